"""Group administration (list_groups, alter/delete consumer group offsets,
remove_members_from_consumer_group, share-group delete and offsets) and
``kio groups list|reset-offsets|delete-offsets`` against the real brokers.

Apache Kafka 4.4 for all of it, compared with confluent-kafka's AdminClient
where it has the operation (alter_consumer_group_offsets, list_groups).
Tansu runs the tests of what it has (OffsetCommit, ListGroups v5, LeaveGroup)
and test_tansu_lacks_offset_delete pins what it lacks: OffsetDelete,
Alter/DeleteShareGroupOffsets and share groups are not in its ApiVersions.
"""
import time
import uuid

import confluent_kafka
import confluent_kafka.admin
import pytest

from kio import Admin, Consumer, Producer, ShareConsumer
from kio.admin import ConfigResource
from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.errors import KafkaError, UnsupportedVersionError
from test_cli import kio, ok

TP = TopicPartition
kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap, topic, per_partition, partitions):
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(per_partition):
            for part in range(partitions):
                p.send(topic, b"%d" % i, partition=part)
                p.flush()                        # one record per batch: Tansu's LATEST is per batch


def joined(bootstrap, group, topic, **conf):
    """A consumer that is a member of ``group`` (assignment received)."""
    if conf.get("group_protocol") != "consumer":     # the broker's settings with KIP-848's protocol
        conf = {"session_timeout_ms": 10000, "heartbeat_interval_ms": 500, **conf}
    c = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **conf)
    c.subscribe([topic])
    end = time.monotonic() + 60
    while not c.assignment():
        assert time.monotonic() < end, "the group never formed"
        c.poll(0.2)
    return c


def test_alter_offsets_of_an_empty_group_and_read_them_back_with_confluent(bootstrap, make_topic, broker_kind):
    topic = make_topic(2)
    group = name("alter")
    produce(bootstrap, topic, 5, 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert admin.alter_consumer_group_offsets(group, {TP(topic, 0): 3, TP(topic, 1): OffsetAndMetadata(4, "m")}) \
            == {TP(topic, 0): None, TP(topic, 1): None}
        mine = admin.list_consumer_group_offsets(group)
    metadata = "m" if broker_kind == "kafka" else ""          # Tansu keeps no commit metadata
    assert {tp: (o.offset, o.metadata) for tp, o in mine.items()} == {TP(topic, 0): (3, ""), TP(topic, 1): (4, metadata)}
    ca = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    req = confluent_kafka.ConsumerGroupTopicPartitions(group, [confluent_kafka.TopicPartition(topic, 0),
                                                               confluent_kafka.TopicPartition(topic, 1)])
    theirs = ca.list_consumer_group_offsets([req])[group].result()
    assert sorted((tp.partition, tp.offset) for tp in theirs.topic_partitions) == [(0, 3), (1, 4)]
    # and the other way round: confluent alters, kio reads
    ca.alter_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions(
        group, [confluent_kafka.TopicPartition(topic, 0, 1)])])[group].result()
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert admin.list_consumer_group_offsets(group, [TP(topic, 0)])[TP(topic, 0)].offset == 1
        with pytest.raises(ValueError, match="must be an int >= 0"):
            admin.alter_consumer_group_offsets(group, {TP(topic, 0): -1})


def test_alter_offsets_of_a_group_with_members_fails_as_in_java(bootstrap, make_topic, broker_kind):
    topic = make_topic(1)
    protocols = ["classic", "consumer"] if broker_kind == "kafka" else ["classic"]    # Tansu: no KIP-848
    for protocol in protocols:
        group = name("busy")
        c = joined(bootstrap, group, topic, group_protocol=protocol)
        try:
            with Admin(bootstrap_servers=bootstrap) as admin:
                h = admin.alter_consumer_group_offsets(group, {TP(topic, 0): 0}, raise_errors=False)
            err = h.errors()[TP(topic, 0)]
            assert isinstance(err, error_codes.UnknownMemberIdError), (protocol, err)
            assert "the group has members" in str(err)
        finally:
            c.close()


