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

try:
    from cluster_load import (ProduceLoad, Stall, check_exactly_once_in_order, read_partitions, report,
                              restart_and_check)
except ImportError:  # pragma: no cover
    from tests.cluster_load import (ProduceLoad, Stall, check_exactly_once_in_order, read_partitions, report,
                                    restart_and_check)

import kio.aio
from kio import Consumer, Producer, ShareConsumer

PARTITIONS = 3


def _topic(cluster, prefix):
    return cluster.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", PARTITIONS)


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
    total = restart_and_check(cluster, victim, load, topic, PARTITIONS, "idempotent producer")
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


# -- consumers: group coordinator SIGKILL ---------------------------------------------------------------

class GroupLog:
    """What the members of one group consumed: values per partition in the
    order they came, the longest stall, commit failures survived."""

    def __init__(self, name):
        self.name = name
        self.values = {p: [] for p in range(PARTITIONS)}
        self.stall = Stall()
        self.commit_errors = 0
        self.lock = threading.Lock()

    def add(self, records):
        with self.lock:
            for r in records:
                self.values[r.partition].append(r.value.decode())
        if records:
            self.stall.tick()

    def seen(self):
        with self.lock:
            return {v for vs in self.values.values() for v in vs}

    def check(self, acked):
        """At least once, and in order per partition apart from replays (the
        first time each record is seen, sequences ascend)."""
        seen = self.seen()
        for p, seqs in acked.items():
            missing = {f"{p}:{s}" for s in seqs} - seen
            assert not missing, f"{self.name}: lost {sorted(missing)[:10]}"
        for p, vs in self.values.items():
            first = list(dict.fromkeys(int(v.split(":")[1]) for v in vs))
            assert first == sorted(first), f"{self.name}: partition {p} out of order"
        return sum(map(len, self.values.values()))


