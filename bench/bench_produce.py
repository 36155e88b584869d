"""Produce throughput: kio vs confluent-kafka, aiokafka, kafka-python and Java, like with like.

N records of 100 bytes to one partition, on a local broker started by the
bench: Apache Kafka (default) or Tansu (``--broker tansu``). Every client
runs with two sets of settings:

* ``defaults``: the client's own defaults, with only acks=1 set (the
  clients' default acks differ: kio, librdkafka and Java wait for all
  replicas, aiokafka and kafka-python for the leader); the settings column
  names what is then in force.
* ``tuned``: the same for every client: acks=1, linger.ms=5, batch.size
  1 MiB, a 128 MiB buffer, idempotence off, no compression.

and asks for delivery reports the same way on both sides: ``none`` (kio's
future dropped, confluent-kafka's ``produce()`` without ``on_delivery`` and
``poll(0)`` every 1,000 records, aiokafka's and kafka-python's futures
dropped; the run ends with each client's flush) or ``callback`` (a Python
function per record: ``on_delivery=`` for kio and confluent-kafka,
``add_done_callback`` / ``add_callback`` on the futures of aiokafka and
kafka-python; the run checks every record was reported). Java's
ProducerPerformance always registers a callback per record (bench/_java.py
says how its CPU is counted). ``send_many()`` reports through one future
per call.

Each client gets a fresh topic per run, in this process. Rows run in rounds
(--repeat, default 3), every row once per round, so a machine that gets busier
moves every client alike; the table gives the median records/s and the
median CPU µs per record of the rounds, and ratios against confluent-kafka's
row with the same settings and delivery reports. CPU is getrusage(RUSAGE_SELF)
user+system: every thread of this process (librdkafka's, kio's network
thread), not the broker. The markdown table is what the README shows.

    python bench/bench_produce.py --records 300000 --repeat 3 [--broker kafka|tansu]
    python bench/bench_produce.py --records 300000 --batch-sizes 16384,65536,262144,1048576
"""
from __future__ import annotations

import asyncio
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import (  # noqa: E402
    Row, broker_label, cpu, create_topic, load_average, local_broker, markdown_table, matrix_args,
    measure, run_rows,
)

VALUE = b"x" * 100
TUNED_BATCH = 1 << 20
TUNED_BUFFER = 128 * 1024 * 1024
TUNED_TEXT = "acks=1, linger.ms 5, batch.size 1 MiB, buffer 128 MiB, no idempotence"


# -- kio ----------------------------------------------------------------------------------------

KIO_TUNED = dict(acks=1, linger_ms=5, batch_size=TUNED_BATCH, buffer_memory=TUNED_BUFFER,
                 enable_idempotence=False)


def _kio_defaults_text():
    from kproto.producer.config import PRODUCER_CONFIG
    d = {name: s.default for name, s in PRODUCER_CONFIG.settings.items()}
    return (f"acks=1; batch.size {d['batch.size'] // 1024} KiB, linger.ms {d['linger.ms']}, "
            f"buffer.memory {d['buffer.memory'] >> 20} MiB")


def kio_send(bootstrap, n, conf, delivery):
    from kio import Producer
    topic = create_topic(bootstrap)
    p = Producer(bootstrap_servers=bootstrap, **conf)
    p.partitions_for(topic)
    reported = [0]

    def cb(err, md):
        if err is None:
            reported[0] += 1

    def run():
        send = p.send
        if delivery == "callback":
            for _ in range(n):
                send(topic, VALUE, partition=0, on_delivery=cb)
        else:
            for _ in range(n):
                send(topic, VALUE, partition=0)
        assert p.flush() == 0
    try:
        r = measure(run, n)
        assert p.metrics()["records_sent"] == n, p.metrics()
        assert delivery != "callback" or reported[0] == n, reported
    finally:
        p.close()
    return r


def kio_send_many(bootstrap, n, conf, delivery):
    from kio import Producer
    topic = create_topic(bootstrap)
    p = Producer(bootstrap_servers=bootstrap, **conf)
    p.partitions_for(topic)
    values = [VALUE] * 10000

    def run():
        for i in range(0, n, 10000):
            fut = p.send_many(topic, values[:min(10000, n - i)], partition=0)
        assert p.flush() == 0 and fut.result().count == min(10000, n)
    try:
        r = measure(run, n)
        assert p.metrics()["records_sent"] == n, p.metrics()
    finally:
        p.close()
    return r


