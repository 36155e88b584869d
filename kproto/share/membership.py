"""Share group membership (KIP-932): the ShareGroupHeartbeat state machine.

The broker assigns partitions (its ``share.assignor``; many members may get
the same partition), so a member only says what it subscribes to and takes
the assignment it is given: there is no revocation to acknowledge, unlike
the consumer protocol. States::

    UNSUBSCRIBED --subscribe--> JOINING (epoch 0) --answer--> STABLE (epoch n)
    STABLE --heartbeat every heartbeat_interval_ms (the broker's)--> STABLE
    JOINING/STABLE --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> JOINING (epoch 0, same member id,
                                                                   assignment lost)
    JOINING/STABLE --leave()--> LEAVING (epoch -1) --answer or failure--> LEFT
    UNSUBSCRIBED, or JOINING with no heartbeat in flight --leave()--> LEFT (nothing to tell)
    JOINING/STABLE --fatal error (authorization, group full, ...)--> FAILED (for good)

:data:`TRANSITIONS` is the complete table; no other move is made.

The member id is made here (a random UUID, as KIP-1082 has clients do), so
a member that rejoins after being fenced keeps its id.
"""
from __future__ import annotations

import enum
import logging
import uuid
from typing import Dict, FrozenSet, List, NamedTuple, Optional

from kproto import error_codes
from kproto.consumer import COORDINATOR, OutgoingRequest
from kproto.backoff import RetryBackoff
from kproto.consumer.coordinator import COORDINATOR_ERRORS, CoordinatorLookupFailed, GroupCoordinator
from kproto.consumer.membership import GroupError
from kproto.errors import KafkaError, UnsupportedVersionError
from kproto.statemachine import checked_move

__all__ = ["ShareMembership", "ShareMemberState", "AssignmentChanged", "ShareGroupFatalError"]

log = logging.getLogger(__name__)
E = error_codes

LEAVE_EPOCH = -1
#: Heartbeat interval while the member has no partitions yet (see on_response).
JOINING_HEARTBEAT_MS = 500
_FENCED = frozenset({E.FencedMemberEpochError.code, E.UnknownMemberIdError.code})
_LOADING = E.CoordinatorLoadInProgressError.code


class ShareMemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    STABLE = "STABLE"
    LEAVING = "LEAVING"
    LEFT = "LEFT"
    FAILED = "FAILED"


_S = ShareMemberState
#: The share membership machine's transition table (as h11's ``_state.py``):
#: the states each state may move to, and the event that moves it.
#: ``ShareMembership._move`` refuses any other move (IllegalStateTransitionError).
TRANSITIONS = {
    _S.UNSUBSCRIBED: frozenset({
        _S.JOINING,              # subscribe()
        _S.LEFT}),               # leave() before ever subscribing
    _S.JOINING: frozenset({
        _S.STABLE,               # the broker answered with a member epoch
        _S.JOINING,              # fenced again before the first answer: rejoin with epoch 0
        _S.LEAVING,              # leave() with a heartbeat in flight (the member id may be known)
        _S.LEFT,                 # leave() with no heartbeat in flight: the broker does not know us
        _S.FAILED}),             # a non-retriable error, a broker without share groups
    _S.STABLE: frozenset({
        _S.STABLE,               # every answered heartbeat (new epoch, new assignment)
        _S.JOINING,              # FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: rejoin with epoch 0
        _S.LEAVING,              # leave()
        _S.FAILED}),
    _S.LEAVING: frozenset({
        _S.LEFT}),               # the leave heartbeat was answered or failed
    _S.LEFT: frozenset({
        _S.JOINING}),            # subscribe() again, or the one that came while leaving
    _S.FAILED: frozenset(),      # for good: subscribe() raises the error
}


class AssignmentChanged(NamedTuple):
    """The broker's new assignment: {topic id: frozenset of partitions}
    (empty when the member lost it: fenced, left)."""
    assignment: Dict[uuid.UUID, FrozenSet[int]]


class ShareGroupFatalError(NamedTuple):
    error: KafkaError


