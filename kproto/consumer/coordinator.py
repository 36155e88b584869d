"""Group coordinator discovery: ONE state machine shared by every path.

Why this is its own small machine: KAFKA-13840 (Java 2.6-3.1) - in assign mode
with async or auto commits, once the coordinator became unknown the client never
looked it up again, because the async path kept a finished lookup future as
"in flight". Here the in-flight lookup is explicit state (``LOOKING_UP`` +
the request object) and EVERY way a lookup ends - response, error response,
connection failure, timeout, or a stale answer - goes through ``_end_lookup``
which clears it. Membership, sync/async/auto commits in subscribe and assign
mode all share one instance, so whoever needs the coordinator just calls
:meth:`GroupCoordinator.want`.

States::

    UNKNOWN --poll (wanted, backoff over)--> LOOKING_UP --found--> KNOWN(node)
       ^                                         |  error/failure/timeout
       +------------- (retry backoff) -----------+
    KNOWN --mark_unknown(reason)--> UNKNOWN (looked up again at once, or after the backoff)

Backoff (Java's ``retry.backoff.ms`` / ``retry.backoff.max.ms``, KIP-580): a
failed lookup, and a coordinator lost before it ever answered, count as
failures of one :class:`~kproto.backoff.RetryBackoff`, so the next lookup
waits 100, 200, 400, 800, 1000, 1000... ms (+-20% jitter). A coordinator that
is found but cannot be used - its connection refused, NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE from it, a broker naming a coordinator that is down -
therefore costs one lookup a second, not one per round trip. The count
starts afresh when the coordinator answers a request as the coordinator
(:meth:`confirmed`: the driver calls it for every answer to a request sent
to the coordinator that did not mark it unknown); a coordinator that had
answered, or was kept for longer than the longest backoff, is looked up
again at once when lost, as in Java.

Logging: "coordinator is node N" at INFO when the node changes (DEBUG when
the same one is found again); losses and failed lookups through a
:class:`~kproto.backoff.RateLimitedLog` (the first at its level, then at
most one every :attr:`GroupCoordinator.LOG_INTERVAL_MS` saying how many
were left out).

A lookup answered with a non-retriable error (GROUP_AUTHORIZATION_FAILED)
is not retried: its :class:`CoordinatorLookupFailed` event is ``fatal`` and
the machines waiting for the coordinator fail with that error (the
application gets it from poll or commit, as Java's
GroupAuthorizationException); a later ``want`` looks it up again.

The driver connects to the coordinator under :attr:`connection_id`
(2**31-1 - node id, as Java does) so group traffic has its own connection, and
closes that connection on :class:`CoordinatorLost` (which fails its in-flight
requests, as Java's ``markCoordinatorUnknown`` does).
"""
from __future__ import annotations

import enum
import logging
from typing import NamedTuple, Optional

from kproto import error_codes
from kproto.backoff import RateLimitedLog, RetryBackoff
from kproto.consumer import ANY, OutgoingRequest
from kproto.errors import KafkaError, RequestTimedOutError
from kproto.requests import KEY_TYPE_GROUP, find_coordinator_body

__all__ = ["CoordinatorState", "CoordinatorInfo", "GroupCoordinator", "CoordinatorFound",
           "CoordinatorLost", "CoordinatorLookupFailed", "COORDINATOR_ERRORS"]

log = logging.getLogger(__name__)

#: Error codes meaning "this broker is not (or not yet) the coordinator": the
#: caller marks the coordinator unknown and retries after a fresh lookup.
COORDINATOR_ERRORS = frozenset({
    error_codes.CoordinatorNotAvailableError.code,   # 15
    error_codes.NotCoordinatorError.code,            # 16
})


class CoordinatorState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    LOOKING_UP = "LOOKING_UP"
    KNOWN = "KNOWN"


class CoordinatorInfo(NamedTuple):
    node_id: int
    host: str
    port: int

    @property
    def connection_id(self) -> int:
        # Java: a separate connection id for the coordinator role of a broker.
        return 2**31 - 1 - self.node_id


