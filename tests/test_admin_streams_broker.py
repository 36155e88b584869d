"""Streams-group administration (KIP-1071) against the real brokers:
describe_streams_groups, list/alter/delete_streams_group_offsets,
delete_streams_groups, list_groups' "streams" type, and ``kio groups
list|describe`` on a streams group.

Apache Kafka 4.4 has streams groups on by default (feature streams.version
1). The group is made without a Kafka Streams JVM: a member joins with
StreamsGroupHeartbeat sent raw through kio.blocking, with the smallest
topology there is (one subtopology reading one topic), and commits as a
member with OffsetCommit. Tansu has no streams groups: test_tansu_lacks_streams_groups
pins what it answers.
"""
import asyncio
import contextlib
import threading
import time
import uuid

import pytest
import trio

import kio.aio
import kio.trio
from kio import Admin, Producer
from kio.blocking import BlockingClient
from kproto.admin_groups import GroupListing
from kproto.admin_streams import StreamsTaskIds
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.error_codes import (
    GroupIdNotFoundError, GroupSubscribedToTopicError, NonEmptyGroupError, UnknownMemberIdError,
)
from kproto.errors import UnsupportedVersionError
from test_admin_authorized_operations import GROUP_OPERATIONS
from test_admin_java_tools import java_tool
from test_cli import kio as kio_cli
from test_cli import ok

TP = TopicPartition
kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the
# coordinator is made and loaded on first use; a member finds it and asks again.
_COORDINATOR_NOT_READY = (14, 15, 16)


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class StreamsMember:
    """One member of a streams group, as a Kafka Streams client is on the wire:
    it joins with its topology (subtopology "0" reading ``topic``), heartbeats
    with the epoch and the tasks it owns, commits as a member and leaves."""

    def __init__(self, bootstrap, group, topic):
        self.client = BlockingClient(bootstrap, client_id="streams-app")
        self.group, self.topic = group, topic
        self.member_id, self.process_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.epoch = 0
        self.active = []

    def _heartbeat(self, **fields):
        body = {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                "endpoint_information_epoch": 0, "rebalance_timeout_ms": 30000, "topology": None,
                "active_tasks": self.active, "standby_tasks": [], "warmup_tasks": [],
                "process_id": self.process_id, "client_tags": [], "task_offsets": [], "task_end_offsets": []}
        body.update(fields)
        end = time.monotonic() + 30
        while True:
            r = self.client.request("StreamsGroupHeartbeat", body)
            if r["error_code"] in _COORDINATOR_NOT_READY and time.monotonic() < end:
                # the first FindCoordinator of a group makes __consumer_offsets
                self.client.request("FindCoordinator", {"key_type": 0, "coordinator_keys": [self.group]})
                time.sleep(0.2)
                continue
            assert r["error_code"] == 0, r
            return r

    def join(self):
        """Join with the topology, then heartbeat until the group gave this
        member its tasks and the member said it owns them."""
        topology = {"epoch": 0, "subtopologies": [{
            "subtopology_id": "0", "source_topics": [self.topic], "source_topic_regex": [],
            "state_changelog_topics": [], "repartition_sink_topics": [], "repartition_source_topics": [],
            "copartition_groups": []}]}
        r = self._heartbeat(topology=topology)
        end = time.monotonic() + 30
        while True:
            self.epoch = r["member_epoch"]
            if r["active_tasks"]:
                self.active = r["active_tasks"]
                r = self._heartbeat()             # owning them now: the member has reconciled
                self.epoch = r["member_epoch"]
                return self
            assert time.monotonic() < end, f"no tasks were assigned: {r}"
            time.sleep(0.3)
            r = self._heartbeat()

    def commit(self, offsets):
        """OffsetCommit as this member: {partition: offset} of its topic."""
        r = self.client.request("OffsetCommit", {
            "group_id": self.group, "generation_id_or_member_epoch": self.epoch, "member_id": self.member_id,
            "group_instance_id": None, "retention_time_ms": -1, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p, o in offsets.items()]}]})
        assert [p["error_code"] for t in r["topics"] for p in t["partitions"]] == [0] * len(offsets), r

    @contextlib.contextmanager
    def kept_alive(self):
        """Heartbeat every 500 ms in a thread while the block runs (a JVM tool
        takes longer than the test broker's 10 s session timeout)."""
        stop = threading.Event()

        def beat():
            while not stop.wait(0.5):
                self.epoch = self._heartbeat()["member_epoch"]

        t = threading.Thread(target=beat, daemon=True)
        t.start()
        try:
            yield self
        finally:
            stop.set()
            t.join()

    def leave(self):
        r = self._heartbeat(member_epoch=-1)
        assert r["member_epoch"] == -1
        self.client.close()

    def __enter__(self):
        return self.join()

    def __exit__(self, *exc):
        self.leave()


