"""``kio demo``: a produce/consume round trip against a broker, with figures.

Starts the local development broker unless a bootstrap server is given,
creates a topic with :class:`kio.Admin`, produces the records with
:class:`kio.Producer` (the bulk ``send_many`` path, a chunk per partition in
turn), consumes them back with a :class:`kio.Consumer` group member
(``poll_batch``), and verifies count and checksum, then stops the broker.
"""
from __future__ import annotations

import os
import sys
import time
import zlib

from kproto.errors import KafkaError

CHUNK = 10_000               # records per send_many call
IDLE_LIMIT_S = 30.0          # a consumer that sees nothing for this long gives up


def _value(i: int, size: int) -> bytes:
    head = b"%010d:" % i
    return (head + b"x" * size)[:max(size, len(head))]


def _checksum(values, acc: int) -> int:
    crc = zlib.crc32
    for v in values:
        acc += crc(v)
    return acc & 0xFFFFFFFFFFFFFFFF


def _produce(bootstrap, topic, records, value_size, partitions, compression) -> int:
    from kio.producer import Producer

    checksum = 0
    futures = []
    with Producer(bootstrap_servers=bootstrap, client_id="kio-demo", compression_type=compression,
                  linger_ms=5, batch_size=256 * 1024, max_block_ms=30000) as producer:
        for n, first in enumerate(range(0, records, CHUNK)):
            values = [_value(i, value_size) for i in range(first, min(first + CHUNK, records))]
            checksum = _checksum(values, checksum)
            futures.append(producer.send_many(topic, values, partition=n % partitions))
        producer.flush()
    for f in futures:
        f.result(0)          # raises the first delivery error, if any
    return checksum


def _consume(bootstrap, topic, records):
    from kio.consumer import Consumer

    count = checksum = 0
    # A short session timeout lets the demo's only member join at once.
    with Consumer(bootstrap_servers=bootstrap, client_id="kio-demo", group_id=f"{topic}-readers",
                  auto_offset_reset="earliest", session_timeout_ms=6000) as consumer:
        assigned = []
        consumer.subscribe([topic], on_assign=lambda parts: assigned.append(time.monotonic()))
        last = time.monotonic()
        while count < records and time.monotonic() - last < IDLE_LIMIT_S:
            batches = consumer.poll_batch(timeout=0.5)
            for b in batches:
                count += len(b)
                checksum = _checksum(b.values, checksum)
            if batches:
                last = time.monotonic()
        joined = assigned[0] if assigned else None
        consumer.commit()
    return count, checksum, joined


def run_demo(bootstrap_servers=None, records=1_000_000, value_size=100, partitions=3,
             compression="lz4", timeout=30.0, out=sys.stdout) -> int:
    from kio.admin import Admin, NewTopic

    broker = None
    if bootstrap_servers is None:
        from kio.testing.broker import LocalBroker
        broker = LocalBroker().start()
        bootstrap_servers = broker.bootstrap_servers
        print(f"started local broker on {bootstrap_servers}", file=out)
    try:
        topic = f"kio-demo-{os.getpid()}-{int(time.time())}"
        with Admin(bootstrap_servers=bootstrap_servers, client_id="kio-demo",
                   default_api_timeout_ms=int(timeout * 1000)) as admin:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        print(f"topic {topic}: {partitions} partitions; producing {records:,} records "
              f"of {value_size} bytes ({compression})", file=out)

        t0, c0 = time.perf_counter(), time.process_time()
        sent_sum = _produce(bootstrap_servers, topic, records, value_size, partitions, compression)
        t1, c1 = time.perf_counter(), time.process_time()
        print(f"produced {records:,} records in {t1 - t0:.2f} s: "
              f"{records / (t1 - t0):,.0f} records/s, client CPU "
              f"{(c1 - c0) / records * 1e6:.2f} us/record (building the values included)", file=out)

        m1 = time.monotonic()
        count, got_sum, joined = _consume(bootstrap_servers, topic, records)
        t2, c2, m2 = time.perf_counter(), time.process_time(), time.monotonic()
        join_s = (joined or m2) - m1
        print(f"consumed {count:,} records with a group consumer in {t2 - t1:.2f} s: joining the "
              f"group took {join_s:.2f} s, then {count / max(m2 - (joined or m2), 1e-9):,.0f} "
              f"records/s; client CPU {(c2 - c1) / max(count, 1) * 1e6:.2f} us/record", file=out)
        ok = count == records and got_sum == sent_sum
        print(f"verification: count {count:,}/{records:,}, checksum "
              f"{got_sum:016x} vs {sent_sum:016x}: {'OK' if ok else 'MISMATCH'}", file=out)
        if not ok:
            raise KafkaError(f"verification failed: {count:,} of {records:,} records read back, "
                             f"checksums {got_sum:016x} and {sent_sum:016x}")
        return 0
    finally:
        if broker is not None:
            broker.stop()
            print("stopped local broker", file=out)
