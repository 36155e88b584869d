"""Failover on a three-node Apache Kafka cluster (the ``kafka_cluster`` fixture).

Each test runs a client under load, kills (SIGKILL) or restarts brokers, and
then checks what the client promises: no acknowledged record lost, no
duplicates where idempotence or transactions promise none, order per
partition; it prints the longest stall (``pytest -s`` shows the
``[failover]`` lines). Every test brings the cluster back to full health
(``wait_in_sync``) before it ends. Heavier variants (longer loads, several
faults in a row) are in bench/soak_cluster.py.
"""
import asyncio
import threading
import time
import uuid

import pytest

try:
    from cluster_load import (ProduceLoad, Stall, check_exactly_once_in_order, read_partitions, report)
except ImportError:  # pragma: no cover
    from tests.cluster_load import (ProduceLoad, Stall, check_exactly_once_in_order, read_partitions, report)

import kio.aio
from kio import Consumer, Producer, ShareConsumer

PARTITIONS = 3


def _topic(cluster, prefix):
    return cluster.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", PARTITIONS)


def _crash_and_recover(cluster, node, down_for=0.0):
    """SIGKILL ``node``, leave it down ``down_for`` s, start it again and wait
    until no partition is under-replicated."""
    cluster.kill(node)
    time.sleep(down_for)
    cluster.start_node(node)
    cluster.wait_in_sync(120)


def _metadata_requests(client):
    """Metadata requests a kio client's core sent so far (its NetworkClient's
    cluster cache counts answers and failures)."""
    return client._core.cluster.version


# -- producer ------------------------------------------------------------------------------------------

def test_idempotent_producer_survives_leader_sigkill(kafka_cluster):
    cluster = kafka_cluster
    topic = _topic(cluster, "idem")
    load = ProduceLoad(cluster.bootstrap_servers, topic, PARTITIONS, acks="all",
                       enable_idempotence=True).start()
    try:
        load.wait_acked(500)
        victim = cluster.leader(topic, 0)
        cluster.kill(victim)
        load.wait_acked(1500, timeout=90)         # writes go on without the dead leader
    finally:
        load.stop()
    stall = load.stall.longest
    cluster.start_node(victim)
    cluster.wait_in_sync(120)
    assert not load.errors, load.errors[:3]
    log = read_partitions(cluster.bootstrap_servers, topic, PARTITIONS)
    total = check_exactly_once_in_order(log, load.acked, "idempotent producer")
    assert total == sum(load.sent.values())      # everything sent was written, once
    report("idempotent producer, leader SIGKILL", stall, records=total, killed=victim,
           hints=load.producer._core.cluster.leader_hints_applied)


def test_transactional_producer_survives_leader_sigkill(kafka_cluster):
    cluster = kafka_cluster
    topic = _topic(cluster, "txn")
    committed = {p: [] for p in range(PARTITIONS)}
    stall = Stall()
    aborted = 0
    stop = threading.Event()
    errors = []

    def run():
        nonlocal aborted
        seq = 0
        with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"tx-{topic}",
                      linger_ms=5, transaction_timeout_ms=30000) as p:
            p.init_transactions(60)
            while not stop.is_set():
                batch = {q: [] for q in range(PARTITIONS)}
                p.begin_transaction()
                try:
                    for i in range(30):
                        q = i % PARTITIONS
                        p.send(topic, f"{q}:{seq + i}".encode(), partition=q)
                        batch[q].append(seq + i)
                    p.commit_transaction(60)
                except Exception as exc:               # a retriable failure: abort, send again
                    errors.append(exc)
                    aborted += 1
                    p.abort_transaction(60)
                    continue
                finally:
                    seq += 30
                for q, s in batch.items():
                    committed[q].extend(s)
                stall.tick()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        _wait(lambda: sum(map(len, committed.values())) >= 300, 60, "first transactions")
        victim = cluster.leader(topic, 0)
        cluster.kill(victim)
        before = sum(map(len, committed.values()))
        _wait(lambda: sum(map(len, committed.values())) >= before + 900, 120, "transactions after the kill")
    finally:
        stop.set()
        t.join(120)
    cluster.start_node(victim)
    cluster.wait_in_sync(120)
    log = read_partitions(cluster.bootstrap_servers, topic, PARTITIONS, read_committed=True)
    total = check_exactly_once_in_order(log, committed, "read_committed after transactions")
    # read_committed shows exactly the committed transactions: nothing more.
    assert total == sum(map(len, committed.values()))
    report("transactional producer, leader SIGKILL", stall.longest, records=total, aborted=aborted,
           errors=len(errors))


def _wait(cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)