@kafka_only
def test_remove_every_member_of_a_consumer_protocol_group(bootstrap, make_topic):
    topic = make_topic(1)
    group = name("rm848")
    c = joined(bootstrap, group, topic, group_protocol="consumer")
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            members = [m.member_id for m in admin.describe_consumer_groups([group])[group].members]
            assert admin.remove_members_from_consumer_group(group) == {members[0]: None}
            d = admin.describe_consumer_groups([group])[group]
            assert (d.state, d.members) == ("Empty", ())
    finally:
        c.close()


@kafka_only
def test_delete_consumer_group_offsets(bootstrap, make_topic):
    topic, other = make_topic(2), make_topic(1)
    group = name("del")
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TP(topic, 0): 0, TP(topic, 1): 0, TP(other, 0): 0})
        assert admin.delete_consumer_group_offsets(group, [TP(topic, 1)]) == {TP(topic, 1): None}
        assert set(admin.list_consumer_group_offsets(group)) == {TP(topic, 0), TP(other, 0)}
        gone = admin.delete_consumer_group_offsets("no-such-" + group, [TP(topic, 0)], raise_errors=False)
        assert isinstance(gone.errors()[TP(topic, 0)], error_codes.GroupIdNotFoundError)
        with pytest.raises(ValueError, match="given twice"):
            admin.delete_consumer_group_offsets(group, [TP(topic, 0), TP(topic, 0)])
        # a topic the group's members consume cannot lose its offsets
        c = joined(bootstrap, group, other)
        try:
            h = admin.delete_consumer_group_offsets(group, [TP(other, 0), TP(topic, 0)], raise_errors=False)
            assert isinstance(h.errors()[TP(other, 0)], error_codes.GroupSubscribedToTopicError)
            assert h.values() == {TP(topic, 0): None}
        finally:
            c.close()


def test_remove_static_and_all_members(bootstrap, make_topic, broker_kind):
    topic = make_topic(1)
    group = name("rm")
    static = joined(bootstrap, group, topic, group_instance_id="inst-1")
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            h = admin.remove_members_from_consumer_group(group, ["inst-1", "no-such-inst"], reason="test",
                                                         raise_errors=False)
            if broker_kind == "kafka":
                assert h.values() == {"inst-1": None}
            else:                                    # Tansu does not know static members by instance id
                assert isinstance(h.errors()["inst-1"], error_codes.UnknownMemberIdError)
            assert isinstance(h.errors()["no-such-inst"], error_codes.UnknownMemberIdError)
            if broker_kind == "kafka":               # Tansu's DescribeGroups lists no members
                assert admin.describe_consumer_groups([group])[group].members == ()
    finally:
        static.close()
    dynamic = joined(bootstrap, group, topic)
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            if broker_kind == "kafka":
                members = [m.member_id for m in admin.describe_consumer_groups([group])[group].members]
                assert len(members) == 1
                assert admin.remove_members_from_consumer_group(group) == {members[0]: None}
                assert admin.describe_consumer_groups([group])[group].state == "Empty"
                assert admin.remove_members_from_consumer_group(group) == {}       # nobody left
            missing = admin.remove_members_from_consumer_group("no-such-" + group, raise_errors=False)
            if broker_kind == "kafka":
                assert isinstance(missing.error, error_codes.GroupIdNotFoundError)
            else:                                    # Tansu describes an unknown group as empty
                assert missing.result() == {}
    finally:
        dynamic.close()