def kio_send_many_keyed(bootstrap, n, conf, delivery):
    """send_many with a distinct 16-byte key per record, murmur2-partitioned
    over a topic of 3 partitions, 10,000 records per call (as a Spark task
    hands over Arrow batches)."""
    from kio import Producer
    topic = create_topic(bootstrap, 3)
    p = Producer(bootstrap_servers=bootstrap, **conf)
    p.partitions_for(topic)
    values = [VALUE] * n
    keys = [b"%016d" % i for i in range(n)]

    def run():
        for i in range(0, n, 10000):
            fut = p.send_many(topic, values[i:i + 10000], keys=keys[i:i + 10000])
        assert p.flush() == 0 and fut.result().count == min(10000, n)
    try:
        r = measure(run, n)
        assert p.metrics()["records_sent"] == n, p.metrics()
    finally:
        p.close()
    return r


# -- confluent-kafka -------------------------------------------------------------------------------

CONFLUENT_TUNED = {"acks": 1, "linger.ms": 5, "batch.size": TUNED_BATCH,
                   "queue.buffering.max.kbytes": TUNED_BUFFER // 1024,
                   "queue.buffering.max.messages": 10_000_000, "enable.idempotence": False}
CONFLUENT_DEFAULTS_TEXT = ("acks=1; batch.size 1,000,000 B, batch.num.messages 10,000, linger.ms 5, "
                           "queue.buffering.max.messages 100,000")


def confluent_produce(bootstrap, n, conf, delivery):
    import confluent_kafka as ck
    topic = create_topic(bootstrap)
    p = ck.Producer({"bootstrap.servers": bootstrap, **conf})
    p.list_topics(topic, timeout=10)
    reported = [0]

    def cb(err, msg):
        if err is None:
            reported[0] += 1

    def run():
        produce, poll = p.produce, p.poll
        kw = {"on_delivery": cb} if delivery == "callback" else {}
        for i in range(n):
            while True:
                try:
                    produce(topic, VALUE, partition=0, **kw)
                    break
                except BufferError:          # queue.buffering.max.*: serve reports, retry
                    poll(0.01)
            if i % 1000 == 0:
                poll(0)
        assert p.flush(60) == 0
    r = measure(run, n)
    assert delivery != "callback" or reported[0] == n, reported
    return r


# -- aiokafka -----------------------------------------------------------------------------------

AIOKAFKA_TUNED = dict(acks=1, linger_ms=5, max_batch_size=TUNED_BATCH, enable_idempotence=False)


def aiokafka_send(bootstrap, n, conf, delivery):
    from aiokafka import AIOKafkaProducer
    topic = create_topic(bootstrap)

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await p.start()
        try:
            await p.partitions_for(topic)
            reported = [0]

            def cb(fut):
                if fut.exception() is None:
                    reported[0] += 1
            c0, t0 = cpu(), time.perf_counter()
            send = p.send
            for _ in range(n):
                fut = await send(topic, VALUE, partition=0)
                if delivery == "callback":
                    fut.add_done_callback(cb)
            await p.flush()
            await asyncio.sleep(0)               # done-callbacks run on the next loop turn
            t1, c1 = time.perf_counter(), cpu()
            assert delivery != "callback" or reported[0] == n, reported
            return n / (t1 - t0), (c1 - c0) / n * 1e6, t1 - t0
        finally:
            await p.stop()
    return asyncio.run(main())


# -- kafka-python -----------------------------------------------------------------------------------

# kafka-python 2.x has no buffer_memory setting (its accumulator is unbounded)
KAFKA_PYTHON_TUNED = dict(acks=1, linger_ms=5, batch_size=TUNED_BATCH)


def kafka_python_send(bootstrap, n, conf, delivery):
    from kafka import KafkaProducer
    topic = create_topic(bootstrap)
    p = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    p.partitions_for(topic)
    reported = [0]

    def cb(md):
        reported[0] += 1

    def run():
        send = p.send
        for _ in range(n):
            fut = send(topic, VALUE, partition=0)
            if delivery == "callback":
                fut.add_callback(cb)
        p.flush()
    try:
        r = measure(run, n)
        assert delivery != "callback" or reported[0] == n, reported
    finally:
        p.close()
    return r


# -- Java ---------------------------------------------------------------------------------------

JAVA_TUNED = {"acks": 1, "linger.ms": 5, "batch.size": TUNED_BATCH, "buffer.memory": TUNED_BUFFER,
              "enable.idempotence": "false"}


