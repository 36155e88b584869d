"""Async drivers: kio.aio and kio.trio against aiokafka, produce and consume.

Produce: N records of 100 bytes to one partition, ``await send()`` per
record, then every acknowledgement awaited. Consume: N records of 100 bytes
from offset 0 of one partition, manual assignment, each client created
inside the measured span. Every client runs at its own defaults with only
acks=1 set (``defaults``) and with the same tuned settings (``tuned``:
produce with acks=1, linger.ms 5, batch.size 1 MiB, 128 MiB buffer, no
idempotence; consume with max.partition.fetch.bytes 8 MiB, fetch.max.bytes
64 MiB, 10,000 records per poll). Same run, same local broker (Apache Kafka
by default, ``--broker tansu``); client CPU is getrusage(RUSAGE_SELF) of this
process (the broker runs in another one). Rows run in alternating rounds
(--repeat); the markdown tables give medians and ratios against aiokafka.

    python bench/bench_async.py --records 1000000 --repeat 3 [--broker kafka|tansu]
"""
from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import datetime  # noqa: E402
import functools  # noqa: E402

from _bench import (  # noqa: E402
    Row, broker_label, cpu, create_topic, load_average, local_broker, markdown_table, matrix_args,
    run_rows,
)

VALUE = b"x" * 100
PRODUCER_TUNED = dict(acks=1, linger_ms=5, batch_size=1 << 20, buffer_memory=128 << 20,
                      enable_idempotence=False)
CONSUMER_TUNED = dict(max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20, max_poll_records=10000)


def timed(n):
    """Decorator-free helper: returns (start, finish) closures measuring n records."""
    state = {}

    def start():
        state["c"], state["t"] = cpu(), time.perf_counter()

    def finish():
        secs = time.perf_counter() - state["t"]
        return n / secs, (cpu() - state["c"]) / n * 1e6, secs
    return start, finish


# -- produce --------------------------------------------------------------------------------------

async def _kio_produce(mod, bootstrap, topic, n, conf):
    start, finish = timed(n)
    async with mod.Producer(bootstrap_servers=bootstrap, **conf) as p:
        await p.partitions_for(topic)
        start()
        send = p.send
        last = None
        for _ in range(n):
            last = await send(topic, VALUE, partition=0)
        assert await p.flush() == 0
        await last
        result = finish()
        assert p.metrics()["records_sent"] == n
    return result


def produce_aio(bootstrap, topic, n, tuned):
    import kio.aio
    return asyncio.run(_kio_produce(kio.aio, bootstrap, topic, n, PRODUCER_TUNED if tuned else {"acks": 1}))


def produce_trio(bootstrap, topic, n, tuned):
    import trio

    import kio.trio
    return trio.run(_kio_produce, kio.trio, bootstrap, topic, n, PRODUCER_TUNED if tuned else {"acks": 1})


def produce_aiokafka(bootstrap, topic, n, tuned):
    from aiokafka import AIOKafkaProducer
    conf = dict(acks=1, linger_ms=5, max_batch_size=1 << 20, enable_idempotence=False) if tuned \
        else dict(acks=1)

    async def main():
        start, finish = timed(n)
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await p.start()
        await p.partitions_for(topic)
        start()
        futs = []
        send = p.send
        for _ in range(n):
            futs.append(await send(topic, VALUE, partition=0))
        await asyncio.gather(*futs)
        result = finish()
        await p.stop()
        return result
    return asyncio.run(main())


# -- consume --------------------------------------------------------------------------------------

async def _kio_consume(mod, bootstrap, topic, n, batch, conf):
    from kio import TopicPartition
    start, finish = timed(n)
    start()
    count = 0
    async with mod.Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        while count < n:
            if batch:
                for b in await c.poll_batch(timeout=1.0):
                    count += len(b.values)
            else:
                for r in await c.poll(timeout=1.0):
                    r.value
                    count += 1
        result = finish()
    return result


def consume_aio(batch):
    def run(bootstrap, topic, n, tuned):
        import kio.aio
        return asyncio.run(_kio_consume(kio.aio, bootstrap, topic, n, batch, CONSUMER_TUNED if tuned else {}))
    return run


def consume_trio(bootstrap, topic, n, tuned):
    import trio

    import kio.trio
    return trio.run(_kio_consume, kio.trio, bootstrap, topic, n, False, CONSUMER_TUNED if tuned else {})


