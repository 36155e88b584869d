"""Consumer group membership, classic protocol (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup), as a sans-IO state machine.

Follows Java's ``AbstractCoordinator`` + ``ConsumerCoordinator``:

* joining: JoinGroup (MEMBER_ID_REQUIRED -> rejoin at once with the member id
  the broker handed out); the leader decodes every member's subscription, runs
  the assignor the coordinator chose and sends the assignments in SyncGroup;
  followers send an empty SyncGroup;
* before each rebalance the *join-prepare* step runs once: the ``prepare_join``
  hook (auto-commit of consumed offsets, see ``OffsetCommitter.
  commit_before_rebalance``) up to rebalance.timeout.ms, then revocation - all
  owned partitions with the EAGER protocol, only those of topics no longer
  subscribed with COOPERATIVE. With COOPERATIVE, the rest is revoked after
  SyncGroup (owned - assigned) followed by a rejoin;
* heartbeats every heartbeat.interval.ms once joined; no successful heartbeat
  within session.timeout.ms marks the coordinator unknown; the application must
  report ``poll_called(now)`` within max.poll.interval.ms, else the member leaves
  the group (LeaveGroup; static members only drop their generation) and rejoins
  on the next ``poll_called``;
* ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID reset the generation and member id:
  owned partitions are reported *lost* (no commit, they may already be
  someone else's); FENCED_INSTANCE_ID and other non-retriable group errors are
  fatal; coordinator errors and connection failures mark the shared
  coordinator unknown and the step is retried after rediscovery;
* static membership (group.instance.id): no LeaveGroup on close or poll timeout.

The driver invokes the application's rebalance listener for the events a poll
returned before it calls ``poll`` again: revocations are emitted one poll
before the JoinGroup that follows them, so offsets can still be committed.

States (:class:`MemberState`) change only along :data:`TRANSITIONS`, the
complete table of moves with the event behind each.
"""
from __future__ import annotations

import enum
import logging
import re
from typing import NamedTuple, Optional

from kproto import error_codes
from kproto.consumer import COORDINATOR, COORDINATOR_NODE, OutgoingRequest
from kproto.consumer.assignors import (
    RebalanceProtocol, build_assignors, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription, rebalance_protocol_for,
)
from kproto.consumer.coordinator import (
    COORDINATOR_ERRORS, CoordinatorFound, CoordinatorLookupFailed, CoordinatorLost,
)
from kproto.errors import ConfigError, KafkaError, UnsupportedVersionError
from kproto.statemachine import checked_move

__all__ = ["MemberState", "GroupMembership", "PartitionsAssigned", "PartitionsRevoked",
           "PartitionsLost", "GroupFatalError", "GroupError", "MetadataNeeded"]

log = logging.getLogger(__name__)

E = error_codes
PROTOCOL_TYPE = "consumer"
# JoinGroup/SyncGroup errors after which we rejoin at once (Java: no backoff).
_REJOIN_NOW = {E.UnknownMemberIdError.code, E.IllegalGenerationError.code,
               E.RebalanceInProgressError.code, E.MemberIdRequiredError.code}
_RESET_GENERATION = {E.UnknownMemberIdError.code, E.IllegalGenerationError.code}


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"            # not in the group (no subscription, left, or reset)
    PREPARING = "PREPARING"          # join-prepare: commit hook, then revocation
    JOIN_PENDING = "JOIN_PENDING"    # ready to send JoinGroup (after backoff / coordinator)
    JOINING = "JOINING"              # JoinGroup in flight
    AWAITING_METADATA = "AWAITING_METADATA"  # leader: waiting for metadata of group topics
    SYNCING = "SYNCING"              # SyncGroup in flight
    STABLE = "STABLE"
    FATAL = "FATAL"
    CLOSED = "CLOSED"


