"""Consume throughput: kio vs confluent-kafka, aiokafka and kafka-python.

The bench starts a local Tansu broker (kio.broker.LocalBroker), writes N
records of 100 bytes to one partition, then each client reads all N from
offset 0 (manual assignment, no group), one client after the other in this
process. Per-record clients touch every record's value; kio's poll_batch
touches every partition batch's value column. The measured time and CPU start
before the client is created (background prefetching counts) and end when the
last record is in the application's hands. Reported per client: records/s and
client CPU microseconds per record (see bench/_bench.py).

    python bench/bench_consume.py --records 1000000
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import cpu, create_topic, measure, print_line, print_table  # noqa: E402
from kio.broker import LocalBroker  # noqa: E402

VALUE = b"x" * 100
TIMEOUT = 120.0


def fill(bootstrap, topic, n):
    from kio import Producer
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=262144,
                  buffer_memory=256 * 1024 * 1024) as p:
        sent = 0
        while sent < n:
            k = min(100_000, n - sent)
            p.send_many(topic, [VALUE] * k, partition=0)
            sent += k
        assert p.flush() == 0


def _check(got, n, start):
    if got < n:
        raise RuntimeError(f"only {got} of {n} records after {time.monotonic() - start:.0f} s")


def bench_kio_poll(bootstrap, topic, n):
    from kio import Consumer, TopicPartition
    held = []

    def run():
        c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        held.append(c)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = size = 0
        start = time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            for r in c.poll(1.0):
                size += len(r.value)
                got += 1
        _check(got, n, start)
    r = measure(run, n)
    held[0].close()
    return r


def bench_kio_poll_batch(bootstrap, topic, n, arrow=False):
    from kio import Consumer, TopicPartition
    if arrow:
        import pyarrow  # noqa: F401 - a one-time import (~0.1 s CPU), not part of consuming
    held = []

    def run():
        c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        held.append(c)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = size = 0
        start = time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            for batch in c.poll_batch(1.0, arrow=arrow):
                size += len(batch.values)
                got += len(batch)
        _check(got, n, start)
    r = measure(run, n)
    held[0].close()
    return r


def _confluent_consumer(bootstrap, topic):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    return c


def bench_confluent_consume(bootstrap, topic, n):
    held = []

    def run():
        c = _confluent_consumer(bootstrap, topic)
        held.append(c)
        got = size = 0
        start = time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            for m in c.consume(500, 1.0):
                if m.error() is None:
                    size += len(m.value())
                    got += 1
        _check(got, n, start)
    r = measure(run, n)
    held[0].close()
    return r


def bench_confluent_poll(bootstrap, topic, n):
    held = []

    def run():
        c = _confluent_consumer(bootstrap, topic)
        held.append(c)
        got = size = 0
        start = time.monotonic()
        poll = c.poll
        while got < n and time.monotonic() - start < TIMEOUT:
            m = poll(1.0)
            if m is not None and m.error() is None:
                size += len(m.value())
                got += 1
        _check(got, n, start)
    r = measure(run, n)
    held[0].close()
    return r


def bench_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        async def run():
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
            await c.start()
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            got = size = 0
            start = time.monotonic()
            while got < n and time.monotonic() - start < TIMEOUT:
                for records in (await c.getmany(timeout_ms=1000)).values():
                    for m in records:
                        size += len(m.value)
                        got += 1
            _check(got, n, start)
            return c
        c0, t0 = cpu(), time.perf_counter()
        c = await run()
        t1, c1 = time.perf_counter(), cpu()
        await c.stop()
        return n / (t1 - t0), (c1 - c0) / n * 1e6, t1 - t0
    return asyncio.run(main())


def bench_kafka_python(bootstrap, topic, n):
    from kafka import KafkaConsumer, TopicPartition
    held = []

    def run():
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        held.append(c)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = size = 0
        start = time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            for records in c.poll(timeout_ms=1000).values():
                for m in records:
                    size += len(m.value)
                    got += 1
        _check(got, n, start)
    r = measure(run, n)
    held[0].close()
    return r


CLIENTS = [
    ("confluent-kafka consume(500)", bench_confluent_consume),
    ("confluent-kafka poll()", bench_confluent_poll),
    ("kio poll()", bench_kio_poll),
    ("kio poll_batch()", bench_kio_poll_batch),
    ("kio poll_batch(arrow=True)", functools.partial(bench_kio_poll_batch, arrow=True)),
    ("aiokafka getmany()", bench_aiokafka),
    ("kafka-python poll()", bench_kafka_python),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--only", action="append", help="run only clients whose name contains this")
    args = ap.parse_args()
    n = args.records
    results = []
    with LocalBroker() as broker:
        bs = broker.bootstrap_servers
        topic = create_topic(bs)
        fill(bs, topic, n)
        for name, fn in CLIENTS:
            if args.only and not any(o in name for o in args.only):
                continue
            try:
                rate, us, secs = fn(bs, topic, n)
            except Exception as e:  # noqa: BLE001 - report and continue with the others
                print(f"{name}: failed: {e!r}", file=sys.stderr)
                continue
            results.append((name, rate, us, secs))
            print_line(name, rate, us, secs)
    print_table(results, f"{n:,} records x {len(VALUE)} B from offset 0 of one partition; "
                         f"Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
