"""Cluster and replica administration, as operations of
:class:`kproto.admin.AdminCore` (mixed in), routed as Java's Admin routes them:

* ``describe_topics``: DescribeTopicPartitions (KIP-966), paginated (the
  broker answers at most ``partition_size_limit_per_response`` partitions
  and a cursor to go on from), where the broker has it; Metadata elsewhere;
* ``describe_log_dirs`` / ``alter_replica_log_dirs``: to each broker named;
* ``elect_leaders``, ``alter_partition_reassignments``,
  ``list_partition_reassignments``, ``update_features``: to the controller
  (in KRaft: the broker Metadata names, which forwards them);
* ``describe_features``: ApiVersions to any broker (its supported and
  finalized features);
* ``describe_metadata_quorum``: DescribeQuorum for ``__cluster_metadata``
  to any broker (which forwards it to the active controller), or with
  ``bootstrap.controllers`` to the active controller.
"""
from __future__ import annotations

import enum
import uuid
from typing import Dict, Iterable, Mapping, NamedTuple, Optional, Tuple

from kproto import error_codes
from kproto._admin_mixin import AdminMixin
from kproto.cluster import TopicPartition
from kproto.errors import KafkaError, UnsupportedVersionError

__all__ = ["ClusterAdmin", "ElectionType", "TopicPartitionReplica", "ReplicaInfo", "LogDirDescription",
           "PartitionReassignment", "ReplicaLogDirInfo",
           "FinalizedVersionRange", "SupportedVersionRange", "FeatureMetadata",
           "FeatureUpdate", "UpgradeType", "QuorumInfo", "ReplicaState"]

#: Java's default DescribeTopicPartitions page size (DescribeTopicsOptions.partitionSizeLimitPerResponse).
PARTITION_SIZE_LIMIT = 2000
_METADATA_TOPIC = "__cluster_metadata"
_LEADER_NOT_AVAILABLE = 5
_UNKNOWN_TOPIC_ID = 100


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


class UpgradeType(enum.IntEnum):
    """Java's ``FeatureUpdate.UpgradeType``."""
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


class TopicPartitionReplica(NamedTuple):
    """The replica of a partition on one broker."""
    topic: str
    partition: int
    broker_id: int


class ReplicaInfo(NamedTuple):
    size: int
    offset_lag: int
    is_future: bool                       # a replica being moved to this log dir


class LogDirDescription(NamedTuple):
    error: Optional[KafkaError]           # e.g. KafkaStorageError for an offline log dir
    replica_infos: Dict[TopicPartition, ReplicaInfo]
    total_bytes: Optional[int]            # None: the broker did not say (before v4)
    usable_bytes: Optional[int]


class ReplicaLogDirInfo(NamedTuple):
    """Where a replica lives on its broker (Java's ReplicaLogDirInfo): its log
    dir and lag, and, while it moves, the future dir and that copy's lag.
    None/-1: not there (e.g. no such replica on that broker)."""
    current_replica_log_dir: Optional[str]
    current_replica_offset_lag: int
    future_replica_log_dir: Optional[str]
    future_replica_offset_lag: int


class PartitionReassignment(NamedTuple):
    replicas: Tuple[int, ...]
    adding_replicas: Tuple[int, ...]
    removing_replicas: Tuple[int, ...]


class FinalizedVersionRange(NamedTuple):
    min_version_level: int
    max_version_level: int


class SupportedVersionRange(NamedTuple):
    min_version: int
    max_version: int


class FeatureMetadata(NamedTuple):
    finalized_features: Dict[str, FinalizedVersionRange]
    finalized_features_epoch: Optional[int]
    supported_features: Dict[str, SupportedVersionRange]


class FeatureUpdate(NamedTuple):
    """Set a feature's finalized level (0 with a downgrade type: remove it)."""
    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


class ReplicaState(NamedTuple):
    replica_id: int
    replica_directory_id: object          # uuid.UUID, or None
    log_end_offset: int
    last_fetch_timestamp: Optional[int]   # None: unknown (-1)
    last_caught_up_timestamp: Optional[int]


class QuorumInfo(NamedTuple):
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: Tuple[ReplicaState, ...]
    observers: Tuple[ReplicaState, ...]
    nodes: Dict[int, Tuple[Tuple[str, str, int], ...]]   # {node: ((listener, host, port), ...)}


def _error(code, message, context):
    return error_codes.error_for_code(code, message, context) if code else None