_M = MemberState
#: The classic membership machine's transition table (as h11's ``_state.py``):
#: the states each state may move to, and the event that moves it.
#: ``GroupMembership._move`` refuses any other move (IllegalStateTransitionError).
#: Every live state may also move to FATAL (a non-retriable group error: a
#: fenced static member, an authorization failure, a broken answer) and to
#: CLOSED (``close()``, or the answer to its LeaveGroup).
TRANSITIONS = {
    _M.UNJOINED: frozenset({
        _M.PREPARING,            # subscribed, or polled again after a poll timeout: join
        _M.UNJOINED,             # unsubscribe() while not in the group
        _M.FATAL, _M.CLOSED}),
    _M.PREPARING: frozenset({
        _M.JOIN_PENDING,         # the prepare hook finished and revocations were handed out
        _M.PREPARING,            # OffsetCommit lost the generation: the round starts again
        _M.UNJOINED,             # unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.JOIN_PENDING: frozenset({
        _M.JOINING,              # the JoinGroup goes out (backoff over, coordinator known)
        _M.PREPARING,            # OffsetCommit lost the generation
        _M.UNJOINED,             # unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.JOINING: frozenset({
        _M.SYNCING,              # joined: a follower (or a leader told to skip the assignment) syncs
        _M.AWAITING_METADATA,    # joined as leader; metadata lacks some member's topics
        _M.JOIN_PENDING,         # retriable JoinGroup error or failure (MEMBER_ID_REQUIRED, ...)
        _M.PREPARING,            # OffsetCommit lost the generation
        _M.UNJOINED,             # unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.AWAITING_METADATA: frozenset({
        _M.SYNCING,              # the metadata came (or its wait ran out): the leader assigned
        _M.PREPARING,            # Heartbeat or OffsetCommit lost the generation
        _M.UNJOINED,             # poll timeout, unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.SYNCING: frozenset({
        _M.STABLE,               # SyncGroup brought the assignment
        _M.JOIN_PENDING,         # retriable SyncGroup error or failure
        _M.PREPARING,            # Heartbeat or OffsetCommit lost the generation
        _M.UNJOINED,             # poll timeout, unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.STABLE: frozenset({
        _M.PREPARING,            # rejoin: rebalance, subscription or metadata change, lost generation
        _M.UNJOINED,             # poll timeout, unsubscribe()
        _M.FATAL, _M.CLOSED}),
    _M.FATAL: frozenset({
        _M.UNJOINED,             # unsubscribe(): the application starts over
        _M.CLOSED}),             # close()
    _M.CLOSED: frozenset(),      # for good: a new member is needed
}


class PartitionsAssigned(NamedTuple):
    partitions: tuple        # newly added (COOPERATIVE) or all (EAGER); may be empty
    generation_id: int


class PartitionsRevoked(NamedTuple):
    partitions: tuple        # give them up cleanly: commit first if you want


class PartitionsLost(NamedTuple):
    partitions: tuple        # already someone else's: do NOT commit them
    reason: str


class GroupFatalError(NamedTuple):
    error: KafkaError


class GroupError(NamedTuple):
    """An error the application hears of from its next poll while the member
    goes on (TOPIC_AUTHORIZATION_FAILED in a heartbeat: an ACL added later
    lets it join; Java's ErrorEvent)."""
    error: KafkaError


class MetadataNeeded(NamedTuple):
    """The leader needs a metadata refresh for these topics; answer with
    ``update_metadata`` (the driver's metadata machinery owns the request)."""
    topics: tuple


class _Joined(NamedTuple):
    generation_id: int
    member_id: str
    group_instance_id: Optional[str]


