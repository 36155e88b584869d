"""kio consumers with ``group.protocol=consumer`` (KIP-848) against Apache Kafka
4.4: partitions shared and rebalanced by the broker, rebalance listeners in
order (a revocation is finished before the partitions move on), commits with
the member epoch, static membership, the poll timeout, a regex subscription
evaluated by the broker, a mixed group (a classic member and a consumer-protocol
member: Kafka converts the group online), a group with confluent-kafka's
consumer-protocol member, and the asyncio and trio drivers.

Kafka only: Tansu serves neither ConsumerGroupHeartbeat nor
ConsumerGroupDescribe (KIP-848). The suite's Kafka broker tells members to
heartbeat every 500 ms (``kio.testing.kafka_broker``), so a rebalance takes about a
second.
"""
import time
import uuid

import confluent_kafka
import pytest

from kio import Consumer, Producer, TopicPartition as TP
from kio.admin import Admin

try:
    from test_drivers import call, group_rebalance_and_commits, run
except ImportError:  # tests/ as a package
    from tests.test_drivers import call, group_rebalance_and_commits, run  # noqa: F401

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

NEW = {"group_protocol": "consumer"}


def group_name(prefix="cp"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap, topic, partitions, per_partition, start=0):
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for part in range(partitions):
            for i in range(start, start + per_partition):
                p.send(topic, b"p%d-%d" % (part, i), partition=part)
        assert p.flush(30) == 0


