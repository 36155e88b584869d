"""One Apache Kafka broker for profiling, kept running until a stop file appears.

Starts ``KafkaBroker(heap=...)`` with the log4j2 file next to this script
(``kafka.request.logger`` into ``<out>/request.log``; set its level to DEBUG
in ``<out>/log4j2.yaml`` while the broker runs: log4j2 re-reads the file
every few seconds) and G1's log in ``<out>/gc.log``; makes a topic of
``--partitions`` partitions (bench/_bench.py create_topic: in steps above
5,000) with ``--config name=value`` topic configs; writes the bootstrap
address, the topic and the broker's pid to ``<out>/broker.json``; stops the
broker when ``<out>/STOP`` exists. Flight Recorder recordings are then taken
around a run with ``jcmd <pid> JFR.start settings=profile filename=...`` and
``jcmd <pid> JFR.stop``::

    python bench/broker_profile/keep_broker.py --out /tmp/prof --heap 3g --partitions 10000 &
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from _bench import create_topic  # noqa: E402
from kio.testing.kafka_broker import KafkaBroker  # noqa: E402

LOG4J2 = """\
Configuration:
  monitorInterval: 3
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
    File:
      name: REQLOG
      fileName: {out}/request.log
      PatternLayout:
        pattern: "[%d] %m%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.BrokerServer
        level: INFO
      - name: kafka.request.logger
        level: WARN
        additivity: false
        AppenderRef:
          - ref: REQLOG
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--heap", default="3g")
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--config", action="append", default=[], help="a topic config, name=value")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    log4j2 = os.path.join(args.out, "log4j2.yaml")
    with open(log4j2, "w") as f:
        f.write(LOG4J2.format(out=args.out))
    b = KafkaBroker(heap=args.heap, log_path=os.path.join(args.out, "broker.log"),
                    jvm_options=[f"-Dlog4j2.configurationFile={log4j2}",
                                 f"-Xlog:gc:file={os.path.join(args.out, 'gc.log')}"]).start()
    try:
        bootstrap = f"{b.host}:{b.port}"
        configs = dict(c.split("=", 1) for c in args.config)
        topic = create_topic(bootstrap, args.partitions, configs)
        with open(os.path.join(args.out, "broker.json"), "w") as f:
            json.dump({"bootstrap": bootstrap, "topic": topic, "pid": b.process.pid}, f)
        print(bootstrap, topic, b.process.pid, flush=True)
        while not os.path.exists(os.path.join(args.out, "STOP")):
            time.sleep(2)
    finally:
        b.stop()


if __name__ == "__main__":
    main()
