"""``ConsumerCore``: the whole Kafka consumer as a sans-IO state machine.

It composes the pieces - config, metadata (:mod:`kproto.cluster`),
connections (:mod:`kproto.client`), coordinator discovery, group membership,
offset commits, positions and the fetcher - behind one object with the same
driver contract as :class:`~kproto.producer.core.ProducerCore`::

    core = ConsumerCore({"bootstrap.servers": "h:9092", "group.id": "g"})
    core.subscribe(["t"], now)   # or subscribe_pattern(regex, now) / assign([tp, ...], now)
    for action in core.poll(now):            # Connect(node, host, port) | Close(node, reason)
        ...
    # bytes: core.nodes_with_output(), core.output(node), core.sent(node, n, now)
    core.connected(node, now); core.received(node, data, now); core.disconnected(node, now, exc)
    core.next_deadline(now)                  # absolute ms, or None
    core.poll_called(now)                    # the application polls (max.poll.interval.ms, auto-commit)
    records = core.drain(max_records)        # Record objects; raises pending errors once
    for event in core.events(): ...          # PartitionsAssigned / Revoked / Lost, GroupFatalError
    core.rebalance_listener_done(now)        # after running the listener for those events

Routing of the group machines' :class:`~kproto.consumer.OutgoingRequest`:
``ANY`` goes to the least loaded node, ``COORDINATOR`` to the coordinator's
own connection (``CoordinatorInfo.connection_id``, registered as a node of
its own); a negotiated version below ``min_version`` fails the request with
UnsupportedVersionError. Requests that cannot be sent yet wait in an unsent
queue for at most request.timeout.ms (Java's ConsumerNetworkClient).

Positions of newly assigned partitions come from the committed offsets
(OffsetFetch), else from auto.offset.reset (ListOffsets). Revocations hold
the next JoinGroup until the driver reports the rebalance listener ran
(:meth:`ConsumerCore.rebalance_listener_done`), so the listener can still
commit with the current generation from another thread.
"""
from __future__ import annotations

import collections
import logging
import random
import re
import uuid
from typing import Optional

from kproto import error_codes
from kproto.backoff import RateLimitedLog, RetryBackoff
from kproto.client import DriverIO, network_for
from kproto.cluster import ClusterMetadata, TopicPartition, topic_authorization_error, validate_topic_name
from kproto.consumer import ANY, COORDINATOR_NODE, OffsetAndMetadata
from kproto.consumer.commits import OffsetCommitter
from kproto.consumer.config import parse_consumer_config
from kproto.consumer.coordinator import CoordinatorFound, CoordinatorLost, GroupCoordinator
from kproto.consumer._fetch import FetchAnswer, decode_fetch_response
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.membership import (
    GroupError, GroupFatalError, GroupMembership, MetadataNeeded, PartitionsAssigned, PartitionsLost,
    PartitionsRevoked,
)
from kproto.consumer.membership_consumer import ConsumerProtocolMembership
from kproto.consumer.positions import (
    EARLIEST, LATEST, LIST_OFFSETS_EARLIEST, LIST_OFFSETS_LATEST, NoOffsetForPartitionError, Positions,
)
from kproto.errors import KafkaError, KafkaTimeoutError, RequestTimedOutError, UnsupportedVersionError
from kproto.client_metrics import network_metrics
from kproto.telemetry import MetricPoint, metric_name

__all__ = ["ConsumerCore", "OffsetsHandle", "OffsetAndTimestamp", "InvalidGroupIdError",
           "ConsumerClosedError", "OffsetsTimeoutError"]

log = logging.getLogger(__name__)
E = error_codes
_ZERO_UUID = uuid.UUID(int=0)


# The operation needs group.id (subscribe, commit, committed): raised as the
# broker's INVALID_GROUP_ID class, as Java throws InvalidGroupIdException.
InvalidGroupIdError = error_codes.InvalidGroupIdError


class ConsumerClosedError(KafkaError):
    """The consumer is closed."""


class OffsetsTimeoutError(KafkaTimeoutError):
    """An offsets lookup (ListOffsets) did not complete in time."""

    retriable = True


class OffsetAndTimestamp(tuple):
    """(offset, timestamp) found by offsets_for_times."""
    __slots__ = ()

    def __new__(cls, offset: int, timestamp: int) -> "OffsetAndTimestamp":
        return tuple.__new__(cls, (offset, timestamp))

    @property
    def offset(self) -> int:
        return self[0]

    @property
    def timestamp(self) -> int:
        return self[1]

    def __repr__(self) -> str:
        return f"OffsetAndTimestamp(offset={self[0]}, timestamp={self[1]})"


class OffsetsHandle:
    """A ListOffsets lookup: ``done``, ``error``, ``result()`` ->
    {TopicPartition: OffsetAndTimestamp or None (no such offset)}."""
    __slots__ = ("timestamps", "deadline", "done", "error", "_result", "_pending", "_in_flight",
                 "metadata_version")

    def __init__(self, timestamps, deadline):
        self.timestamps = timestamps
        self.deadline = deadline
        self.done = False
        self.error = None
        self._result = {}
        self._pending = set(timestamps)      # not yet answered
        self._in_flight = set()
        self.metadata_version = 0            # the metadata's version when the lookup began

    def result(self):
        if not self.done:
            raise RuntimeError("the lookup is not finished yet")
        if self.error is not None:
            raise self.error
        return dict(self._result)

    def _finish(self, error=None):
        if not self.done:
            self.done, self.error = True, error