class CoordinatorFound(NamedTuple):
    coordinator: CoordinatorInfo
    epoch: int


class CoordinatorLost(NamedTuple):
    coordinator: CoordinatorInfo
    reason: str


class CoordinatorLookupFailed(NamedTuple):
    error: KafkaError
    fatal: bool          # not retriable (e.g. GROUP_AUTHORIZATION_FAILED): waiters should fail


class GroupCoordinator:
    """Finds and remembers the coordinator of ``group_id``.

    Inputs: :meth:`want`, :meth:`poll`, :meth:`on_response`, :meth:`on_failure`,
    :meth:`mark_unknown`. Outputs: FindCoordinator requests from ``poll``,
    :meth:`next_deadline`, :meth:`events` (CoordinatorFound / CoordinatorLost /
    CoordinatorLookupFailed), and listeners added with :meth:`add_listener`
    (called synchronously with the same events, so other machines react at
    once). ``epoch`` grows every time a coordinator is found.
    """

    #: at most one "marked unknown" / "lookup failed" line per this many ms (per kind)
    LOG_INTERVAL_MS = 10000

    def __init__(self, group_id: str, *, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000, request_timeout_ms: int = 30000, rng=None):
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.request_timeout_ms = request_timeout_ms
        self.state = CoordinatorState.UNKNOWN
        self.coordinator: Optional[CoordinatorInfo] = None
        self.epoch = 0
        self.last_error: Optional[KafkaError] = None
        self._wanted = False
        self._inflight: Optional[OutgoingRequest] = None
        self._inflight_deadline = None
        #: consecutive failures (lookups, and coordinators lost before they answered)
        self.backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms, rng)
        self._next_lookup_at = 0
        self._found_at = 0
        self._served = False
        self._last_node = None          # the node last logged at INFO
        self._lost_log = RateLimitedLog(log, self.LOG_INTERVAL_MS)
        self._failed_log = RateLimitedLog(log, self.LOG_INTERVAL_MS)
        self._events = []
        self._listeners = []

    # -- queries ---------------------------------------------------------------------
    @property
    def known(self) -> bool:
        return self.state is CoordinatorState.KNOWN

    @property
    def lookup_in_flight(self) -> bool:
        return self._inflight is not None

    @property
    def connection_id(self) -> Optional[int]:
        return None if self.coordinator is None else self.coordinator.connection_id

    def add_listener(self, fn) -> None:
        self._listeners.append(fn)

    def events(self) -> list:
        out, self._events = self._events, []
        return out

    # -- inputs ----------------------------------------------------------------------
    def want(self, now=None) -> bool:
        """Someone needs the coordinator: look it up at the next poll if unknown.
        Returns True when it is known already."""
        if self.known:
            return True
        self._wanted = True
        return False

    def poll(self, now) -> list:
        if self._inflight is not None and now >= self._inflight_deadline:
            # The driver never answered (request lost, no node to send to): give up
            # on this lookup so a new one can start - never wait forever.
            self._end_lookup(RequestTimedOutError(
                f"FindCoordinator for group {self.group_id!r} got no answer within "
                f"{self.request_timeout_ms} ms"), now)
        if (self.state is CoordinatorState.UNKNOWN and self._wanted and self._inflight is None
                and now >= self._next_lookup_at):
            body = find_coordinator_body(self.group_id, KEY_TYPE_GROUP)
            req = OutgoingRequest(ANY, "FindCoordinator", body, self)
            self._inflight = req
            self._inflight_deadline = now + self.request_timeout_ms
            self.state = CoordinatorState.LOOKING_UP
            return [req]
        return []

    def on_response(self, request, body, now) -> None:
        if request is not self._inflight:
            return                           # an abandoned lookup answering late
        found, error = self._parse(body)
        if error is not None:
            self._end_lookup(error, now)
            return
        self._inflight = None
        self._wanted = False
        self.last_error = None
        self.coordinator = found
        self.epoch += 1
        self.state = CoordinatorState.KNOWN
        self._found_at = now
        self._served = False            # the failure count stays until it answers: see confirmed
        log.log(logging.DEBUG if found == self._last_node else logging.INFO,
                "group %r: coordinator is node %s (%s:%s)", self.group_id, *found)
        self._last_node = found
        self._emit(CoordinatorFound(found, self.epoch))

    def confirmed(self, now=None) -> None:
        """The coordinator answered a request as the coordinator (no
        NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, no connection failure):
        the next loss is looked up at once again."""
        if self.state is CoordinatorState.KNOWN:
            self._served = True
            self.backoff.reset()

    def on_failure(self, request, error, now) -> None:
        if request is self._inflight:
            self._end_lookup(error, now)

    def mark_unknown(self, reason: str, now, epoch: Optional[int] = None) -> bool:
        """Forget the coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
        connection loss, request timeout, session timeout).

        ``epoch``: the coordinator epoch the failing request was sent to; a
        report about an older coordinator is ignored. Returns True if forgotten."""
        if self.state is not CoordinatorState.KNOWN:
            return False
        if epoch is not None and epoch >= 0 and epoch != self.epoch:
            return False
        old = self.coordinator
        self.coordinator = None
        self.state = CoordinatorState.UNKNOWN
        self._wanted = True                  # whoever used it still needs one
        # One that served (answered, or was kept for a while) is rediscovered at
        # once, as Java does; one lost before it ever answered (connection
        # refused, NOT_COORDINATOR at once) counts as a failed attempt.
        served = self._served or now - self._found_at >= self.retry_backoff_max_ms
        self._next_lookup_at = now + self.backoff.lost(served)
        self._lost_log.log(now, logging.INFO, "group %r: coordinator %s marked unknown: %s",
                           self.group_id, old, reason)
        self._emit(CoordinatorLost(old, reason))
        return True

    def next_deadline(self, now) -> Optional[float]:
        if self._inflight is not None:
            return self._inflight_deadline
        if self.state is CoordinatorState.UNKNOWN and self._wanted:
            return max(now, self._next_lookup_at)
        return None

    # -- internals -------------------------------------------------------------------
    def _parse(self, body):
        """(CoordinatorInfo, None) or (None, error) for either response shape:
        v4+ has a ``coordinators`` list (batched keys), v0-3 top-level fields."""
        coordinators = body.get("coordinators") or []
        if coordinators:
            entry = next((c for c in coordinators if c.get("key") == self.group_id), coordinators[0])
        else:
            entry = body
        code = entry.get("error_code", 0)
        if code:
            return None, error_codes.error_for_code(
                code, entry.get("error_message"), context=f"FindCoordinator for group {self.group_id!r}")
        if entry.get("node_id", -1) < 0 or not entry.get("host"):
            return None, error_codes.CoordinatorNotAvailableError(
                "FindCoordinator answered without a coordinator node")
        return CoordinatorInfo(entry["node_id"], entry["host"], entry["port"]), None

    def _end_lookup(self, error: KafkaError, now) -> None:
        # The one place a failed lookup ends: the in-flight state is always cleared.
        self._inflight = None
        self._inflight_deadline = None
        self.state = CoordinatorState.UNKNOWN
        self.last_error = error
        self._next_lookup_at = now + self.backoff.failed()
        fatal = not getattr(error, "retriable", False)
        if fatal:
            # Not retried (Java: GroupAuthorizationException): waiters fail
            # with the error; a later want() looks it up again, after the backoff.
            self._wanted = False
        self._failed_log.log(now, logging.WARNING if fatal else logging.INFO,
                             "group %r: coordinator lookup failed: %s", self.group_id, error)
        self._emit(CoordinatorLookupFailed(error, fatal))

    def _emit(self, event) -> None:
        self._events.append(event)
        for fn in list(self._listeners):
            fn(event)
