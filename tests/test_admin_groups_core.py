"""The group and transaction admin logic that needs no broker: argument
checks, the version-dependent request bodies, the console's parsers."""
import pytest

from kio.cli.common import UsageError
from kio.cli.groups import parse_datetime_ms, parse_duration_ms, parse_topic_partitions
from kproto.admin import AdminCore
from kproto.admin_groups import GroupListing, _list_groups_body, group_offsets_by_topic
from kproto.admin_transactions import AbortTransactionSpec, ProducerState, _list_transactions_body
from kproto.cluster import TopicPartition
from kproto.errors import UnsupportedVersionError

TP = TopicPartition


def core():
    return AdminCore({"bootstrap.servers": "127.0.0.1:1"})


def test_offsets_are_checked_before_any_request():
    c = core()
    with pytest.raises(ValueError, match="must be an int >= 0"):
        c.alter_consumer_group_offsets("g", {TP("t", 0): -5}, now=0)
    with pytest.raises(ValueError, match="t-0 is given twice"):
        c.delete_consumer_group_offsets("g", [("t", 0), TP("t", 0)], now=0)
    with pytest.raises(ValueError, match="not a TopicPartition"):
        c.delete_consumer_group_offsets("g", [("t", -1)], now=0)
    with pytest.raises(ValueError, match="distinct group instance ids"):
        c.remove_members_from_consumer_group("g", ["a", "a"], now=0)
    with pytest.raises(ValueError, match="unknown group type"):
        c.list_groups(types=["kstreams"], now=0)
    with pytest.raises(ValueError, match="unknown state"):
        c.list_transactions(states=["ongoing"], now=0)
    with pytest.raises(ValueError, match="producer epoch"):
        c.abort_transaction(AbortTransactionSpec(TP("t", 0), 7, -1, 0), now=0)
    assert not c.pending                           # nothing was queued


def test_empty_inputs_finish_at_once():
    c = core()
    for h in (c.alter_consumer_group_offsets("g", {}, now=0), c.delete_consumer_group_offsets("g", [], now=0),
              c.describe_producers([], now=0), c.remove_members_from_consumer_group("g", [], now=0)):
        assert h.done and h.result() == {}


def test_group_offsets_by_topic_sorts_per_topic():
    assert group_offsets_by_topic([("b", 1), TP("a", 2), ("b", 0)], "x") == {"a": [2], "b": [0, 1]}


def test_list_groups_body_per_version():
    assert _list_groups_body(["Stable"], ["share"])(5) == {"states_filter": ["Stable"], "types_filter": ["share"]}
    assert _list_groups_body(["Stable"], [])(3) == {"states_filter": [], "types_filter": []}
    with pytest.raises(UnsupportedVersionError, match="ListGroups v5"):
        _list_groups_body([], ["share"])(4)
    assert GroupListing("g", "classic", "", "Empty").is_simple_consumer_group
    assert not GroupListing("g", "consumer", "consumer", "Stable").is_simple_consumer_group


def test_list_transactions_body_per_version():
    body = _list_transactions_body(["Ongoing"], [7], 1000, "^a")(2)
    assert body == {"state_filters": ["Ongoing"], "producer_id_filters": [7], "duration_filter": 1000,
                    "transactional_id_pattern": "^a"}
    assert _list_transactions_body([], [], None, None)(0)["duration_filter"] == -1
    with pytest.raises(UnsupportedVersionError, match="ListTransactions v1"):
        _list_transactions_body([], [], 5, None)(0)
    with pytest.raises(UnsupportedVersionError, match="ListTransactions v2"):
        _list_transactions_body([], [], None, "x")(1)


def test_abort_spec_from_a_producer_state():
    state = ProducerState(42, 3, 9, 0, None, 100)
    assert AbortTransactionSpec.for_producer(("t", 1), state) == AbortTransactionSpec(TP("t", 1), 42, 3, 0)
    assert AbortTransactionSpec.for_producer(TP("t", 1), state._replace(coordinator_epoch=5)).coordinator_epoch == 5


def test_console_parsers():
    assert parse_topic_partitions(["a", "b:2,0,2"]) == {"a": None, "b": [0, 2]}
    for bad in ("b:x", ":1", "b:-1"):
        with pytest.raises(UsageError):
            parse_topic_partitions([bad])
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    for bad in ("1h", "P", "PT", "P1DT", "-PT1H"):
        with pytest.raises(UsageError, match="PnDTnHnMnS"):
            parse_duration_ms(bad)
    assert parse_datetime_ms("1970-01-01T00:00:01Z") == 1000
    with pytest.raises(UsageError, match="ISO date-time"):
        parse_datetime_ms("yesterday")


# -- streams groups (KIP-1071) ------------------------------------------------------------------