@kafka_only
def test_list_groups_by_type_and_state_as_confluent_lists_them(bootstrap, make_topic):
    topic = make_topic(1)
    simple, classic, modern, shared = name("simple"), name("classic"), name("modern"), name("share")
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(simple, {TP(topic, 0): 0})
        a = joined(bootstrap, classic, topic)
        b = joined(bootstrap, modern, topic, group_protocol="consumer")
        s = ShareConsumer(bootstrap_servers=bootstrap, group_id=shared)
        try:
            s.subscribe([topic])
            end = time.monotonic() + 30
            while not any(g.group_id == shared for g in admin.list_groups(types=["share"])):
                assert time.monotonic() < end
                s.poll(0.3)
            every = {g.group_id: g for g in admin.list_groups()}
            assert (every[simple].type, every[simple].protocol_type, every[simple].state) == ("classic", "", "Empty")
            assert every[simple].is_simple_consumer_group
            assert (every[classic].type, every[classic].protocol_type, every[classic].state) == \
                ("classic", "consumer", "Stable")
            assert (every[modern].type, every[modern].state) == ("consumer", "Stable")
            assert (every[shared].type, every[shared].protocol_type) == ("share", "share")
            ids = {t: {g.group_id for g in admin.list_groups(types=[t])} for t in ("classic", "consumer", "share")}
            assert {simple, classic} <= ids["classic"] and modern not in ids["classic"]
            assert modern in ids["consumer"] and shared in ids["share"] and shared not in ids["consumer"]
            stable = {g.group_id for g in admin.list_groups(states=["stable"])}
            assert {classic, modern} <= stable and simple not in stable
            with pytest.raises(ValueError, match="unknown group type"):
                admin.list_groups(types=["kstreams"])
            # list_consumer_groups keeps its meaning: classic and consumer groups, no share group
            consumer_ids = {g.group_id for g in admin.list_consumer_groups()}
            assert {simple, classic} <= consumer_ids and shared not in consumer_ids
            # confluent-kafka's list_consumer_groups with its KIP-1043 types filter agrees
            ca = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
            for kind, theirs_type in (("classic", confluent_kafka.ConsumerGroupType.CLASSIC),
                                      ("consumer", confluent_kafka.ConsumerGroupType.CONSUMER)):
                theirs = ca.list_consumer_groups(types={theirs_type}).result().valid
                mine = {g.group_id for g in admin.list_groups(types=[kind])}
                ours = {simple, classic, modern, shared}
                assert {g.group_id for g in theirs} & ours == mine & ours
                assert all(g.type == theirs_type for g in theirs)
        finally:
            s.close()
            b.close()
            a.close()