def consume_aiokafka(bootstrap, topic, n, tuned):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    conf = dict(max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20) if tuned else {}
    max_records = 10000 if tuned else None

    async def main():
        start, finish = timed(n)
        start()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        count = 0
        while count < n:
            for records in (await c.getmany(timeout_ms=1000, max_records=max_records)).values():
                for r in records:
                    r.value
                    count += 1
        result = finish()
        await c.stop()
        return result
    return asyncio.run(main())


def fill(bootstrap, n) -> str:
    from kio import Producer
    topic = create_topic(bootstrap)
    with Producer(bootstrap_servers=bootstrap, batch_size=1 << 20, linger_ms=5) as p:
        for start in range(0, n, 100000):
            p.send_many(topic, [VALUE] * min(100000, n - start), partition=0)
        assert p.flush() == 0
    return topic


def _described(kind, client, tuned):
    if tuned:
        return ("acks=1, linger.ms 5, batch.size 1 MiB, buffer 128 MiB, no idempotence" if kind == "produce"
                else "max.partition.fetch.bytes 8 MiB, fetch.max.bytes 64 MiB, 10,000 records per poll")
    if client == "aiokafka":
        return ("acks=1; max_batch_size 16 KiB, linger_ms 0" if kind == "produce"
                else "max_partition_fetch_bytes 1 MiB, fetch_max_bytes 50 MiB, no max_records")
    if kind == "produce":
        from kproto.producer.config import PRODUCER_CONFIG
        d = {k: st.default for k, st in PRODUCER_CONFIG.settings.items()}
        return (f"acks=1; batch.size {d['batch.size'] // 1024} KiB, linger.ms {d['linger.ms']}, "
                f"buffer.memory {d['buffer.memory'] >> 20} MiB")
    from kproto.consumer.config import CONSUMER_CONFIG
    d = {k: st.default for k, st in CONSUMER_CONFIG.settings.items()}
    return (f"max.partition.fetch.bytes {d['max.partition.fetch.bytes'] >> 20} MiB, fetch.max.bytes "
            f"{d['fetch.max.bytes'] >> 20} MiB, max.poll.records {d['max.poll.records']}")


PRODUCERS = [
    ("kio.aio", "await send()", produce_aio),
    ("kio.trio", "await send()", produce_trio),
    ("aiokafka", "await send()", produce_aiokafka),
]
CONSUMERS = [
    ("kio.aio", "poll()", consume_aio(False)),
    ("kio.aio", "poll_batch()", consume_aio(True)),
    ("kio.trio", "poll()", consume_trio),
    ("aiokafka", "getmany()", consume_aiokafka),
]


def main():
    args = matrix_args(__doc__)
    n = args.records
    settings = args.settings.split(",")
    load_before = load_average()
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        produce_aio(bs, create_topic(bs), min(n, 100_000), False)     # untimed: warm the broker's JIT
        produce = [Row(client, call, which, "a future per record", _described("produce", client, which == "tuned"),
                       lambda fn=fn, which=which: fn(bs, create_topic(bs), n, which == "tuned"))
                   for which in ("defaults", "tuned") if which in settings for client, call, fn in PRODUCERS]
        produced = run_rows(produce, args.only, args.repeat)
        topic = fill(bs, n)
        consume = [Row(client, call, which, "-", _described("consume", client, which == "tuned"),
                       functools.partial(fn, bs, topic, n, which == "tuned"))
                   for which in ("defaults", "tuned") if which in settings for client, call, fn in CONSUMERS]
        consumed = run_rows(consume, args.only, args.repeat)
    tail = (f"{broker_label(broker)}; Python {sys.version.split()[0]}; median of {args.repeat} alternating "
            f"rounds; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
            f"{load_before} before, {load_average()} after")
    print()
    print(markdown_table(produced, "aiokafka", f"`python bench/bench_async.py --records {n} --repeat "
                         f"{args.repeat}`, produce: {n:,} records x {len(VALUE)} B to one partition, "
                         f"`await send()` each; " + tail, delivery_column=False))
    print()
    print(markdown_table(consumed, "aiokafka", f"consume: {n:,} records x {len(VALUE)} B from offset 0 of "
                         f"one partition; " + tail, delivery_column=False))


if __name__ == "__main__":
    main()