def _streams_answer(**group):
    """A StreamsGroupDescribe answer's group entry, as the codec decodes it."""
    tasks = {"active_tasks": [{"subtopology_id": "0", "partitions": [0, 1]}],
             "standby_tasks": [{"subtopology_id": "1", "partitions": [2]}], "warmup_tasks": []}
    member = {"member_id": "m1", "member_epoch": 7, "instance_id": None, "rack_id": "r1", "client_id": "app",
              "client_host": "/10.0.0.1", "topology_epoch": 2, "process_id": "p1",
              "user_endpoint": {"host": "h", "port": 8080}, "client_tags": [{"key": "zone", "value": "a"}],
              "task_offsets": [{"subtopology_id": "0", "partition": 1, "offset": 42}], "task_end_offsets": [],
              "assignment": tasks, "target_assignment": dict(tasks, warmup_tasks=[
                  {"subtopology_id": "0", "partitions": [3]}]), "is_classic": False}
    entry = {"error_code": 0, "error_message": None, "group_id": "wc", "group_state": "Reconciling",
             "group_epoch": 9, "assignment_epoch": 8, "topology": {"epoch": 2, "subtopologies": [{
                 "subtopology_id": "0", "source_topics": ["text"], "repartition_sink_topics": ["wc-rep"],
                 "state_changelog_topics": [{"name": "wc-store-changelog", "partitions": 0,
                                             "replication_factor": 3,
                                             "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
                 "repartition_source_topics": []}]},
             "members": [member], "authorized_operations": -2147483648, "assignor_name": "sticky"}
    entry.update(group)
    return entry


def test_streams_group_description_is_typed_as_javas():
    from kproto.admin_streams import (StreamsEndpoint, StreamsGroupMemberAssignment, StreamsTaskIds,
                                      StreamsTaskOffset, StreamsTopicInfo, streams_group_description)
    d = streams_group_description(_streams_answer(), "coord")
    assert (d.group_id, d.group_state, d.group_epoch, d.target_assignment_epoch, d.topology_epoch) \
        == ("wc", "Reconciling", 9, 8, 2)
    assert (d.coordinator, d.assignor_name) == ("coord", "sticky")
    (s,) = d.subtopologies
    assert (s.subtopology_id, s.source_topics, s.repartition_sink_topics) == ("0", ("text",), ("wc-rep",))
    assert s.state_changelog_topics == {"wc-store-changelog": StreamsTopicInfo(0, 3, {"cleanup.policy": "compact"})}
    assert s.repartition_source_topics == {}
    (m,) = d.members
    assert (m.member_id, m.member_epoch, m.instance_id, m.rack_id, m.client_id, m.client_host) \
        == ("m1", 7, None, "r1", "app", "/10.0.0.1")
    assert (m.topology_epoch, m.process_id, m.user_endpoint, m.client_tags) \
        == (2, "p1", StreamsEndpoint("h", 8080), {"zone": "a"})
    assert m.task_offsets == (StreamsTaskOffset("0", 1, 42),) and m.task_end_offsets == ()
    assert m.assignment == StreamsGroupMemberAssignment(
        (StreamsTaskIds("0", (0, 1)),), (StreamsTaskIds("1", (2,)),), ())
    assert m.target_assignment.warmup_tasks == (StreamsTaskIds("0", (3,)),) and not m.is_classic


def test_streams_group_without_topology_or_members():
    from kproto.admin_streams import streams_group_description
    d = streams_group_description(_streams_answer(topology=None, members=[], group_state="Empty",
                                                  assignor_name=None), None)
    assert (d.topology_epoch, d.subtopologies, d.members, d.assignor_name) == (-1, (), (), None)


def test_streams_operations_check_their_input_and_carry_their_names():
    c = core()
    with pytest.raises(ValueError, match="describe_streams_groups: group ids are non-empty strings"):
        c.describe_streams_groups(["ok", ""], now=0)
    with pytest.raises(ValueError, match="describe_streams_groups"):
        c.describe_streams_groups(["a", "a"], now=0)
    with pytest.raises(ValueError, match="delete_streams_groups"):
        c.delete_streams_groups(["a", "a"], now=0)
    with pytest.raises(ValueError, match="alter_streams_group_offsets: the offset for t-0 must be an int >= 0"):
        c.alter_streams_group_offsets("g", {TP("t", 0): -1}, now=0)
    with pytest.raises(ValueError, match="delete_streams_group_offsets: t-0 is given twice"):
        c.delete_streams_group_offsets("g", [TP("t", 0), ("t", 0)], now=0)
    assert not c.pending
    for h in (c.describe_streams_groups([], now=0), c.delete_streams_groups([], now=0),
              c.alter_streams_group_offsets("g", {}, now=0), c.delete_streams_group_offsets("g", [], now=0)):
        assert h.done and h.result() == {}
    ops = {"describe_streams_groups": c.describe_streams_groups(["g"], now=0),
           "list_streams_group_offsets": c.list_streams_group_offsets("g", now=0),
           "alter_streams_group_offsets": c.alter_streams_group_offsets("g", {TP("t", 0): 1}, now=0),
           "delete_streams_group_offsets": c.delete_streams_group_offsets("g", [TP("t", 0)], now=0),
           "delete_streams_groups": c.delete_streams_groups(["g"], now=0)}
    assert {name: h.operation for name, h in ops.items()} == {name: name for name in ops}
    assert c.pending                               # each queued its FindCoordinator