def poll_all(consumers, until, timeout=30, read=None):
    """Poll every consumer in turn (0.1 s each) until ``until()``; records go
    to ``read[name]`` as (partition, offset)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for name, c in consumers.items():
            for r in c.poll(0.1):
                if read is not None:
                    read.setdefault(name, []).append((r.partition, r.offset))
        if until():
            return True
    return until()


def parts(c):
    return {tp.partition for tp in c.assignment()}


def test_members_share_partitions_and_rebalance_in_order_when_one_leaves(bootstrap, make_topic):
    topic = make_topic(6)
    group = group_name()
    produce(bootstrap, topic, 6, 5)
    log = []                                    # (member, "assign"/"revoke", partition), in order
    closing = set()

    def listeners(name, c):
        def on_assign(ps):
            log.extend((name, "assign", tp.partition) for tp in ps)

        def on_revoke(ps):
            # the revocation listener can still commit: the member epoch is valid
            # (not on close: kio commits the positions itself before leaving)
            if name not in closing:
                c.commit(timeout=10)
            log.extend((name, "revoke", tp.partition) for tp in ps)
        return dict(on_assign=on_assign, on_revoke=on_revoke)

    cs = {n: Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, client_id=n, **NEW) for n in ("a", "b", "c")}
    try:
        read = {}
        cs["a"].subscribe([topic], **listeners("a", cs["a"]))
        assert poll_all({"a": cs["a"]}, lambda: len(parts(cs["a"])) == 6, read=read)
        for n in ("b", "c"):
            cs[n].subscribe([topic], **listeners(n, cs[n]))
        assert poll_all(cs, lambda: all(len(parts(c)) == 2 for c in cs.values()), read=read), \
            {n: parts(c) for n, c in cs.items()}
        assert set().union(*(parts(c) for c in cs.values())) == set(range(6))
        # every partition that moved was revoked by its old owner before the new one got it
        for i, (member, kind, p) in enumerate(log):
            if kind == "assign" and member != "a":
                assert ("a", "revoke", p) in log[:i], (p, log)
        # what a read is what it was committed up to when revoked: nothing is read twice
        assert poll_all(cs, lambda: sum(len(v) for v in read.values()) >= 30, read=read)
        assert sorted(x for v in read.values() for x in v) == sorted(
            (p, o) for p in range(6) for o in range(5))
        # one leaves: its partitions go to the others
        closing.add("c")
        cs.pop("c").close()
        assert poll_all(cs, lambda: parts(cs["a"]) | parts(cs["b"]) == set(range(6))
                        and len(parts(cs["a"])) == 3 and len(parts(cs["b"])) == 3)
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        assert desc.state == "Stable" and desc.protocol_type == "consumer"
        assert sorted(m.client_id for m in desc.members) == ["a", "b"]
    finally:
        closing.update(cs)
        for c in cs.values():
            c.close()


def test_commit_uses_the_member_epoch_and_committed_offsets_read_back(bootstrap, make_topic):
    topic = make_topic(2)
    group = group_name()
    produce(bootstrap, topic, 2, 10)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, **NEW) as c:
        c.subscribe([topic])
        got = []
        end = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < end:
            got += c.poll(0.2)
        assert len(got) == 20
        epoch = c._core.membership.member_epoch
        assert epoch > 0
        committed = c.commit()
        assert {tp: om.offset for tp, om in committed.items()} == {TP(topic, 0): 10, TP(topic, 1): 10}
        c.commit({TP(topic, 0): 7}, asynchronous=True)
        assert c.committed([TP(topic, 0)], timeout=10)[TP(topic, 0)].offset in (7, 10)
        c.commit({TP(topic, 0): 8})
        seen = c.committed([TP(topic, 0), TP(topic, 1)], timeout=10)
        assert {tp: om.offset for tp, om in seen.items()} == {TP(topic, 0): 8, TP(topic, 1): 10}
        assert c._core.membership.member_epoch == epoch      # no rebalance in between
    # a new member of the group starts where the commits say
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW) as c:
        c.subscribe([topic])
        got = []
        end = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < end:
            got += c.poll(0.2)
        assert sorted((r.partition, r.offset) for r in got) == [(0, 8), (0, 9)]


def test_close_with_auto_commit_commits_and_the_next_member_resumes(bootstrap, make_topic):
    topic = make_topic(1)
    group = group_name()
    produce(bootstrap, topic, 1, 30)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW) as c:
        c.subscribe([topic])
        got = []
        end = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < end:
            got += c.poll(0.2)
        assert len(got) == 30
    with Admin(bootstrap_servers=bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets(group)
    assert offsets[TP(topic, 0)].offset == 30


def test_static_members_get_their_partitions_back_without_moving_the_others(bootstrap, make_topic):
    topic = make_topic(4)
    group = group_name("static")
    events = {"a": [], "b": []}

    def member(name, instance):
        c = Consumer(bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
                     auto_offset_reset="earliest", **NEW)
        c.subscribe([topic], on_assign=lambda ps: events[name].append(("assign", sorted(ps))),
                    on_revoke=lambda ps: events[name].append(("revoke", sorted(ps))))
        return c

    a, b = member("a", "inst-a"), member("b", "inst-b")
    try:
        assert poll_all({"a": a, "b": b}, lambda: len(parts(a)) == 2 and len(parts(b)) == 2)
        before_a, before_b = parts(a), parts(b)
        events["b"].clear()
        a.close()                                   # leaves with epoch -2: the broker keeps its share
        a = member("a", "inst-a")
        assert poll_all({"a": a, "b": b}, lambda: parts(a) == before_a, timeout=20), (parts(a), before_a)
        assert parts(b) == before_b and events["b"] == []     # b saw no rebalance at all
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        assert sorted(m.group_instance_id for m in desc.members) == ["inst-a", "inst-b"]
    finally:
        a.close()
        b.close()


def test_poll_timeout_leaves_and_the_member_rejoins_at_its_next_poll(bootstrap, make_topic):
    topic = make_topic(2)
    group = group_name("slow")
    lost = []
    slow = Consumer(bootstrap_servers=bootstrap, group_id=group, max_poll_interval_ms=2000,
                    auto_offset_reset="earliest", **NEW)
    other = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW)
    try:
        slow.subscribe([topic], on_lost=lost.append)
        other.subscribe([topic])
        both = {"slow": slow, "other": other}
        assert poll_all(both, lambda: len(parts(slow)) == 1 and len(parts(other)) == 1)
        # the slow one stops polling: it leaves by itself, the other takes over
        assert poll_all({"other": other}, lambda: len(parts(other)) == 2, timeout=20)
        slow.poll(0.1)                               # back: the partitions were lost, it rejoins
        assert lost and len(lost[0]) == 1
        assert poll_all(both, lambda: len(parts(slow)) == 1 and len(parts(other)) == 1)
    finally:
        slow.close()
        other.close()


def test_regex_subscription_is_evaluated_by_the_broker_and_finds_new_topics(bootstrap, make_topic):
    prefix = "rx" + uuid.uuid4().hex[:6]
    first = make_topic(1, prefix=prefix)
    make_topic(1, prefix="other" + prefix)           # does not match
    produce(bootstrap, first, 1, 3)
    group = group_name("regex")
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  metadata_max_age_ms=1000, **NEW) as c:
        c.subscribe(f"^{prefix}-.*")
        got = []
        end = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < end:
            got += c.poll(0.2)
        assert {r.topic for r in got} == {first} and len(got) == 3
        later = make_topic(2, prefix=prefix)
        produce(bootstrap, later, 2, 2)
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(r.topic == later for r in got):
            got += c.poll(0.2)
        assert sorted((r.partition, r.offset) for r in got if r.topic == later) == [
            (0, 0), (0, 1), (1, 0), (1, 1)]
        assert c.subscription() >= {first, later}
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        (m,) = desc.members
        assert {tp.topic for tp in m.assignment.partitions} == {first, later}


def test_mixed_group_classic_member_then_consumer_protocol_member(bootstrap, make_topic):
    """Online upgrade: a classic group gets a consumer-protocol member; Kafka
    converts the group and assigns to both (the classic member through
    JoinGroup/SyncGroup); when that member leaves, the group goes back."""
    topic = make_topic(4)
    group = group_name("mixed")
    produce(bootstrap, topic, 4, 5)
    read = {}
    open_ = True
    classic = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                       session_timeout_ms=10000, heartbeat_interval_ms=500,
                       partition_assignment_strategy="cooperative-sticky", enable_auto_commit=False)
    new = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                   enable_auto_commit=False, **NEW)
    try:
        classic.subscribe([topic], on_revoke=lambda ps: classic.commit(timeout=10) if open_ else None)
        assert poll_all({"classic": classic}, lambda: len(parts(classic)) == 4, read=read)
        with Admin(bootstrap_servers=bootstrap) as admin:
            assert admin.describe_consumer_groups([group])[group].protocol_type == "consumer"
        new.subscribe([topic])
        both = {"classic": classic, "new": new}
        assert poll_all(both, lambda: len(parts(classic)) == 2 and len(parts(new)) == 2, read=read), \
            (parts(classic), parts(new))
        assert not parts(classic) & parts(new)
        assert poll_all(both, lambda: sum(len(v) for v in read.values()) >= 20, read=read)
        assert sorted(x for v in read.values() for x in v) == sorted(
            (p, o) for p in range(4) for o in range(5))
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        assert desc.state == "Stable" and len(desc.members) == 2
        # and back (Kafka converts the group to classic when its last
        # consumer-protocol member leaves): the classic member gets everything
        new.close()
        assert poll_all({"classic": classic}, lambda: len(parts(classic)) == 4, read=read), parts(classic)
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        assert desc.state == "Stable" and len(desc.members) == 1
    finally:
        open_ = False
        classic.close()
        new.close()


def test_group_of_kio_and_confluent_kafka_consumer_protocol_members(bootstrap, make_topic):
    topic = make_topic(4)
    group = group_name("cfl")
    produce(bootstrap, topic, 4, 5)
    ours = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW)
    theirs = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                       "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    owned = set()
    read = {"kio": set(), "confluent": set()}
    try:
        ours.subscribe([topic])
        theirs.subscribe([topic], on_assign=lambda _, ps: owned.update(p.partition for p in ps),
                         on_revoke=lambda _, ps: owned.difference_update(p.partition for p in ps))
        end = time.monotonic() + 45
        while time.monotonic() < end:
            for r in ours.poll(0.1):
                read["kio"].add((r.partition, r.offset))
            for m in theirs.consume(100, 0.1):
                if m.error() is None:
                    read["confluent"].add((m.partition(), m.offset()))
            if (len(parts(ours)) == 2 and len(owned) == 2 and parts(ours) | owned == set(range(4))
                    and len(read["kio"] | read["confluent"]) == 20):
                break
        assert len(parts(ours)) == 2 and len(owned) == 2 and not parts(ours) & owned, (parts(ours), owned)
        assert read["kio"] | read["confluent"] == {(p, o) for p in range(4) for o in range(5)}
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
        assert len(desc.members) == 2 and desc.protocol_type == "consumer"
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("kind", ["asyncio", "trio"])
def test_async_drivers_with_the_consumer_protocol(kind, bootstrap):
    run(kind, group_rebalance_and_commits, bootstrap, NEW)


def test_a_member_expelled_by_the_broker_is_fenced_loses_its_partitions_and_rejoins(bootstrap, make_topic):
    """Silence longer than the broker's session timeout (10 s in the suite):
    the network thread is held still, the broker expels the member and gives
    its partitions away; the next heartbeat learns it is unknown/fenced, the
    partitions are reported lost (not revoked: no commit), and the member
    rejoins with the same member id."""
    topic = make_topic(2)
    group = group_name("fence")
    events = []
    a = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW)
    b = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW)
    try:
        a.subscribe([topic], on_lost=lambda ps: events.append(("lost", sorted(ps))),
                    on_revoke=lambda ps: events.append(("revoke", sorted(ps))))
        b.subscribe([topic])
        assert poll_all({"a": a, "b": b}, lambda: len(parts(a)) == 1 and len(parts(b)) == 1)
        member = a._core.membership.member_id
        owned = sorted(a.assignment())
        # (a may have held both partitions until b joined: that revocation is
        # the group forming, not what this test is about)
        events.clear()
        with a._lock:                               # a's network thread stops at its next step
            end = time.monotonic() + 30
            while time.monotonic() < end and len(parts(b)) < 2:
                b.poll(0.2)
        assert len(parts(b)) == 2                    # the broker gave a's partition to b
        assert poll_all({"a": a, "b": b}, lambda: len(parts(a)) == 1 and len(parts(b)) == 1)
        # first thing a hears: its partition is lost (not revoked: no commit);
        # (what the broker gives it when it is back is the broker's choice)
        assert events[0] == ("lost", owned), events
        assert a._core.membership.member_id == member
    finally:
        a.close()
        b.close()


def test_switching_between_names_and_a_regex_subscription(bootstrap, make_topic):
    prefix = "sw" + uuid.uuid4().hex[:6]
    named = make_topic(1)
    matched = make_topic(1, prefix=prefix)
    group = group_name("switch")
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW) as c:
        c.subscribe([named])
        assert poll_all({"c": c}, lambda: {tp.topic for tp in c.assignment()} == {named})
        c.subscribe(f"^{prefix}-.*")
        assert poll_all({"c": c}, lambda: {tp.topic for tp in c.assignment()} == {matched}), c.assignment()
        c.subscribe([named])
        assert poll_all({"c": c}, lambda: {tp.topic for tp in c.assignment()} == {named}), c.assignment()
        c.unsubscribe()
        assert c.assignment() == set()
        c.subscribe([matched])
        assert poll_all({"c": c}, lambda: {tp.topic for tp in c.assignment()} == {matched})


def test_auto_commit_before_revocation_means_nothing_is_read_twice(bootstrap, make_topic):
    """With auto-commit (the default) the consumed positions are committed
    before a partition is given up, so its next owner starts after them."""
    topic = make_topic(4)
    group = group_name("auto")
    produce(bootstrap, topic, 4, 10)
    read = {}
    a = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                 auto_commit_interval_ms=60000, **NEW)        # only the revocation's commit
    b = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **NEW)
    try:
        a.subscribe([topic])
        assert poll_all({"a": a}, lambda: len(read.get("a", ())) == 40, read=read)
        b.subscribe([topic])
        assert poll_all({"a": a, "b": b}, lambda: len(parts(a)) == 2 and len(parts(b)) == 2, read=read)
        produce(bootstrap, topic, 4, 5, start=10)
        assert poll_all({"a": a, "b": b}, lambda: sum(len(v) for v in read.values()) >= 60, read=read)
        poll_all({"a": a, "b": b}, lambda: False, timeout=1, read=read)      # nothing more comes
        assert sorted(x for v in read.values() for x in v) == sorted(
            (p, o) for p in range(4) for o in range(15))
        assert {p for p, o in read["b"]} == parts(b)          # b read only its own, from the commit on
    finally:
        a.close()
        b.close()


def test_a_second_live_member_with_the_same_instance_id_fails_clearly(bootstrap, make_topic):
    from kproto.error_codes import UnreleasedInstanceIdError
    topic = make_topic(1)
    group = group_name("dup")
    first = Consumer(bootstrap_servers=bootstrap, group_id=group, group_instance_id="same", **NEW)
    second = Consumer(bootstrap_servers=bootstrap, group_id=group, group_instance_id="same", **NEW)
    try:
        first.subscribe([topic])
        assert poll_all({"first": first}, lambda: len(parts(first)) == 1)
        second.subscribe([topic])
        with pytest.raises(UnreleasedInstanceIdError):
            end = time.monotonic() + 20
            while time.monotonic() < end:
                second.poll(0.2)
                first.poll(0.0)
        assert parts(first) == {0}                          # the first one is not disturbed
    finally:
        first.close()
        second.close()


def test_console_consumer_joins_with_the_consumer_protocol(bootstrap, make_topic):
    """``kio consume --group G --property group.protocol=consumer``: the
    tool's classic session/heartbeat defaults stay out of the way."""
    import json
    import os
    import subprocess
    import sys
    topic = make_topic(2)
    group = group_name("cli")
    produce(bootstrap, topic, 2, 2)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    res = subprocess.run([sys.executable, "-m", "kio", "consume", "--bootstrap-server", bootstrap,
                          "--topic", topic, "--from-beginning", "--json", "--max-messages", "4",
                          "--group", group, "--property", "group.protocol=consumer"],
                         capture_output=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr.decode()
    recs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    assert sorted((r["partition"], r["offset"]) for r in recs) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    with Admin(bootstrap_servers=bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 2, 1: 2}