def _top_error(core, call, body, context) -> bool:
    """Fail ``call`` on the response's top-level error; True when it did."""
    code = body.get("error_code", 0)
    if not code:
        return False
    err = error_codes.error_for_code(code, body.get("error_message"), context)
    if code == 41:          # NOT_CONTROLLER: re-route
        core._retry(call, err, call.request.completed_at if call.request else 0, moved=True)
    else:
        core._fail_call(call, err)
    return True


def _replica(r) -> ReplicaState:
    def ts(v):
        return None if v is None or v < 0 else v
    d = r.get("replica_directory_id")
    return ReplicaState(r["replica_id"], None if d is None or d.int == 0 else d, r.get("log_end_offset", -1),
                        ts(r.get("last_fetch_timestamp", -1)), ts(r.get("last_caught_up_timestamp", -1)))


def _by_topic(tps):
    by: Dict[str, list] = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return sorted((t, sorted(ps)) for t, ps in by.items())


class ClusterAdmin(AdminMixin):
    """The cluster operations of AdminCore (a mixin)."""

    # -- topics ------------------------------------------------------------------------------
    def describe_topics(self, topics, *, partition_size_limit_per_response=PARTITION_SIZE_LIMIT,
                        include_authorized_operations=False, timeout_ms=None, now):
        """{name: TopicDescription}; one item per topic. UNKNOWN_TOPIC_OR_PARTITION
        fails it, except for a topic this core created recently: that one is
        retried within the deadline (the brokers learn of a new topic a moment
        after CreateTopics answers). DescribeTopicPartitions, page by page,
        where the broker has it (``op.pages`` counts the pages); else Metadata.
        A topic given by id (a ``uuid.UUID``, as TopicDescription.topic_id;
        Java's ``TopicCollection.ofTopicIds``) is its own item, described by
        a Metadata v12+ request naming the ids; an id no topic has fails with
        UnknownTopicIdError naming it. ``include_authorized_operations``: each
        description's ``authorized_operations`` are what the caller may do
        with the topic (else None; DescribeTopicPartitions always answers
        them, Metadata when asked)."""
        from kproto.admin import NODE, _Call, _no_dups
        topics = list(topics)
        _no_dups(topics, "describe_topics")
        bad = [t for t in topics if not (isinstance(t, uuid.UUID) or isinstance(t, str) and t)]
        if bad:
            raise ValueError(f"describe_topics: {bad[0]!r} is neither a topic name (a non-empty str) "
                             f"nor a topic id (uuid.UUID)")
        if partition_size_limit_per_response < 1:
            raise ValueError("describe_topics: partition_size_limit_per_response must be >= 1")
        op = self._op("describe_topics", topics, now, timeout_ms)
        ids = [t for t in topics if isinstance(t, uuid.UUID)]
        topics = [t for t in topics if not isinstance(t, uuid.UUID)]
        include = bool(include_authorized_operations)
        if ids:
            self._describe_topic_ids(op, ids, include)
        op.pages = 0
        core = self
        gathered: Dict[str, list] = {}        # topic -> partitions of the pages so far

        class Describe(_Call):
            cursor = None

            def build(call, core_, node):
                if call.cursor is None and core.client.api_version(node, "DescribeTopicPartitions") is None:
                    call.api = "Metadata"
                    return {"topics": [{"name": n} for n in call.keys], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": include}
                call.api = "DescribeTopicPartitions"
                return {"topics": [{"name": n} for n in sorted(call.keys)],
                        "response_partition_limit": partition_size_limit_per_response,
                        "cursor": call.cursor}

            def handle(call, core_, body, now):
                op.pages += 1
                if call.api == "Metadata":
                    core._seen_metadata(body, now)
                more = body.get("next_cursor")
                again = []
                answered = set()
                for t in body.get("topics") or []:
                    n = t.get("name")
                    if n not in call.keys or op.items[n].done:
                        continue
                    answered.add(n)
                    code = t.get("error_code", 0)
                    if code and core._propagating(n, code, now):     # being created
                        again.append(n)
                        continue
                    if code:
                        core._complete(op, n, error=error_codes.error_for_code(
                            code, None, f"describe topic {n!r}"))
                        continue
                    gathered.setdefault(n, []).extend(t.get("partitions") or ())
                    if more is None or n != more["topic_name"]:
                        core._complete(op, n, value=core._topic_description(t, gathered.pop(n), include))
                if more is not None:
                    rest = [n for n in call.keys if not op.items[n].done and n not in again]
                    nxt = Describe(op, "DescribeTopicPartitions", rest, target=NODE, node=call.node,
                                   tries=call.tries, not_before=now, drops=call.drops)
                    nxt.cursor = {"topic_name": more["topic_name"], "partition_index": more["partition_index"]}
                    core._submit(nxt)
                    return
                for n in call.keys:
                    if n not in answered and n not in again and not op.items[n].done:
                        if core._propagating(n, 3, now):
                            again.append(n)
                            continue
                        core._complete(op, n, error=error_codes.error_for_code(
                            3, "the broker did not describe it", f"describe topic {n!r}"))
                if again:
                    core._retry(call, error_codes.error_for_code(_LEADER_NOT_AVAILABLE, None, "describe topics"),
                                now, keys=again)

            @staticmethod
            def on_moved(call, now2):
                # (the engine calls call.on_moved(call, now): a static method)
                # A page's broker went away: start the remaining topics over anywhere.
                for n in call.keys:
                    gathered.pop(n, None)
                fresh = Describe(op, "DescribeTopicPartitions", call.keys, tries=call.tries,
                                 not_before=call.next_try_at, drops=call.drops)
                fresh.last_error = call.last_error
                core._submit(fresh)

        if topics:
            self._submit(Describe(op, "DescribeTopicPartitions", topics))
        return op

    def _describe_topic_ids(self, op, ids, include):
        """Metadata naming topics by id only (v12+: the name null), one call
        for every id of ``op``; the answer's topics are found by id."""
        from kproto.admin import _SelfCall
        core = self

        def build(node, call=None):
            version = core.client.api_version(node, "Metadata") or 0
            if version < 12:
                raise UnsupportedVersionError(
                    f"describing topics by id needs Metadata v12 or later (KIP-516); node {node} "
                    f"offers v{version}")
            return {"topics": [{"topic_id": i, "name": None} for i in call.keys],
                    "allow_auto_topic_creation": False, "include_topic_authorized_operations": include}

        def handle(call, body, now):
            core._seen_metadata(body, now)
            answered = {t.get("topic_id"): t for t in body.get("topics") or ()}
            for i in call.keys:
                t = answered.get(i)
                code = _UNKNOWN_TOPIC_ID if t is None else t.get("error_code", 0)
                if code:
                    core._complete(op, i, error=error_codes.error_for_code(
                        code, "no topic has this id" if code == _UNKNOWN_TOPIC_ID else None,
                        f"describe topic id {i}"))
                else:
                    core._complete(op, i, value=core._topic_description(t, t.get("partitions") or (), include))

        self._submit(_SelfCall(op, "Metadata", ids, build, handle))

    @staticmethod
    def _topic_description(t, partitions, include_authorized_operations):
        from kproto.admin import PartitionInfo, TopicDescription, _asked_operations, _topic_id
        parts = tuple(PartitionInfo(
            p["partition_index"], p["leader_id"] if p["leader_id"] >= 0 else None,
            tuple(p.get("replica_nodes") or ()), tuple(p.get("isr_nodes") or ()),
            tuple(p.get("offline_replicas") or ()), p.get("leader_epoch", -1))
            for p in sorted(partitions, key=lambda p: p["partition_index"]))
        return TopicDescription(t["name"], _topic_id(t.get("topic_id")), bool(t.get("is_internal")), parts,
                                _asked_operations(t, include_authorized_operations))

    # -- log dirs ------------------------------------------------------------------------------
    def describe_log_dirs(self, broker_ids: Iterable[int], *, timeout_ms=None, now):
        """{broker: {log dir path: LogDirDescription}} (DescribeLogDirs to each broker)."""
        from kproto.admin import NODE, _no_dups, _SelfCall
        brokers = [int(b) for b in broker_ids]
        _no_dups(brokers, "describe_log_dirs")
        op = self._op("describe_log_dirs", brokers, now, timeout_ms)

        def build(node, call=None):
            return {"topics": None}

        def handle(call, body, now):
            b = call.keys[0]
            code = body.get("error_code", 0)
            if code:
                self._complete(op, b, error=error_codes.error_for_code(code, None, f"describe log dirs of {b}"))
                return
            dirs = {}
            for r in body.get("results") or []:
                replicas = {TopicPartition(t["name"], p["partition_index"]):
                            ReplicaInfo(p["partition_size"], p["offset_lag"], bool(p["is_future_key"]))
                            for t in r.get("topics") or [] for p in t.get("partitions") or []}
                total, usable = r.get("total_bytes", -1), r.get("usable_bytes", -1)
                dirs[r["log_dir"]] = LogDirDescription(
                    _error(r.get("error_code", 0), None, f"log dir {r['log_dir']} of broker {b}"),
                    dict(sorted(replicas.items())), None if total < 0 else total, None if usable < 0 else usable)
            self._complete(op, b, value=dirs)

        for b in brokers:
            self._submit(_SelfCall(op, "DescribeLogDirs", [b], build, handle, target=NODE, node=b))
        return op

    def describe_replica_log_dirs(self, replicas: Iterable[TopicPartitionReplica], *, timeout_ms=None, now):
        """{TopicPartitionReplica: ReplicaLogDirInfo}: the log dir of each
        replica on its broker, and the future one while it moves
        (DescribeLogDirs for those partitions, to each broker)."""
        from kproto.admin import NODE, _no_dups, _SelfCall
        wanted = [TopicPartitionReplica(*r) for r in replicas]
        _no_dups(wanted, "describe_replica_log_dirs")
        op = self._op("describe_replica_log_dirs", wanted, now, timeout_ms)
        by_broker: Dict[int, list] = {}
        for r in wanted:
            by_broker.setdefault(r.broker_id, []).append(r)

        def build(node, call=None):
            return {"topics": [{"topic": t, "partitions": ps} for t, ps in
                               _by_topic(TopicPartition(r.topic, r.partition) for r in call.keys)]}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._fail_call(call, error_codes.error_for_code(code, None,
                                                                 f"describe log dirs of broker {call.node}"))
                return
            found: Dict[TopicPartitionReplica, dict] = {r: {} for r in call.keys}
            for d in body.get("results") or []:
                if d.get("error_code", 0):
                    continue                     # an offline log dir holds nothing we can report
                for t in d.get("topics") or []:
                    for p in t.get("partitions") or []:
                        r = TopicPartitionReplica(t["name"], p["partition_index"], call.node)
                        if r in found:
                            found[r]["future" if p["is_future_key"] else "current"] = (d["log_dir"], p["offset_lag"])
            for r, where in found.items():
                cur, fut = where.get("current", (None, -1)), where.get("future", (None, -1))
                self._complete(op, r, value=ReplicaLogDirInfo(cur[0], cur[1], fut[0], fut[1]))

        for b, rs in sorted(by_broker.items()):
            self._submit(_SelfCall(op, "DescribeLogDirs", rs, build, handle, target=NODE, node=b))
        return op

    def alter_replica_log_dirs(self, assignments: Mapping[TopicPartitionReplica, str], *, timeout_ms=None, now):
        """Move replicas between a broker's log dirs: {TopicPartitionReplica:
        absolute log dir path} (AlterReplicaLogDirs to each broker); one item
        per replica. An unknown path fails with LogDirNotFoundError."""
        from kproto.admin import NODE, _SelfCall
        moves = {TopicPartitionReplica(*r): str(p) for r, p in assignments.items()}
        op = self._op("alter_replica_log_dirs", list(moves), now, timeout_ms)
        by_broker: Dict[int, list] = {}
        for r in moves:
            by_broker.setdefault(r.broker_id, []).append(r)

        def build(node, call=None):
            by_path: Dict[str, list] = {}
            for r in call.keys:
                by_path.setdefault(moves[r], []).append(TopicPartition(r.topic, r.partition))
            return {"dirs": [{"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in _by_topic(tps)]}
                             for path, tps in sorted(by_path.items())]}

        def handle(call, body, now):
            for t in body.get("results") or []:
                for p in t.get("partitions") or []:
                    r = TopicPartitionReplica(t["topic_name"], p["partition_index"], call.node)
                    if r in op.items:
                        self._complete(op, r, error=_error(p["error_code"], None,
                                                           f"move {r.topic}-{r.partition} on broker {r.broker_id}"))
            self._unanswered(call, op, "AlterReplicaLogDirs")

        for b, replicas in sorted(by_broker.items()):
            self._submit(_SelfCall(op, "AlterReplicaLogDirs", replicas, build, handle, target=NODE, node=b))
        return op

    # -- leaders and reassignments ---------------------------------------------------------------
    def elect_leaders(self, election_type=ElectionType.PREFERRED, partitions: Optional[Iterable] = None, *,
                      timeout_ms=None, now):
        """Elect leaders (ElectLeaders at the controller): for ``partitions``
        one item per TopicPartition (value None; a partition whose preferred
        replica already leads fails with ElectionNotNeededError, as in Java);
        ``partitions`` None: every partition, one item "partitions" whose value
        is {TopicPartition: None or the error} (Java's ``partitions()``)."""
        from kproto.admin import CONTROLLER, _no_dups, _SelfCall
        etype = ElectionType(election_type)
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        if tps is not None:
            _no_dups(tps, "elect_leaders")
        op = self._op("elect_leaders", ["partitions"] if tps is None else tps, now, timeout_ms,
                      single=tps is None)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"election_type": int(etype), "timeout_ms": wait, "topic_partitions": None if tps is None else
                    [{"topic": t, "partitions": ps} for t, ps in _by_topic(call.keys)]}

        def handle(call, body, now):
            if _top_error(self, call, body, "elect leaders"):
                return
            out = {}
            for t in body.get("replica_election_results") or []:
                for p in t.get("partition_result") or []:
                    tp = TopicPartition(t["topic"], p["partition_id"])
                    out[tp] = _error(p["error_code"], p.get("error_message"), f"elect a leader for {t['topic']}-"
                                                                              f"{p['partition_id']}")
            if tps is None:
                self._complete(op, "partitions", value=dict(sorted(out.items())))
                return
            for tp, err in out.items():
                if tp in op.items:
                    self._complete(op, tp, error=err)
            self._unanswered(call, op, "ElectLeaders")

        if tps is None or tps:
            self._submit(_SelfCall(op, "ElectLeaders", list(op.items), build, handle, target=CONTROLLER))
        return op

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Optional[Iterable[int]]], *,
                                      timeout_ms=None, now):
        """Start moving partitions to {TopicPartition: [broker ids]}, or cancel
        a move in progress ({tp: None}; none in progress:
        NoReassignmentInProgressError); AlterPartitionReassignments at the
        controller, one item per partition."""
        from kproto.admin import CONTROLLER, _SelfCall
        targets = {TopicPartition(*tp): None if r is None else [int(b) for b in r]
                   for tp, r in reassignments.items()}
        op = self._op("alter_partition_reassignments", list(targets), now, timeout_ms)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"timeout_ms": wait, "allow_replication_factor_change": True, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "replicas": targets[TopicPartition(t, p)]}
                                           for p in ps]} for t, ps in _by_topic(call.keys)]}

        def handle(call, body, now):
            if _top_error(self, call, body, "alter partition reassignments"):
                return
            for t in body.get("responses") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    if tp in op.items:
                        self._complete(op, tp, error=_error(p["error_code"], p.get("error_message"),
                                                            f"reassign {tp.topic}-{tp.partition}"))
            self._unanswered(call, op, "AlterPartitionReassignments")

        if targets:
            self._submit(_SelfCall(op, "AlterPartitionReassignments", list(targets), build, handle,
                                   target=CONTROLLER))
        return op

    def list_partition_reassignments(self, partitions: Optional[Iterable[TopicPartition]] = None, *,
                                     timeout_ms=None, now):
        """{TopicPartition: PartitionReassignment} of the moves in progress (of
        ``partitions``, or all); ListPartitionReassignments at the controller."""
        from kproto.admin import CONTROLLER, _SelfCall
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        op = self._op("list_partition_reassignments", ["reassignments"], now, timeout_ms, single=True)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"timeout_ms": wait, "topics": None if tps is None else
                    [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(tps)]}

        def handle(call, body, now):
            if _top_error(self, call, body, "list partition reassignments"):
                return
            out = {TopicPartition(t["name"], p["partition_index"]): PartitionReassignment(
                tuple(p["replicas"]), tuple(p["adding_replicas"]), tuple(p["removing_replicas"]))
                for t in body.get("topics") or [] for p in t.get("partitions") or []}
            self._complete(op, "reassignments", value=dict(sorted(out.items())))

        self._submit(_SelfCall(op, "ListPartitionReassignments", op.items, build, handle, target=CONTROLLER))
        return op

    # -- features and the quorum ---------------------------------------------------------------
    def describe_features(self, *, timeout_ms=None, now):
        """FeatureMetadata: the finalized feature levels of the cluster and the
        ones the broker supports (ApiVersions to any broker)."""
        from kproto.admin import _SelfCall
        op = self._op("describe_features", ["features"], now, timeout_ms, single=True)

        def build(node, call=None):
            from kproto.connection import client_software_version
            return {"client_software_name": "kproto", "client_software_version": client_software_version()}

        def handle(call, body, now):
            if _top_error(self, call, body, "describe features"):
                return
            epoch = body.get("finalized_features_epoch", -1)
            self._complete(op, "features", value=FeatureMetadata(
                {f["name"]: FinalizedVersionRange(f["min_version_level"], f["max_version_level"])
                 for f in sorted(body.get("finalized_features") or [], key=lambda f: f["name"])},
                None if epoch is None or epoch < 0 else epoch,
                {f["name"]: SupportedVersionRange(f["min_version"], f["max_version"])
                 for f in sorted(body.get("supported_features") or [], key=lambda f: f["name"])}))

        self._submit(_SelfCall(op, "ApiVersions", op.items, build, handle))
        return op

    def update_features(self, updates: Mapping[str, FeatureUpdate], *, validate_only=False, timeout_ms=None,
                        now):
        """Change finalized feature levels: {feature: FeatureUpdate(level,
        upgrade_type)} (UpdateFeatures at the controller); one item per feature."""
        from kproto.admin import CONTROLLER, _SelfCall
        ups = {}
        for name, u in updates.items():
            if not isinstance(u, FeatureUpdate):
                raise TypeError(f"update_features: {name!r}: expected a FeatureUpdate, not {u!r}")
            if u.max_version_level < 0:
                raise ValueError(f"update_features: {name!r}: the level must be >= 0")
            if u.max_version_level == 0 and u.upgrade_type == UpgradeType.UPGRADE:
                raise ValueError(f"update_features: {name!r}: level 0 removes the feature: a downgrade type "
                                 f"(SAFE_DOWNGRADE or UNSAFE_DOWNGRADE) is needed")
            ups[name] = u
        op = self._op("update_features", list(ups), now, timeout_ms)
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms

        def build(node, call=None):
            return {"timeout_ms": wait, "validate_only": validate_only, "feature_updates": [
                {"feature": n, "max_version_level": ups[n].max_version_level,
                 "allow_downgrade": ups[n].upgrade_type != UpgradeType.UPGRADE,
                 "upgrade_type": int(ups[n].upgrade_type)} for n in call.keys]}

        def handle(call, body, now):
            if _top_error(self, call, body, "update features"):
                return
            for r in body.get("results") or []:
                if r["feature"] in op.items:
                    self._complete(op, r["feature"], error=_error(r["error_code"], r.get("error_message"),
                                                                  f"update feature {r['feature']!r}"))
            # UpdateFeatures v2+ answers only the top-level error: no results means all succeeded.
            for n in call.keys:
                self._complete(op, n)

        if ups:
            self._submit(_SelfCall(op, "UpdateFeatures", list(ups), build, handle, target=CONTROLLER))
        return op

    def describe_metadata_quorum(self, *, timeout_ms=None, now):
        """QuorumInfo of the KRaft metadata quorum: leader, epoch, high
        watermark, voters and observers with their log end offsets (DescribeQuorum
        to any broker, forwarded to the active controller)."""
        from kproto.admin import _SelfCall
        op = self._op("describe_metadata_quorum", ["quorum"], now, timeout_ms, single=True)

        def build(node, call=None):
            return {"topics": [{"topic_name": _METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}

        def handle(call, body, now):
            if _top_error(self, call, body, "describe the metadata quorum"):
                return
            p = next((p for t in body.get("topics") or [] if t["topic_name"] == _METADATA_TOPIC
                      for p in t.get("partitions") or [] if p["partition_index"] == 0), None)
            if p is None:
                self._fail_call(call, KafkaError("describe_metadata_quorum: DescribeQuorum did not describe "
                                                 f"{_METADATA_TOPIC}-0"))
                return
            if p.get("error_code", 0):
                self._fail_call(call, error_codes.error_for_code(p["error_code"], p.get("error_message"),
                                                                 "describe the metadata quorum"))
                return
            nodes = {n["node_id"]: tuple((ln["name"], ln["host"], ln["port"]) for ln in n.get("listeners") or ())
                     for n in body.get("nodes") or []}
            self._complete(op, "quorum", value=QuorumInfo(
                p["leader_id"], p["leader_epoch"], p["high_watermark"],
                tuple(_replica(r) for r in p.get("current_voters") or ()),
                tuple(_replica(r) for r in p.get("observers") or ()), dict(sorted(nodes.items()))))

        self._submit(_SelfCall(op, "DescribeQuorum", op.items, build, handle,
                               target=self._broker_or_active_controller))
        return op
