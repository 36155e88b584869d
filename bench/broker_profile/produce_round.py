"""One round of bench_partitions.py's kio or confluent-kafka producer row on a
given topic (the broker kept by keep_broker.py), printed as one JSON line
with kio's request counters (Produce requests, batches, mean latency)::

    python bench/broker_profile/produce_round.py kio|confluent <bootstrap> <topic> <records>

``KIO_CFG`` (JSON) adds producer configs to kio's row, e.g.
``KIO_CFG='{"buffer_memory": 268435456}'``.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bench_partitions as bp  # noqa: E402
from _bench import load_average  # noqa: E402


def main():
    client, bootstrap, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cfg = json.loads(os.environ.get("KIO_CFG", "{}"))
    metrics = {}
    if client == "kio":
        if cfg:
            import kio
            plain = kio.Producer
            kio.Producer = lambda **kw: plain(**kw, **cfg)   # produce_kio makes its Producer from kio
        rate, us, secs = bp.produce_kio(bootstrap, topic, n, metrics=metrics)
    else:
        rate, us, secs = bp.produce_confluent(bootstrap, topic, n)
    keep = {k: metrics[k] for k in ("requests", "responses", "batches_sent", "records_sent",
                                    "request_latency_ms_avg") if k in metrics}
    print(json.dumps({"client": client, "rate": round(rate), "us": round(us, 2), "secs": round(secs, 2),
                      "load": load_average(), "cfg": cfg, **keep}), flush=True)


if __name__ == "__main__":
    main()
