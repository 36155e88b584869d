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

Every client runs with its own defaults (``defaults``, nothing set; the
settings column names what is in force) and with the same tuned settings
(``tuned``: max.partition.fetch.bytes 8 MiB, fetch.max.bytes 64 MiB, up to
10,000 records per poll: max.poll.records, aiokafka's max_records, and
confluent-kafka's ``consume(10000)``). Rows run in alternating rounds
(--repeat, default 3); the markdown table gives medians and ratios against
confluent-kafka's ``consume()`` with the same settings.

    python bench/bench_consume.py --records 1000000 --repeat 3 [--broker kafka|tansu]
"""
from __future__ import annotations

import asyncio
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import datetime  # noqa: E402

from _bench import (  # noqa: E402
    Row, broker_label, create_topic, load_average, local_broker, markdown_table, matrix_args, measure,
    run_rows,
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


KIO_TUNED = dict(max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20, max_poll_records=10000)
CONFLUENT_TUNED = {"max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 64 << 20}
TUNED_TEXT = "max.partition.fetch.bytes 8 MiB, fetch.max.bytes 64 MiB, 10,000 records per poll"


def _kio_consumer(bootstrap, topic, conf=None):
    from kio import Consumer, TopicPartition
    c = Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **(conf or {}))
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


def bench_kio_poll(bootstrap, topic, n, conf=None):
    import kio.consumer  # noqa: F401 - loaded before the measurement (kio's names load on first use)
    return read_n(lambda: _kio_consumer(bootstrap, topic, conf), lambda c: _values_len(c.poll(1.0)),
                  lambda c: c.close(), n)


def bench_kio_poll_batch(bootstrap, topic, n, conf=None, arrow=False):
    import kio.consumer  # noqa: F401 - loaded before the measurement (kio's names load on first use)
    if arrow:
        import pyarrow  # noqa: F401 - a one-time import (~0.1 s CPU), not part of consuming
    return read_n(lambda: _kio_consumer(bootstrap, topic, conf),
                  lambda c: sum(len(b.values) for b in c.poll_batch(1.0, arrow=arrow)),
                  lambda c: c.close(), n)


def _confluent_consumer(bootstrap, topic, conf=None):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", **(conf or {})})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    return c


def _confluent_round(messages):
    size = got = 0
    for m in messages:
        if m is not None and m.error() is None:
            size += len(m.value())
            got += 1
    return got


def bench_confluent_consume(bootstrap, topic, n, conf=None):
    import confluent_kafka  # noqa: F401 - loaded before the measurement, as kio's
    count = 10000 if conf else 500
    return read_n(lambda: _confluent_consumer(bootstrap, topic, conf),
                  lambda c: _confluent_round(c.consume(count, 1.0)), lambda c: c.close(), n)


def bench_confluent_poll(bootstrap, topic, n, conf=None):
    import confluent_kafka  # noqa: F401 - loaded before the measurement, as kio's
    return read_n(lambda: _confluent_consumer(bootstrap, topic, conf), lambda c: _confluent_round((c.poll(1.0),)),
                  lambda c: c.close(), n)


def bench_aiokafka(bootstrap, topic, n, conf=None):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    loop = asyncio.new_event_loop()
    tuned = dict(max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20) if conf else {}
    max_records = 10000 if conf else None

    async def make():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **tuned)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        return c

    async def read_round(c):
        return sum(_values_len(records) for records in
                   (await c.getmany(timeout_ms=1000, max_records=max_records)).values())
    try:
        return read_n(lambda: loop.run_until_complete(make()), lambda c: loop.run_until_complete(read_round(c)),
                      lambda c: loop.run_until_complete(c.stop()), n)
    finally:
        loop.close()


def bench_kafka_python(bootstrap, topic, n, conf=None):
    from kafka import KafkaConsumer, TopicPartition
    tuned = dict(max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20, max_poll_records=10000) \
        if conf else {}

    def make():
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **tuned)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        return c
    return read_n(make, lambda c: sum(_values_len(rs) for rs in c.poll(timeout_ms=1000).values()),
                  lambda c: c.close(), n)


def bench_java(bootstrap, topic, n, conf=None):
    import _java
    props = {"max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 64 << 20, "max.poll.records": 10000} \
        if conf else {}
    return _java.consumer_perf(bootstrap, topic, n, props)


def rows(bootstrap, topic, n, settings):
    def kio_defaults():
        from kproto.consumer.config import CONSUMER_CONFIG
        d = {name: st.default for name, st in CONSUMER_CONFIG.settings.items()}
        return (f"max.partition.fetch.bytes {d['max.partition.fetch.bytes'] >> 20} MiB, fetch.max.bytes "
                f"{d['fetch.max.bytes'] >> 20} MiB, max.poll.records {d['max.poll.records']}")
    clients = [
        ("confluent-kafka", "consume(500)", "consume(10000)", bench_confluent_consume,
         "max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB, queued.max.messages.kbytes 64 MiB"),
        ("confluent-kafka", "poll()", "poll()", bench_confluent_poll,
         "max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB, queued.max.messages.kbytes 64 MiB"),
        ("kio", "poll()", "poll()", bench_kio_poll, None),
        ("kio", "poll_batch()", "poll_batch()", bench_kio_poll_batch, None),
        ("kio", "poll_batch(arrow=True)", "poll_batch(arrow=True)",
         functools.partial(bench_kio_poll_batch, arrow=True), None),
        ("aiokafka", "getmany()", "getmany(max_records=10000)", bench_aiokafka,
         "max_partition_fetch_bytes 1 MiB, fetch_max_bytes 50 MiB, no max_records"),
        ("kafka-python", "poll()", "poll()", bench_kafka_python,
         "max_partition_fetch_bytes 1 MiB, fetch_max_bytes 50 MiB, max_poll_records 500"),
        ("Java", "ConsumerPerformance", "ConsumerPerformance", bench_java,
         "max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB, max.poll.records 500; a group of one"),
    ]
    out = []
    for which in ("defaults", "tuned"):
        if which not in settings:
            continue
        for client, call, tuned_call, fn, described in clients:
            conf = (KIO_TUNED if client == "kio" else CONFLUENT_TUNED) if which == "tuned" else None
            text = TUNED_TEXT if which == "tuned" else (described or kio_defaults())
            out.append(Row(client, tuned_call if which == "tuned" else call, which, "-", text,
                           functools.partial(fn, bootstrap, topic, n, conf)))
    return out


def main():
    args = matrix_args(__doc__)
    n = args.records
    load_before = load_average()
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        topic = create_topic(bs)
        fill(bs, topic, n)
        done = run_rows(rows(bs, topic, n, args.settings.split(",")), args.only, args.repeat)
    title = (f"`python bench/bench_consume.py --records {n} --repeat {args.repeat}`: {n:,} records x "
             f"{len(VALUE)} B from offset 0 of one partition; {broker_label(broker)}; Python "
             f"{sys.version.split()[0]}; median of {args.repeat} alternating rounds; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
             f"{load_before} before, {load_average()} after")
    print()
    print(markdown_table(done, "confluent-kafka", title, delivery_column=False))


if __name__ == "__main__":
    main()