def produce(bootstrap, topic, per_partition, partitions):
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(per_partition):
            for part in range(partitions):
                p.send(topic, b"%d" % i, partition=part)
        p.flush()


def _table(out):
    """The lines of the command's output, split at tabs."""
    return [line.split("\t") for line in out.splitlines()]


@kafka_only
def test_streams_group_described_offsets_altered_and_deleted(bootstrap, make_topic):
    topic = make_topic(2)
    group = name("streams")
    produce(bootstrap, topic, 4, 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        with StreamsMember(bootstrap, group, topic) as member:
            d = admin.describe_streams_groups([group])[group]
            assert (d.group_id, d.group_state, d.topology_epoch) == (group, "Stable", 0)
            # No authorizer: every group operation (None unless asked).
            assert d.authorized_operations is None
            assert admin.describe_streams_groups([group], include_authorized_operations=True)[group] \
                .authorized_operations == GROUP_OPERATIONS
            assert d.group_epoch >= 1 and d.target_assignment_epoch == d.group_epoch
            assert d.coordinator is not None and d.assignor_name == "sticky"      # the broker's default
            (sub,) = d.subtopologies
            assert (sub.subtopology_id, sub.source_topics, sub.repartition_sink_topics) == ("0", (topic,), ())
            assert sub.state_changelog_topics == {} and sub.repartition_source_topics == {}
            (m,) = d.members
            assert (m.member_id, m.process_id, m.client_id) == (member.member_id, member.process_id, "streams-app")
            assert m.member_epoch == member.epoch and m.topology_epoch == 0 and not m.is_classic
            assert m.instance_id is None and m.user_endpoint is None and m.client_tags == {}
            assert m.assignment.active_tasks == (StreamsTaskIds("0", (0, 1)),)
            assert m.assignment.standby_tasks == () and m.assignment.warmup_tasks == ()
            assert m.target_assignment == m.assignment

            listed = [g for g in admin.list_groups(types=["streams"]) if g.group_id == group]
            assert listed == [GroupListing(group, "streams", "streams", "Stable", d.coordinator.id)]
            assert group not in {g.group_id for g in admin.list_groups(types=["consumer", "classic"])}

            member.commit({0: 3})
            assert admin.list_streams_group_offsets(group) == {TP(topic, 0): OffsetAndMetadata(3, "", -1)}
            assert admin.list_streams_group_offsets(group, [TP(topic, 1)]) == {}

            # While the group has a member: Java's answers, per partition or per group.
            h = admin.alter_streams_group_offsets(group, {TP(topic, 0): 1}, raise_errors=False)
            err = h.errors()[TP(topic, 0)]
            assert isinstance(err, UnknownMemberIdError) and "the group has members" in str(err)
            assert h.operation == "alter_streams_group_offsets"
            h = admin.delete_streams_group_offsets(group, [TP(topic, 0)], raise_errors=False)
            assert isinstance(h.errors()[TP(topic, 0)], GroupSubscribedToTopicError)
            with pytest.raises(NonEmptyGroupError, match=group):
                admin.delete_streams_groups([group])

            out = ok(kio_cli("groups", "describe", "--bootstrap-server", bootstrap, "--group", group))
            rows = _table(out)
            assert rows[0][:3] == [f"Group: {group}", "Type: streams", "State: Stable"]
            assert rows[1] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"]
            assert rows[2] == [group, topic, "0", "3", "4", "1", member.member_id]
            assert rows[3][0] == "MEMBER"
            assert rows[4] == [member.member_id, member.process_id, "streams-app", str(member.epoch), "0:[0,1]",
                               "-", "-"]
            listed = _table(ok(kio_cli("groups", "list", "--bootstrap-server", bootstrap, "--type", "streams")))
            assert [group, "streams", "Stable"] in listed

        # the member left: the group is empty, its offsets can be changed
        d = admin.describe_streams_groups([group])[group]
        assert (d.group_state, d.members) == ("Empty", ())
        assert admin.alter_streams_group_offsets(group, {TP(topic, 0): 1, TP(topic, 1): OffsetAndMetadata(2, "m")}) \
            == {TP(topic, 0): None, TP(topic, 1): None}
        assert {tp: (o.offset, o.metadata) for tp, o in admin.list_streams_group_offsets(group).items()} \
            == {TP(topic, 0): (1, ""), TP(topic, 1): (2, "m")}
        assert admin.delete_streams_group_offsets(group, [TP(topic, 1)]) == {TP(topic, 1): None}
        assert set(admin.list_streams_group_offsets(group)) == {TP(topic, 0)}
        assert admin.delete_streams_groups([group]) == {group: None}
        with pytest.raises(GroupIdNotFoundError, match=group):
            admin.describe_streams_groups([group])
        assert admin.list_streams_group_offsets(group) == {}


@kafka_only
def test_streams_group_errors_name_the_group(bootstrap, make_topic):
    topic = make_topic(1)
    missing, classic = name("no-such"), name("simple")
    with Admin(bootstrap_servers=bootstrap) as admin:
        h = admin.describe_streams_groups([missing], raise_errors=False)
        err = h.errors()[missing]
        assert isinstance(err, GroupIdNotFoundError) and missing in str(err)
        # a group of another type is not a streams group: the same error, as in Java
        admin.alter_consumer_group_offsets(classic, {TP(topic, 0): 0})
        with pytest.raises(GroupIdNotFoundError, match="not a streams group"):
            admin.describe_streams_groups([classic])
        with pytest.raises(GroupIdNotFoundError, match=missing):
            admin.delete_streams_groups([missing])
        # bad input is refused before any request
        with pytest.raises(ValueError, match="describe_streams_groups: .a. is given twice"):
            admin.describe_streams_groups(["a", "a"])
        with pytest.raises(ValueError, match="non-empty strings"):
            admin.describe_streams_groups([""])
        with pytest.raises(ValueError, match="alter_streams_group_offsets: the offset for .* must be an int >= 0"):
            admin.alter_streams_group_offsets(classic, {TP(topic, 0): -1})
        with pytest.raises(ValueError, match="delete_streams_group_offsets: .* is given twice"):
            admin.delete_streams_group_offsets(classic, [TP(topic, 0), TP(topic, 0)])


@kafka_only
def test_async_and_trio_admins_have_the_streams_operations(bootstrap, make_topic):
    topic = make_topic(1)
    group = name("streams-async")

    async def run(admin_class):
        async with admin_class(bootstrap_servers=bootstrap) as admin:
            d = (await admin.describe_streams_groups([group]))[group]
            offsets = await admin.list_streams_group_offsets(group)
            return d.group_state, [t for m in d.members for t in m.assignment.active_tasks], offsets

    with StreamsMember(bootstrap, group, topic) as member:
        member.commit({0: 0})
        for result in (asyncio.run(run(kio.aio.Admin)), trio.run(run, kio.trio.Admin)):
            assert result == ("Stable", [StreamsTaskIds("0", (0,))], {TP(topic, 0): OffsetAndMetadata(0, "", -1)})


@kafka_only
def test_describe_as_kafka_streams_groups_shows_it(bootstrap, make_topic):
    """Java's kafka-streams-groups (kafka-tools' StreamsGroupCommand) and kio
    on the same group: the same members, processes, epochs and tasks."""
    topic = make_topic(2)
    group = name("streams-java")
    tool = "org.apache.kafka.tools.streams.StreamsGroupCommand"
    with StreamsMember(bootstrap, group, topic) as member, member.kept_alive():
        theirs = java_tool(tool, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                           "--members", "--verbose")
        listed = java_tool(tool, "--bootstrap-server", bootstrap, "--list").split()
        mine = _table(ok(kio_cli("groups", "describe", "--bootstrap-server", bootstrap, "--group", group)))
    # GROUP TARGET-ASSIGNMENT-EPOCH TOPOLOGY-EPOCH MEMBER MEMBER-PROTOCOL MEMBER-EPOCH PROCESS CLIENT-ID
    # ASSIGNMENTS ("ACTIVE: 0:[0,1]; TARGET-ACTIVE: 0:[0,1];")
    (row,) = [line.split() for line in theirs.splitlines() if line.startswith(group)]
    epochs = dict(cell.split(": ") for cell in mine[0][4:7])
    assert (row[1], row[2]) == (epochs["TargetAssignmentEpoch"], epochs["TopologyEpoch"])
    (member_row,) = [r for r in mine if r[0] == member.member_id]
    assert [row[3], row[6], row[7], row[5]] == member_row[:4]        # member, process, client id, member epoch
    assert row[8:10] == ["ACTIVE:", member_row[4] + ";"]             # 0:[0,1]
    assert group in listed


@pytest.mark.parametrize("broker", ["tansu"], indirect=True)
def test_tansu_lacks_streams_groups(bootstrap, make_topic):
    topic = make_topic(1)
    group = name("streams")
    with Admin(bootstrap_servers=bootstrap) as admin:
        with pytest.raises(UnsupportedVersionError, match="describe_streams_groups.*StreamsGroupDescribe"):
            admin.describe_streams_groups([group])
        assert admin.list_groups(types=["streams"]) == []
    with BlockingClient(bootstrap) as client:
        with pytest.raises(UnsupportedVersionError, match="StreamsGroupHeartbeat"):
            client.request("StreamsGroupHeartbeat", {"group_id": group, "member_id": "m", "member_epoch": 0,
                                                     "endpoint_information_epoch": 0, "topology": None})
