"""Streams-group administration (KIP-1071), as operations of
:class:`kproto.admin.AdminCore` (mixed in), named as Java's ``Admin``:

* ``describe_streams_groups``: StreamsGroupDescribe at each group's
  coordinator, typed as Java's ``StreamsGroupDescription`` (members with
  their active, standby and warm-up tasks, the topology's subtopologies,
  the group, assignment and topology epochs);
* ``list_streams_group_offsets``, ``alter_streams_group_offsets``,
  ``delete_streams_group_offsets``, ``delete_streams_groups``: a streams
  group keeps its offsets in ``__consumer_offsets`` as a consumer group
  does, and Java's Admin runs these as its consumer-group counterparts
  (OffsetFetch, OffsetCommit as an admin, OffsetDelete, DeleteGroups at
  the group's coordinator); so do we, under the streams names.

``list_groups`` (kproto/admin_groups.py) lists streams groups with the type
"streams". Each operation returns an :class:`~kproto.admin.AdminHandle`.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, NamedTuple, Optional, Tuple

from kproto.admin_acls import AclOperation

__all__ = ["StreamsGroupAdmin", "StreamsGroupDescription", "StreamsGroupMemberDescription",
           "StreamsGroupMemberAssignment", "StreamsTaskIds", "StreamsTaskOffset", "StreamsEndpoint",
           "StreamsGroupSubtopologyDescription", "StreamsTopicInfo"]


class StreamsTaskIds(NamedTuple):
    """The tasks of one subtopology: one per partition of its source topics
    (Java's ``StreamsGroupMemberAssignment.TaskIds``)."""
    subtopology_id: str
    partitions: Tuple[int, ...]


class StreamsGroupMemberAssignment(NamedTuple):
    """A member's tasks: those it processes, keeps a standby copy of the state
    of, and warms up to take over."""
    active_tasks: Tuple[StreamsTaskIds, ...]
    standby_tasks: Tuple[StreamsTaskIds, ...]
    warmup_tasks: Tuple[StreamsTaskIds, ...]


class StreamsTaskOffset(NamedTuple):
    """How far a member's task is (its changelog offset, or the end offset)."""
    subtopology_id: str
    partition: int
    offset: int


class StreamsEndpoint(NamedTuple):
    """Where a member serves interactive queries (``application.server``)."""
    host: str
    port: int


class StreamsGroupMemberDescription(NamedTuple):
    """A member of a streams group (Java's ``StreamsGroupMemberDescription``)."""
    member_id: str
    member_epoch: int
    instance_id: Optional[str]
    rack_id: Optional[str]
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: Optional[StreamsEndpoint]
    client_tags: Dict[str, str]
    task_offsets: Tuple[StreamsTaskOffset, ...]
    task_end_offsets: Tuple[StreamsTaskOffset, ...]
    assignment: StreamsGroupMemberAssignment          # what it has now
    target_assignment: StreamsGroupMemberAssignment   # what the group's assignment gives it
    is_classic: bool


class StreamsTopicInfo(NamedTuple):
    """An internal topic a subtopology needs (changelog or repartition topic)."""
    partitions: int                   # 0: as many as the source topics
    replication_factor: int           # 0: the broker's default
    topic_configs: Dict[str, str]


class StreamsGroupSubtopologyDescription(NamedTuple):
    """One subtopology of the group's topology (Java's
    ``StreamsGroupSubtopologyDescription``)."""
    subtopology_id: str
    source_topics: Tuple[str, ...]
    repartition_sink_topics: Tuple[str, ...]
    state_changelog_topics: Dict[str, StreamsTopicInfo]
    repartition_source_topics: Dict[str, StreamsTopicInfo]


class StreamsGroupDescription(NamedTuple):
    """A streams group (Java's ``StreamsGroupDescription``): its state (Empty,
    NotReady, Assigning, Reconciling, Stable, Dead), epochs and members.
    ``topology_epoch`` is -1 and ``subtopologies`` empty while no member has
    sent a topology."""
    group_id: str
    group_epoch: int
    target_assignment_epoch: int
    topology_epoch: int
    subtopologies: Tuple[StreamsGroupSubtopologyDescription, ...]
    members: Tuple[StreamsGroupMemberDescription, ...]
    group_state: str
    coordinator: Any                  # kproto.admin.Node
    assignor_name: Optional[str]      # None: a broker before StreamsGroupDescribe v1
    #: What the caller may do with the group; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None


def _tasks(entries) -> Tuple[StreamsTaskIds, ...]:
    return tuple(StreamsTaskIds(t["subtopology_id"], tuple(t.get("partitions") or ())) for t in entries or ())


def _assignment(a) -> StreamsGroupMemberAssignment:
    a = a or {}
    return StreamsGroupMemberAssignment(_tasks(a.get("active_tasks")), _tasks(a.get("standby_tasks")),
                                        _tasks(a.get("warmup_tasks")))


def _task_offsets(entries) -> Tuple[StreamsTaskOffset, ...]:
    return tuple(StreamsTaskOffset(t["subtopology_id"], t["partition"], t["offset"]) for t in entries or ())


def _key_values(entries) -> Dict[str, str]:
    return {kv["key"]: kv["value"] for kv in entries or ()}


def _topic_infos(entries) -> Dict[str, StreamsTopicInfo]:
    return {t["name"]: StreamsTopicInfo(t.get("partitions", 0), t.get("replication_factor", 0),
                                        _key_values(t.get("topic_configs")))
            for t in entries or ()}


def _member(m: dict) -> StreamsGroupMemberDescription:
    endpoint = m.get("user_endpoint")
    return StreamsGroupMemberDescription(
        m["member_id"], m.get("member_epoch", -1), m.get("instance_id"), m.get("rack_id"),
        m.get("client_id") or "", m.get("client_host") or "", m.get("topology_epoch", -1),
        m.get("process_id") or "", StreamsEndpoint(endpoint["host"], endpoint["port"]) if endpoint else None,
        _key_values(m.get("client_tags")), _task_offsets(m.get("task_offsets")),
        _task_offsets(m.get("task_end_offsets")), _assignment(m.get("assignment")),
        _assignment(m.get("target_assignment")), bool(m.get("is_classic")))


def streams_group_description(d: dict, coordinator) -> StreamsGroupDescription:
    """A StreamsGroupDescribe answer's group entry, typed as Java's Admin types it."""
    topology = d.get("topology") or {}
    subtopologies = tuple(StreamsGroupSubtopologyDescription(
        s["subtopology_id"], tuple(s.get("source_topics") or ()), tuple(s.get("repartition_sink_topics") or ()),
        _topic_infos(s.get("state_changelog_topics")), _topic_infos(s.get("repartition_source_topics")))
        for s in topology.get("subtopologies") or ())
    return StreamsGroupDescription(
        d["group_id"], d.get("group_epoch", -1), d.get("assignment_epoch", -1),
        topology.get("epoch", -1) if topology else -1, subtopologies,
        tuple(_member(m) for m in d.get("members") or ()), d.get("group_state") or "", coordinator,
        d.get("assignor_name"))


class StreamsGroupAdmin:
    """The streams-group operations of AdminCore (a mixin: it uses the
    core's ``_op``, ``_describe_each_group`` and the consumer-group offset
    and delete machinery, as Java's Admin does)."""

    def describe_streams_groups(self, group_ids, *, include_authorized_operations=False, timeout_ms=None, now):
        """{group: StreamsGroupDescription} (StreamsGroupDescribe at each
        group's coordinator); a group that does not exist, or is not a
        streams group, fails with GroupIdNotFoundError.
        ``include_authorized_operations``: each description's
        ``authorized_operations`` are what the caller may do with the group
        (else None)."""
        from kproto.admin import _no_dups
        groups = list(group_ids)
        bad = [g for g in groups if not isinstance(g, str) or not g]
        if bad:
            raise ValueError(f"describe_streams_groups: group ids are non-empty strings, not {bad!r}")
        _no_dups(groups, "describe_streams_groups")
        op = self._op("describe_streams_groups", groups, now, timeout_ms)
        return self._describe_each_group(op, "StreamsGroupDescribe", "streams group", streams_group_description,
                                         include_authorized_operations)

    def list_streams_group_offsets(self, group_id, partitions=None, *, require_stable=True, timeout_ms=None, now):
        """{TopicPartition: OffsetAndMetadata} committed by streams group
        ``group_id`` (OffsetFetch: every partition it committed, or
        ``partitions``); partitions without a commit are left out."""
        return self._list_group_offsets("list_streams_group_offsets", group_id, partitions, require_stable,
                                        timeout_ms, now)

    def alter_streams_group_offsets(self, group_id, offsets, *, timeout_ms=None, now):
        """Commit ``{TopicPartition: offset or OffsetAndMetadata}`` for streams
        group ``group_id`` (OffsetCommit as an admin); one item per
        partition. The coordinator takes it only while the group has no
        members: an active group fails each partition (UnknownMemberIdError,
        as in Java)."""
        return self._alter_group_offsets("alter_streams_group_offsets", group_id, offsets, timeout_ms, now)

    def delete_streams_group_offsets(self, group_id, partitions, *, timeout_ms=None, now):
        """Delete streams group ``group_id``'s committed offsets of
        ``partitions`` (OffsetDelete); one item per partition. A source topic
        of the group's topology, while it has members, fails with
        GroupSubscribedToTopicError."""
        return self._delete_group_offsets("delete_streams_group_offsets", group_id, partitions, timeout_ms, now)

    def delete_streams_groups(self, group_ids, *, timeout_ms=None, now):
        """Delete streams groups and their offsets (DeleteGroups); one item per
        group. A group with members fails with NonEmptyGroupError, an
        unknown one with GroupIdNotFoundError."""
        return self._delete_groups("delete_streams_groups", group_ids, timeout_ms, now)
