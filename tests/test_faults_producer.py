"""Producers while a proxy cuts every connection at random (~every 100 ms):
the idempotent producer writes each record exactly once and in order per
partition; a non-idempotent acks=all producer loses nothing (its duplicates
are counted and reported). All traffic crosses the proxy: the broker
advertises the proxy's port."""
import collections
import time

import pytest

from conftest import broker_kinds
from fault_proxy import proxied_broker
from kio import Consumer, Producer, TopicPartition as TP
from kio.admin import Admin

PARTITIONS = 6
RECORDS = 200_000


@pytest.fixture(scope="module", params=broker_kinds())
def proxied(request):
    """(bootstrap through the proxy, proxy) on a broker of its own."""
    with proxied_broker(request.param) as bootstrap_and_proxy:
        yield bootstrap_and_proxy


def make_topic(bootstrap):
    name = f"faults-{time.monotonic_ns()}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([name], num_partitions=PARTITIONS)
    return name


def produce_under_cuts(bootstrap, proxy, topic, **config):
    """Send RECORDS keyed records (key = sequence number) while the proxy cuts."""
    failures = []
    with Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=32768,
                  delivery_timeout_ms=120000, request_timeout_ms=5000, retry_backoff_ms=20,
                  reconnect_backoff_ms=20, **config) as p:
        p.partitions_for(topic)
        proxy.cut_randomly(every_s=0.1)
        try:
            for i in range(RECORDS):
                p.send(topic, b"%d" % i, key=b"%d" % i, partition=i % PARTITIONS,
                       on_delivery=lambda err, md: err is not None and failures.append(err))
            assert p.flush(120) == 0
        finally:
            proxy.stop_cutting()
    return failures


def read_back(bootstrap, topic, expected_at_least):
    """{partition: [sequence numbers in offset order]}."""
    out = collections.defaultdict(list)
    tps = [TP(topic, p) for p in range(PARTITIONS)]
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
        c.assign(tps)
        c.seek_to_beginning(tps)
        got = 0
        idle_until = time.monotonic() + 20
        while time.monotonic() < idle_until:
            batches = c.poll_batch(timeout=0.5)
            for b in batches:
                out[b.partition].extend(int(v) for v in b.values)
                got += len(b)
            if batches:
                idle_until = time.monotonic() + (2 if got >= expected_at_least else 20)
    return out


def tally(got):
    """(received, lost, duplicated, reordered) of what read_back returned."""
    seqs = [s for p in range(PARTITIONS) for s in got[p]]
    lost = RECORDS - len(set(seqs))
    duplicated = len(seqs) - len(set(seqs))
    reordered = sum(1 for p in range(PARTITIONS) for a, b in zip(got[p], got[p][1:]) if b <= a)
    return len(seqs), lost, duplicated, reordered


def produce_and_read_back(proxied, label, **config):
    bootstrap, proxy = proxied
    topic = make_topic(bootstrap)
    cuts_before = proxy.cuts
    failures = produce_under_cuts(bootstrap, proxy, topic, acks="all", **config)
    cuts = proxy.cuts - cuts_before
    assert failures == []
    got = read_back(bootstrap, topic, RECORDS)
    received, lost, duplicated, reordered = tally(got)
    print(f"\n{label}: sent {RECORDS}, received {received}, lost {lost}, duplicated {duplicated}, "
          f"reordered {reordered}, connections cut {cuts}")
    assert cuts >= 5, "the proxy did not cut anything: the test proves nothing"
    return got, lost, duplicated, reordered


def test_idempotent_producer_writes_every_record_exactly_once_in_order(proxied):
    got, lost, duplicated, reordered = produce_and_read_back(proxied, "idempotent", enable_idempotence=True)
    assert (lost, duplicated, reordered) == (0, 0, 0)
    assert all(got[p] == list(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS))


def test_non_idempotent_acks_all_loses_nothing(proxied):
    _, lost, _, _ = produce_and_read_back(proxied, "acks=all, no idempotence", enable_idempotence=False,
                                          max_in_flight_requests_per_connection=5)
    assert lost == 0
