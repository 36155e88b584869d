"""Group administration beyond listing and describing, as operations of
:class:`kproto.admin.AdminCore` (mixed in), named as Java's ``Admin``:

* ``list_consumer_group_offsets``: OffsetFetch for one group, or for many
  (Java's ``listConsumerGroupOffsets(Map<String, ListConsumerGroupOffsetsSpec>)``):
  one FindCoordinator (v4, KIP-699) for all of them, then one OffsetFetch
  (v8, KIP-709) per coordinator naming its groups (``_at_coordinators``);
* ``describe_classic_groups`` (KIP-1043, Java 4.0's ``describeClassicGroups``):
  DescribeGroups for classic groups, batched per coordinator; a group of
  another type (or none) fails with GroupIdNotFoundError, as in Java;
* ``list_groups``: every group of every type (KIP-1043: ListGroups v5 with
  its types filter; classic, consumer, share, streams);
* ``alter_consumer_group_offsets``: OffsetCommit as Java's admin sends it
  (generation -1, no member), which the coordinator accepts only while the
  group has no members;
* ``delete_consumer_group_offsets``: OffsetDelete;
* ``remove_members_from_consumer_group``: LeaveGroup v3+ naming static
  members by group instance id, or every member (Java's ``removeAll``);
* ``delete_share_groups``, ``alter_share_group_offsets``,
  ``delete_share_group_offsets``: DeleteGroups, AlterShareGroupOffsets and
  DeleteShareGroupOffsets at the share group's coordinator.

Each returns an :class:`~kproto.admin.AdminHandle`, driven like every other
admin operation: coordinator moves, retries and the deadline are the core's.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Union

from kproto import error_codes
from kproto.admin_acls import AclOperation
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.errors import KafkaError, UnsupportedVersionError
from kproto.requests import find_coordinators_body, offsets_fetch_body

__all__ = ["GroupAdmin", "GroupListing", "ClassicGroupDescription", "GROUP_TYPES", "group_offsets_by_topic"]

#: KIP-1043's group types, as ListGroups v5 names them.
GROUP_TYPES = ("classic", "consumer", "share", "streams")
#: Per-partition OffsetCommit codes meaning "this group has members": the
#: coordinator takes a commit without a member only from an empty group.
_GROUP_HAS_MEMBERS = frozenset({22, 25, 110, 113})   # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED/STALE_MEMBER_EPOCH
_COORDINATOR_CODES = frozenset({14, 15, 16})
_GROUP_ID_NOT_FOUND = 69


class GroupListing(NamedTuple):
    """A group as ListGroups lists it (Java's ``GroupListing``)."""
    group_id: str
    type: Optional[str]                   # classic, consumer, share, streams; None: a broker before v5
    protocol_type: str                    # "consumer", "share"...; "" for a simple (offsets-only) group
    state: Optional[str]                  # Stable, Empty...; None: a broker before ListGroups v4
    coordinator: int = -1                 # the broker that listed it

    @property
    def is_simple_consumer_group(self) -> bool:
        """A classic group used only to store offsets (no protocol, no members)."""
        return self.type in (None, "classic") and self.protocol_type == ""


class ClassicGroupDescription(NamedTuple):
    """A classic group as DescribeGroups describes it (Java's ``ClassicGroupDescription``)."""
    group_id: str
    protocol: str                         # the protocol type: "consumer", "connect"...; "" for a simple group
    protocol_data: str                    # the protocol chosen (a consumer group's assignor: "range"...)
    members: tuple                        # kproto.admin.MemberDescription
    state: str                            # Stable, Empty, PreparingRebalance, CompletingRebalance, Dead
    coordinator: Optional[Any]            # kproto.admin.Node
    #: What the caller may do with the group; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None

    @property
    def is_simple_consumer_group(self) -> bool:
        """A group used only to store offsets (no protocol, no members)."""
        return self.protocol == ""


def group_offsets_by_topic(partitions: Iterable, what: str) -> dict:
    """{topic: sorted partitions} of TopicPartitions (or (topic, partition)
    pairs); a duplicate raises ValueError naming ``what``."""
    by: dict = {}
    for tp in partitions:
        topic, partition = tp[0], tp[1]
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"{what}: {tp!r} is not a TopicPartition(topic, partition >= 0)")
        if partition in by.setdefault(topic, []):
            raise ValueError(f"{what}: {topic}-{partition} is given twice")
        by[topic].append(partition)
    return {t: sorted(ps) for t, ps in sorted(by.items())}