def _classic_member(bootstrap, topic, group, log, stop):
    with Consumer(bootstrap_servers=bootstrap, group_id=group, group_protocol="classic",
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.subscribe([topic])
        while not stop.is_set():
            records = c.poll(0.2)
            log.add(records)
            if records:
                try:
                    c.commit()
                except Exception:          # the coordinator moved: the next commit covers it
                    log.commit_errors += 1
        c.commit()


async def _kip848_member(bootstrap, topic, group, log, stop):
    async with kio.aio.Consumer(bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer",
                                auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.subscribe([topic])
        while not stop.is_set():
            records = await c.poll(0.2)
            log.add(records)
            if records:
                try:
                    await c.commit()
                except Exception:
                    log.commit_errors += 1
        await c.commit()


def _share_member(bootstrap, topic, group, log, stop):
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.subscribe([topic])
        while not stop.is_set():
            log.add(c.poll(0.2))


def _groups_with_one_coordinator(cluster, n):
    """``n`` group ids whose coordinator is the same node (so one SIGKILL hits all)."""
    while True:
        groups = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        nodes = {cluster.coordinator(g) for g in groups}
        if len(nodes) == 1:
            return groups, nodes.pop()


def test_group_coordinator_sigkill_classic_kip848_and_share_groups(kafka_cluster):
    """Classic (threading, 2 members), KIP-848 (asyncio, 2 members) and share
    (threading, 2 members) groups whose coordinator is the same node consume
    a topic under produce load while that node is SIGKILLed: every group
    keeps consuming; nothing acknowledged is lost; the classic and KIP-848
    groups' commits end at the log end (they survived the move)."""
    from kio import Admin
    from kio.admin import ConfigResource

    cluster = kafka_cluster
    topic = _topic(cluster, "grp")
    (classic, modern, share), coordinator = _groups_with_one_coordinator(cluster, 3)
    boot = cluster.bootstrap_servers
    with Admin(bootstrap_servers=boot) as admin:
        admin.incremental_alter_configs({ConfigResource.group(share): {"share.auto.offset.reset": "earliest"}})
    logs = {name: GroupLog(name) for name in ("classic", "kip848", "share")}
    stop = threading.Event()

    def asyncio_members():
        async def both():
            await asyncio.gather(*(_kip848_member(boot, topic, modern, logs["kip848"], stop) for _ in range(2)))
        asyncio.run(both())

    threads = [threading.Thread(target=_classic_member, args=(boot, topic, classic, logs["classic"], stop))
               for _ in range(2)]
    threads += [threading.Thread(target=_share_member, args=(boot, topic, share, logs["share"], stop))
                for _ in range(2)]
    threads.append(threading.Thread(target=asyncio_members))
    load = ProduceLoad(boot, topic, PARTITIONS, acks="all").start()
    for t in threads:
        t.start()
    try:
        load.wait_acked(300)
        _wait(lambda: all(len(g.seen()) >= 200 for g in logs.values()), 90, "every group consuming")
        cluster.kill(coordinator)
        load.wait_acked(900, timeout=90)
    finally:
        load.stop()
    acked_total = sum(map(len, load.acked.values()))
    try:
        _wait(lambda: all(len(g.seen()) >= acked_total for g in logs.values()), 120,
              "every group caught up after the coordinator moved")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not load.errors, load.errors[:3]
    cluster.start_node(coordinator)
    cluster.wait_in_sync(120)
    figures = {name: g.check(load.acked) for name, g in logs.items()}
    # The commits survived the move: each group committed up to the log end.
    with Admin(bootstrap_servers=boot) as admin:
        ends = {tp: info.offset for tp, info in admin.list_offsets(
            {(topic, p): "latest" for p in range(PARTITIONS)}).items()}
        for group in (classic, modern):
            offsets = admin.list_consumer_group_offsets(group)
            assert {tp: om.offset for tp, om in offsets.items()} == ends, group
    for name, g in logs.items():
        report(f"{name} group, coordinator SIGKILL", g.stall.longest, consumed=figures[name],
               commit_errors=g.commit_errors, killed=coordinator)


# -- admin (asyncio driver): a broker SIGKILLed between and during calls ------------------------------------

def test_asyncio_admin_keeps_answering_through_a_leader_sigkill(kafka_cluster):
    """kio.aio.Admin runs describe_topics / list_offsets / create_topics in a
    loop while the leader of the partitions it asks about is SIGKILLed:
    every call succeeds (within its timeout); the slowest is the stall."""
    cluster = kafka_cluster
    topic = _topic(cluster, "adm")
    victim = cluster.leader(topic, 0)
    latencies = []

    async def calls(admin, tag):
        t0 = time.monotonic()
        d = await admin.describe_topics([topic])
        assert len(d[topic].partitions) == PARTITIONS
        offsets = await admin.list_offsets({(topic, p): "latest" for p in range(PARTITIONS)})
        assert len(offsets) == PARTITIONS
        await admin.create_topics([f"{topic}-{tag}"], num_partitions=1, replication_factor=3)
        latencies.append(time.monotonic() - t0)

    async def run():
        async with kio.aio.Admin(bootstrap_servers=cluster.bootstrap_servers, default_api_timeout_ms=60000) as admin:
            for i in range(3):
                await calls(admin, f"a{i}")
            cluster.kill(victim)
            for i in range(6):
                await calls(admin, f"b{i}")
            d = await admin.describe_topics([topic])
            return d[topic].partitions

    partitions = asyncio.run(run())
    assert all(p.leader is not None and p.leader != victim for p in partitions)
    cluster.start_node(victim)
    cluster.wait_in_sync(120)
    report("asyncio admin, leader SIGKILL", max(latencies), calls=len(latencies), killed=victim)


# -- reassignment and rolling restart under load -----------------------------------------------------------------

def test_partition_reassignment_under_produce_and_consume_load(kafka_cluster):
    """Partition 0 moves from three replicas to two that exclude its leader
    (Kafka's reassign tool) while a producer writes and a consumer reads:
    nothing lost or duplicated, order kept, the leader moved."""
    cluster = kafka_cluster
    topic = _topic(cluster, "move")
    log = GroupLog("reassign")
    stop = threading.Event()
    consumer = threading.Thread(target=_classic_member,
                                args=(cluster.bootstrap_servers, topic, f"g-{topic}", log, stop))
    consumer.start()
    load = ProduceLoad(cluster.bootstrap_servers, topic, PARTITIONS, acks="all").start()
    try:
        load.wait_acked(300)
        old = cluster.leader(topic, 0)
        target = [n.node_id for n in cluster.nodes if n.node_id != old][:2]
        cluster.reassign(topic, 0, target)
        load.wait_acked(600)
    finally:
        load.stop()
    acked_total = sum(map(len, load.acked.values()))
    try:
        _wait(lambda: len(log.seen()) >= acked_total, 60, "the consumer caught up")
    finally:
        stop.set()
        consumer.join(60)
    assert not load.errors, load.errors[:3]
    assert cluster.leader(topic, 0) in target
    total = check_exactly_once_in_order(read_partitions(cluster.bootstrap_servers, topic, PARTITIONS),
                                        load.acked, "after reassignment")
    log.check(load.acked)
    report("reassignment of a led partition", max(load.stall.longest, log.stall.longest), records=total,
           moved=f"{old}->{target}")


def test_rolling_restart_under_produce_and_consume_load(kafka_cluster):
    """Every node is restarted in turn (controlled shutdown) while an
    idempotent producer writes and a KIP-848 consumer reads: nothing lost,
    no duplicates, order kept. Controlled shutdown moves leaders while the
    producer writes, so its NOT_LEADER_OR_FOLLOWER answers carry KIP-951
    hints: the producer follows them instead of asking Metadata."""
    cluster = kafka_cluster
    topic = _topic(cluster, "roll")
    log = GroupLog("rolling")
    stop = threading.Event()

    def member():
        asyncio.run(_kip848_member(cluster.bootstrap_servers, topic, f"g-{topic}", log, stop))

    consumer = threading.Thread(target=member)
    consumer.start()
    load = ProduceLoad(cluster.bootstrap_servers, topic, PARTITIONS, acks="all",
                       enable_idempotence=True).start()
    try:
        load.wait_acked(300)
        for node in cluster.nodes:
            cluster.restart_node(node.node_id)
            load.wait_acked(300, timeout=90)
            cluster.wait_in_sync(120)
    finally:
        load.stop()
    acked_total = sum(map(len, load.acked.values()))
    try:
        _wait(lambda: len(log.seen()) >= acked_total, 90, "the consumer caught up")
    finally:
        stop.set()
        consumer.join(90)
    assert not load.errors, load.errors[:3]
    total = check_exactly_once_in_order(read_partitions(cluster.bootstrap_servers, topic, PARTITIONS),
                                        load.acked, "after a rolling restart")
    assert total == sum(load.sent.values())
    log.check(load.acked)
    core = load.producer._core
    # KIP-951: controlled shutdown moved leaders under the producer's feet;
    # the old leaders' NOT_LEADER_OR_FOLLOWER answers named the new ones and
    # the producer followed them without a Metadata round trip.
    assert core.cluster.leader_hints_applied >= 1
    report("rolling restart", max(load.stall.longest, log.stall.longest), records=total,
           producer_stall=f"{load.stall.longest:.2f}", consumer_stall=f"{log.stall.longest:.2f}",
           leader_hints=core.cluster.leader_hints_applied, metadata_answers=core.cluster.version)