class _ConsumerCluster(ClusterMetadata):
    """ClusterMetadata plus what only the consumer needs: topic ids (Fetch
    v13+), internal topics (pattern subscriptions) and all-topics requests."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.all_topics = False
        self.topic_ids: dict = {}
        self.internal_topics: set = set()

    def request_body(self, now) -> dict:
        body = super().request_body(now)
        if self.all_topics:
            body["topics"] = None                    # every topic (pattern subscription)
        return body

    def update(self, body: dict, now) -> None:
        super().update(body, now)
        for t in body.get("topics") or ():
            if t.get("error_code", 0):
                continue
            tid = t.get("topic_id")
            if tid is not None and tid != _ZERO_UUID:
                self.topic_ids[t["name"]] = tid
            if t.get("is_internal"):
                self.internal_topics.add(t["name"])

    def candidate_nodes(self) -> list:
        # Coordinator connections (extra nodes) are never "least loaded" candidates.
        return super().candidate_nodes()


class ConsumerCore(DriverIO):
    def __init__(self, config=None, *, rng=None, **kwargs):
        from kproto.config import Config
        cfg = config if isinstance(config, Config) else parse_consumer_config(config, **kwargs)
        self.config = cfg
        self.rng = rng or random.Random()
        # Java: allow.auto.create.topics applies to the topics of subscribe()
        # only; assign() and lookups never create a topic (see _set_mode).
        self.cluster, self.client = network_for(
            cfg, rng=self.rng, max_in_flight=5, allow_auto_topic_creation=False,
            cluster_class=_ConsumerCluster, telemetry_type="consumer")
        self.client.on_metadata = self._on_metadata
        if self.client.telemetry is not None:
            self.client.telemetry.extra_metrics = self._telemetry_metrics
        self.positions = Positions(cfg.auto_offset_reset)
        self.fetcher = Fetcher(
            self.positions, fetch_min_bytes=cfg.fetch_min_bytes, fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            fetch_max_bytes=cfg.fetch_max_bytes, max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            isolation_level=cfg.isolation_level, check_crcs=cfg.check_crcs,
            max_poll_records=cfg.max_poll_records, client_rack=cfg.client_rack or "")
        cluster = self.cluster
        self.fetcher.leader_hint = lambda tp, answer, endpoints: cluster.apply_leader_hint(
            tp.topic, tp.partition, answer, endpoints)
        self.group_id = cfg.group_id
        self.coordinator = self.membership = self.committer = None
        if self.group_id is not None:
            self.coordinator = GroupCoordinator(
                self.group_id, retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms, request_timeout_ms=cfg.request_timeout_ms,
                rng=self.rng)
            self.coordinator.add_listener(self._on_coordinator_event)
            # The only place the group protocol matters: both machines have
            # one interface and emit the same events.
            if cfg.group_protocol == "consumer":
                self.membership = ConsumerProtocolMembership(
                    self.coordinator, max_poll_interval_ms=cfg.max_poll_interval_ms,
                    group_instance_id=cfg.group_instance_id, remote_assignor=cfg.group_remote_assignor,
                    retry_backoff_ms=cfg.retry_backoff_ms, request_timeout_ms=cfg.request_timeout_ms,
                    client_rack=cfg.client_rack or None, prepare_join=self._prepare_join)
            else:
                self.membership = GroupMembership(
                    self.coordinator, session_timeout_ms=cfg.session_timeout_ms,
                    heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                    max_poll_interval_ms=cfg.max_poll_interval_ms, group_instance_id=cfg.group_instance_id,
                    assignment_strategy=cfg.partition_assignment_strategy,
                    retry_backoff_ms=cfg.retry_backoff_ms, request_timeout_ms=cfg.request_timeout_ms,
                    client_rack=cfg.client_rack or None, prepare_join=self._prepare_join)
            self.committer = OffsetCommitter(
                self.coordinator, membership=None, enable_auto_commit=cfg.enable_auto_commit,
                auto_commit_interval_ms=cfg.auto_commit_interval_ms,
                default_api_timeout_ms=cfg.default_api_timeout_ms, retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms, positions=self.consumed_offsets, rng=self.rng)
        self.key_deserializer = cfg.key_deserializer
        self.value_deserializer = cfg.value_deserializer
        self.mode = None                       # None | "subscribe" | "pattern" | "assign"
        self._unsent: collections.deque = collections.deque()   # (OutgoingRequest, expiry)
        self._events = []                      # application events
        self._errors = []                      # raised once by the next drain
        # The topics in use that the last metadata answer (or a heartbeat)
        # refused: one error, replaced by each answer, raised once by the next
        # drain (Java's Metadata.maybeThrowAnyException).
        self._topic_error = None
        self._auth_fallback = None               # a heartbeat's refusal waiting for metadata to name topics
        self._revoked_states = {}              # revoked, listener not run yet: tp -> PartitionState
        self._revocation_pending = False
        self._committed_fetches = []           # (FetchHandle, set of tps)
        self._committed_pending = set()
        self._committed_retry_at = 0
        self._committed_backoff = RetryBackoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms, self.rng)
        self._committed_log = RateLimitedLog(log, GroupCoordinator.LOG_INTERVAL_MS)
        self._no_offset = set()                # 'none' reset strategy hit: wait for a seek
        self._lookups = []                     # OffsetsHandle
        self.data_ready = False                # a fetch response arrived (drivers: wake the app)
        # A round with nothing new must not walk every assigned partition (a
        # driver may run one per poll()): what the round derives from all of
        # them is kept under Positions.version. _unpositioned: (version,
        # needs_position() then); _assigned_topics: (version, topics);
        # _fetch_idle: what the last fetch plan saw when it left nothing
        # blocked (see _fetch), or None.
        self._unpositioned = (-1, [])
        self._assigned_topics = (-1, frozenset())
        self._fetch_idle = None
        # A Fetch's timeout, read once: each Config attribute is a failed
        # lookup and a __getattr__ call (~4k instructions), twice per answer.
        self._fetch_timeout_ms = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
        # _init_positions started a committed-offsets fetch after the
        # committer's turn in this round: the next round sends it, at once.
        self._round_again = False
        self.closing = False
        self.closed = False
        self._close_step = None
        self._close_commit = None
        self._close_deadline = None
        # Fetch requests with the final epoch sent by close and not answered
        # yet; the counts of those sent and of those the broker answered
        # without error (metrics(): fetch_sessions_closed_*)
        self._fetch_closes_pending = 0
        self._fetch_closes_sent = 0
        self._fetch_closes_answered = 0
        self._now = 0

    # == subscriptions ===================================================================
    def _need_group(self, what):
        if self.group_id is None:
            raise InvalidGroupIdError(f"{what} needs group.id in the consumer configuration")

    def _check_open(self):
        if self.closing or self.closed:
            raise ConsumerClosedError("the consumer is closed")

    def subscribe(self, topics, now) -> None:
        """Subscribe to these topics (group management)."""
        self._check_open()
        self._need_group("subscribe()")
        topics = [topics] if isinstance(topics, str) else list(topics)
        if self.mode == "assign":
            raise KafkaError("subscribe() after assign(): call unsubscribe() first")
        for t in topics:
            validate_topic_name(t)
        self._set_mode("subscribe")
        self.cluster.all_topics = False
        self.committer.membership = self.membership
        for t in topics:
            self.cluster.add_topic(t, now)
        self.membership.subscribe(topics, now)
        self.cluster.request_update()

    def subscribe_pattern(self, pattern, now) -> None:
        """Subscribe to every topic whose whole name matches ``pattern``
        (a regex string or a compiled pattern); metadata of all topics is
        fetched every metadata.max.age.ms to find new ones. With
        group.protocol=consumer the broker evaluates the pattern (RE2J
        syntax: see :func:`~kproto.consumer.membership_consumer.to_broker_regex`)."""
        self._check_open()
        self._need_group("subscribe()")
        if self.mode == "assign":
            raise KafkaError("subscribe() after assign(): call unsubscribe() first")
        pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        # first: the consumer protocol checks that the broker can evaluate it
        self.membership.subscribe_pattern(pattern, now)
        self._set_mode("pattern")
        self.cluster.all_topics = True
        self.committer.membership = self.membership
        self.cluster.request_update()

    def assign(self, partitions, now) -> None:
        """Manual assignment (no group management); replaces the previous one."""
        self._check_open()
        if self.mode in ("subscribe", "pattern"):
            raise KafkaError("assign() after subscribe(): call unsubscribe() first")
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            validate_topic_name(tp.topic)
        self._set_mode("assign" if tps else None)
        if self.committer is not None:
            self.committer.membership = None             # a "simple" group: generation -1
        keep = set(tps)
        self._drop_buffered(lambda tp: tp not in keep)
        self.positions.assign(tps)
        self._no_offset &= keep
        for tp in tps:
            self.cluster.add_topic(tp.topic, now)

    def unsubscribe(self, now) -> None:
        if self.mode in ("subscribe", "pattern"):
            self.membership.unsubscribe(now)
            self._process_membership_events(now)
        self._set_mode(None)
        self.cluster.all_topics = False
        self._drop_buffered(lambda tp: True)
        self.positions.assign([])

    def _set_mode(self, mode):
        """Switch the subscription mode, and with it whether our Metadata
        requests may create topics: as in Java, only the topics of a
        subscribe() are created (when allow.auto.create.topics and the
        broker allow it); an assign() of a missing topic must not create
        it, and a pattern subscription asks for every topic anyway."""
        self.mode = mode
        self._topic_error = self._auth_fallback = None     # about the topics used before
        self.cluster.allow_auto_topic_creation = (
            mode == "subscribe" and bool(self.config.allow_auto_create_topics))

    def _telemetry_metrics(self, now) -> list:
        """The consumer's own KIP-714 metrics (Java's names)."""
        return [MetricPoint(metric_name("consumer-coordinator-metrics", "assigned-partitions"),
                            len(self.positions.assigned()))]

    def metrics(self) -> dict:
        """The consumer's counters: the network client's
        (:func:`~kproto.client_metrics.network_metrics`), the partitions
        assigned and whether fetched records wait to be polled."""
        m = network_metrics(self.client)
        m["assigned_partitions"] = len(self.positions.assigned())
        m["records_buffered"] = self.fetcher.has_buffered()
        m["fetch_sessions_closed_sent"] = self._fetch_closes_sent
        m["fetch_sessions_closed_answered"] = self._fetch_closes_answered
        return m

    def assignment(self) -> set:
        return set(self.positions.assigned())

    def subscription(self) -> set:
        if self.membership is None or self.mode not in ("subscribe", "pattern"):
            return set()
        return set(self.membership.subscription)

    # == positions =======================================================================
    def _state(self, tp):
        tp = TopicPartition(*tp)
        st = self._revoked_states.get(tp)
        return st if st is not None else self.positions.state(tp)

    def seek(self, tp, offset: int, leader_epoch: int = -1) -> None:
        tp = TopicPartition(*tp)
        self.positions.seek(tp, offset, leader_epoch)
        self._no_offset.discard(tp)
        self._drop_buffered(lambda t: t == tp)

    def seek_to_beginning(self, partitions=None) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, partitions=None) -> None:
        self._seek_to(partitions, LATEST)

    def _seek_to(self, partitions, strategy):
        tps = self.positions.assigned() if partitions is None else [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            self.positions.request_reset(tp, strategy)
            self._no_offset.discard(tp)
        keep = set(tps)
        self._drop_buffered(lambda t: t in keep)

    def position(self, tp) -> Optional[int]:
        """The offset of the next record to hand out (None while unknown: poll
        on). Raises TopicAuthorizationFailedError while the broker refuses the
        topic (Java's position() throws it rather than time out)."""
        pos = self._state(tp).position
        if pos is None and self.cluster.topic_errors:
            refused = self.cluster.unauthorized_topics((tp[0],))
            if refused:
                raise topic_authorization_error(refused)
        return pos

    def pause(self, partitions) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self.positions.pause(tps)

    def resume(self, partitions) -> None:
        self.positions.resume([TopicPartition(*tp) for tp in partitions])

    def paused(self) -> set:
        return set(self.positions.paused())

    def lag(self, tp) -> Optional[int]:
        return self.positions.lag(TopicPartition(*tp))

    def consumed_offsets(self) -> dict:
        """{tp: OffsetAndMetadata(position)} of every partition with a position
        (what a commit without arguments and auto-commit commit)."""
        out = {}
        for tp in self.positions.assigned():
            st = self.positions.state(tp)
            if st.position is not None:
                out[tp] = OffsetAndMetadata(st.position, "", st.leader_epoch)
        for tp, st in self._revoked_states.items():
            if st.position is not None:
                out[tp] = OffsetAndMetadata(st.position, "", st.leader_epoch)
        return out

    # == commits ===========================================================================
    def commit_sync(self, offsets=None, now=0, timeout_ms=None):
        """Commit ``offsets`` ({tp: offset or OffsetAndMetadata}; default: the
        consumed positions); returns a CommitHandle to wait on."""
        self._need_group("commit")
        return self.committer.commit_sync(self.consumed_offsets() if offsets is None else offsets,
                                          now, timeout_ms)

    def commit_async(self, offsets=None, now=0, callback=None):
        self._need_group("commit")
        return self.committer.commit_async(self.consumed_offsets() if offsets is None else offsets,
                                           now, callback)

    def committed(self, partitions, now, timeout_ms=None):
        """FetchHandle: {tp: OffsetAndMetadata or None}."""
        self._need_group("committed()")
        return self.committer.fetch_committed(partitions, now, timeout_ms)

    # == offset lookups (ListOffsets) =========================================================
    def list_offsets(self, timestamps: dict, now, timeout_ms=None) -> OffsetsHandle:
        """{tp: timestamp ms, or -2 earliest / -1 latest} -> OffsetsHandle."""
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        ts = {TopicPartition(*tp): int(v) for tp, v in timestamps.items()}
        h = OffsetsHandle(ts, now + t)
        h.metadata_version = self.cluster.version
        for tp in ts:
            self.cluster.add_topic(tp.topic, now)
        if not ts:
            h._finish()
        else:
            self._lookups.append(h)
        return h

    def beginning_offsets(self, partitions, now, timeout_ms=None) -> OffsetsHandle:
        return self.list_offsets({tp: LIST_OFFSETS_EARLIEST for tp in partitions}, now, timeout_ms)

    def end_offsets(self, partitions, now, timeout_ms=None) -> OffsetsHandle:
        return self.list_offsets({tp: LIST_OFFSETS_LATEST for tp in partitions}, now, timeout_ms)

    def _poll_lookups(self, now):
        for h in list(self._lookups):
            if h.done:
                self._lookups.remove(h)
                continue
            if now >= h.deadline:
                h._finish(OffsetsTimeoutError(
                    f"failed to get offsets by times for {sorted(h._pending)} in time"))
                self._lookups.remove(h)
                continue
            if self.cluster.version > h.metadata_version:
                refused = self.cluster.unauthorized_topics(tp.topic for tp in h._pending)
                if refused:          # an answer since the lookup began refused them: no waiting
                    h._finish(topic_authorization_error(refused))
                    self._lookups.remove(h)
                    continue
            by_node = {}
            for tp in h._pending - h._in_flight:
                leader = self.cluster.leader(tp.topic, tp.partition)
                if leader is None:
                    self.cluster.add_topic(tp.topic, now)
                    self.cluster.request_update()
                    continue
                if not self.client.ready(leader, now):
                    continue
                by_node.setdefault(leader, []).append(tp)
            for node, tps in by_node.items():
                topics = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append({
                        "partition_index": tp.partition, "current_leader_epoch": -1,
                        "timestamp": h.timestamps[tp]})
                body = {"replica_id": -1, "isolation_level": self.fetcher.isolation,
                        "timeout_ms": self.config.request_timeout_ms,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                h._in_flight.update(tps)
                self.client.send(node, "ListOffsets", body, now,
                                 callback=lambda r, h=h, tps=tuple(tps): self._on_lookup(h, tps, r))

    def _on_lookup(self, h, tps, r):
        h._in_flight.difference_update(tps)
        if h.done:
            return
        if r.error is not None:
            self.cluster.request_update()
            return                                   # retried by the next poll until the deadline
        for t in r.result["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                if tp not in h._pending:
                    continue
                code = p["error_code"]
                if code:
                    err = E.error_for_code(code, None, context=f"list offsets {tp.topic}-{tp.partition}")
                    if err.retriable:
                        self.cluster.request_update()
                        continue
                    h._finish(err)
                    return
                off = p.get("offset", -1)
                if off is None or off < 0:
                    olds = p.get("old_style_offsets") or []
                    off = olds[0] if olds else -1
                h._result[tp] = None if off < 0 else OffsetAndTimestamp(off, p.get("timestamp", -1))
                h._pending.discard(tp)
        if not h._pending:
            h._finish()

    # == records ===========================================================================
    def poll_called(self, now) -> bool:
        """The application called poll(): max.poll.interval.ms timer and
        auto-commit. Returns whether that gave :meth:`poll` work to do now (an
        auto-commit to send, a rejoin after a poll timeout); otherwise a
        driver need not run a round for it."""
        work = False
        if self.membership is not None and self.mode in ("subscribe", "pattern"):
            work = bool(self.membership.poll_called(now))
        if self.committer is not None and self.mode is not None:
            work = self.committer.poll_called(now) is not None or work
        return work

    def _raise_error(self):
        if self.client.auth_error is not None:
            raise self.client.auth_error     # wrong credentials or TLS: retrying cannot fix it (Java's poll)
        if self._topic_error is not None:
            err, self._topic_error = self._topic_error, None
            raise err
        while self._errors:
            err = self._errors.pop(0)
            if isinstance(err, NoOffsetForPartitionError) and not (getattr(err, "partitions", set())
                                                                    & self._no_offset):
                # Every partition it named got a position since (a seek right
                # after assign, before this poll): nothing to tell. Java only
                # looks for positions inside poll(), so it never raises this.
                continue
            raise err

    #: a drain dropped a used-up buffered fetch and handed out nothing: its
    #: partitions may fetch again, which needs a round the driver runs (only
    #: a drain that hands out records asks for one). The fetcher drops a
    #: fetch in the drain that hands out its last record; this covers the
    #: rest (a compacted batch whose last records are gone, a revoked
    #: partition's data), so an empty poll() never leaves a partition
    #: unfetched until the driver's next timer.
    fetch_freed = False

    def has_records(self) -> bool:
        return bool(self._errors) or self._topic_error is not None or self.fetcher.has_buffered()

    def _note_freed(self, out, buffered: int) -> None:
        if not out and len(self.fetcher._buffered) < buffered:
            self.fetch_freed = True

    def _nothing_fetched(self) -> bool:
        """No fetched data nor fetch error to hand out (the first look of
        most of a quiet consumer's polls): a drain would give nothing and
        free nothing."""
        f = self.fetcher
        return not f._buffered and not f._errors

    def drain(self, max_records: Optional[int] = None) -> list:
        """Up to max_records (default max.poll.records) records; deserializers applied."""
        self._raise_error()
        if self._nothing_fetched():
            return []
        buffered = len(self.fetcher._buffered)
        records = self.fetcher.drain(max_records)
        self._note_freed(records, buffered)
        if records and (self.key_deserializer is not None or self.value_deserializer is not None):
            records = [self._deserialize(r) for r in records]
        return records

    def drain_columns(self, max_records: Optional[int] = None) -> dict:
        """{tp: (offsets, timestamps, keys, values)}; deserializers applied."""
        self._raise_error()
        if self._nothing_fetched():
            return {}
        buffered = len(self.fetcher._buffered)
        cols = self.fetcher.drain_columns(max_records)
        self._note_freed(cols, buffered)
        kd, vd = self.key_deserializer, self.value_deserializer
        if cols and (kd is not None or vd is not None):
            for tp, (offs, tss, keys, vals) in list(cols.items()):
                if kd is not None:
                    keys = [None if k is None else kd(k) for k in keys]
                if vd is not None:
                    vals = [None if v is None else vd(v) for v in vals]
                cols[tp] = (offs, tss, keys, vals)
        return cols

    def drain_buffers(self, max_records: Optional[int] = None, headers: bool = False) -> dict:
        """{tp: ColumnBuffers} in Arrow's layout (kproto.records.arrow turns
        them into arrays); raw bytes: deserializers do not apply here.
        ``headers``: gather the records' headers too."""
        self._raise_error()
        if self._nothing_fetched():
            return {}
        buffered = len(self.fetcher._buffered)
        bufs = self.fetcher.drain_buffers(max_records, headers)
        self._note_freed(bufs, buffered)
        return bufs

    def _deserialize(self, r):
        from kproto.records import Record
        kd, vd = self.key_deserializer, self.value_deserializer
        key = r.key if kd is None or r.key is None else kd(r.key)
        value = r.value if vd is None or r.value is None else vd(r.value)
        return Record(r.offset, r.timestamp, r.timestamp_type, key, value, r.headers, r.topic, r.partition)

    def _drop_buffered(self, pred):
        buf = self.fetcher._buffered
        if buf and any(pred(b.tp) for b in buf):
            self.fetcher._buffered = collections.deque(b for b in buf if not pred(b.tp))

    # == events / rebalance listener ========================================================
    def events(self, ack: bool = True) -> list:
        """Application events since the last call. With ``ack`` (the default)
        the rebalance listener is taken to have run before the next poll;
        drivers that run it later pass ``ack=False`` and call
        :meth:`rebalance_listener_done` afterwards."""
        out, self._events = self._events, []
        if ack and self._revocation_pending:
            self.rebalance_listener_done(self._now)
        return out

    def rebalance_listener_done(self, now=None) -> None:
        """The listener ran for every revocation handed out: the revoked
        partitions go, and the rebalance may proceed (JoinGroup)."""
        self._revocation_pending = False
        self._revoked_states.clear()

    def _prepare_join(self, now, round_) -> bool:
        if self._revocation_pending:
            return False                         # the application's listener has not run yet
        return self.committer.commit_before_rebalance(now, round_)

    def _process_membership_events(self, now):
        for ev in self.membership.events():
            if isinstance(ev, PartitionsAssigned):
                self.positions.add(ev.partitions)
                for tp in ev.partitions:
                    self.cluster.add_topic(tp.topic, now)
                self._events.append(ev)
            elif isinstance(ev, PartitionsRevoked):
                gone = set(ev.partitions)
                for tp in gone:
                    if self.positions.is_assigned(tp):
                        self._revoked_states[tp] = self.positions.state(tp)
                self.positions.remove(gone)
                self._drop_buffered(lambda tp: tp in gone)
                self._revocation_pending = True
                self._events.append(ev)
            elif isinstance(ev, PartitionsLost):
                gone = set(ev.partitions)
                self.positions.remove(gone)
                self._drop_buffered(lambda tp: tp in gone)
                self._events.append(ev)
            elif isinstance(ev, MetadataNeeded):
                for t in ev.topics:
                    self.cluster.add_topic(t, now)
                self.cluster.request_update()
            elif isinstance(ev, GroupFatalError):
                self._events.append(ev)
                self._errors.append(ev.error)
                self.client.report_error(ev.error)      # error_cb
            elif isinstance(ev, GroupError):
                # TOPIC_AUTHORIZATION_FAILED from a ConsumerGroupHeartbeat: the
                # member stays and retries; the application hears of it from
                # poll, with the refused topics named when the metadata knows them.
                self._note_unauthorized(ev.error)

    def _topics_in_use(self):
        if self.mode == "assign":
            return {tp.topic for tp in self.positions.assigned()}
        if self.mode == "subscribe":
            return self.membership.subscription
        return ()          # a pattern matches only topics the metadata lists: never refused ones

    def _note_unauthorized(self, fallback=None):
        """The next drain raises a TopicAuthorizationFailedError naming the
        topics in use the last metadata answer refused (else ``fallback``,
        if given); the application is woken for it."""
        names = self.cluster.unauthorized_topics(self._topics_in_use())
        if names:
            self._topic_error, self._auth_fallback = topic_authorization_error(names), None
            self.data_ready = True
        elif fallback is not None:
            # A heartbeat said a subscribed topic is refused before a metadata
            # answer named it (Java's heartbeat error names none): ask the
            # metadata, which names it; this error goes out if it does not.
            self._auth_fallback = fallback
            self.cluster.request_update()
        elif self._auth_fallback is not None:
            self._topic_error, self._auth_fallback = self._auth_fallback, None
            self.data_ready = True

    def _on_metadata(self, now):
        if self.membership is not None and self.mode in ("subscribe", "pattern"):
            counts = {t: len(p) for t, p in self.cluster.partitions.items() if p}
            internal = self.cluster.internal_topics if self.config.exclude_internal_topics else ()
            self.membership.update_metadata(counts, now, internal, topic_ids=self.cluster.topic_ids)
        if self.cluster.topic_errors or self._auth_fallback is not None:
            # Java's poll raises TopicAuthorizationException: not a silent wait.
            self._note_unauthorized()

    def _on_coordinator_event(self, event):
        if isinstance(event, CoordinatorFound):
            c = event.coordinator
            self.cluster.add_node(c.connection_id, c.host, c.port)

    # == group requests =====================================================================
    def _route(self, now):
        """Send what the unsent queue holds where it can go now."""
        keep = collections.deque()
        while self._unsent:
            req, expiry = self._unsent.popleft()
            if now >= expiry:
                req.owner.on_failure(req, RequestTimedOutError(
                    f"{req.api_name} could not be sent within {self.config.request_timeout_ms} ms "
                    f"(no node ready)"), now)
                continue
            if req.destination == ANY:
                node = self.client.least_loaded_node(now)
            elif req.destination == COORDINATOR_NODE and self.coordinator.known:
                c = self.coordinator.coordinator
                node = c.node_id
                if self.cluster.node_address(node) is None:
                    self.cluster.add_node(node, c.host, c.port)
            else:
                node = self.coordinator.connection_id if self.coordinator.known else None
                if node is None:
                    req.owner.on_failure(req, E.CoordinatorNotAvailableError(
                        f"the coordinator of group {self.group_id!r} is not known"), now)
                    continue
            if node is None or not self.client.ready(node, now):
                keep.append((req, expiry))
                continue
            version = self.client.api_version(node, req.api_name)
            if version is None or version < req.min_version:
                req.owner.on_failure(req, UnsupportedVersionError(
                    f"{req.api_name} needs v{req.min_version}+ for this request; node {node} "
                    f"supports at most {version}"), now)
                continue
            self.client.send(node, req.api_name, req.body, now, timeout_ms=req.timeout_ms,
                             callback=lambda r, req=req: self._group_done(req, r))
        self._unsent = keep

    def _group_done(self, req, r):
        if r.error is not None:
            req.owner.on_failure(req, r.error, r.completed_at)
            return
        req.owner.on_response(req, r.result, r.completed_at)
        coord = self.coordinator
        if (req.destination != ANY and coord.known and req.coordinator_epoch == coord.epoch):
            # It answered as the coordinator (a coordinator error would have
            # marked it unknown): the lookup backoff starts afresh.
            coord.confirmed(r.completed_at)

    def _close_coordinator_connection(self, coord, reason, now):
        if coord is None:
            return
        c = self.client.connections.get(coord.connection_id)
        if c is not None and c.is_connected:
            self.client._handle(c.close(f"coordinator lost: {reason}", now), now)

    # == positions of new partitions ============================================================
    def _init_positions(self, now):
        if not self._committed_fetches and not self._needs_position():
            return                       # every partition has a position (each round of a steady consumer)
        for item in list(self._committed_fetches):
            h, tps = item
            if not h.done:
                continue
            self._committed_fetches.remove(item)
            self._committed_pending -= tps
            if h.error is not None:
                if not getattr(h.error, "retriable", False) and not any(
                        type(e) is type(h.error) for e in self._errors):
                    # GROUP_AUTHORIZATION_FAILED and the like: poll raises it (Java:
                    # GroupAuthorizationException); the next attempt waits the backoff.
                    self._errors.append(h.error)
                self._committed_log.log(now, logging.WARNING, "fetching committed offsets of %s failed "
                                        "(will retry): %s", sorted(tps), h.error)
                self._committed_retry_at = now + self._committed_backoff.failed()
                continue
            self._committed_backoff.reset()
            for tp, om in h.result().items():
                if not self.positions.is_assigned(tp):
                    continue
                st = self.positions.state(tp)
                if st.position is not None or st.reset_to is not None:
                    continue                         # a seek happened meanwhile
                if om is None:
                    self._reset(tp)
                else:
                    self.positions.seek(tp, om.offset, om.leader_epoch)
        need = [tp for tp in self._needs_position()
                if tp not in self._committed_pending and tp not in self._no_offset]
        if not need:
            return
        if self.committer is not None:
            if now < self._committed_retry_at:
                return
            h = self.committer.fetch_committed(need, now)
            self._committed_fetches.append((h, set(need)))
            self._committed_pending.update(need)
            self._round_again = True
            if h.done:                                # (empty)
                self._init_positions(now)
        else:
            for tp in need:
                self._reset(tp)

    def _needs_position(self) -> list:
        """Positions.needs_position(), walked again only after a change of
        the positions: a partition comes to need one only by an assignment."""
        version = self.positions.version
        if self._unpositioned[0] != version:
            self._unpositioned = (version, self.positions.needs_position())
        return self._unpositioned[1]

    def _reset(self, tp):
        try:
            self.positions.request_reset(tp)
        except NoOffsetForPartitionError as e:
            self._no_offset.add(tp)
            self._errors.append(e)

    # == fetching ==============================================================================
    def _fetch_plan_is_current(self) -> bool:
        """Whether a fetch plan now would send nothing the last one did not,
        without walking the partitions: the last plan was blocked by nothing
        (every leader known and connected), and since then no answer, no
        connection event and no change of the positions came (any of them
        bumps ``client.progress`` or ``Positions.version``), and either no
        buffered partition was drained or every node the assigned partitions
        are fetched from still has a Fetch in flight (a drained partition's
        next fetch waits for its node's answer: one Fetch per node)."""
        idle = self._fetch_idle
        if idle is None:
            return False
        version, progress, buffered, nodes = idle
        f = self.fetcher
        return (version == self.positions.version and progress == self.client.progress
                and (buffered == len(f._buffered) or nodes <= f._in_flight_nodes))

    def _fetch_nodes(self):
        """The leaders of every partition of the assigned topics (a
        superset of the nodes fetched from), or None while one is unknown."""
        version = self.positions.version
        if self._assigned_topics[0] != version:
            self._assigned_topics = (version, frozenset(tp.topic for tp in self.positions.states))
        nodes = set()
        leaders_of_topic = self.cluster.partitions.get
        for topic in self._assigned_topics[1]:
            leaders = leaders_of_topic(topic)
            if not leaders:
                return None
            nodes.update(leaders.values())
        return frozenset(nodes) if -1 not in nodes else None

    def _fetch(self, now):
        f = self.fetcher
        client = self.client
        cluster = self.cluster
        if self._fetch_plan_is_current():
            return
        # Whether this plan leaves something for later that no answer or
        # position change will announce: a node not ready (its reconnect
        # backoff is a timer), an unknown leader or topic id (the metadata
        # refresh asked for below).
        blocked = []

        def leader_of(tp):
            return cluster.leader(tp.topic, tp.partition)

        def version_of(node):
            if not client.ready(node, now):
                blocked.append(node)
                return None
            return client.api_version(node, "Fetch")

        for lo in f.reset_requests(leader_of, version_of):
            if not client.is_ready(lo.node):
                f._resets_in_flight.difference_update(lo.strategies)
                blocked.append(lo.node)
                continue
            client.send(lo.node, "ListOffsets", lo.body, now,
                        callback=lambda r, lo=lo: self._on_reset_done(lo, r))
        for req in f.fetch_requests(leader_of, version_of, cluster.topic_ids.get, cluster.partitions.get,
                                    cluster.leaders_version):
            if not client.is_ready(req.node):
                f.on_fetch_unsent(req)
                blocked.append(req.node)
                continue
            client.send(req.node, "Fetch", req.wire_body, now, version=req.version,
                        timeout_ms=self._fetch_timeout_ms,
                        callback=lambda r, req=req: self._on_fetch_done(req, r),
                        decoder=decode_fetch_response)
        nodes = None if blocked or f.metadata_refresh_needed else self._fetch_nodes()
        self._fetch_idle = None if nodes is None else (
            self.positions.version, client.progress, len(f._buffered), nodes)
        if f.metadata_refresh_needed:
            f.metadata_refresh_needed = False
            cluster.request_update()

    def _on_fetch_done(self, req, r):
        if r.error is not None:
            self.fetcher.on_fetch_failure(req, r.error)
        else:
            self.fetcher.on_fetch_response(req, r.result)
        self.data_ready = True

    def _on_reset_done(self, lo, r):
        if r.error is not None:
            self.fetcher.on_list_offsets_failure(lo, r.error)
        else:
            self.fetcher.on_list_offsets_response(lo, r.result)

    # == closing ===============================================================================
    def begin_close(self, now, timeout_ms=None) -> None:
        """Start closing: auto-commit (sync) the consumed positions, then revoke
        and leave the group. Keep polling until :attr:`close_done`, then call
        :meth:`close`."""
        if self.closing:
            return
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        self.closing = True
        self._close_deadline = now + t
        self._close_step = "commit"
        if self.committer is not None and self.mode is not None:
            self._close_commit = self.committer.close(now, t)

    @property
    def close_done(self) -> bool:
        return self._close_step == "done"

    def _poll_close(self, now):
        if self._close_step == "commit":
            if self._close_commit is None or self._close_commit.done or now >= self._close_deadline:
                self._close_step = "leave"
                self._close_fetch_sessions(now)
                if self.membership is not None and self.mode in ("subscribe", "pattern"):
                    self.membership.close(now)
                    self._process_membership_events(now)
                self.positions.assign([])
                self._drop_buffered(lambda tp: True)
        if self._close_step == "leave":
            m = self.membership
            # the final-epoch Fetch requests are awaited too, as Java's
            # consumer does (AbstractFetch's close: until answered or the
            # close timeout): else a consumer without a group could close its
            # connections before they were written
            if ((m is None or self.mode not in ("subscribe", "pattern") or m.closed)
                    and self._fetch_closes_pending == 0) or now >= self._close_deadline:
                self._close_step = "telemetry"
        if self._close_step == "telemetry" and (self.client.telemetry_closed(now) or now >= self._close_deadline):
            self._close_step = "done"     # after the terminating telemetry push (KIP-714)

    def _close_fetch_sessions(self, now) -> None:
        """End every open fetch session with the final epoch, as Java's
        consumer does on close: the broker frees the session's cache slot
        now instead of at its expiry (a slot another consumer may need).
        A node not connected keeps the session until it expires; the answers
        are awaited until the close deadline (``_poll_close``)."""
        client = self.client

        def version_of(node):
            return client.api_version(node, "Fetch") if client.is_ready(node) else None

        for req in self.fetcher.close_session_requests(version_of):
            self._fetch_closes_pending += 1
            self._fetch_closes_sent += 1
            client.send(req.node, "Fetch", req.wire_body, now, version=req.version,
                        timeout_ms=self.config.request_timeout_ms, decoder=decode_fetch_response,
                        callback=self._on_fetch_close_done)

    def _on_fetch_close_done(self, r) -> None:
        """A final-epoch Fetch came back (or failed): one close less to wait for."""
        self._fetch_closes_pending -= 1
        body = r.result if r.error is None else None
        if body is None:
            return
        # the C decoder's FetchAnswer, or the codec's dict
        code = body.error_code if isinstance(body, FetchAnswer) else body.get("error_code", 0)
        if code == 0:
            self._fetch_closes_answered += 1

    def close(self, now) -> list:
        """Close every connection; returns Close actions."""
        self.closing = True
        self.closed = True
        self._close_step = "done"
        for h in self._lookups:
            h._finish(ConsumerClosedError("the consumer was closed"))
        self._lookups = []
        return self.client.close(now)

    # == the driver interface =================================================================
    def poll(self, now) -> list:
        self._now = now
        self._round_again = False
        actions = self.client.poll(now)
        if self.closed:
            return actions
        if self.closing:
            self._poll_close(now)
        if self.coordinator is not None:
            coord = self.coordinator
            if coord.known and self.client.is_unavailable(coord.connection_id, now):
                # As Java's coordinatorUnknown(): a coordinator we cannot
                # connect to is looked up again (it may have moved), rather
                # than waited for until requests to it time out.
                coord.mark_unknown("cannot connect to the coordinator", now)
            for ev in self.coordinator.events():
                if isinstance(ev, CoordinatorLost):
                    self._close_coordinator_connection(ev.coordinator, ev.reason, now)
            reqs = self.coordinator.poll(now)
            if self.mode in ("subscribe", "pattern") or self.closing:
                reqs += self.membership.poll(now)
                self._process_membership_events(now)
            reqs += self.committer.poll(now)
            self.committer.events()
            expiry = now + self.config.request_timeout_ms
            for r in reqs:
                self._unsent.append((r, expiry))
            if self._unsent:
                self._route(now)
            # routing may have failed requests synchronously: let the machines react now
            if self.mode in ("subscribe", "pattern") or self.closing:
                self._process_membership_events(now)
        if not self.closing:
            self._init_positions(now)
            self._fetch(now)
        if self._lookups:
            self._poll_lookups(now)
        # Only what the requests queued above can have made due (a metadata
        # update, Connect actions): the timeouts, idle connections and
        # telemetry the first poll checked at this ``now`` are unchanged, and
        # walking them again was a fifth of a quiet consumer's round.
        actions.extend(self.client.poll_requests(now))
        return actions

    def next_deadline(self, now) -> Optional[float]:
        if self._round_again:
            return now
        # The earliest of the deadlines below, kept as it goes (no list per
        # call: a quiet consumer asks once per Fetch answer, and more often).
        best = self.client.next_deadline(now)
        if self.coordinator is not None:
            group = self.mode in ("subscribe", "pattern") or self.closing
            for d in (self.coordinator.next_deadline(now),
                      self.membership.next_deadline(now) if group else None,
                      self.committer.next_deadline(now)):
                if d is not None and (best is None or d < best):
                    best = d
        if self._unsent:
            # They wait for a node: the client's deadline says when the one
            # in backoff may be tried, and a connection coming up is an I/O
            # event - only their expiry is ours.
            d = min(expiry for _, expiry in self._unsent)
            if best is None or d < best:
                best = d
        # Offset lookups and resets, committed-offset fetches and closing wait
        # for answers (I/O events), for a node (the client's deadline) or for
        # metadata (the client's deadline too): no polling timer of our own.
        for h in self._lookups:
            d = h.deadline
            if d is not None and (best is None or d < best):
                best = d
        if self.closing and not self.close_done:
            d = self._close_deadline
            if d is not None and (best is None or d < best):
                best = d
        unpositioned = self._needs_position()
        if unpositioned and any(tp not in self._committed_pending and tp not in self._no_offset
                                for tp in unpositioned):
            # Committed offsets to fetch again after a failure. (A partition
            # without offset under auto.offset.reset=none waits for a seek, not
            # for a timer: counting it made the drivers spin.)
            d = max(now, self._committed_retry_at)
            if best is None or d < best:
                best = d
        return best
