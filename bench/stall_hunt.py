"""Hunt the consumer-side stall of bench_latency (issue 27): a producer
process sends 100-byte records at a fixed rate to a LogAppendTime topic while
this process consumes them with kio's threading Consumer (or ``--aio``); a
watchdog thread prints the consumer's state whenever no record came for
more than ``--gap`` seconds while the producer runs, and each record whose
append -> poll latency is above the gap is counted.

    python bench/stall_hunt.py --rate 50000 --seconds 20 --rounds 10 [--bootstrap host:port]

State printed: the driver's hand-over flags (who waits on the sockets), the
wake-up pipe's flags, and each connection's requests in flight with their
age and correlation id.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import create_topic, local_broker  # noqa: E402
from bench_latency import paced, sent_at, stamp, value  # noqa: E402


def produce(bootstrap, topic, rate, seconds):
    from kio import Producer
    p = Producer(bootstrap_servers=bootstrap)
    p.partitions_for(topic)
    print("ready", flush=True)
    paced(lambda: p.send(topic, value(), partition=0), rate, rate * seconds)
    p.flush()
    p.close()


def state(c) -> str:
    """The threading consumer's hand-over flags and in-flight requests (read without the lock)."""
    from kio._shared.common import now_ms      # the core's clock
    now = now_ms()
    drv = {k: getattr(c, k, None) for k in (
        "_net_selects", "_app_selects", "_sockets_wanted", "_standby_until", "_standby_timer",
        "_planned", "_app_deadline", "_app_round_due", "_round_wanted", "_runs", "_waiters", "_changes",
        "_handovers", "_takebacks", "_rounds_here", "_select_rounds", "_rounds_run")}
    net = c._net
    drv.update(wake_pending=net.wake_pending, round_wanted_net=getattr(net, "round_wanted", None), woken=net.woken,
               interest=dict(net._interest))
    conns = {}
    for node, conn in c._core.client.connections.items():
        conns[node] = [(r.api_name, r.correlation_id, r.written, round(now - r.sent_at))
                       for r in list(conn._awaiting)] + [f"out={len(conn.data_to_send() or b'')}"]
    return f"driver={drv} conns={conns} next_deadline_in={_deadline_in(c)}"


def _deadline_in(c):
    try:
        from kio._shared.common import now_ms
        d = c._core.next_deadline(now_ms())
        return None if d is None else round(d - now_ms())
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return repr(e)


def consume(bootstrap, topic, rate, seconds, gap, go):
    from kio import Consumer, TopicPartition
    tp = TopicPartition(topic, 0)
    total = rate * seconds
    got = 0
    last = [time.monotonic()]
    late = []
    stop = threading.Event()
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign([tp])
        c.seek(tp, 0)
        c.poll(0.5)

        def watchdog():
            reported = 0.0
            while not stop.wait(0.2):
                idle = time.monotonic() - last[0]
                if idle > gap and idle - reported > gap:
                    reported = idle
                    print(f"  STALL {idle:.1f}s without a record ({got}/{total}): {state(c)}", flush=True)
                elif idle < gap:
                    reported = 0.0

        w = threading.Thread(target=watchdog, daemon=True)
        go()
        last[0] = time.monotonic()
        w.start()
        deadline = time.monotonic() + seconds + 60
        while got < total and time.monotonic() < deadline:
            for r in c.poll(0.5):
                got += 1
                now = stamp()
                last[0] = time.monotonic()
                if now - r.timestamp * 1000 > gap * 1e6:
                    late.append((now - r.timestamp * 1000) / 1e6)
        stop.set()
        end_state = state(c)
    return got, total, late, end_state


def one_round(bootstrap, rate, seconds, gap):
    topic = create_topic(bootstrap, configs={"message.timestamp.type": "LogAppendTime"})
    me = [sys.executable, os.path.abspath(__file__), "--child",
          json.dumps({"bootstrap": bootstrap, "topic": topic, "rate": rate, "seconds": seconds})]
    prod = None

    def go():
        nonlocal prod
        prod = subprocess.Popen(me, stdout=subprocess.PIPE)
        prod.stdout.readline()

    try:
        got, total, late, end_state = consume(bootstrap, topic, rate, seconds, gap, go)
    finally:
        if prod is not None:
            prod.wait(timeout=120)
    worst = max(late) if late else 0.0
    print(f"rate {rate}: {got}/{total} records, {len(late)} later than {gap}s after append "
          f"(worst {worst:.1f}s)", flush=True)
    if got < total or late:
        print(f"  end state: {end_state}", flush=True)
    return bool(late) or got < total


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[2])
        produce(spec["bootstrap"], spec["topic"], spec["rate"], spec["seconds"])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, action="append")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds without a record that count as a stall")
    ap.add_argument("--bootstrap")
    ap.add_argument("--debug", action="store_true", help="kio/kproto DEBUG logging to stderr")
    args = ap.parse_args()
    if args.debug:
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    rates = args.rate or [10_000, 50_000]

    def run(bootstrap):
        stalls = 0
        for i in range(args.rounds):
            for rate in rates:
                stalls += one_round(bootstrap, rate, args.seconds, args.gap)
        print(f"{stalls} rounds with a stall of {args.rounds * len(rates)}", flush=True)

    if args.bootstrap:
        run(args.bootstrap)
    else:
        with local_broker("kafka") as b:
            run(b.bootstrap_servers)


if __name__ == "__main__":
    main()
