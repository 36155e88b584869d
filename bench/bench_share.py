"""Share-group consume throughput (KIP-932): kio's ShareConsumer vs confluent-kafka's.

The bench starts a local Apache Kafka broker (Tansu has no share groups),
writes N records of 100 bytes to one partition, then each client reads all
N as the only member of a share group of its own (``share.auto.offset.reset``
earliest), one client after the other in this process, touching every
record's value. Acknowledgement is part of the work: implicit mode accepts
each poll's records at the next poll, explicit mode acknowledges every
record; the measured span starts before the client is created and ends when
commit_sync() has confirmed the last acknowledgements. Reported per client:
records/s and client CPU microseconds per record (see bench/_bench.py).

    python bench/bench_share.py --records 200000
"""
from __future__ import annotations

import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import (  # noqa: E402
    bench_args, broker_label, create_topic, local_broker, measure, print_table, run_clients,
)

VALUE = b"x" * 100
TIMEOUT = 300.0
MAX_POLL = 500


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


def new_group(bootstrap):
    from kio import Admin
    from kio.admin import ConfigResource
    group = "bench-share-" + uuid.uuid4().hex[:8]
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.incremental_alter_configs({ConfigResource.group(group): {"share.auto.offset.reset": "earliest"}})
    return group


def read_n(make, read_round, finish, close, n):
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
        finish(c)
    try:
        return measure(run, n)
    finally:
        if held:
            close(held[0])


def bench_kio(bootstrap, topic, n, explicit=False):
    from kio import AcknowledgeType, ShareConsumer
    group = new_group(bootstrap)

    def make():
        c = ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=MAX_POLL,
                          share_acknowledgement_mode="explicit" if explicit else "implicit")
        c.subscribe([topic])
        return c

    def read_round(c):
        records = c.poll(1.0)
        size = 0
        for r in records:
            size += len(r.value)
            if explicit:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
        return len(records)

    return read_n(make, read_round, lambda c: c.commit_sync(), lambda c: c.close(), n)


def bench_confluent(bootstrap, topic, n, explicit=False):
    import confluent_kafka as ck
    group = new_group(bootstrap)

    def make():
        c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "max.poll.records": MAX_POLL,
                              "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
        c.subscribe([topic])
        return c

    def read_round(c):
        got = size = 0
        for m in c.poll(1.0):
            if m.error() is None:
                size += len(m.value())
                got += 1
                if explicit:
                    c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        return got

    return read_n(make, read_round, lambda c: c.commit_sync(), lambda c: c.close(), n)


CLIENTS = [
    ("confluent-kafka implicit", bench_confluent),
    ("confluent-kafka explicit", lambda b, t, n: bench_confluent(b, t, n, explicit=True)),
    ("kio implicit", bench_kio),
    ("kio explicit", lambda b, t, n: bench_kio(b, t, n, explicit=True)),
]


def main():
    args = bench_args(__doc__, default_records=200_000)
    if args.broker != "kafka":
        sys.exit("share groups need Apache Kafka (--broker kafka)")
    n = args.records
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        topic = create_topic(bs)
        fill(bs, topic, n)
        results = run_clients(CLIENTS, args.only, lambda fn: fn(bs, topic, n))
    print_table(results, f"{n:,} records x {len(VALUE)} B, one partition, one share-group member each; "
                         f"{broker_label(broker)}; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
