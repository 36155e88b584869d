"""``ShareConsumerCore``: a KIP-932 share group member as one sans-IO object.

The driver contract is the consumer core's (:mod:`kproto.consumer.core`)::

    core = ShareConsumerCore({"bootstrap.servers": "h:9092", "group.id": "jobs"})
    core.subscribe(["jobs"], now)
    for action in core.poll(now): ...            # Connect(node, host, port) | Close(node, reason)
    # bytes: core.nodes_with_output(), core.output(node), core.sent(node, n, now)
    core.connected(node, now); core.received(node, data, now); core.disconnected(node, now, exc)
    core.next_deadline(now)                      # absolute ms, or None
    core.poll_started(now)                       # the application polls: settle the previous poll's records
    records = core.drain(max_records)            # ShareRecords; raises pending errors once
    core.acknowledge(record, AcknowledgeType.REJECT)
    h = core.commit(now, timeout_ms)             # h.done, h.result()
    for event in core.events(): ...              # AcknowledgementsDone (for commit callbacks)
    core.begin_close(now); ... until core.close_done; core.close(now)

Acknowledgement modes (``share.acknowledgement.mode``, as Java's):
``implicit`` - the records a poll returned are ACCEPTed by the next poll or
commit, and ``acknowledge`` is refused; ``explicit`` - every record must be
acknowledged before the next poll, which otherwise raises
:class:`~kproto.share.ShareStateError`.
"""
from __future__ import annotations

import collections
import logging
import random
from typing import Dict, Optional

from kproto.client import DriverIO, network_for
from kproto.client_metrics import network_metrics
from kproto.cluster import TopicPartition, validate_topic_name
from kproto.consumer.coordinator import CoordinatorLost, GroupCoordinator
from kproto.consumer.membership import GroupError
from kproto.consumer.core import ConsumerClosedError, ConsumerCore, _ConsumerCluster
from kproto.errors import KafkaError
from kproto.share import AcknowledgeType, ShareCommitTimeoutError, ShareStateError
from kproto.share.config import parse_share_consumer_config
from kproto.share.fetcher import CommitHandle, ShareFetcher, ShareRequest
from kproto.share.membership import (
    AssignmentChanged, ShareGroupFatalError, ShareMembership, ShareMemberState,
)

__all__ = ["ShareConsumerCore"]

log = logging.getLogger(__name__)
_ACK_TYPES = frozenset(AcknowledgeType)      # 1, 2, 3, 4 (an int or the enum)


