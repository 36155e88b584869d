"""Instructions per ``Producer.send()`` (and per consumed record): load-independent CPU cost.

Wall-clock and getrusage figures move by +-20% on a busy machine; the number
of instructions the application thread executes per ``send()`` does not. Run
this script twice under valgrind's callgrind with a different ``--records``
and divide the difference of the main thread's instruction counts by the
difference of the record counts (start-up, imports, metadata and the final
flush cancel out)::

    python bench/send_cost.py --callgrind 10000,60000

does exactly that (needs ``valgrind``; Debian: ``apt-get install valgrind``)
against the Apache Kafka broker it starts (or ``--bootstrap HOST:PORT``), and
prints instructions per ``send()`` for 100-byte values, no key, one partition,
the producer's defaults but acks=1. Without ``--callgrind`` it runs the send
loop once and prints the application thread's CPU µs per record
(``time.thread_time``, excludes the network thread).

``--consume`` measures the consume path instead: ``Consumer.poll()`` over
records of 100 bytes from offset 0 of one partition (a topic of 300,000 the
script fills first), every thread of the process counted (the network thread
decodes the fetch answers), e.g. ``--consume --callgrind 50000,250000``.
Whole-process counts (``--consume``, ``--all-threads``) include the network
thread, whose work depends on timing (how many records each request or fetch
carries): they move by ~3% from run to run, the application thread's count
of ``send()`` by well under 1%.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _callgrind import instructions  # noqa: E402

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


def consume_loop(bootstrap: str, topic: str, n: int) -> float:
    """poll() n records from offset 0 (the values touched); returns the
    process's CPU µs per record."""
    from kio import Consumer, TopicPartition
    c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = 0
        t0 = time.process_time()
        deadline = time.monotonic() + 120
        while got < n and time.monotonic() < deadline:
            for r in c.poll(1.0):
                len(r.value)
                got += 1
        t1 = time.process_time()
        if got < n:
            raise RuntimeError(f"only {got} of {n} records in 120 s")
    finally:
        c.close()
    return (t1 - t0) / n * 1e6


def fill(bootstrap: str, topic: str, n: int) -> None:
    from kio import Producer
    with Producer(bootstrap_servers=bootstrap, acks=1) as p:
        for i in range(0, n, 10000):
            p.send_many(topic, [VALUE] * min(10000, n - i), partition=0)
        assert p.flush() == 0


def callgrind(bootstrap: str, topic: str, counts: list[int], callback: bool, consume: bool,
              all_threads: bool = False) -> float:
    whole = consume or all_threads
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            out = os.path.join(tmp, f"cg.{n}")
            cmd = ["valgrind", "--tool=callgrind", f"--separate-threads={'no' if whole else 'yes'}",
                   f"--callgrind-out-file={out}",
                   sys.executable, os.path.abspath(__file__), "--bootstrap", bootstrap, "--topic", topic,
                   "--records", str(n)] + (["--callback"] if callback else []) + (["--consume"] if consume else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            results.append(instructions(out, "" if whole else "-01"))
    (n0, n1), (i0, i1) = counts, results
    return (i1 - i0) / (n1 - n0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    ap.add_argument("--topic", help="an existing one-partition topic (default: create one)")
    ap.add_argument("--callback", action="store_true", help="send() with an on_delivery callback")
    ap.add_argument("--consume", action="store_true", help="measure Consumer.poll() instead of send()")
    ap.add_argument("--all-threads", action="store_true",
                    help="--callgrind: count every thread (send() plus the network thread's share)")
    ap.add_argument("--callgrind", metavar="N0,N1",
                    help="instructions per send(): run twice under callgrind with N0 and N1 records")
    args = ap.parse_args()
    broker = None
    if args.bootstrap is None:
        from kio.testing.broker import start_broker
        broker = start_broker("kafka")
        args.bootstrap = broker.bootstrap_servers
    try:
        if args.topic is None:
            from _bench import create_topic
            args.topic = create_topic(args.bootstrap)
            if args.consume:
                fill(args.bootstrap, args.topic, 300_000)
        if args.callgrind:
            counts = [int(x) for x in args.callgrind.split(",")]
            per = callgrind(args.bootstrap, args.topic, counts, args.callback, args.consume, args.all_threads)
            if args.consume:
                print(f"poll(): {per:,.0f} instructions per record (callgrind, whole process, "
                      f"{counts[0]:,} vs {counts[1]:,} records)")
                return
            print(f"send(){' with on_delivery' if args.callback else ''}: {per:,.0f} instructions per call "
                  f"(callgrind, {'whole process' if args.all_threads else 'application thread'}, "
                  f"{counts[0]:,} vs {counts[1]:,} records)")
        elif args.consume:
            us = consume_loop(args.bootstrap, args.topic, args.records)
            print(f"poll(): {us:.3f} µs process CPU per record ({args.records:,} records)")
        else:
            us = send_loop(args.bootstrap, args.topic, args.records, args.callback)
            print(f"send(){' with on_delivery' if args.callback else ''}: {us:.3f} µs application-thread "
                  f"CPU per call ({args.records:,} records)")
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