@kafka_only
def test_share_group_offsets_altered_and_deleted_and_groups_deleted(bootstrap, make_topic):
    topic = make_topic(2)
    group = name("sg")
    produce(bootstrap, topic, 5, 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.incremental_alter_configs({ConfigResource.group(group): {"share.auto.offset.reset": "earliest"}})
        with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as s:
            s.subscribe([topic])
            got = []
            end = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < end:
                got += s.poll(0.3)
            s.commit_sync()
            busy = admin.alter_share_group_offsets(group, {TP(topic, 0): 1}, raise_errors=False)
            assert isinstance(busy.error, error_codes.NonEmptyGroupError), busy.error
            assert isinstance(admin.delete_share_groups([group], raise_errors=False).errors()[group],
                              error_codes.NonEmptyGroupError)
        assert admin.alter_share_group_offsets(group, {TP(topic, 0): 2, TP(topic, 1): 3}) == \
            {TP(topic, 0): None, TP(topic, 1): None}
        offsets = admin.list_share_group_offsets(group)
        assert (offsets[TP(topic, 0)].start_offset, offsets[TP(topic, 1)].start_offset) == (2, 3)
        assert admin.delete_share_group_offsets(group, [topic]) == {topic: None}
        assert topic not in {tp.topic for tp in admin.list_share_group_offsets(group)}
        assert admin.delete_share_groups([group]) == {group: None}
        assert group not in {g.group_id for g in admin.list_groups(types=["share"])}
        missing = admin.delete_share_groups(["no-such-" + group], raise_errors=False)
        assert isinstance(missing.errors()["no-such-" + group], error_codes.GroupIdNotFoundError)


@kafka_only
def test_async_and_trio_admins_have_the_group_operations(bootstrap, make_topic):
    import asyncio

    import trio

    import kio.aio
    import kio.trio
    topic = make_topic(1)

    async def run(admin_class):
        group = name("ag")
        async with admin_class(bootstrap_servers=bootstrap) as admin:
            await admin.alter_consumer_group_offsets(group, {TP(topic, 0): 0})
            listed = {g.group_id: g.type for g in await admin.list_groups(types=["classic"])}
            deleted = await admin.delete_consumer_group_offsets(group, [TP(topic, 0)])
            left = await admin.list_consumer_group_offsets(group)
            return listed.get(group), deleted, left

    for result in (asyncio.run(run(kio.aio.Admin)), trio.run(run, kio.trio.Admin)):
        assert result == ("classic", {TP(topic, 0): None}, {})


def test_offsets_of_many_groups_at_once_from_every_driver(bootstrap, make_topic):
    import asyncio

    import trio

    import kio.aio
    import kio.trio
    topic = make_topic(2)
    a, b, never = name("many"), name("many"), name("never")
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(a, {TP(topic, 0): 1, TP(topic, 1): 2})
        admin.alter_consumer_group_offsets(b, {TP(topic, 1): 5})
        specs = {a: None, b: [TP(topic, 0), TP(topic, 1)], never: None}
        expected = {g: admin.list_consumer_group_offsets(g, ps) for g, ps in specs.items()}
        assert expected == {a: {TP(topic, 0): OffsetAndMetadata(1, ""), TP(topic, 1): OffsetAndMetadata(2, "")},
                            b: {TP(topic, 1): OffsetAndMetadata(5, "")}, never: {}}
        assert admin.list_consumer_group_offsets(specs) == expected

    async def listed(admin_class):
        async with admin_class(bootstrap_servers=bootstrap) as admin:
            return await admin.list_consumer_group_offsets(specs)

    assert asyncio.run(listed(kio.aio.Admin)) == expected
    assert trio.run(listed, kio.trio.Admin) == expected


def test_describe_classic_groups_describes_classic_groups_only(bootstrap, make_topic, broker_kind):
    topic = make_topic(2)
    classic, simple, modern, missing = name("classic"), name("simple"), name("modern"), name("missing")
    member = joined(bootstrap, classic, topic, client_id="cl-1")
    others = [member]
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.alter_consumer_group_offsets(simple, {TP(topic, 0): 1})
            groups = [classic, simple, missing]
            if broker_kind == "kafka":
                others.append(joined(bootstrap, modern, topic, group_protocol="consumer"))
                groups.append(modern)
            h = admin.describe_classic_groups(groups, raise_errors=False)
            d = h.values()[classic]
            [m] = d.members
            assert m.member_id.startswith("cl-1-")
            if broker_kind == "kafka":
                assert (d.group_id, d.protocol, d.protocol_data, d.state) == (classic, "consumer", "range", "Stable")
                assert m.client_id == "cl-1" and set(m.assignment.partitions) == {TP(topic, 0), TP(topic, 1)}
            else:
                # Tansu leaves the chosen assignor and the members' client id, host and assignment empty.
                assert (d.group_id, d.protocol, d.protocol_data, d.state) == (classic, "consumer", "", "Stable")
                assert (m.client_id, m.host, m.assignment.partitions) == ("", "", ())
            assert d.coordinator is not None and not d.is_simple_consumer_group
            s = h.values()[simple]
            assert s.is_simple_consumer_group and s.state == "Empty" and s.members == ()
            errors = h.errors()
            if broker_kind == "tansu":
                # Tansu describes a group it does not know as an empty simple group.
                assert not errors and h.values()[missing] == s._replace(group_id=missing)
                return
            # A KIP-848 group and a missing one: GroupIdNotFoundError, as Java's describeClassicGroups.
            assert set(errors) == {modern, missing}, h.values()
            assert all(isinstance(e, error_codes.GroupIdNotFoundError) for e in errors.values()), errors
            assert "not a classic group" in str(errors[modern])
    finally:
        for c in others:
            c.close()


@pytest.mark.parametrize("broker", ["tansu"], indirect=True)
def test_tansu_lacks_offset_delete(bootstrap, make_topic):
    topic = make_topic(1)
    with Admin(bootstrap_servers=bootstrap) as admin:
        with pytest.raises(UnsupportedVersionError, match="OffsetDelete"):
            admin.delete_consumer_group_offsets(name("g"), [TP(topic, 0)])
        with pytest.raises(UnsupportedVersionError, match="AlterShareGroupOffsets"):
            admin.alter_share_group_offsets(name("g"), {TP(topic, 0): 0})


# -- the console tools ----------------------------------------------------------------------------

def _table(out):
    lines = out.splitlines()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def test_kio_groups_reset_offsets(bootstrap, make_topic, broker_kind):
    topic = make_topic(2)
    group = name("reset")
    produce(bootstrap, topic, 6, 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TP(topic, 0): 2, TP(topic, 1): 2})
    base = ("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", group)
    # a dry run by default: it prints the plan, says so, changes nothing
    res = kio(*base, "--topic", topic, "--to-earliest")
    head, rows = _table(ok(res))
    assert head == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert b"dry run" in res.stderr
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert {o.offset for o in admin.list_consumer_group_offsets(group).values()} == {2}
    _, rows = _table(ok(kio(*base, "--topic", f"{topic}:1", "--shift-by", "-1", "--execute")))
    assert rows == [[group, topic, "1", "1"]]
    _, rows = _table(ok(kio(*base, "--all-topics", "--to-latest", "--execute")))
    assert rows == [[group, topic, "0", "6"], [group, topic, "1", "6"]]
    _, rows = _table(ok(kio(*base, "--all-topics", "--to-offset", "100")))      # kept within the log
    assert [r[3] for r in rows] == ["6", "6"]
    _, rows = _table(ok(kio(*base, "--all-topics", "--shift-by", "-4", "--execute")))
    assert [r[3] for r in rows] == ["2", "2"]
    _, rows = _table(ok(kio(*base, "--all-topics", "--by-duration", "P1D")))      # a day ago: the start
    assert [r[3] for r in rows] == ["0", "0"]
    _, rows = _table(ok(kio(*base, "--all-topics", "--to-datetime", "2099-01-01T00:00:00Z")))
    # no record that late: the end of the log (Tansu answers offset 0 for a future timestamp)
    assert [r[3] for r in rows] == (["6", "6"] if broker_kind == "kafka" else ["0", "0"])
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert {tp.partition: o.offset for tp, o in admin.list_consumer_group_offsets(group).items()} == {0: 2, 1: 2}
    res = kio(*base, "--all-topics", "--by-duration", "1h")
    assert res.returncode == 2 and b"PnDTnHnMnS" in res.stderr
    # refused while the group has members, as kafka-consumer-groups does
    c = joined(bootstrap, group, topic)
    try:
        res = kio(*base, "--all-topics", "--to-earliest", "--execute")
        assert res.returncode == 1
        assert b"can only be reset if the group" in res.stderr and b"Stable" in res.stderr
    finally:
        c.close()


@kafka_only
def test_kio_groups_delete_offsets_and_list(bootstrap, make_topic):
    topic = make_topic(2)
    group = name("cli")
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TP(topic, 0): 0, TP(topic, 1): 0})
    head, rows = _table(ok(kio("groups", "list", "--bootstrap-server", bootstrap, "--type", "classic")))
    assert head == ["GROUP", "TYPE", "STATE"] and [group, "classic", "Empty"] in rows
    _, rows = _table(ok(kio("groups", "list", "--bootstrap-server", bootstrap, "--type", "share")))
    assert group not in {r[0] for r in rows}
    _, rows = _table(ok(kio("groups", "delete-offsets", "--bootstrap-server", bootstrap, "--group", group,
                            "--topic", f"{topic}:1")))
    assert rows == [[topic, "1", "Successful"]]
    res = kio("groups", "delete-offsets", "--bootstrap-server", bootstrap, "--group", "no-such-" + group,
              "--topic", topic)
    assert res.returncode == 1 and b"GroupIdNotFoundError" in res.stderr
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert set(admin.list_consumer_group_offsets(group)) == {TP(topic, 0)}