class ShareConsumerCore(DriverIO):
    def __init__(self, config=None, *, rng=None, **kwargs):
        from kproto.config import Config
        cfg = config if isinstance(config, Config) else parse_share_consumer_config(config, **kwargs)
        self.config = cfg
        self.explicit = cfg.share_acknowledgement_mode == "explicit"
        self.rng = rng or random.Random()
        self.cluster, self.client = network_for(
            cfg, rng=self.rng, max_in_flight=5, allow_auto_topic_creation=False,
            cluster_class=_ConsumerCluster, telemetry_type="consumer")
        self.client.on_metadata = self._on_metadata
        self.group_id = cfg.group_id
        self.coordinator = GroupCoordinator(
            self.group_id, retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms, request_timeout_ms=cfg.request_timeout_ms,
            rng=self.rng)
        self.coordinator.add_listener(self._on_coordinator_event)
        self.membership = ShareMembership(
            self.coordinator, self.group_id, rack_id=cfg.client_rack or None,
            retry_backoff_ms=cfg.retry_backoff_ms, retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            request_timeout_ms=cfg.request_timeout_ms, rng=self.rng)
        self.member_id = self.membership.member_id
        self.fetcher = ShareFetcher(
            self.group_id, self.member_id, max_wait_ms=cfg.fetch_max_wait_ms, min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_max_bytes, max_records=cfg.max_poll_records, check_crcs=cfg.check_crcs,
            record_limit=cfg.share_acquire_mode == "record_limit")
        self.key_deserializer = cfg.key_deserializer
        self.value_deserializer = cfg.value_deserializer
        self._unsent = collections.deque()     # (OutgoingRequest, expiry): group requests without a node yet
        self._events: list = []
        self._errors: list = []
        self._topic_error = None               # subscribed topics refused (ConsumerCore's)
        self._auth_fallback = None
        self._assigned_ids: Dict[object, frozenset] = {}
        self._commits: list = []
        self.data_ready = False
        self.closing = False
        self.closed = False
        self._close_step: Optional[str] = None
        self._close_deadline = None
        self._now = 0

    # == the group's routing, shared with the consumer core ==================================
    # FindCoordinator goes to the least loaded node, ShareGroupHeartbeat to the
    # coordinator's own connection: the very routing (and unsent queue) the
    # consumer core uses, so both follow one set of rules.
    _route = ConsumerCore._route
    _group_done = ConsumerCore._group_done
    _close_coordinator_connection = ConsumerCore._close_coordinator_connection
    _on_coordinator_event = ConsumerCore._on_coordinator_event
    # Subscribed topics the broker refuses (no DESCRIBE ACL): named from the
    # metadata answers, raised by the next poll, as the consumer does.
    _note_unauthorized = ConsumerCore._note_unauthorized

    def _topics_in_use(self):
        return self.membership.subscription

    # == application inputs =====================================================================
    def subscribe(self, topics, now) -> None:
        """Join the share group for these topics (replaces the subscription)."""
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            raise KafkaError("subscribe() needs at least one topic (use close() to leave the group)")
        for t in topics:
            validate_topic_name(t)
        for t in topics:
            self.cluster.add_topic(t, now)
        self._topic_error = self._auth_fallback = None     # about the topics used before
        self.membership.subscribe(topics, now)
        self.cluster.request_update()

    def unsubscribe(self, now) -> None:
        """Leave the group; records fetched and not handed out are released
        (the last poll's, unless acknowledged or committed, too: as in Java,
        leaving accepts nothing by itself). subscribe() joins again."""
        self._check_open()
        self.membership.leave(now)
        self.membership.subscription = []
        self._topic_error = None
        self._assigned_ids = {}
        self.fetcher.set_assignment(set())

    def subscription(self) -> set:
        return set(self.membership.subscription)

    def assignment(self) -> set:
        """The partitions the broker gave this member (others may share them)."""
        return set(self.fetcher.assigned)

    def metrics(self) -> dict:
        """The share consumer's counters: the network client's
        (:func:`~kproto.client_metrics.network_metrics`) and the partitions assigned."""
        m = network_metrics(self.client)
        m["assigned_partitions"] = len(self.fetcher.assigned)
        return m

    def poll_started(self, now) -> None:
        """The application polls again: settle the records of its last poll
        (implicit: accept them; explicit: they must all be acknowledged)."""
        self._check_open()
        self._now = now
        if not self.membership.subscription:
            raise ShareStateError("the share consumer is not subscribed to any topics: subscribe() first")
        if self.explicit:
            n = len(self.fetcher.delivered)
            if n:
                raise ShareStateError(
                    f"{n} record(s) of the previous poll are not acknowledged: in explicit mode "
                    f"(share.acknowledgement.mode=explicit) acknowledge() each record before polling again")
        else:
            self.fetcher.acknowledge_delivered(AcknowledgeType.ACCEPT)

    #: as ConsumerCore.fetch_freed (the drivers' shared poll steps read
    #: both): a drain that handed out nothing dropped a used-up buffered
    #: fetch - every acquired record of it gone (a compacted batch, a revoked
    #: partition) - so its leader may be fetched again and its gaps
    #: acknowledged, which needs a round the driver runs.
    fetch_freed = False

    def drain(self, max_records: Optional[int] = None) -> list:
        """Up to ``max_records`` acquired records (ShareRecord); raises a
        pending error (group failure, authorization, corruption) once; an
        authentication or TLS failure every time until a connection succeeds."""
        if self.client.auth_error is not None:
            raise self.client.auth_error     # retrying cannot fix it
        if self._topic_error is not None:
            err, self._topic_error = self._topic_error, None
            raise err
        if self._errors:
            raise self._errors.pop(0)
        if self.membership.state is ShareMemberState.FAILED:
            raise self.membership.error              # every poll: the member cannot go on
        kd, vd = self.key_deserializer, self.value_deserializer
        convert = None
        if kd is not None or vd is not None:
            def convert(r):
                return (r.key if kd is None or r.key is None else kd(r.key),
                        r.value if vd is None or r.value is None else vd(r.value))
        buffered = self.fetcher.buffered_fetches()
        out = self.fetcher.drain(max_records, convert)
        if not out and self.fetcher.buffered_fetches() < buffered:
            self.fetch_freed = True
        return out

    def acknowledge(self, record, kind=AcknowledgeType.ACCEPT) -> None:
        """Acknowledge one record of the last poll (explicit mode)."""
        self._check_open()
        if not self.explicit:
            raise ShareStateError(
                "acknowledge() needs share.acknowledgement.mode=explicit: in implicit mode the next poll "
                "or commit accepts every record of the last poll")
        if kind not in _ACK_TYPES or isinstance(kind, (bool, float)):
            raise ValueError(f"acknowledge type must be ACCEPT, RELEASE, REJECT or RENEW, not {kind!r}")
        self.fetcher.acknowledge((record.topic, record.partition), record.offset, kind, record)

    def commit(self, now, timeout_ms: Optional[int] = None) -> CommitHandle:
        """Send the acknowledgements made so far (implicit mode: accept the
        last poll's records first) and report per partition when the leaders
        answered."""
        self._check_open()
        if not self.explicit:
            self.fetcher.acknowledge_delivered(AcknowledgeType.ACCEPT)
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        h = self.fetcher.commit(now, now + t)
        h.started = now
        if not h.done:
            self._commits.append(h)
        return h

    def events(self) -> list:
        """AcknowledgementsDone events since the last call."""
        out, self._events = self._events, []
        return out

    def _check_open(self):
        if self.closing or self.closed:
            raise ConsumerClosedError("the share consumer is closed")

    # == the driver interface ======================================================================
    def poll(self, now) -> list:
        self._now = now
        actions = self.client.poll(now)
        if self.closed:
            return actions
        coord = self.coordinator
        if coord.known and self.client.is_unavailable(coord.connection_id, now):
            coord.mark_unknown("cannot connect to the coordinator", now)
        for ev in coord.events():
            if isinstance(ev, CoordinatorLost):
                self._close_coordinator_connection(ev.coordinator, ev.reason, now)
        # (a fatal lookup error, GROUP_AUTHORIZATION_FAILED, fails the membership:
        # the next poll raises it rather than waiting for a coordinator that
        # will never come)
        if self.closing:
            self._poll_close(now)
        reqs = coord.poll(now) + self.membership.poll(now)
        expiry = now + self.config.request_timeout_ms
        for r in reqs:
            self._unsent.append((r, expiry))
        if self._unsent:
            self._route(now)
        self._membership_events(now)
        self._share_requests(now)
        for h in self._commits:
            if not h.done and now >= h.deadline:
                h._expire(ShareCommitTimeoutError(
                    f"commit_sync: the partition leaders did not answer the acknowledgements within "
                    f"{h.deadline - h.started:.0f} ms"))
        self._commits = [h for h in self._commits if not h.done]
        self._events.extend(self.fetcher.events())
        if self.fetcher.metadata_refresh_needed:
            self.fetcher.metadata_refresh_needed = False
            self.cluster.request_update()
        actions.extend(self.client.poll(now))
        return actions

    def next_deadline(self, now) -> Optional[float]:
        ds = [self.client.next_deadline(now), self.coordinator.next_deadline(now),
              self.membership.next_deadline(now)]
        ds.extend(h.deadline for h in self._commits if not h.done)
        if self._unsent:
            ds.append(min(expiry for _, expiry in self._unsent))
        if self.closing and self._close_step != "done":
            ds.append(self._close_deadline)
        ds = [d for d in ds if d is not None]
        return min(ds) if ds else None

    def _membership_events(self, now):
        for ev in self.membership.events():
            if isinstance(ev, AssignmentChanged):
                self._assigned_ids = ev.assignment
                self._apply_assignment()
                log.info("share group %r: assigned %s", self.group_id, sorted(self.fetcher.assigned))
            elif isinstance(ev, ShareGroupFatalError):
                self._errors.append(ev.error)
                self.client.report_error(ev.error)      # error_cb
                self.data_ready = True
            elif isinstance(ev, GroupError):
                self._note_unauthorized(ev.error)

    def _apply_assignment(self):
        names = {tid: name for name, tid in self.cluster.topic_ids.items()}
        tps = set()
        for tid, parts in self._assigned_ids.items():
            name = names.get(tid)
            if name is None:
                # An id our metadata does not know yet (a topic made after the
                # last refresh): ask for fresh metadata, apply it then.
                self.cluster.request_update()
                continue
            tps.update(TopicPartition(name, p) for p in parts)
        if tps != self.fetcher.assigned:
            self.fetcher.set_assignment(tps)

    def _on_metadata(self, now):
        if self._assigned_ids:
            self._apply_assignment()
        if self.cluster.topic_errors or self._auth_fallback is not None:
            self._note_unauthorized()

    def _share_requests(self, now):
        client, cluster = self.client, self.cluster

        def leader_of(tp):
            return cluster.leader(tp.topic, tp.partition)

        def ready(node):
            return client.ready(node, now)

        def renew_supported(node):        # ShareAcknowledge v2 carries RENEW (KIP-1222)
            v = client.api_version(node, "ShareAcknowledge")
            return v is None or v >= 2

        for req in self.fetcher.requests(leader_of, cluster.topic_ids.get, ready, now, renew_supported):
            timeout = self.config.request_timeout_ms
            if req.api == "ShareFetch":
                timeout += self.config.fetch_max_wait_ms       # the broker may hold it that long
            client.send(req.node, req.api, req.body, now, timeout_ms=timeout,
                        callback=lambda r, req=req: self._on_share_done(req, r))

    def _on_share_done(self, req: ShareRequest, r):
        if r.error is not None:
            log.info("%s to node %s failed: %s", req.api, req.node, r.error)
            self.fetcher.on_failure(req, r.error)
        else:
            self.fetcher.on_response(req, r.result, r.completed_at)
        self.data_ready = True

    # == closing ===================================================================================
    def begin_close(self, now, timeout_ms: Optional[int] = None) -> None:
        """Start closing: send the acknowledgements made so far with the
        closing of the share sessions (the leaders release what is still
        acquired), then leave the group. Poll until :attr:`close_done`.

        As Java's close(), this accepts nothing by itself: in implicit mode
        the last poll's records are released unless a commit accepted them
        (a close in an exception handler must not accept records whose
        processing failed)."""
        if self.closing:
            return
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        self.closing = True
        self._close_deadline = now + t
        self._close_step = "sessions"
        self.fetcher.begin_close()

    @property
    def close_done(self) -> bool:
        return self._close_step == "done"

    def _poll_close(self, now):
        if self._close_step == "sessions" and (self.fetcher.closed or now >= self._close_deadline):
            self._close_step = "leave"
            self.membership.leave(now)
        if self._close_step == "leave" and (self.membership.done or now >= self._close_deadline):
            self._close_step = "telemetry"
        if self._close_step == "telemetry" and (self.client.telemetry_closed(now) or now >= self._close_deadline):
            self._close_step = "done"     # after the terminating telemetry push (KIP-714)

    def close(self, now) -> list:
        """Close every connection; returns Close actions."""
        self.closing = True
        self.closed = True
        self._close_step = "done"
        return self.client.close(now)
