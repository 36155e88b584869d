"""Instructions per ``Producer.send()``: a load-independent measure of its CPU cost.

Wall-clock and getrusage figures move by +-20% on a busy machine; the number
of instructions the application thread executes per ``send()`` does not. Run
this script twice under valgrind's callgrind with a different ``--records``
and divide the difference of the main thread's instruction counts by the
difference of the record counts (start-up, imports, metadata and the final
flush cancel out)::

    python bench/send_cost.py --callgrind 20000,120000

does exactly that (needs ``valgrind``; Debian: ``apt-get install valgrind``)
against the Apache Kafka broker it starts (or ``--bootstrap HOST:PORT``), and
prints instructions per ``send()`` for 100-byte values, no key, one partition,
the producer's defaults but acks=1. Without ``--callgrind`` it runs the send
loop once and prints the application thread's CPU µs per record
(``time.thread_time``, excludes the network thread).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VALUE = b"x" * 100


def send_loop(bootstrap: str, topic: str, n: int, callback: bool) -> float:
    """Send n records (after a warm-up of 2,000) and flush; returns the
    application thread's CPU µs per send()."""
    from kio import Producer
    p = Producer(bootstrap_servers=bootstrap, acks=1)
    try:
        p.partitions_for(topic)
        send = p.send
        cb = (lambda err, md: None) if callback else None
        for _ in range(2000):
            send(topic, VALUE, partition=0, on_delivery=cb)
        p.flush()
        t0 = time.thread_time()
        if cb is None:
            for _ in range(n):
                send(topic, VALUE, partition=0)
        else:
            for _ in range(n):
                send(topic, VALUE, partition=0, on_delivery=cb)
        t1 = time.thread_time()
        p.flush()
    finally:
        p.close()
    return (t1 - t0) / max(n, 1) * 1e6


def _main_thread_instructions(out_file: str) -> int:
    """Ir of the first thread (the application's) in a callgrind output of
    --separate-threads=yes: that file is named <out>-01."""
    with open(out_file + "-01") as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no instruction total in {out_file}-01")


def callgrind(bootstrap: str, topic: str, counts: list[int], callback: bool) -> float:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            out = os.path.join(tmp, f"cg.{n}")
            cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                   sys.executable, os.path.abspath(__file__), "--bootstrap", bootstrap, "--topic", topic,
                   "--records", str(n)] + (["--callback"] if callback else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            results.append(_main_thread_instructions(out))
    (n0, n1), (i0, i1) = counts, results
    return (i1 - i0) / (n1 - n0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    ap.add_argument("--topic", help="an existing one-partition topic (default: create one)")
    ap.add_argument("--callback", action="store_true", help="send() with an on_delivery callback")
    ap.add_argument("--callgrind", metavar="N0,N1",
                    help="instructions per send(): run twice under callgrind with N0 and N1 records")
    args = ap.parse_args()
    broker = None
    if args.bootstrap is None:
        from kio.broker import start_broker
        broker = start_broker("kafka")
        args.bootstrap = broker.bootstrap_servers
    try:
        if args.topic is None:
            from _bench import create_topic
            args.topic = create_topic(args.bootstrap)
        if args.callgrind:
            counts = [int(x) for x in args.callgrind.split(",")]
            per = callgrind(args.bootstrap, args.topic, counts, args.callback)
            print(f"send(){' with on_delivery' if args.callback else ''}: {per:,.0f} instructions per call "
                  f"(callgrind, application thread, {counts[0]:,} vs {counts[1]:,} records)")
        else:
            us = send_loop(args.bootstrap, args.topic, args.records, args.callback)
            print(f"send(){' with on_delivery' if args.callback else ''}: {us:.3f} µs application-thread "
                  f"CPU per call ({args.records:,} records)")
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
