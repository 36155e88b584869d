"""Share-group administration, as operations of :class:`kproto.admin.AdminCore`
(mixed in): list share groups (ListGroups with the "share" type filter on
every broker), describe them (ShareGroupDescribe at the coordinator), their
offsets per share-partition (DescribeShareGroupOffsets), and the
incremental config changes share groups are tuned with
(IncrementalAlterConfigs on GROUP resources: ``share.auto.offset.reset``,
``share.record.lock.duration.ms``, ``share.delivery.count.limit``...).

Each operation returns an :class:`~kproto.admin.AdminHandle`, driven like
every other admin operation (retries, coordinator moves and the deadline
are the admin core's).
"""
from __future__ import annotations

from typing import Any, FrozenSet, NamedTuple, Optional, Tuple

from kproto import error_codes
from kproto.admin_acls import AclOperation
from kproto.cluster import TopicPartition
from kproto.errors import KafkaError

__all__ = ["ShareGroupAdmin", "ShareGroupListing", "ShareMemberDescription", "ShareGroupDescription",
           "SharePartitionOffset"]


class ShareGroupListing(NamedTuple):
    group_id: str
    state: Optional[str]                  # Empty, Stable, Dead
    coordinator: int = -1                 # the broker that listed it


class ShareMemberDescription(NamedTuple):
    member_id: str
    client_id: str
    host: str
    rack_id: Optional[str]
    member_epoch: int
    subscription: Tuple[str, ...]         # topic names
    assignment: Tuple[TopicPartition, ...]


class ShareGroupDescription(NamedTuple):
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: Tuple[ShareMemberDescription, ...]
    coordinator: Any                      # kproto.admin.Node
    #: What the caller may do with the group; None unless asked (``include_authorized_operations``).
    authorized_operations: Optional[FrozenSet[AclOperation]] = None


class SharePartitionOffset(NamedTuple):
    """Where a share group stands on one partition: ``start_offset`` (the
    share-partition start offset: records before it are done; -1 before the
    group first read the partition), the ``leader_epoch`` it was written
    in, and ``lag`` (records not yet acknowledged; -1 when unknown)."""
    start_offset: int
    leader_epoch: int
    lag: int