def _offset_and_metadata(tp, value, what) -> OffsetAndMetadata:
    om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
    if not isinstance(om.offset, int) or isinstance(om.offset, bool) or om.offset < 0:
        raise ValueError(f"{what}: the offset for {tp[0]}-{tp[1]} must be an int >= 0, not {om.offset!r}")
    return om


def _list_groups_body(states, types):
    def build(version):
        if types and version < 5:
            raise UnsupportedVersionError(
                f"filtering groups by type needs ListGroups v5 (KIP-1043); the broker speaks v{version}")
        body = {"states_filter": list(states) if version >= 4 else [], "types_filter": list(types)}
        return body
    return build


class GroupAdmin:
    """The group operations of AdminCore (a mixin: it uses the core's
    ``_op``, ``_submit``, ``_group_call``, ``_complete``... machinery and
    imports kproto.admin inside its methods, as that module mixes it in)."""

    def _every_broker(self, op, key, api, build, collect, finish):
        """Metadata (any broker), then ``api`` (body ``build``) to every
        broker it lists; ``collect(node, body)`` takes each error-free answer
        and, once every broker answered, ``finish()`` is the value of
        ``op``'s item ``key``. A broker's error fails the item (retriable
        ones are retried)."""
        from kproto.admin import NODE, _Call
        core = self
        left: dict = {}

        class Ask(_Call):
            def build(call, core_, node):
                return build

            def handle(call, core_, body, now):
                code = body.get("error_code", 0)
                if code:
                    err = error_codes.error_for_code(code, body.get("error_message"), f"{api} on node {call.node}")
                    if err.retriable:
                        core._retry(call, err, now)
                    else:
                        core._fail_call(call, err)
                    return
                collect(call.node, body)
                left.pop(call.node, None)
                if not left:
                    core._complete(op, key, value=finish())

        self._ask_every_broker(op, key, left, lambda n: Ask(op, api, [key], target=NODE, node=n))

    def _describe_each_group(self, op, api, what, describe, include_authorized_operations):
        """``api`` (ShareGroupDescribe, StreamsGroupDescribe: the next-generation
        groups' describe) at the coordinator of each of ``op``'s groups, one
        group a request; the item's value is ``describe(entry, coordinator)``
        of the group's entry in the answer, with its ``authorized_operations``
        when ``include_authorized_operations``. A group's error fails its
        item (GROUP_ID_NOT_FOUND: GroupIdNotFoundError, as Java's Admin);
        ``what`` names the group kind."""
        from kproto.admin import _asked_operations
        include = bool(include_authorized_operations)
        for g in op.items:
            def build(node, call=None, g=g):
                return {"group_ids": [g], "include_authorized_operations": include}

            def handle(call, resp, now, g=g):
                d = next((x for x in resp.get("groups") or [] if x.get("group_id") == g), None)
                if d is None:
                    self._fail_call(call, KafkaError(f"{api} did not describe group {g!r}"))
                    return
                if self._group_error(call, d["error_code"], d.get("error_message"),
                                     f"describe {what} {g!r}", now):
                    return
                described = describe(d, getattr(call, "coordinator", None))
                self._complete(op, g, value=described._replace(
                    authorized_operations=_asked_operations(d, include)))

            self._group_call(op, g, api, build, handle)
        return op

    # -- many groups, batched per coordinator --------------------------------------------------
    def _at_coordinators(self, op, groups, api, build, handle):
        """One FindCoordinator for ``groups`` (v4 names them all; an older
        broker is asked one group at a time), then one ``api`` call per
        coordinator with the groups it coordinates as keys: ``build(node,
        call=)`` and ``handle(call, body, now)`` as for ``_group_call``.
        A call whose node goes away, and the groups ``_regroup`` sends back,
        look their coordinators up again."""
        from kproto.admin import NODE, Node, _Call, _SelfCall
        core = self

        def relookup(c, now):
            again = Lookup(op, "FindCoordinator", c.keys, tries=c.tries, not_before=c.next_try_at, drops=c.drops)
            again.last_error = c.last_error
            core._submit(again)

        class Lookup(_Call):
            def build(call, core_, node):
                return find_coordinators_body(call.keys)

            def handle(call, core_, body, now):
                entries = body.get("coordinators")
                asked = call.keys
                if not entries:                       # before v4: the first group only
                    entries, asked = [dict(body, key=call.keys[0])], call.keys[:1]
                    if len(call.keys) > 1:
                        core._submit(Lookup(op, "FindCoordinator", call.keys[1:], tries=call.tries,
                                            not_before=now, drops=call.drops))
                at: Dict[int, list] = {}
                again, err = [], None
                for g in asked:
                    e = next((e for e in entries if e.get("key") == g), None)
                    code = 15 if e is None else e.get("error_code", 0)
                    if code == 0 and (e.get("node_id", -1) < 0 or not e.get("host")):
                        code = 15
                    if code:
                        err = error_codes.error_for_code(code, e and e.get("error_message"),
                                                         f"FindCoordinator for group {g!r}")
                        if err.retriable:
                            again.append(g)
                        else:
                            core._complete(op, g, error=err)
                        continue
                    if e["node_id"] not in core.cluster.brokers:
                        core.cluster.add_node(e["node_id"], e["host"], e["port"])
                    at.setdefault(e["node_id"], [Node(e["node_id"], e["host"], e["port"])]).append(g)
                if again:
                    core._retry(call, err, now, keys=again)
                for node, (coordinator, *gs) in sorted(at.items()):
                    main = _SelfCall(op, api, gs, build, handle, target=NODE, node=node, tries=call.tries,
                                     not_before=now, drops=call.drops)
                    main.coordinator = coordinator
                    main.on_moved = relookup
                    core._submit(main)

        if groups:
            self._submit(Lookup(op, "FindCoordinator", groups))

    def _regroup(self, call, group, code, message, context, now) -> None:
        """A group-level error for ``group`` in a call of ``_at_coordinators``:
        a moved coordinator is looked up again, a loading one asked again
        after the backoff, anything else fails the group."""
        from kproto.admin import _COORDINATOR_LOADING, _COORDINATOR_MOVED
        err = error_codes.error_for_code(code, message, context)
        if code in _COORDINATOR_MOVED or code == _COORDINATOR_LOADING:
            self._retry(call, err, now, moved=code in _COORDINATOR_MOVED, keys=[group])
        else:
            self._complete(call.op, group, error=err)

    def _answered_groups(self, call, batched: bool, now) -> list:
        """The groups an answer of ``_at_coordinators`` covers: all of them
        when it was ``batched``, else (a broker before the version that takes
        many groups answers for one) the first, the rest sent again in a
        call of their own to the same coordinator."""
        from kproto.admin import _copy_call
        if batched or len(call.keys) == 1:
            return list(call.keys)
        rest = _copy_call(call, call.keys[1:])
        rest.request, rest.next_try_at = None, now
        self._submit(rest)
        return call.keys[:1]

    def list_consumer_group_offsets(self, group_id, partitions=None, *, require_stable=True,
                                    timeout_ms=None, now):
        """The committed offsets of one group, ``{TopicPartition:
        OffsetAndMetadata}`` (all its partitions, or ``partitions``), or of
        many: ``group_id`` a mapping ``{group: partitions or None for all}``
        gives ``{group: {TopicPartition: OffsetAndMetadata}}``, one item per
        group (Java's ``listConsumerGroupOffsets(Map<String,
        ListConsumerGroupOffsetsSpec>)``); the groups of one coordinator go in
        one OffsetFetch (v8+). Partitions without a commit are left out."""
        return self._list_group_offsets("list_consumer_group_offsets", group_id, partitions, require_stable,
                                        timeout_ms, now)

    def _list_group_offsets(self, what, group_id, partitions, require_stable, timeout_ms, now):
        """OffsetFetch for one group or a mapping of groups, as operation
        ``what`` (consumer and streams groups keep their offsets alike)."""
        from kproto.admin import _no_dups
        if isinstance(group_id, str):
            specs, single = {group_id: partitions}, True
        elif isinstance(group_id, Mapping):
            if partitions is not None:
                raise ValueError(f"{what}: with a mapping of groups, give each group's partitions in it "
                                 f"({{group: partitions}}), not partitions=")
            specs, single = dict(group_id), False
            bad = [g for g in specs if not isinstance(g, str) or not g]
            if bad:
                raise ValueError(f"{what}: {bad[0]!r} is not a group id (a non-empty str)")
        else:
            raise TypeError(f"{what}: group_id must be a group id (str) or a mapping {{group: partitions}}, "
                            f"not {type(group_id).__name__}")
        _no_dups(list(specs), what)
        topics = {g: None if ps is None else [{"name": t, "partition_indexes": p} for t, p in
                                               sorted(group_offsets_by_topic(ps, f"{what} of {g!r}").items())]
                  for g, ps in specs.items()}
        op = self._op(what, list(specs), now, timeout_ms, single=single)
        core = self

        def build(node, call=None):
            return offsets_fetch_body({g: topics[g] for g in call.keys}, require_stable)

        def handle(call, body, now):
            answers = {gb.get("group_id"): gb for gb in body.get("groups") or ()}
            for g in core._answered_groups(call, bool(answers), now):
                gb = answers.get(g, body if not answers else None)
                if gb is None:
                    core._complete(op, g, error=error_codes.error_for_code(
                        16, "the coordinator did not answer for it", f"fetch offsets of group {g!r}"))
                    continue
                code, context = gb.get("error_code", 0), f"fetch offsets of group {g!r}"
                out: Dict[TopicPartition, OffsetAndMetadata] = {}
                for t in gb.get("topics") or []:
                    for p in t.get("partitions") or []:
                        if p.get("error_code", 0) and not code:
                            code = p["error_code"]
                            context = f"fetch offset of {t['name']}-{p['partition_index']} for group {g!r}"
                        if p["committed_offset"] >= 0:
                            out[TopicPartition(t["name"], p["partition_index"])] = OffsetAndMetadata(
                                p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1))
                if code:
                    core._regroup(call, g, code, None, context, now)
                else:
                    core._complete(op, g, value=dict(sorted(out.items())))

        self._at_coordinators(op, list(specs), "OffsetFetch", build, handle)
        return op

    def describe_classic_groups(self, group_ids, *, include_authorized_operations=False, timeout_ms=None, now):
        """{group: ClassicGroupDescription}, one item per group; the groups of
        one coordinator in one DescribeGroups. A group that is not a classic
        group fails with GroupIdNotFoundError (Kafka 4's DescribeGroups v6
        says so; an older broker's answer for a missing group, state "Dead"
        with no protocol, gets the same error), as Java's
        ``describeClassicGroups``. Members' assignments are decoded in
        "consumer" protocol groups. ``include_authorized_operations``: each
        description's ``authorized_operations`` are what the caller may do
        with the group (else None)."""
        from kproto.admin import _asked_operations, _no_dups, classic_members
        groups = list(group_ids)
        _no_dups(groups, "describe_classic_groups")
        bad = [g for g in groups if not isinstance(g, str) or not g]
        if bad:
            raise ValueError(f"describe_classic_groups: {bad[0]!r} is not a group id (a non-empty str)")
        op = self._op("describe_classic_groups", groups, now, timeout_ms)
        include = bool(include_authorized_operations)
        core = self

        def build(node, call=None):
            return {"groups": list(call.keys), "include_authorized_operations": include}

        def handle(call, body, now):
            answers = {d.get("group_id"): d for d in body.get("groups") or ()}
            for g in call.keys:
                d = answers.get(g)
                code = 16 if d is None else d.get("error_code", 0)     # unanswered: ask again
                if code == 0 and d.get("group_state") == "Dead" and not d.get("protocol_type"):
                    code = _GROUP_ID_NOT_FOUND
                if code:
                    message = d and d.get("error_message") or (
                        f"group {g!r} does not exist" if code == _GROUP_ID_NOT_FOUND else None)
                    core._regroup(call, g, code, message, f"describe classic group {g!r}", now)
                    continue
                core._complete(op, g, value=ClassicGroupDescription(
                    g, d.get("protocol_type") or "", d.get("protocol_data") or "", classic_members(d),
                    d.get("group_state") or "", getattr(call, "coordinator", None), _asked_operations(d, include)))

        self._at_coordinators(op, groups, "DescribeGroups", build, handle)
        return op

    def list_groups(self, *, types=None, states=None, timeout_ms=None, now):
        """[GroupListing] of every broker (KIP-1043): ``types`` keeps these
        group types only (classic, consumer, share, streams), ``states``
        these states (Stable, Empty... as Kafka names them, any case).
        ListGroups v5 filters at the broker; the listing is filtered here
        too, for brokers that filter less."""
        types = [str(t).lower() for t in types or ()]
        unknown = [t for t in types if t not in GROUP_TYPES]
        if unknown:
            raise ValueError(f"list_groups: unknown group type(s) {unknown}; the types are {list(GROUP_TYPES)}")
        states = [str(s) for s in states or ()]
        op = self._op("list_groups", ["groups"], now, timeout_ms, single=True)
        found: dict = {}
        wanted_states = {s.lower() for s in states}

        def collect(node, body):
            for g in body.get("groups") or []:
                found[g["group_id"]] = GroupListing(
                    g["group_id"], (g.get("group_type") or "").lower() or None, g.get("protocol_type") or "",
                    g.get("group_state") or None, node)

        def finish() -> List[GroupListing]:
            keep = [g for g in found.values()
                    if (not types or g.type is None or g.type in types)
                    and (not wanted_states or g.state is None or g.state.lower() in wanted_states)]
            return sorted(keep)

        self._every_broker(op, "groups", "ListGroups", _list_groups_body(states, types), collect, finish)
        return op

    def alter_consumer_group_offsets(self, group_id, offsets, *, timeout_ms=None, now):
        """Commit ``{TopicPartition: offset or OffsetAndMetadata}`` for
        ``group_id`` as an admin (OffsetCommit, generation -1, no member):
        one item per partition. The coordinator takes it only while the
        group is empty; a group with members fails each partition with
        UnknownMemberIdError (as Java's Admin surfaces it)."""
        return self._alter_group_offsets("alter_consumer_group_offsets", group_id, offsets, timeout_ms, now)

    def _alter_group_offsets(self, what, group_id, offsets, timeout_ms, now):
        """OffsetCommit as an admin, as operation ``what`` (consumer and
        streams groups: Java's Admin commits both this way)."""
        items = {TopicPartition(*tp): _offset_and_metadata(tp, v, what) for tp, v in offsets.items()}
        group_offsets_by_topic(items, what)
        op = self._op(what, list(items), now, timeout_ms)
        g = group_id

        def build(node, call=None):
            by: dict = {}
            for tp in call.keys:
                om = items[tp]
                by.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
            return {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None, "retention_time_ms": -1,
                    "topics": [{"name": t, "partitions": ps} for t, ps in sorted(by.items())]}

        def handle(call, body, now):
            for t in body.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    code = p.get("error_code", 0)
                    if code in _COORDINATOR_CODES:
                        self._group_error(call, code, None, f"alter offsets of group {g!r}", now)
                        return
                    if tp not in call.keys:
                        continue
                    context = f"alter offset of {tp.topic}-{tp.partition} for group {g!r}"
                    if code in _GROUP_HAS_MEMBERS:
                        context += " (the group has members: its offsets can be altered only while it is empty)"
                    self._complete(op, tp, error=error_codes.error_for_code(code, None, context) if code else None)
            self._unanswered(call, op, "OffsetCommit")

        if items:
            self._group_call(op, g, "OffsetCommit", build, handle, keys=list(items))
        return op

    def delete_consumer_group_offsets(self, group_id, partitions, *, timeout_ms=None, now):
        """Delete the committed offsets of ``partitions`` from ``group_id``
        (OffsetDelete): one item per partition. A partition of a topic the
        group's members still subscribe to fails with
        GroupSubscribedToTopicError; an unknown group with GroupIdNotFoundError."""
        return self._delete_group_offsets("delete_consumer_group_offsets", group_id, partitions, timeout_ms, now)

    def _delete_group_offsets(self, what, group_id, partitions, timeout_ms, now):
        """OffsetDelete, as operation ``what`` (consumer and streams groups)."""
        by = group_offsets_by_topic(partitions, what)
        keys = [TopicPartition(t, p) for t, ps in by.items() for p in ps]
        op = self._op(what, keys, now, timeout_ms)
        g = group_id

        def build(node, call=None):
            return {"group_id": g, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                                              for t, ps in by.items()]}

        def handle(call, body, now):
            if self._group_error(call, body.get("error_code", 0), None, f"delete offsets of group {g!r}", now):
                return
            for t in body.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    if tp in op.items:
                        code = p.get("error_code", 0)
                        self._complete(op, tp, error=error_codes.error_for_code(
                            code, None, f"delete offset of {tp.topic}-{tp.partition} from group {g!r}")
                            if code else None)
            self._unanswered(call, op, "OffsetDelete")

        if keys:
            self._group_call(op, g, "OffsetDelete", build, handle, keys=keys)
        return op

    def remove_members_from_consumer_group(self, group_id, members=None, *, reason=None, timeout_ms=None, now):
        """Make members leave ``group_id`` (LeaveGroup v3+), so the group
        rebalances without waiting for their session timeout.

        ``members``: group instance ids of static members; one item per id,
        a member the group does not have failing with UnknownMemberIdError.
        None (Java's ``removeAll``): every member the group has now (found
        with describe_consumer_groups); then the one item is the group, its
        value ``{group instance id or member id: None}``."""
        if members is not None:
            ids = [m for m in members]
            bad = [m for m in ids if not isinstance(m, str) or not m]
            if bad or len(set(ids)) != len(ids):
                raise ValueError(f"remove_members_from_consumer_group: members must be distinct group instance "
                                 f"ids (non-empty str), not {ids!r}")
            op = self._op("remove_members_from_consumer_group", ids, now, timeout_ms)
            if ids:
                self._leave_group(op, group_id, [(m, "", m) for m in ids], reason)
            return op
        op = self._op("remove_members_from_consumer_group", [group_id], now, timeout_ms, single=True)
        described = self.describe_consumer_groups([group_id], timeout_ms=timeout_ms, now=now)
        described.operation = "remove_members_from_consumer_group"

        def got_members(h):
            from kproto.admin import AdminHandle, _unlist
            _unlist(self, h)
            if h.error is not None:
                self._complete(op, group_id, error=h.error)
                return
            found = [(m.group_instance_id or m.member_id, m.member_id, m.group_instance_id)
                     for m in h.result()[group_id].members]
            if not found:
                self._complete(op, group_id, value={})
                return
            inner = AdminHandle(op.operation, [k for k, _, _ in found], op.deadline)
            inner.timeout_ms = op.timeout_ms

            def left(i):
                _unlist(self, i)
                self._complete(op, group_id, error=i.error,
                               value=None if i.error is not None else dict(sorted(i.values().items())))

            inner._listeners.append(left)
            self._leave_group(inner, group_id, found, reason)

        described._listeners.append(got_members)
        return op

    def _leave_group(self, op, group_id, members, reason):
        """LeaveGroup for ``members`` [(item key, member id, group instance id)]."""
        by_identity = {(member_id or None, instance): key for key, member_id, instance in members}

        def body(version):
            if version < 3:
                raise UnsupportedVersionError(
                    f"removing members needs LeaveGroup v3 (KIP-345); the broker speaks v{version}")
            return {"group_id": group_id, "members": [
                {"member_id": member_id, "group_instance_id": instance, "reason": reason}
                for _, member_id, instance in members]}

        def handle(call, resp, now):
            if self._group_error(call, resp.get("error_code", 0), None, f"leave group {group_id!r}", now):
                return
            for m in resp.get("members") or []:
                instance = m.get("group_instance_id")
                key = by_identity.get((m.get("member_id") or None, instance))
                if key is None:
                    key = by_identity.get((None, instance)) if instance else None
                if key is None or key not in call.keys:
                    continue
                code = m.get("error_code", 0)
                self._complete(op, key, error=error_codes.error_for_code(
                    code, None, f"remove member {key!r} from group {group_id!r}") if code else None)
            self._unanswered(call, op, "LeaveGroup")

        self._group_call(op, group_id, "LeaveGroup", lambda node, call=None: body, handle,
                         keys=[k for k, _, _ in members])

    # -- share groups ----------------------------------------------------------------------
    def delete_share_groups(self, group_ids, *, timeout_ms=None, now):
        """Delete share groups and their state (DeleteGroups at each group's
        coordinator, as Java's Admin); one item per group. A group with
        members fails with NonEmptyGroupError, an unknown one with
        GroupIdNotFoundError."""
        return self._delete_groups("delete_share_groups", group_ids, timeout_ms, now)

    def alter_share_group_offsets(self, group_id, offsets, *, timeout_ms=None, now):
        """Set where share group ``group_id`` starts on each partition:
        ``{TopicPartition: start offset}`` (AlterShareGroupOffsets); one item
        per partition. The group must be empty (NonEmptyGroupError otherwise)."""
        what = "alter_share_group_offsets"
        items = {TopicPartition(*tp): _offset_and_metadata(tp, v, what).offset for tp, v in offsets.items()}
        by = group_offsets_by_topic(items, what)
        op = self._op(what, list(items), now, timeout_ms)
        g = group_id

        def build(node, call=None):
            return {"group_id": g, "topics": [{"topic_name": t, "partitions": [
                {"partition_index": p, "start_offset": items[TopicPartition(t, p)]} for p in ps]}
                for t, ps in by.items()]}

        def handle(call, body, now):
            if self._group_error(call, body.get("error_code", 0), body.get("error_message"),
                                 f"alter share offsets of group {g!r}", now):
                return
            for t in body.get("responses") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["topic_name"], p["partition_index"])
                    if tp in op.items:
                        code = p.get("error_code", 0)
                        self._complete(op, tp, error=error_codes.error_for_code(
                            code, p.get("error_message"),
                            f"alter share offset of {tp.topic}-{tp.partition} for group {g!r}") if code else None)
            self._unanswered(call, op, "AlterShareGroupOffsets")

        if items:
            self._group_call(op, g, "AlterShareGroupOffsets", build, handle, keys=list(items))
        return op

    def delete_share_group_offsets(self, group_id, topics, *, timeout_ms=None, now):
        """Forget share group ``group_id``'s state on every partition of
        ``topics`` (DeleteShareGroupOffsets; names); one item per topic. The
        group must be empty (NonEmptyGroupError otherwise)."""
        from kproto.admin import _no_dups
        topics = list(topics)
        _no_dups(topics, "delete_share_group_offsets")
        op = self._op("delete_share_group_offsets", topics, now, timeout_ms)
        g = group_id

        def build(node, call=None):
            return {"group_id": g, "topics": [{"topic_name": t} for t in topics]}

        def handle(call, body, now):
            if self._group_error(call, body.get("error_code", 0), body.get("error_message"),
                                 f"delete share offsets of group {g!r}", now):
                return
            for t in body.get("responses") or []:
                name = t.get("topic_name")
                if name in op.items:
                    code = t.get("error_code", 0)
                    self._complete(op, name, error=error_codes.error_for_code(
                        code, t.get("error_message"), f"delete share offsets of topic {name!r} for group {g!r}")
                        if code else None)
            self._unanswered(call, op, "DeleteShareGroupOffsets")

        if topics:
            self._group_call(op, g, "DeleteShareGroupOffsets", build, handle, keys=topics)
        return op