class ShareMembership:
    """Inputs: :meth:`subscribe`, :meth:`leave`, :meth:`poll`,
    :meth:`on_response`, :meth:`on_failure`. Outputs: requests from ``poll``,
    :meth:`next_deadline`, :meth:`events` (AssignmentChanged,
    ShareGroupFatalError, GroupError)."""

    def __init__(self, coordinator: GroupCoordinator, group_id: str, *, member_id: Optional[str] = None,
                 rack_id: Optional[str] = None, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 request_timeout_ms: int = 30000, rng=None):
        self.coordinator = coordinator
        self.group_id = group_id
        self.member_id = member_id or str(uuid.uuid4())
        self.rack_id = rack_id or None
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.request_timeout_ms = request_timeout_ms
        self.state = ShareMemberState.UNSUBSCRIBED   # changed only by _move (see TRANSITIONS)
        self.epoch = 0
        self.subscription: List[str] = []
        self.assignment: Dict[uuid.UUID, FrozenSet[int]] = {}
        self.heartbeat_interval_ms = 5000         # until the broker says
        self.error: Optional[KafkaError] = None
        self._send_subscription = True            # the next heartbeat names the topics
        self._next_heartbeat_at: Optional[float] = None
        self._inflight: Optional[OutgoingRequest] = None
        self._backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms, rng)
        self._rejoin = False                      # subscribe() came while leaving
        self._events: list = []
        coordinator.add_listener(self._on_coordinator_event)

    # -- inputs -------------------------------------------------------------------------
    def subscribe(self, topics, now) -> None:
        topics = sorted(set(topics))
        if self.state is ShareMemberState.FAILED:
            raise self.error or KafkaError(f"share group {self.group_id!r}: the member failed")
        if topics == self.subscription and self.state in (ShareMemberState.JOINING, ShareMemberState.STABLE):
            return
        self.subscription = topics
        self._send_subscription = True
        if self.state is ShareMemberState.LEAVING:
            self._rejoin = True                      # after the leave is answered (unsubscribe, subscribe)
            return
        if self.state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.LEFT):
            self._move(ShareMemberState.JOINING)
            self.epoch = 0
        self._next_heartbeat_at = now                # tell the broker at once

    def leave(self, now) -> None:
        """Leave the group (epoch -1): the broker gives our partitions'
        share to the others at once instead of after the session timeout."""
        if self.state in (ShareMemberState.LEFT, ShareMemberState.FAILED, ShareMemberState.LEAVING):
            return
        if self.state is ShareMemberState.UNSUBSCRIBED or (
                self.state is ShareMemberState.JOINING and self._inflight is None):
            self._left()                             # the broker does not know this member (yet / any more)
            return
        self._move(ShareMemberState.LEAVING)
        self._next_heartbeat_at = now
        # A heartbeat in flight is answered first (a broker answers a
        # connection's requests in order); the leave goes after it.

    @property
    def done(self) -> bool:
        """Left the group (or never joined, or failed)."""
        return self.state in (ShareMemberState.LEFT, ShareMemberState.FAILED, ShareMemberState.UNSUBSCRIBED)

    def events(self) -> list:
        out, self._events = self._events, []
        return out

    def poll(self, now) -> List[OutgoingRequest]:
        if self.state not in (ShareMemberState.JOINING, ShareMemberState.STABLE, ShareMemberState.LEAVING):
            return []
        if self._inflight is not None or self._next_heartbeat_at is None or now < self._next_heartbeat_at:
            return []
        if not self.coordinator.want(now):
            return []
        leaving = self.state is ShareMemberState.LEAVING
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": LEAVE_EPOCH if leaving else self.epoch, "rack_id": self.rack_id,
                "subscribed_topic_names": list(self.subscription)
                if (self._send_subscription or self.epoch == 0) and not leaving else None}
        req = OutgoingRequest(COORDINATOR, "ShareGroupHeartbeat", body, self,
                              coordinator_epoch=self.coordinator.epoch, context=leaving)
        self._inflight = req
        self._next_heartbeat_at = None
        return [req]

    def on_response(self, request, body, now) -> None:
        if request is not self._inflight:
            return
        self._inflight = None
        code = body.get("error_code", 0)
        if self.state is ShareMemberState.LEAVING:
            if not request.context:                  # the heartbeat before the leave: now leave
                self._next_heartbeat_at = now
                return
            if code:
                log.info("share group %r: leaving answered %s (left anyway)", self.group_id,
                         E.error_for_code(code, body.get("error_message")))
            self._left()
            return
        if code:
            self._on_error(code, body.get("error_message"), request, now)
            return
        self._backoff.reset()
        self._send_subscription = False
        self.epoch = body["member_epoch"]
        if body.get("heartbeat_interval_ms", 0) > 0:
            self.heartbeat_interval_ms = body["heartbeat_interval_ms"]
        self._move(ShareMemberState.STABLE)
        assignment = body.get("assignment")
        if assignment is not None:
            new = {tp["topic_id"]: frozenset(tp["partitions"]) for tp in assignment["topic_partitions"]
                   if tp["partitions"]}
            if new != self.assignment:
                self.assignment = new
                self._events.append(AssignmentChanged(dict(new)))
        interval = self.heartbeat_interval_ms
        if not self.assignment and self.subscription:
            # The broker assigns after the join, asynchronously: its first
            # answers carry an empty assignment. Ask again soon rather than a
            # whole interval (5 s by default) later, until partitions come.
            interval = min(interval, JOINING_HEARTBEAT_MS)
        self._next_heartbeat_at = now + interval

    def on_failure(self, request, error, now) -> None:
        if request is not self._inflight:
            return
        self._inflight = None
        if self.state is ShareMemberState.LEAVING:
            if request.context:
                self._left()                          # best effort: the session timeout does the rest
            else:
                self._next_heartbeat_at = now
            return
        if isinstance(error, UnsupportedVersionError):
            # The broker has no ShareGroupHeartbeat at all (before Kafka 4.1,
            # share groups off, another implementation): no retry helps.
            self._fail(UnsupportedVersionError(
                f"share group {self.group_id!r}: the broker does not support share groups "
                f"(KIP-932, Apache Kafka 4.1 and later): {error}"))
            return
        self.coordinator.mark_unknown(f"ShareGroupHeartbeat failed: {error}", now, request.coordinator_epoch)
        self._retry(now)

    def next_deadline(self, now) -> Optional[float]:
        if self._inflight is not None or self._next_heartbeat_at is None:
            return None                               # an answer (I/O) or an input comes first
        if self.state not in (ShareMemberState.JOINING, ShareMemberState.STABLE, ShareMemberState.LEAVING):
            return None
        if not self.coordinator.known:
            return None                               # the coordinator's own deadline drives the lookup
        return max(now, self._next_heartbeat_at)

    # -- internals ----------------------------------------------------------------------
    def _on_error(self, code, message, request, now):
        err = E.error_for_code(code, message, context=f"ShareGroupHeartbeat of group {self.group_id!r}")
        if code in COORDINATOR_ERRORS:
            self.coordinator.mark_unknown(str(err), now, request.coordinator_epoch)
            self._next_heartbeat_at = now
        elif code == _LOADING:
            self._retry(now)
        elif code in _FENCED:
            # The broker dropped us (session timed out, stale epoch): whatever
            # we held is someone else's now; rejoin with the same member id.
            log.info("share group %r: %s; rejoining", self.group_id, err)
            self.epoch = 0
            self._move(ShareMemberState.JOINING)
            self._send_subscription = True
            if self.assignment:
                self.assignment = {}
                self._events.append(AssignmentChanged({}))
            self._next_heartbeat_at = now
        elif err.retriable:
            self._retry(now)
        elif code == E.TopicAuthorizationFailedError.code:
            # A subscribed topic without a DESCRIBE ACL: as Java (4.x), the
            # member stays and retries (an ACL added later lets it in); the
            # application hears of it from poll meanwhile.
            log.error("%s", err)
            self._events.append(GroupError(err))
            self._retry(now)
        else:
            # GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST,
            # UNSUPPORTED_VERSION...: no retry helps.
            self._fail(err)

    def _move(self, new: ShareMemberState) -> None:
        """The one place the state changes: only along TRANSITIONS."""
        self.state = checked_move(TRANSITIONS, self.state, new, machine="share group membership",
                                  owner=f"share group {self.group_id!r}")

    def _fail(self, err):
        log.error("%s", err)
        self.error = err
        self._move(ShareMemberState.FAILED)
        if self.assignment:
            self.assignment = {}
            self._events.append(AssignmentChanged({}))
        self._events.append(ShareGroupFatalError(err))

    def _retry(self, now):
        self._next_heartbeat_at = now + self._backoff.failed()

    def _on_coordinator_event(self, event) -> None:
        if not (isinstance(event, CoordinatorLookupFailed) and event.fatal):
            return
        # GROUP_AUTHORIZATION_FAILED from FindCoordinator: not retried, as from
        # the heartbeat (Java: GroupAuthorizationException from poll).
        if self.state in (ShareMemberState.JOINING, ShareMemberState.STABLE):
            self._fail(event.error)
        elif self.state is ShareMemberState.LEAVING:
            self._inflight = None
            self._left()                              # nothing to tell a coordinator we cannot find

    def _left(self):
        self._move(ShareMemberState.LEFT)
        self.epoch = LEAVE_EPOCH
        if self.assignment:
            self.assignment = {}
            self._events.append(AssignmentChanged({}))
        if self._rejoin:
            self._rejoin = False
            self._move(ShareMemberState.JOINING)
            self.epoch = 0
            self._send_subscription = True
            self._next_heartbeat_at = 0
