"""Produce throughput: kio vs confluent-kafka, aiokafka and kafka-python.

N records of 100 bytes to one partition with acks=1, on a local broker started
by the bench: Apache Kafka (default) or Tansu (``--broker tansu``). Each client gets its own
topic and runs in this process, one after the other. Reported per client:
records/s (wall time from the first send to the last acknowledgement) and
client CPU microseconds per record from resource.getrusage(RUSAGE_SELF)
deltas (user+system). RUSAGE_SELF covers every thread of this process, so for
confluent-kafka it includes librdkafka's C threads, and for kio its network
thread; the broker runs in another process and is not counted. "send_many(keys=)"
adds a distinct 16-byte key per record and spreads them over 3 partitions
(murmur2, 10,000 records per call, default buffer.memory). The Java row is
Kafka's own ProducerPerformance tool in a child JVM with kio's settings
(bench/_java.py says how its CPU is counted).

    python bench/bench_produce.py --records 1000000 [--broker kafka|tansu]
"""
from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import (  # noqa: E402
    bench_args, broker_label, cpu, create_topic, local_broker, measure, print_table, run_clients,
)

VALUE = b"x" * 100


def bench_kio_send(bootstrap, topic, n):
    from kio import Producer
    p = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=262144,
                 buffer_memory=128 * 1024 * 1024)
    p.partitions_for(topic)

    def run():
        send = p.send
        for _ in range(n):
            send(topic, VALUE, partition=0)
        assert p.flush() == 0
    r = measure(run, n)
    assert p.metrics()["records_sent"] == n, p.metrics()
    p.close()
    return r


def bench_kio_send_many(bootstrap, topic, n):
    from kio import Producer
    p = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=262144,
                 buffer_memory=128 * 1024 * 1024)
    p.partitions_for(topic)
    values = [VALUE] * n

    def run():
        fut = p.send_many(topic, values, partition=0)
        assert fut.result().count == n
    r = measure(run, n)
    p.close()
    return r


def bench_kio_send_many_keyed(bootstrap, topic, n):
    """send_many with a distinct key per record, murmur2-partitioned over a
    topic of its own with 3 partitions, and the default buffer.memory (32
    MiB), which the records outgrow several times."""
    from kio import Producer
    topic = create_topic(bootstrap, 3)
    p = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=1 << 20)
    p.partitions_for(topic)
    values = [VALUE] * n
    keys = [b"%016d" % i for i in range(n)]

    def run():
        for i in range(0, n, 10000):          # as a Spark task hands over Arrow batches
            fut = p.send_many(topic, values[i:i + 10000], keys=keys[i:i + 10000])
        p.flush()
        assert fut.result().count == min(10000, n)
    r = measure(run, n)
    assert p.metrics()["records_sent"] == n, p.metrics()
    p.close()
    return r


def bench_confluent(bootstrap, topic, n):
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                     "batch.size": 262144, "queue.buffering.max.messages": 2000000,
                     "queue.buffering.max.kbytes": 1048576, "enable.idempotence": False})
    p.list_topics(topic, timeout=10)
    delivered = [0]

    def cb(err, msg):
        if err is None:
            delivered[0] += 1

    def run():
        produce = p.produce
        for _ in range(n):
            while True:
                try:
                    produce(topic, VALUE, partition=0, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.01)
        p.flush(60)
    r = measure(run, n)
    assert delivered[0] == n, delivered
    return r


def bench_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaProducer

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=262144,
                             enable_idempotence=False)
        await p.start()
        await p.partitions_for(topic)

        async def run():
            futs = []
            send = p.send
            for _ in range(n):
                futs.append(await send(topic, VALUE, partition=0))
            await asyncio.gather(*futs)
        c0, t0 = cpu(), time.perf_counter()
        await run()
        t1, c1 = time.perf_counter(), cpu()
        await p.stop()
        return n / (t1 - t0), (c1 - c0) / n * 1e6, t1 - t0
    return asyncio.run(main())


def bench_kafka_python(bootstrap, topic, n):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=262144,
                      )
    p.partitions_for(topic)

    def run():
        send = p.send
        for _ in range(n):
            send(topic, VALUE, partition=0)
        p.flush()
    r = measure(run, n)
    p.close()
    return r


def bench_java(bootstrap, topic, n):
    import _java
    return _java.producer_perf(bootstrap, topic, n, len(VALUE), {
        "acks": 1, "linger.ms": 5, "batch.size": 262144, "buffer.memory": 128 * 1024 * 1024})


CLIENTS = [
    ("kio send()", bench_kio_send),
    ("kio send_many()", bench_kio_send_many),
    ("kio send_many(keys=)", bench_kio_send_many_keyed),
    ("confluent-kafka produce()", bench_confluent),
    ("aiokafka send()", bench_aiokafka),
    ("kafka-python send()", bench_kafka_python),
    ("java ProducerPerformance", bench_java),
]


def main():
    args = bench_args(__doc__)
    n = args.records
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        results = run_clients(CLIENTS, args.only, lambda fn: fn(bs, create_topic(bs), n))
    print_table(results, f"{n:,} records x {len(VALUE)} B, one partition, acks=1, linger.ms=5; "
                         f"{broker_label(broker)}; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