class ShareGroupAdmin:
    """The share-group operations of AdminCore (a mixin: it uses the core's
    ``_op``, ``_submit``, ``_group_call``, ``_complete``... machinery, and
    imports kproto.admin inside its methods because that module mixes this
    class in)."""

    def list_share_groups(self, *, states=None, timeout_ms=None, now):
        """[ShareGroupListing] of every broker (ListGroups v5+, type filter
        "share"); ``states`` keeps groups in these states only."""
        from kproto.admin import NODE, _Call
        op = self._op("list_share_groups", ["groups"], now, timeout_ms, single=True)
        found: dict = {}
        left: dict = {}
        wanted = None if not states else {s.lower() for s in states}
        core = self

        class ListCall(_Call):
            def build(call, core_, node):
                # Brokers before ListGroups v5 know no share groups: they list none.
                return {"states_filter": [], "types_filter": ["share"]}

            def handle(call, core_, body, now):
                code = body.get("error_code", 0)
                if code:
                    err = error_codes.error_for_code(code, None, f"ListGroups on node {call.node}")
                    if err.retriable:
                        core._retry(call, err, now)
                    else:
                        core._fail_call(call, err)
                    return
                for g in body.get("groups") or []:
                    if (g.get("group_type") or g.get("protocol_type")) == "share":
                        found[g["group_id"]] = ShareGroupListing(g["group_id"], g.get("group_state") or None,
                                                                 call.node)
                left.pop(call.node, None)
                if not left:
                    listing = [g for g in found.values() if wanted is None or (g.state or "").lower() in wanted]
                    core._complete(op, "groups", value=sorted(listing))

        self._ask_every_broker(op, "groups", left,
                               lambda n: ListCall(op, "ListGroups", ["groups"], target=NODE, node=n))
        return op

    def describe_share_groups(self, group_ids, *, include_authorized_operations=False, timeout_ms=None, now):
        """{group: ShareGroupDescription} (ShareGroupDescribe at each group's
        coordinator); a group that does not exist fails with
        GroupIdNotFoundError. ``include_authorized_operations``: each
        description's ``authorized_operations`` are what the caller may do
        with the group (else None)."""
        from kproto.admin import _no_dups
        groups = list(group_ids)
        _no_dups(groups, "describe_share_groups")
        op = self._op("describe_share_groups", groups, now, timeout_ms)
        return self._describe_each_group(op, "ShareGroupDescribe", "share group", _share_group_description,
                                         include_authorized_operations)

    def list_share_group_offsets(self, group_id, partitions=None, *, timeout_ms=None, now):
        """{TopicPartition: SharePartitionOffset} of ``group_id``: every
        partition it has state for, or ``partitions``."""
        op = self._op("list_share_group_offsets", [group_id], now, timeout_ms, single=True)
        g = group_id
        topics = None
        if partitions is not None:
            by: dict = {}
            for tp in partitions:
                by.setdefault(tp[0], []).append(tp[1])
            topics = [{"topic_name": t, "partitions": sorted(ps)} for t, ps in sorted(by.items())]

        def build(node, call=None):
            return {"groups": [{"group_id": g, "topics": topics}]}

        def handle(call, body, now):
            gb = next((x for x in body.get("groups") or [] if x.get("group_id") == g), None)
            if gb is None:
                self._fail_call(call, KafkaError(f"DescribeShareGroupOffsets did not answer for group {g!r}"))
                return
            if self._group_error(call, gb.get("error_code", 0), gb.get("error_message"),
                                 f"share offsets of group {g!r}", now):
                return
            out = {}
            for t in gb.get("topics") or []:
                for p in t.get("partitions") or []:
                    if p.get("error_code", 0):
                        self._fail_call(call, error_codes.error_for_code(
                            p["error_code"], p.get("error_message"),
                            f"share offset of {t['topic_name']}-{p['partition_index']} for group {g!r}"))
                        return
                    out[TopicPartition(t["topic_name"], p["partition_index"])] = SharePartitionOffset(
                        p["start_offset"], p.get("leader_epoch", -1), p.get("lag", -1))
            self._complete(op, g, value=dict(sorted(out.items())))

        self._group_call(op, g, "DescribeShareGroupOffsets", build, handle)
        return op

    def incremental_alter_configs(self, changes, *, validate_only=False, timeout_ms=None, now):
        """Change settings of config resources, leaving the others as they
        are: ``{ConfigResource: {name: value, None to return it to its
        default, or an AlterConfigOp (APPEND / SUBTRACT list values)}}``;
        one item per resource. Broker resources go to that
        broker; topics and groups (``ConfigResource.group(g)``: a share or
        consumer group's settings) to any broker."""
        from kproto.admin import ConfigResource, _no_dups
        from kproto.admin_configs import incremental_config
        resources = [r if isinstance(r, ConfigResource) else ConfigResource(*r) for r in changes]
        _no_dups(resources, "incremental_alter_configs")
        entries = {r: [incremental_config(r, name, change) for name, change in dict(changes[k]).items()]
                   for r, k in zip(resources, changes)}
        op = self._op("incremental_alter_configs", resources, now, timeout_ms)

        def build(node, call=None):
            return {"validate_only": validate_only, "resources": [{
                "resource_type": r.type, "resource_name": r.name, "configs": entries[r]} for r in call.keys]}

        def handle(call, body, now):
            for res in body.get("responses") or []:
                key = ConfigResource(res["resource_type"], res["resource_name"])
                if key not in call.keys:
                    continue
                code = res.get("error_code", 0)
                self._complete(op, key, value=None, error=error_codes.error_for_code(
                    code, res.get("error_message"), f"alter configs of {key}") if code else None)
            self._unanswered(call, op, "IncrementalAlterConfigs")

        self._per_resource(op, "IncrementalAlterConfigs", resources, build, handle)
        return op


def _share_group_description(d: dict, coordinator) -> ShareGroupDescription:
    """A ShareGroupDescribe answer's group entry, typed."""
    members = tuple(ShareMemberDescription(
        m["member_id"], m.get("client_id") or "", m.get("client_host") or "", m.get("rack_id"),
        m.get("member_epoch", -1), tuple(m.get("subscribed_topic_names") or ()),
        tuple(sorted(TopicPartition(t["topic_name"], p)
                     for t in (m.get("assignment") or {}).get("topic_partitions") or ()
                     for p in t["partitions"])))
        for m in d.get("members") or [])
    return ShareGroupDescription(d["group_id"], d.get("group_state") or "", d.get("group_epoch", -1),
                                 d.get("assignment_epoch", -1), d.get("assignor_name") or "", members, coordinator)