def java_perf(bootstrap, n, conf, delivery):
    import _java
    topic = create_topic(bootstrap)
    return _java.producer_perf(bootstrap, topic, n, len(VALUE), conf)


def sweep_rows(bootstrap, n, sizes):
    """--batch-sizes: kio send() at its defaults but batch.size, against
    confluent-kafka at its defaults, no delivery reports (how the default
    batch.size was chosen)."""
    out = [Row("confluent-kafka", "produce()", "defaults", "none", CONFLUENT_DEFAULTS_TEXT,
               lambda: confluent_produce(bootstrap, n, {"acks": 1}, "none"))]
    for size in sizes:
        out.append(Row("kio", "send()", "defaults", "none",
                       f"acks=1; batch.size {size // 1024} KiB, otherwise defaults",
                       lambda size=size: kio_send(bootstrap, n, {"acks": 1, "batch_size": size}, "none")))
    return out


def rows(bootstrap, n, settings):
    out = []

    def add(client, call, which, delivery, described, fn, conf):
        if which in settings:
            out.append(Row(client, call, which, delivery, described,
                           lambda: fn(bootstrap, n, conf, delivery)))
    for which in ("defaults", "tuned"):
        tuned = which == "tuned"
        for delivery in ("none", "callback"):
            add("kio", "send()", which, delivery, TUNED_TEXT if tuned else _kio_defaults_text(),
                kio_send, KIO_TUNED if tuned else {"acks": 1})
            add("confluent-kafka", "produce()", which, delivery,
                TUNED_TEXT if tuned else CONFLUENT_DEFAULTS_TEXT,
                confluent_produce, CONFLUENT_TUNED if tuned else {"acks": 1})
        add("kio", "send_many()", which, "one future per 10,000 records",
            TUNED_TEXT if tuned else _kio_defaults_text(), kio_send_many, KIO_TUNED if tuned else {"acks": 1})
        add("kio", "send_many(keys=)", which, "one future per 10,000 records",
            (TUNED_TEXT if tuned else _kio_defaults_text()) + "; 3 partitions, 16-byte keys",
            kio_send_many_keyed, KIO_TUNED if tuned else {"acks": 1})
        for delivery in ("none", "callback"):
            add("aiokafka", "send()", which, delivery,
                TUNED_TEXT if tuned else "acks=1; max_batch_size 16 KiB, linger_ms 0",
                aiokafka_send, AIOKAFKA_TUNED if tuned else {"acks": 1})
            add("kafka-python", "send()", which, delivery,
                TUNED_TEXT if tuned else "acks=1; batch_size 16 KiB, linger_ms 0",
                kafka_python_send, KAFKA_PYTHON_TUNED if tuned else {"acks": 1})
        add("Java", "ProducerPerformance", which, "callback",
            TUNED_TEXT if tuned else "acks=1; batch.size 16 KiB, linger.ms 5, buffer.memory 32 MiB",
            java_perf, JAVA_TUNED if tuned else {"acks": 1})
    return out


def main():
    args = matrix_args(__doc__)
    n = args.records
    settings = args.settings.split(",")
    load_before = load_average()
    with local_broker(args.broker) as broker:
        # A broker just started is slow for its first seconds (its JIT): warm
        # it up, untimed, so the first row of round 1 is not the one to pay.
        kio_send(broker.bootstrap_servers, min(n, 100_000), {"acks": 1}, "none")
        confluent_produce(broker.bootstrap_servers, min(n, 100_000), {"acks": 1}, "none")
        if args.batch_sizes:
            todo = sweep_rows(broker.bootstrap_servers, n, [int(x) for x in args.batch_sizes.split(",")])
        else:
            todo = rows(broker.bootstrap_servers, n, settings)
        done = run_rows(todo, args.only, args.repeat)
    sweep = f" --batch-sizes {args.batch_sizes}" if args.batch_sizes else ""
    title = (f"`python bench/bench_produce.py --records {n} --repeat {args.repeat}{sweep}`: {n:,} records x "
             f"{len(VALUE)} B to one partition; {broker_label(broker)}; Python {sys.version.split()[0]}; "
             f"median of {args.repeat} alternating rounds; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
             f"{load_before} before, {load_average()} after")
    print()
    print(markdown_table(done, "confluent-kafka", title))


if __name__ == "__main__":
    main()
