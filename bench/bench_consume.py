"""Consume throughput: kio vs confluent-kafka, aiokafka and kafka-python.

The bench starts a local broker (Apache Kafka, or Tansu with ``--broker tansu``), writes N
records of 100 bytes to one partition, then each client reads all N from
offset 0 (manual assignment, no group), one client after the other in this
process. Per-record clients touch every record's value; kio's poll_batch
touches every partition batch's value column. The measured time and CPU start
before the client is created (background prefetching counts) and end when the
last record is in the application's hands. Reported per client: records/s and
client CPU microseconds per record (see bench/_bench.py). The Java row is
Kafka's own ConsumerPerformance tool in a child JVM (a group of one member;
bench/_java.py says how its CPU is counted).

    python bench/bench_consume.py --records 1000000 [--broker kafka|tansu]
"""
from __future__ import annotations

import asyncio
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import (  # noqa: E402
    bench_args, broker_label, create_topic, local_broker, measure, print_table, run_clients,
)

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


def read_n(make, read_round, close, n):
    """Measure creating a client with make() and calling read_round(client)
    (-> records received) until n records are in hand; close() outside."""
    held = []

    def run():
        c = make()
        held.append(c)
        got = 0
        start = time.monotonic()
        while got < n and time.monotonic() - start < TIMEOUT:
            got += read_round(c)
        if got < n:
            raise RuntimeError(f"only {got} of {n} records after {time.monotonic() - start:.0f} s")
    try:
        return measure(run, n)
    finally:
        if held:
            close(held[0])


def _kio_consumer(bootstrap, topic):
    from kio import Consumer, TopicPartition
    c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    return c


def _values_len(records):
    """Touch every value (what an application does at the least)."""
    size = 0
    for r in records:
        size += len(r.value)
    return len(records)


def bench_kio_poll(bootstrap, topic, n):
    return read_n(lambda: _kio_consumer(bootstrap, topic), lambda c: _values_len(c.poll(1.0)),
                  lambda c: c.close(), n)


def bench_kio_poll_batch(bootstrap, topic, n, arrow=False):
    if arrow:
        import pyarrow  # noqa: F401 - a one-time import (~0.1 s CPU), not part of consuming
    return read_n(lambda: _kio_consumer(bootstrap, topic),
                  lambda c: sum(len(b.values) for b in c.poll_batch(1.0, arrow=arrow)),
                  lambda c: c.close(), n)


def _confluent_consumer(bootstrap, topic):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    return c


def _confluent_round(messages):
    size = got = 0
    for m in messages:
        if m is not None and m.error() is None:
            size += len(m.value())
            got += 1
    return got


def bench_confluent_consume(bootstrap, topic, n):
    return read_n(lambda: _confluent_consumer(bootstrap, topic), lambda c: _confluent_round(c.consume(500, 1.0)),
                  lambda c: c.close(), n)


def bench_confluent_poll(bootstrap, topic, n):
    return read_n(lambda: _confluent_consumer(bootstrap, topic), lambda c: _confluent_round((c.poll(1.0),)),
                  lambda c: c.close(), n)


def bench_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    loop = asyncio.new_event_loop()

    async def make():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        return c

    async def read_round(c):
        return sum(_values_len(records) for records in (await c.getmany(timeout_ms=1000)).values())
    try:
        return read_n(lambda: loop.run_until_complete(make()), lambda c: loop.run_until_complete(read_round(c)),
                      lambda c: loop.run_until_complete(c.stop()), n)
    finally:
        loop.close()


def bench_kafka_python(bootstrap, topic, n):
    from kafka import KafkaConsumer, TopicPartition

    def make():
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        return c
    return read_n(make, lambda c: sum(_values_len(rs) for rs in c.poll(timeout_ms=1000).values()),
                  lambda c: c.close(), n)


def bench_java(bootstrap, topic, n):
    import _java
    return _java.consumer_perf(bootstrap, topic, n)


CLIENTS = [
    ("confluent-kafka consume(500)", bench_confluent_consume),
    ("confluent-kafka poll()", bench_confluent_poll),
    ("kio poll()", bench_kio_poll),
    ("kio poll_batch()", bench_kio_poll_batch),
    ("kio poll_batch(arrow=True)", functools.partial(bench_kio_poll_batch, arrow=True)),
    ("aiokafka getmany()", bench_aiokafka),
    ("kafka-python poll()", bench_kafka_python),
    ("java ConsumerPerformance", bench_java),
]


def main():
    args = bench_args(__doc__)
    n = args.records
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        topic = create_topic(bs)
        fill(bs, topic, n)
        results = run_clients(CLIENTS, args.only, lambda fn: fn(bs, topic, n))
    print_table(results, f"{n:,} records x {len(VALUE)} B from offset 0 of one partition; "
                         f"{broker_label(broker)}; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