class GroupMembership:
    """One member of a consumer group (subscribe mode). See the module docstring.

    ``coordinator`` is the shared :class:`GroupCoordinator`; ``prepare_join`` an
    optional ``hook(now, round) -> bool`` that returns True once the pre-rebalance
    work (auto-commit) is finished; it is called with the same ``round`` until it
    returns True or rebalance.timeout.ms passes.
    """

    def __init__(self, coordinator, *, session_timeout_ms=45000, heartbeat_interval_ms=3000,
                 max_poll_interval_ms=300000, rebalance_timeout_ms=None,
                 group_instance_id=None, assignment_strategy=("range", "cooperative-sticky"),
                 retry_backoff_ms=100, request_timeout_ms=30000, client_rack=None,
                 prepare_join=None):
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        # Java: the broker waits up to max.poll.interval.ms for members to rejoin.
        self.rebalance_timeout_ms = rebalance_timeout_ms or max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.assignors = build_assignors(assignment_strategy)
        self.protocol = rebalance_protocol_for(self.assignors)
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.client_rack = client_rack
        self.prepare_join = prepare_join

        self.state = MemberState.UNJOINED   # changed only by _move (see TRANSITIONS)
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name = None
        self.leader_id = None
        self.fatal_error: Optional[KafkaError] = None
        self.assignment = frozenset()          # partitions owned now
        self.subscription = frozenset()        # topics
        self.pattern = None
        self.topic_partitions = {}             # metadata: {topic: partition count}
        self._joined_subscription = None
        self._group_subscription = frozenset()  # leader: every member's topics
        self._assignment_snapshot = None       # leader: {topic: count} assigned with
        self._pending_rejoin_reason = None
        self._round = 0
        self._prepare_started = None
        self._revocation_emitted = False
        self._retry_at = 0
        self._join_req = self._sync_req = self._hb_req = self._leave_req = None
        self._join_response = None
        self._metadata_deadline = None
        self._last_poll = None
        self._poll_timed_out = False
        self._hb_next = None
        self._session_deadline = None
        self._closing = False
        self._pending_leave = None
        self._session_reset_pending = False
        self._rejoin_reason = None
        self._assignments = []
        self._member_subs = {}
        self._events = []
        #: successful heartbeats so far (same attribute as the consumer protocol's)
        self.heartbeats_answered = 0
        coordinator.add_listener(self._on_coordinator_event)

    # == application inputs ==========================================================
    def subscribe(self, topics, now) -> None:
        """Subscribe to these topics (replaces the subscription; rejoin if changed)."""
        self.pattern = None
        self._set_subscription(frozenset(topics), now)

    def subscribe_pattern(self, pattern, now) -> None:
        """Subscribe to every (non-internal) topic whose name matches ``pattern``
        in the metadata given to :meth:`update_metadata`."""
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self._set_subscription(self._matching_topics(), now)

    def unsubscribe(self, now) -> None:
        """Give up every partition and leave the group (Java's unsubscribe).
        Nothing on a closed member: it left for good (it must stay closed)."""
        if self.state is MemberState.CLOSED:
            return
        self._leave_prepare("unsubscribed")
        self._send_leave_or_reset("the consumer unsubscribed", now)
        self.subscription = frozenset()
        self.pattern = None
        self._move(MemberState.UNJOINED)

    def poll_called(self, now) -> bool:
        """The application called poll(): resets the max.poll.interval.ms timer,
        and rejoins after a poll timeout made this member leave. Returns
        whether it rejoins (a request to send: the caller's next poll has work)."""
        self._last_poll = now
        if self._poll_timed_out:
            self._poll_timed_out = False
            if self.subscription and self.state is MemberState.UNJOINED:
                self._request_rejoin("the application polled again after a poll timeout")
                return True
        return False

    def update_metadata(self, partitions_per_topic: dict, now, internal_topics=(), topic_ids=None) -> None:
        """Topic -> partition count from a metadata refresh (all known topics).
        (``topic_ids``, name -> id, matters to the consumer protocol only.)

        Resumes a leader waiting for metadata, re-evaluates a pattern
        subscription, and (leader) rejoins when the partition count of an
        assigned topic changed."""
        self.topic_partitions = dict(partitions_per_topic)
        if self.pattern is not None:
            self._set_subscription(self._matching_topics(internal_topics), now)
        if self.state is MemberState.AWAITING_METADATA:
            self._assign_and_sync(now)
        elif (self._assignment_snapshot is not None and self.state is MemberState.STABLE
              and self._metadata_changed()):
            self._request_rejoin("the partition count of a subscribed topic changed")

    def close(self, now) -> None:
        """Revoke owned partitions and leave (dynamic members only). Keep polling
        until :attr:`closed` is True (the LeaveGroup is sent once, best effort).
        A pending join is not waited for (see :meth:`_send_leave_or_reset`)."""
        if self.state is MemberState.CLOSED:
            return
        if self.state is MemberState.FATAL:
            self._move(MemberState.CLOSED)    # nothing to leave: the group dropped us
            return
        self._closing = True
        self._leave_prepare("the consumer is closing")
        self._send_leave_or_reset("the consumer is being closed", now)
        if self._leave_req is None:
            self._move(MemberState.CLOSED)

    @property
    def closed(self) -> bool:
        return self.state is MemberState.CLOSED

    def _move(self, new: MemberState) -> None:
        """The one place the state changes: only along TRANSITIONS."""
        self.state = checked_move(TRANSITIONS, self.state, new, machine="group membership",
                                  owner=f"group {self.group_id!r}")

    # == queries ======================================================================
    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader_id == self.member_id

    def commit_generation(self):
        """(generation_id, member_id, group_instance_id) for OffsetCommit while
        STABLE (or preparing to rejoin: the pre-rebalance commit still belongs to
        the current generation, as in Java's onJoinPrepare), else None."""
        if self.state in (MemberState.STABLE, MemberState.PREPARING) and self.generation_id >= 0:
            return _Joined(self.generation_id, self.member_id, self.group_instance_id)
        return None

    @property
    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING, MemberState.JOIN_PENDING, MemberState.JOINING,
                              MemberState.AWAITING_METADATA, MemberState.SYNCING)

    def metadata_topics(self) -> frozenset:
        """Topics this member needs metadata for (its subscription; the leader
        also every member's topics)."""
        return self.subscription | self._group_subscription

    def events(self) -> list:
        out, self._events = self._events, []
        return out

    def on_commit_error(self, error, generation, now) -> None:
        """Commits report group errors here (Java resets the generation on
        ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID from OffsetCommit, and
        REBALANCE_IN_PROGRESS asks for a rejoin)."""
        code = getattr(error, "code", None)
        if code in _RESET_GENERATION and generation == self.generation_id:
            self._reset_generation(f"OffsetCommit failed: {error.name}")
            if self.state not in (MemberState.FATAL, MemberState.CLOSED) and not self._closing:
                self._start_prepare(f"OffsetCommit failed: {error.name}")   # this round is dead
        elif code == E.RebalanceInProgressError.code and self.state is MemberState.STABLE:
            self._request_rejoin("OffsetCommit: the group is rebalancing")
        elif code == E.FencedInstanceIdError.code:
            self._fail(error)

    # == driver contract ==============================================================
    def poll(self, now) -> list:
        out = []
        if self._pending_leave is not None:
            out.append(self._pending_leave)    # from close() / unsubscribe()
            self._pending_leave = None
        if self.state in (MemberState.FATAL, MemberState.CLOSED) or self._closing:
            return out                         # closing: only the LeaveGroup answer is awaited
        if not self.subscription and self.state is MemberState.UNJOINED:
            return out
        if self._in_group() and self._poll_expired(now):
            self._on_poll_timeout(now, out)
            return out
        if self.state is MemberState.UNJOINED and self.subscription and not self._poll_timed_out:
            self._request_rejoin("joining the group")
        if not self.coordinator.want(now):
            return out
        if self.state is MemberState.STABLE and self._pending_rejoin_reason:
            reason, self._pending_rejoin_reason = self._pending_rejoin_reason, None
            self._start_prepare(reason)
        if self.state is MemberState.PREPARING:
            if self._run_prepare(now):
                return out                     # revocations first; JoinGroup at the next poll
            if self.state is MemberState.PREPARING:
                return out
        if self.state is MemberState.JOIN_PENDING and now >= self._retry_at:
            out.append(self._join_request(now))
        if self.state is MemberState.AWAITING_METADATA and now >= self._metadata_deadline:
            log.warning("group %r: no metadata for %s; assigning with what is known",
                        self.group_id, sorted(self._group_subscription - self.topic_partitions.keys()))
            self._assign_and_sync(now)
        if self.state is MemberState.SYNCING and self._sync_req is None and self._join_response:
            out.append(self._sync_request(now))
        self._maybe_heartbeat(now, out)
        return out

    def next_deadline(self, now) -> Optional[float]:
        if self.state in (MemberState.FATAL, MemberState.CLOSED) or self._closing:
            return None
        deadlines = []
        if self.state is MemberState.UNJOINED and self.subscription and not self._poll_timed_out:
            deadlines.append(now)
        if self._in_group() and self._last_poll is not None:
            deadlines.append(self._last_poll + self.max_poll_interval_ms)
        if self.state is MemberState.AWAITING_METADATA:
            deadlines.append(self._metadata_deadline)
        # Everything else needs the coordinator; while it is unknown the shared
        # coordinator machine's deadline drives the loop (no busy polling here).
        if self.coordinator.known:
            if self._in_group():
                if self._session_reset_pending:
                    deadlines.append(now)
                if self._hb_req is None and self._hb_next is not None:
                    deadlines.append(self._hb_next)
                if self._session_deadline is not None:
                    deadlines.append(self._session_deadline)
            if self.state is MemberState.JOIN_PENDING:
                deadlines.append(self._retry_at)
            if self.state is MemberState.PREPARING:
                deadlines.append(now + self.retry_backoff_ms)   # re-ask the prepare hook
            if self.state is MemberState.STABLE and self._pending_rejoin_reason:
                deadlines.append(now)
        return max(now, min(deadlines)) if deadlines else None

    def on_response(self, request, body, now) -> None:
        kind = request.api_name
        if kind == "JoinGroup":
            self._on_join_response(request, body, now)
        elif kind == "SyncGroup":
            self._on_sync_response(request, body, now)
        elif kind == "Heartbeat":
            self._on_heartbeat_response(request, body, now)
        elif kind == "LeaveGroup":
            self._on_leave_done(request, body.get("error_code", 0), now)

    def on_failure(self, request, error, now) -> None:
        if isinstance(error, UnsupportedVersionError) and request.api_name != "LeaveGroup":
            # e.g. static membership against a broker older than KIP-345 (Java: fatal).
            return self._fail(error)
        # A failed request to the coordinator (connection closed, timeout) means
        # it is gone as far as we know: rediscover, as Java does.
        self.coordinator.mark_unknown(f"{request.api_name} failed: {error}", now,
                                      request.coordinator_epoch)
        if request is self._join_req:
            self._join_req = None
            self._retry_join(now, backoff=True)
        elif request is self._sync_req:
            self._sync_req = None
            self._join_response = None
            self._retry_join(now, backoff=True)
        elif request is self._hb_req:
            self._hb_req = None
            self._hb_next = now + self.retry_backoff_ms
        elif request is self._leave_req:
            self._on_leave_done(request, None, now)

    # == join-prepare ================================================================
    def _request_rejoin(self, reason) -> None:
        if self.state in (MemberState.FATAL, MemberState.CLOSED) or self._closing:
            return
        if self.state is MemberState.UNJOINED:
            self._start_prepare(reason)
        elif self.state is MemberState.STABLE:
            self._pending_rejoin_reason = reason   # handled by the next poll
        # Already rebalancing: the round in progress picks up the change.

    def _start_prepare(self, reason) -> None:
        log.info("group %r: member %r (re)joining: %s", self.group_id, self.member_id, reason)
        self._round += 1
        self._rejoin_reason = reason
        self._prepare_started = None
        self._revocation_emitted = False
        self._move(MemberState.PREPARING)
        # Answers to an abandoned JoinGroup/SyncGroup/Heartbeat must not complete this round.
        self._join_req = self._sync_req = self._hb_req = None
        self._join_response = None
        self._hb_next = self._session_deadline = None

    def _run_prepare(self, now) -> bool:
        """Advance join-prepare (Java's onJoinPrepare); True when revocations were
        just emitted. Order: the prepare_join hook (auto-commit of positions),
        then revocation, then - if something was revoked - the hook again, so
        commits made by the application's revocation listener finish (with the
        current generation) before the JoinGroup goes out. The whole step is
        bounded by rebalance.timeout.ms."""
        if self._prepare_started is None:
            self._prepare_started = now
        if any(isinstance(e, PartitionsRevoked) for e in self._events):
            # A revocation from a SyncGroup answer (COOPERATIVE) that the
            # driver has not handed out yet: the hook cannot know its listener
            # is still to run, and the JoinGroup must not go before it did.
            return False
        if not self._hook_done(now):
            return False
        if not self._revocation_emitted:
            self._revocation_emitted = True
            if self.protocol is RebalanceProtocol.EAGER:
                revoked = self.assignment
            else:
                revoked = frozenset(tp for tp in self.assignment if tp.topic not in self.subscription)
            if revoked:
                self.assignment = self.assignment - revoked
                self._events.append(PartitionsRevoked(tuple(sorted(revoked))))
                return True                # the listener runs before our next poll
        self._move(MemberState.JOIN_PENDING)
        self._retry_at = now
        return False

    def _hook_done(self, now) -> bool:
        if self.prepare_join is None or self.prepare_join(now, self._round):
            return True
        if now - self._prepare_started < self.rebalance_timeout_ms:
            return False
        log.warning("group %r: commits before the rebalance did not finish within %s ms; "
                    "rejoining anyway", self.group_id, self.rebalance_timeout_ms)
        return True

    # == JoinGroup ====================================================================
    def _join_request(self, now) -> OutgoingRequest:
        protocols = []
        topics = sorted(self.subscription)
        owned = sorted(self.assignment)
        for a in self.assignors:
            protocols.append({"name": a.name, "metadata": encode_subscription(
                topics, a.subscription_user_data(topics, owned, self.generation_id), owned,
                self.generation_id, self.client_rack)})
        body = {"group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": self.group_instance_id, "protocol_type": PROTOCOL_TYPE,
                "protocols": protocols, "reason": self._rejoin_reason}
        req = OutgoingRequest(COORDINATOR, "JoinGroup", body, self,
                              timeout_ms=max(self.request_timeout_ms, self.rebalance_timeout_ms + 5000),
                              coordinator_epoch=self.coordinator.epoch,
                              min_version=5 if self.group_instance_id is not None else 0)
        self._join_req = req
        self._joined_subscription = self.subscription
        self._move(MemberState.JOINING)
        return req

    def _on_join_response(self, request, body, now) -> None:
        if request is not self._join_req:
            return
        self._join_req = None
        code = body.get("error_code", 0)
        if code == 0:
            ptype = body.get("protocol_type")
            if ptype is not None and ptype != PROTOCOL_TYPE:
                return self._fail(E.InconsistentGroupProtocolError(
                    f"JoinGroup answered protocol type {ptype!r}, expected {PROTOCOL_TYPE!r}"))
            self.member_id = body["member_id"]
            self.generation_id = body["generation_id"]
            self.protocol_name = body["protocol_name"]
            self.leader_id = body["leader"]
            self._reset_session(now)
            log.info("group %r: joined generation %s as %s (%s), protocol %s", self.group_id,
                     self.generation_id, self.member_id,
                     "leader" if self.is_leader else "follower", self.protocol_name)
            self._join_response = body
            if self.is_leader and not body.get("skip_assignment"):
                self._prepare_leader_assignment(now)
            else:
                self._assignments = []
                self._move(MemberState.SYNCING)
            return
        error = E.error_for_code(code, body.get("error_message"),
                                 context=f"JoinGroup of group {self.group_id!r}")
        if code == E.MemberIdRequiredError.code:
            # KIP-394: the broker asks us to rejoin with the member id it assigned.
            self.member_id = body["member_id"]
            return self._retry_join(now, backoff=False)
        if code in _RESET_GENERATION:
            self._reset_generation(f"JoinGroup: {error.name}")
            return self._retry_join(now, backoff=False)
        if code == E.RebalanceInProgressError.code:
            return self._retry_join(now, backoff=False)
        if code in COORDINATOR_ERRORS:
            self.coordinator.mark_unknown(f"JoinGroup: {error.name}", now, request.coordinator_epoch)
            return self._retry_join(now, backoff=True)
        if code == E.CoordinatorLoadInProgressError.code:
            return self._retry_join(now, backoff=True)
        # FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
        # INVALID_GROUP_ID, GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, ...
        self._fail(error)

    def _retry_join(self, now, backoff) -> None:
        if self.state in (MemberState.FATAL, MemberState.CLOSED):
            return
        self._move(MemberState.JOIN_PENDING)
        self._retry_at = now + (self.retry_backoff_ms if backoff else 0)
        self._hb_req = None
        self._hb_next = self._session_deadline = None

    # == leader: assignment ===========================================================
    def _prepare_leader_assignment(self, now) -> None:
        self._member_subs = {}
        for m in self._join_response["members"]:
            try:
                self._member_subs[m["member_id"]] = decode_subscription(m["metadata"],
                                                                        m.get("group_instance_id"))
            except KafkaError as exc:
                # One member's broken metadata must not stall the whole group.
                log.warning("group %r: cannot decode the subscription of member %s: %s",
                            self.group_id, m["member_id"], exc)
                self._member_subs[m["member_id"]] = decode_subscription(
                    encode_subscription([]), m.get("group_instance_id"))
        topics = frozenset(t for s in self._member_subs.values() for t in s.topics)
        self._group_subscription = topics
        missing = topics - self.topic_partitions.keys()
        if missing:
            self._move(MemberState.AWAITING_METADATA)
            self._metadata_deadline = now + self.request_timeout_ms
            self._events.append(MetadataNeeded(tuple(sorted(missing))))
        else:
            self._assign_and_sync(now)

    def _assign_and_sync(self, now) -> None:
        assignor = next((a for a in self.assignors if a.name == self.protocol_name), None)
        if assignor is None:
            return self._fail(E.InconsistentGroupProtocolError(
                f"the coordinator chose assignor {self.protocol_name!r}, which this member lacks"))
        counts = {t: self.topic_partitions[t] for t in self._group_subscription
                  if t in self.topic_partitions}
        result = assignor.assign(counts, self._member_subs)
        self._assignment_snapshot = counts
        self._assignments = [{"member_id": m, "assignment": encode_assignment(a.partitions, a.user_data)}
                             for m, a in sorted(result.items())]
        log.info("group %r: leader assigned %s", self.group_id,
                 {m: len(a.partitions) for m, a in result.items()})
        self._move(MemberState.SYNCING)

    def _metadata_changed(self) -> bool:
        snap = self._assignment_snapshot
        for t in self._group_subscription:
            if self.topic_partitions.get(t) != snap.get(t):
                return True
        return False

    # == SyncGroup ====================================================================
    def _sync_request(self, now) -> OutgoingRequest:
        body = {"group_id": self.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol_name,
                "assignments": self._assignments}
        req = OutgoingRequest(COORDINATOR, "SyncGroup", body, self,
                              coordinator_epoch=self.coordinator.epoch, context=self.generation_id,
                              min_version=3 if self.group_instance_id is not None else 0)
        self._sync_req = req
        return req

    def _on_sync_response(self, request, body, now) -> None:
        if request is not self._sync_req:
            return
        self._sync_req = None
        self._join_response = None
        code = body.get("error_code", 0)
        if code:
            error = E.error_for_code(code, None, context=f"SyncGroup of group {self.group_id!r}")
            if code == E.RebalanceInProgressError.code:
                return self._retry_join(now, backoff=False)
            if code in _RESET_GENERATION:
                self._reset_generation(f"SyncGroup: {error.name}")
                return self._retry_join(now, backoff=False)
            if code in COORDINATOR_ERRORS:
                self.coordinator.mark_unknown(f"SyncGroup: {error.name}", now, request.coordinator_epoch)
                return self._retry_join(now, backoff=True)
            return self._fail(error)
        for field, want in (("protocol_type", PROTOCOL_TYPE), ("protocol_name", self.protocol_name)):
            got = body.get(field)
            if got is not None and got != want:
                return self._fail(E.InconsistentGroupProtocolError(
                    f"SyncGroup answered {field} {got!r}, expected {want!r}"))
        try:
            assigned = frozenset(decode_assignment(body["assignment"]).partitions)
        except KafkaError as exc:
            return self._fail(exc)
        self._complete_join(assigned, now)

    def _complete_join(self, assigned, now) -> None:
        if not self.is_leader:
            self._assignment_snapshot = None
            self._group_subscription = frozenset()
        unexpected = frozenset(tp for tp in assigned if tp.topic not in self.subscription)
        if unexpected:
            # Java: the subscription changed during the rebalance; take what we
            # asked for and rejoin so the leader sees the new subscription.
            log.info("group %r: assignment has unsubscribed topics %s; rejoining", self.group_id,
                     sorted({tp.topic for tp in unexpected}))
            assigned = assigned - unexpected
            self._pending_rejoin_reason = "assignment included topics no longer subscribed"
        revoked = self.assignment - assigned
        added = assigned - self.assignment
        self._move(MemberState.STABLE)
        self._reset_session(now)
        if revoked:
            # Only COOPERATIVE gets here (EAGER revoked everything before joining):
            # give these up, then rejoin so their new owner gets them.
            self._events.append(PartitionsRevoked(tuple(sorted(revoked))))
            self._pending_rejoin_reason = "partitions revoked in a cooperative rebalance"
        self.assignment = assigned
        self._events.append(PartitionsAssigned(tuple(sorted(added)), self.generation_id))
        if self._joined_subscription != self.subscription and not self._pending_rejoin_reason:
            self._pending_rejoin_reason = "the subscription changed during the rebalance"

    # == heartbeats ===================================================================
    def _in_group(self) -> bool:
        return self.generation_id >= 0 and self.state in (
            MemberState.STABLE, MemberState.SYNCING, MemberState.AWAITING_METADATA)

    def _reset_session(self, now) -> None:
        self._session_deadline = now + self.session_timeout_ms
        self._hb_next = now + self.heartbeat_interval_ms
        if self._last_poll is None:
            self._last_poll = now

    def _maybe_heartbeat(self, now, out) -> None:
        if not self._in_group() or self._hb_next is None:
            return
        if self._session_reset_pending:
            self._session_reset_pending = False
            self._session_deadline = now + self.session_timeout_ms
            self._hb_next = now
        if now >= self._session_deadline:
            # Java: the coordinator would have expelled us by now; find it again
            # (the heartbeat that follows will learn whether we are still a member).
            self._session_deadline = now + self.session_timeout_ms
            self._hb_req = None
            self.coordinator.mark_unknown("session timed out without a successful heartbeat", now)
            return
        if self._hb_req is not None or now < self._hb_next:
            return
        body = {"group_id": self.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "group_instance_id": self.group_instance_id}
        self._hb_req = OutgoingRequest(COORDINATOR, "Heartbeat", body, self,
                                       coordinator_epoch=self.coordinator.epoch,
                                       context=self.generation_id,
                                       min_version=3 if self.group_instance_id is not None else 0)
        self._hb_next = now + self.heartbeat_interval_ms
        out.append(self._hb_req)

    def _on_heartbeat_response(self, request, body, now) -> None:
        if request is not self._hb_req:
            return
        self._hb_req = None
        code = body.get("error_code", 0)
        if code == 0:
            self._session_deadline = now + self.session_timeout_ms
            self.heartbeats_answered += 1
            return
        error = E.error_for_code(code, None, context=f"Heartbeat of group {self.group_id!r}")
        if code in COORDINATOR_ERRORS:
            self.coordinator.mark_unknown(f"Heartbeat: {error.name}", now, request.coordinator_epoch)
            self._hb_next = now + self.retry_backoff_ms
        elif code == E.RebalanceInProgressError.code:
            if self.state is MemberState.STABLE:
                self._request_rejoin("the coordinator started a rebalance")
        elif code in _RESET_GENERATION:
            if request.context != self.generation_id:
                return                     # about a generation we already left behind
            self._reset_generation(f"Heartbeat: {error.name}")
            self._start_prepare(f"Heartbeat: {error.name}")
        elif code == E.CoordinatorLoadInProgressError.code:
            self._hb_next = now + self.retry_backoff_ms
        else:
            self._fail(error)              # FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED, ...

    # == poll timeout, leaving, resets =================================================
    def _poll_expired(self, now) -> bool:
        return self._last_poll is not None and now - self._last_poll > self.max_poll_interval_ms

    def _on_poll_timeout(self, now, out) -> None:
        log.warning("group %r: the application did not poll within max.poll.interval.ms (%s ms); "
                    "leaving the group", self.group_id, self.max_poll_interval_ms)
        self._poll_timed_out = True
        leave = self._leave_request("consumer poll timeout has expired", now)
        if leave is not None:
            out.append(leave)
        self._reset_generation("consumer poll timeout has expired")
        self._move(MemberState.UNJOINED)

    def _leave_prepare(self, reason) -> None:
        if not self.assignment:
            return
        if self.generation_id < 0 or not self.member_id:
            self._events.append(PartitionsLost(tuple(sorted(self.assignment)), reason))
        else:
            self._events.append(PartitionsRevoked(tuple(sorted(self.assignment))))
        self.assignment = frozenset()

    def _leave_request(self, reason, now, destination=COORDINATOR) -> Optional[OutgoingRequest]:
        """A LeaveGroup for dynamic members that are in the group, else None."""
        if (self.group_instance_id is not None or not self.member_id
                or not self.coordinator.known or self._leave_req is not None):
            return None
        member_id, members = self.member_id, [{"member_id": self.member_id, "group_instance_id": None,
                                               "reason": reason}]
        # v0-2 name the one member leaving; v3+ (KIP-345) a list of members.
        body = (lambda v: {"group_id": self.group_id, "member_id": member_id} if v < 3
                else {"group_id": self.group_id, "members": members})
        self._leave_req = OutgoingRequest(destination, "LeaveGroup", body, self,
                                          coordinator_epoch=self.coordinator.epoch)
        return self._leave_req

    def _send_leave_or_reset(self, reason, now) -> None:
        # A JoinGroup (or SyncGroup) in flight is held by the coordinator until
        # the rebalance completes - with default settings many seconds, up to
        # the rebalance timeout - and the broker answers nothing else on that
        # connection before. A LeaveGroup behind it made close() and Ctrl-C
        # wait for the whole join: it goes around it instead (the join is
        # abandoned; its late answer is ignored), so leaving takes one round trip.
        held = self._join_req is not None or self._sync_req is not None
        leave = self._leave_request(reason, now, COORDINATOR_NODE if held else COORDINATOR)
        if leave is not None:
            self._pending_leave = leave
        self._reset_generation(reason, lost=False)
        self._join_req = self._sync_req = self._hb_req = None
        self._join_response = None

    def _on_leave_done(self, request, code, now) -> None:
        if request is not self._leave_req:
            return
        self._leave_req = None
        if code:
            log.info("group %r: LeaveGroup answered %s", self.group_id, E.error_for_code(code))
        if self._closing and self.state is not MemberState.CLOSED:
            self._move(MemberState.CLOSED)     # (a fatal error may have closed it meanwhile)

    def _reset_generation(self, reason, lost=True) -> None:
        """Forget generation and member id (Java's resetStateAndGeneration);
        owned partitions are lost."""
        log.info("group %r: resetting generation and member id: %s", self.group_id, reason)
        self.generation_id = -1
        self.member_id = ""
        self.leader_id = None
        self._assignment_snapshot = None
        self._group_subscription = frozenset()
        if lost and self.assignment:
            self._events.append(PartitionsLost(tuple(sorted(self.assignment)), reason))
            self.assignment = frozenset()

    def _fail(self, error) -> None:
        if self.state in (MemberState.FATAL, MemberState.CLOSED):
            # A late answer (an OffsetCommit after close(), a second fatal
            # error): a closed member stays closed, a failed one keeps the
            # error the application was told about.
            log.warning("group %r: %s after the member was %s; ignored", self.group_id, error,
                        "closed" if self.state is MemberState.CLOSED else "failed")
            return
        log.error("group %r: fatal group error: %s", self.group_id, error)
        self.fatal_error = error
        self._move(MemberState.FATAL)
        self._join_req = self._sync_req = self._hb_req = None
        self._events.append(GroupFatalError(error))

    # == subscription =================================================================
    def _set_subscription(self, topics, now) -> None:
        if topics == self.subscription:
            return
        self.subscription = topics
        if self.state is MemberState.STABLE:
            self._request_rejoin("the subscription changed")

    def _matching_topics(self, internal_topics=()) -> frozenset:
        internal = set(internal_topics)
        return frozenset(t for t in self.topic_partitions
                         if t not in internal and self.pattern.fullmatch(t))

    def _on_coordinator_event(self, event) -> None:
        # The driver closes the old coordinator connection on CoordinatorLost, which
        # fails our in-flight requests through on_failure; here we only stop
        # expecting a heartbeat answer that may never come, and on a new
        # coordinator heartbeat at once (to learn whether we are still a member)
        # with a fresh session timer.
        if isinstance(event, CoordinatorLost):
            self._hb_req = None
        elif isinstance(event, CoordinatorFound) and self._in_group():
            self._session_reset_pending = True   # applied by the next poll (it has `now`)
        elif (isinstance(event, CoordinatorLookupFailed) and event.fatal and self.subscription
              and not self._closing and self.state not in (MemberState.FATAL, MemberState.CLOSED)):
            # GROUP_AUTHORIZATION_FAILED from FindCoordinator: not retried (Java
            # throws GroupAuthorizationException from poll); as from JoinGroup.
            self._fail(event.error)
