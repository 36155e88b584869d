"""Async drivers: kio.aio and kio.trio against aiokafka, produce and consume.

Produce: N records of 100 bytes to one partition with acks=1 and
linger.ms=5, ``await send()`` per record, then every acknowledgement
awaited. Consume: N records of 100 bytes from offset 0 of one partition,
manual assignment, each client created inside the measured span. Same run,
same local Tansu broker; client CPU is getrusage(RUSAGE_SELF) of this
process (the broker runs in another one).

    python bench/bench_async.py --records 1000000
"""
from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import bench_args, cpu, create_topic, print_table, run_clients  # noqa: E402
from kio.broker import LocalBroker  # noqa: E402

VALUE = b"x" * 100
PRODUCER = dict(acks=1, linger_ms=5, batch_size=262144, buffer_memory=256 * 1024 * 1024)


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

async def _kio_produce(mod, bootstrap, topic, n):
    start, finish = timed(n)
    async with mod.Producer(bootstrap_servers=bootstrap, **PRODUCER) as p:
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


def produce_aio(bootstrap, topic, n):
    import kio.aio
    return asyncio.run(_kio_produce(kio.aio, bootstrap, topic, n))


def produce_trio(bootstrap, topic, n):
    import trio

    import kio.trio
    return trio.run(_kio_produce, kio.trio, bootstrap, topic, n)


def produce_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaProducer

    async def main():
        start, finish = timed(n)
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=262144,
                             enable_idempotence=False)
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

async def _kio_consume(mod, bootstrap, topic, n, batch):
    from kio import TopicPartition
    start, finish = timed(n)
    start()
    count = 0
    async with mod.Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        while count < n:
            if batch:
                for b in await c.poll_batch(timeout=1.0):
                    count += len(b.values)
            else:
                for r in await c.poll(timeout=1.0, max_records=100000):
                    r.value
                    count += 1
        result = finish()
    return result


def consume_aio(batch):
    def run(bootstrap, topic, n):
        import kio.aio
        return asyncio.run(_kio_consume(kio.aio, bootstrap, topic, n, batch))
    return run


def consume_trio(bootstrap, topic, n):
    import trio

    import kio.trio
    return trio.run(_kio_consume, kio.trio, bootstrap, topic, n, False)


def consume_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        start, finish = timed(n)
        start()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        count = 0
        while count < n:
            for records in (await c.getmany(timeout_ms=1000)).values():
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


PRODUCERS = [
    ("kio.aio await send()", produce_aio),
    ("kio.trio await send()", produce_trio),
    ("aiokafka await send()", produce_aiokafka),
]
CONSUMERS = [
    ("kio.aio poll()", consume_aio(False)),
    ("kio.aio poll_batch()", consume_aio(True)),
    ("kio.trio poll()", consume_trio),
    ("aiokafka getmany()", consume_aiokafka),
]


def main():
    args = bench_args(__doc__)
    n = args.records
    with LocalBroker() as broker:
        bs = broker.bootstrap_servers
        produced = run_clients(PRODUCERS, args.only, lambda fn: fn(bs, create_topic(bs), n))
        topic = fill(bs, n)
        consumed = run_clients(CONSUMERS, args.only, lambda fn: fn(bs, topic, n))
    print_table(produced, f"produce: {n:,} records x {len(VALUE)} B, one partition, acks=1, linger.ms=5; "
                          f"Python {sys.version.split()[0]}", base_prefix="aiokafka")
    print_table(consumed, f"consume: {n:,} records x {len(VALUE)} B from offset 0 of one partition",
                base_prefix="aiokafka")


if __name__ == "__main__":
    main()
