"""Consumer group membership with the KIP-848 consumer protocol
(``group.protocol=consumer``): ConsumerGroupHeartbeat (api key 68) as a
sans-IO state machine.

It has the same interface and emits the same events as the classic
:class:`~kproto.consumer.membership.GroupMembership`, so the consumer core and
the drivers choose the class from the configuration and need nothing else.
What differs is the protocol, as in Java's ``ConsumerMembershipManager``:

* **joining**: the client makes up its member id (a random UUID, kept for the
  life of the consumer, also across fencing and rejoining, as Java 4.x does)
  and heartbeats with member epoch 0 and every field. The broker computes the
  assignment itself (``group.remote.assignor``: ``uniform`` or ``range``;
  unset: the broker's default) and answers with the member epoch, the
  heartbeat interval and the target assignment by topic id;
* **heartbeats** every ``heartbeat_interval_ms`` the broker gave. A field
  that did not change since the last heartbeat is sent as null (KIP-848:
  null means unchanged); after an error, a rejoin or a failed request
  everything is sent again;
* **reconciliation** of a new target assignment: partitions dropped from it
  are revoked first - the ``prepare_join`` hook commits the consumed
  positions with auto-commit, :class:`PartitionsRevoked` goes to the
  application's listener and the hook waits until it ran and its commits
  finished - then the added partitions are assigned
  (:class:`PartitionsAssigned`) once metadata names their topic ids
  (:class:`MetadataNeeded` asks for a refresh when an id is unknown), then
  the next heartbeat, sent at once, acknowledges what the member owns now;
* **fencing**: FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID mean the broker gave
  the partitions away: they are reported lost (no commit) and the member
  rejoins with epoch 0 and the same member id;
* **leaving**: a heartbeat with member epoch -1 (-2 for a static member,
  ``group.instance.id``, whose assignment the broker keeps for its session
  timeout so the same instance gets it back). A member that does not poll
  within max.poll.interval.ms leaves this way, reports its partitions lost
  and rejoins on the next poll, as Java does;
* **regex subscriptions** are resolved by the broker (``subscribed_topic_regex``,
  Java's RE2J syntax): :func:`to_broker_regex` converts and checks a Python
  pattern;
* commits carry the member epoch as ``generation_id_or_member_epoch``
  (OffsetCommit v9) and the member id: see :meth:`commit_generation`.

The coordinator's errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
connection loss) mark the shared coordinator unknown and the heartbeat is
retried after the lookup; COORDINATOR_LOAD_IN_PROGRESS after a backoff;
other errors (GROUP_AUTHORIZATION_FAILED, UNRELEASED_INSTANCE_ID,
FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION,
GROUP_MAX_SIZE_REACHED, a broker without the API, ...) are fatal.

States (:class:`ConsumerMemberState`) change only along :data:`TRANSITIONS`,
the complete table of moves with the event behind each.
"""
from __future__ import annotations

import base64
import enum
import logging
import re
import uuid
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Pattern, Tuple, Union

from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.consumer import COORDINATOR, OutgoingRequest
from kproto.consumer.coordinator import (
    COORDINATOR_ERRORS, CoordinatorFound, CoordinatorLookupFailed, CoordinatorLost,
)
from kproto.consumer.membership import (
    GroupError, GroupFatalError, MetadataNeeded, PartitionsAssigned, PartitionsLost, PartitionsRevoked, _Joined,
)
from kproto.errors import KafkaError, UnsupportedVersionError
from kproto.statemachine import checked_move

__all__ = ["ConsumerProtocolMembership", "ConsumerMemberState", "to_broker_regex", "new_member_id",
           "LEAVE_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_STATIC_MEMBER_EPOCH"]

log = logging.getLogger(__name__)
E = error_codes

#: Member epochs of a leaving member (KIP-848): a dynamic member leaves for
#: good; a static one only "temporarily" (the broker keeps its assignment).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

_FENCED = {E.FencedMemberEpochError.code, E.UnknownMemberIdError.code}


class ConsumerMemberState(enum.Enum):
    UNJOINED = "UNJOINED"        # not in the group (no subscription, left, or poll timeout)
    JOINING = "JOINING"          # heartbeating with epoch 0 until the broker gives an epoch
    STABLE = "STABLE"            # in the group; owned partitions match what was reconciled
    RECONCILING = "RECONCILING"  # revoking / assigning towards a new target assignment
    FATAL = "FATAL"
    CLOSED = "CLOSED"


_C = ConsumerMemberState
#: The KIP-848 membership machine's transition table (as h11's ``_state.py``):
#: the states each state may move to, and the event that moves it.
#: ``ConsumerProtocolMembership._move`` refuses any other move
#: (IllegalStateTransitionError). Leaving - unsubscribe(), close(), a poll
#: timeout, being fenced - always passes through UNJOINED.
TRANSITIONS = {
    _C.UNJOINED: frozenset({
        _C.JOINING,              # subscribed, polled after a poll timeout, or rejoining after fencing
        _C.UNJOINED,             # unsubscribe() or close() when already out of the group
        _C.FATAL,                # OffsetCommit answered FENCED_INSTANCE_ID
        _C.CLOSED}),             # close(): nothing to leave, or the leave heartbeat was answered
    _C.JOINING: frozenset({
        _C.STABLE,               # the broker answered with a member epoch
        _C.UNJOINED,             # fenced (rejoins at once), unsubscribe(), close()
        _C.FATAL}),              # a non-retriable heartbeat error, a broker without the API
    _C.STABLE: frozenset({
        _C.RECONCILING,          # a new target assignment (or the first, even an empty one)
        _C.UNJOINED,             # fenced, poll timeout, unsubscribe(), close()
        _C.FATAL}),
    _C.RECONCILING: frozenset({
        _C.STABLE,               # revoked and assigned: the next heartbeat acknowledges
        _C.UNJOINED,             # fenced, poll timeout, unsubscribe(), close()
        _C.FATAL}),
    _C.FATAL: frozenset({
        _C.UNJOINED,             # unsubscribe(): the application starts over
        _C.CLOSED}),             # close()
    _C.CLOSED: frozenset(),      # for good: a new member is needed
}


def new_member_id() -> str:
    """A member id as the Java client makes one (``Uuid.randomUuid()``: 16
    random bytes in URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


# Constructs of Python's ``re`` that Java's RE2J (the broker's regex engine)
# lacks: RE2 guarantees linear time, so it has no backtracking features.
_UNSUPPORTED_GROUPS = (
    ("(?=", "lookahead"), ("(?!", "negative lookahead"), ("(?<=", "lookbehind"),
    ("(?<!", "negative lookbehind"), ("(?P=", "named backreference"), ("(?(", "conditional group"),
    ("(?>", "atomic group"), ("(?#", "comment group"),
)
_RE2_FLAGS = set("imsU")


def to_broker_regex(pattern: Union[str, Pattern[str]]) -> str:
    """The broker-side regular expression (KIP-848 ``subscribed_topic_regex``,
    evaluated by the broker with RE2J against whole topic names) for a Python
    pattern string or compiled pattern.

    The common subset - literals, ``.``, classes, ``* + ? {m,n}`` and their
    lazy forms, alternation, groups (also ``(?P<name>...)`` and ``(?:...)``),
    anchors, ``\\d \\w \\s \\b`` - means the same in both. ``\\Z`` becomes
    RE2J's ``\\z``; the flags IGNORECASE, MULTILINE and DOTALL become inline
    flags. Raises :class:`~kproto.error_codes.InvalidRegularExpressionError`
    for what RE2J cannot express (lookaround, backreferences, conditionals,
    atomic groups, possessive quantifiers, VERBOSE) and for patterns Python
    itself rejects. (``\\d``/``\\w`` are ASCII-only in RE2J; topic names are
    ASCII, so that never changes a match.)"""
    flags = 0
    if isinstance(pattern, re.Pattern):
        flags = pattern.flags
        pattern = pattern.pattern
    if isinstance(pattern, bytes) or not isinstance(pattern, str):
        raise E.InvalidRegularExpressionError(
            f"a topic pattern must be a str or a compiled str pattern, not {type(pattern).__name__}")
    if not pattern:
        raise E.InvalidRegularExpressionError("the topic pattern is empty")
    try:
        re.compile(pattern, flags)
    except re.error as exc:
        raise E.InvalidRegularExpressionError(f"invalid topic pattern {pattern!r}: {exc}") from None
    if flags & re.VERBOSE:
        raise E.InvalidRegularExpressionError(
            f"topic pattern {pattern!r}: re.VERBOSE has no equivalent in the broker's RE2J syntax")
    out = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            if not in_class and nxt.isdigit() and nxt != "0":
                raise _unsupported(pattern, f"backreference \\{nxt}")
            if nxt == "Z" and not in_class:
                out.append("\\z")                 # Python's end of text; \Z means something else in RE2J
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            # a ']' right after '[' or '[^' is a literal member of the class
            if pattern[i:i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i:i + 1] == "]":
                out.append("]")
                i += 1
            continue
        if ch == "(" and pattern[i + 1:i + 2] == "?":
            for prefix, what in _UNSUPPORTED_GROUPS:
                if pattern.startswith(prefix, i):
                    raise _unsupported(pattern, what)
            m = re.match(r"\(\?([a-zA-Z]+)(?=[:)-])", pattern[i:])
            if m and not set(m.group(1)) <= _RE2_FLAGS:
                raise _unsupported(pattern, f"inline flags (?{m.group(1)})")
        if ch in "*+?}" and pattern[i + 1:i + 2] == "+" and out and out[-1] != "\\":
            raise _unsupported(pattern, f"possessive quantifier {ch}+")
        out.append(ch)
        i += 1
    prefix = "".join(f for f, bit in (("i", re.IGNORECASE), ("m", re.MULTILINE), ("s", re.DOTALL))
                     if flags & bit)
    body = "".join(out)
    return f"(?{prefix}){body}" if prefix else body


def _unsupported(pattern: str, what: str) -> KafkaError:
    return E.InvalidRegularExpressionError(
        f"topic pattern {pattern!r} uses {what}, which the broker's regular expressions (RE2J, "
        f"group.protocol=consumer) do not support")


class ConsumerProtocolMembership:
    """One member of a consumer group under the KIP-848 protocol (subscribe
    mode). Same contract as :class:`~kproto.consumer.membership.GroupMembership`;
    see the module docstring.

    ``prepare_join``: ``hook(now, round) -> bool``, True once the work due
    before partitions are revoked (auto-commit, and the application's
    revocation listener with its commits) is finished; asked with the same
    ``round`` until then, for at most the rebalance timeout (max.poll.interval.ms).
    """

    def __init__(self, coordinator: Any, *, max_poll_interval_ms: int = 300000,
                 rebalance_timeout_ms: Optional[int] = None, group_instance_id: Optional[str] = None,
                 remote_assignor: Optional[str] = None, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30000, client_rack: Optional[str] = None,
                 prepare_join: Optional[Callable[[float, int], bool]] = None,
                 member_id: Optional[str] = None) -> None:
        self.coordinator = coordinator
        self.group_id: str = coordinator.group_id
        self.max_poll_interval_ms = max_poll_interval_ms
        # Java: the rebalance timeout the broker allows for a revocation is max.poll.interval.ms.
        self.rebalance_timeout_ms = rebalance_timeout_ms or max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.remote_assignor = remote_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.client_rack = client_rack
        self.prepare_join = prepare_join

        self.state = ConsumerMemberState.UNJOINED   # changed only by _move (see TRANSITIONS)
        self.member_id: str = member_id or new_member_id()
        self.member_epoch = 0
        self.fatal_error: Optional[KafkaError] = None
        self.assignment: FrozenSet[TopicPartition] = frozenset()   # owned now
        self.subscription: FrozenSet[str] = frozenset()
        self.pattern: Optional[Pattern[str]] = None      # local matching, for subscription()
        self.regex: Optional[str] = None                 # what the broker evaluates
        self.topic_partitions: Dict[str, int] = {}
        self.heartbeat_interval_ms: Optional[int] = None   # the broker's, from its answers
        #: successful heartbeat answers so far (commits waiting for a fresh
        #: member epoch after STALE_MEMBER_EPOCH watch it)
        self.heartbeats_answered = 0
        self._names: Dict[Any, str] = {}                 # topic id -> name (metadata)
        self._owned: Dict[Any, FrozenSet[int]] = {}      # what we own, by topic id (acknowledged)
        self._owned_name_by_id: Dict[Any, str] = {}      # their names when they were assigned
        self._target: Optional[Dict[Any, FrozenSet[int]]] = None   # latest target from the broker
        self._rec: Optional[Dict[str, Any]] = None                 # reconciliation in progress
        self._first_reconcile = True
        self._metadata_asked = False
        self._sent: Optional[Dict[str, Any]] = None                # fields of the last heartbeat; None: send all
        self._hb_req: Optional[OutgoingRequest] = None
        self._hb_next: Optional[float] = None
        self._ack_needed = False
        self._join_sent = False                          # a heartbeat with epoch 0 went out
        self._leave_req: Optional[OutgoingRequest] = None
        self._pending_leave: Optional[OutgoingRequest] = None
        self._closing = False
        self._last_poll: Optional[float] = None
        self._poll_timed_out = False
        self._round = 0
        self._events: List[Any] = []
        coordinator.add_listener(self._on_coordinator_event)

    # == application inputs ==========================================================
    def subscribe(self, topics: Any, now: float) -> None:
        """Subscribe to these topic names (replaces the subscription)."""
        self.pattern = None
        changed, self.regex = self.regex is not None, None
        self._set_subscription(frozenset(topics), now, changed)

    def subscribe_pattern(self, pattern: Union[str, Pattern[str]], now: float) -> None:
        """Subscribe to every topic whose whole name matches ``pattern``; the
        broker evaluates it (see :func:`to_broker_regex` for what converts)."""
        regex = to_broker_regex(pattern)             # raises before anything changes
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        changed, self.regex = regex != self.regex, regex
        self._set_subscription(self._matching_topics(), now, changed)

    def unsubscribe(self, now: float) -> None:
        """Give up every partition and leave the group. Nothing on a closed
        member: it left for good (it must stay closed)."""
        if self.state is ConsumerMemberState.CLOSED:
            return
        self._leave_prepare("the consumer unsubscribed")
        self._send_leave(now)
        self.subscription = frozenset()
        self.pattern = self.regex = None
        self._move(ConsumerMemberState.UNJOINED)

    def poll_called(self, now: float) -> bool:
        """The application polled: resets the max.poll.interval.ms timer and,
        after a poll timeout made the member leave, rejoins. Returns whether
        it rejoins (a request to send: the caller's next poll has work)."""
        self._last_poll = now
        if self._poll_timed_out:
            self._poll_timed_out = False
            log.info("group %r: the application polled again after a poll timeout; rejoining",
                     self.group_id)
            self._join_if_needed()
            return True
        return False

    def update_metadata(self, partitions_per_topic: Dict[str, int], now: float,
                        internal_topics: Any = (), topic_ids: Optional[Dict[str, Any]] = None) -> None:
        """Topic -> partition count (and topic name -> id) from a metadata
        refresh: names the topic ids of an assignment waiting for them and
        re-evaluates the local view of a pattern subscription."""
        self.topic_partitions = dict(partitions_per_topic)
        if topic_ids:
            for name, tid in topic_ids.items():
                self._names[tid] = name
        if self.pattern is not None:
            self.subscription = self._matching_topics(internal_topics)
        self._metadata_asked = False
        if self.state is ConsumerMemberState.STABLE:
            self._maybe_reconcile(now)

    def close(self, now: float) -> None:
        """Revoke the owned partitions and leave (epoch -1, static members -2).
        Keep polling until :attr:`closed`."""
        if self.state is ConsumerMemberState.CLOSED:
            return
        if self.state is ConsumerMemberState.FATAL:
            self._move(ConsumerMemberState.CLOSED)    # nothing to leave: the group dropped us
            return
        self._closing = True
        self._leave_prepare("the consumer is closing")
        self._send_leave(now)
        if self._leave_req is None:
            self._move(ConsumerMemberState.CLOSED)

    @property
    def closed(self) -> bool:
        return self.state is ConsumerMemberState.CLOSED

    def _move(self, new: ConsumerMemberState) -> None:
        """The one place the state changes: only along TRANSITIONS."""
        self.state = checked_move(TRANSITIONS, self.state, new, machine="consumer group membership",
                                  owner=f"group {self.group_id!r}")

    # == queries ======================================================================
    @property
    def generation_id(self) -> int:
        """The member epoch (what the classic protocol calls the generation)."""
        return self.member_epoch

    def commit_generation(self) -> Optional[_Joined]:
        """(member epoch, member id, group instance id) for OffsetCommit while
        the member is in the group, else None."""
        if self.member_epoch > 0 and self.state in (ConsumerMemberState.STABLE,
                                                    ConsumerMemberState.RECONCILING):
            return _Joined(self.member_epoch, self.member_id, self.group_instance_id)
        return None

    @property
    def rebalance_in_progress(self) -> bool:
        return self.state in (ConsumerMemberState.JOINING, ConsumerMemberState.RECONCILING)

    def metadata_topics(self) -> FrozenSet[str]:
        return self.subscription

    def events(self) -> List[Any]:
        out, self._events = self._events, []
        return out

    def on_commit_error(self, error: KafkaError, generation: Optional[int], now: float) -> None:
        """OffsetCommit answered a group error: STALE_MEMBER_EPOCH,
        FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID make the member heartbeat
        at once (its answer brings the current epoch, or fences the member
        properly); FENCED_INSTANCE_ID is fatal."""
        code = getattr(error, "code", None)
        if code == E.FencedInstanceIdError.code:
            self._fail(error)
        elif code in _FENCED or code == E.StaleMemberEpochError.code:
            if self._hb_next is not None:
                self._hb_next = min(self._hb_next, now)

    # == driver contract ==============================================================
    def poll(self, now: float) -> List[Any]:
        out: List[Any] = []
        if self._pending_leave is not None:
            out.append(self._pending_leave)
            self._pending_leave = None
        if self.state in (ConsumerMemberState.FATAL, ConsumerMemberState.CLOSED) or self._closing:
            return out
        if self.state is ConsumerMemberState.UNJOINED:
            if (not self.subscription and self.regex is None) or self._poll_timed_out:
                return out
            self._join_if_needed()
        if self._in_group() and self._poll_expired(now):
            self._on_poll_timeout(now, out)
            return out
        if not self.coordinator.want(now):
            return out
        if self.state is ConsumerMemberState.RECONCILING:
            self._advance_reconciliation(now)
        self._maybe_heartbeat(now, out)
        return out

    def next_deadline(self, now: float) -> Optional[float]:
        if self.state in (ConsumerMemberState.FATAL, ConsumerMemberState.CLOSED) or self._closing:
            return None
        ds = []
        if self._pending_leave is not None:
            ds.append(now)
        if self.state is ConsumerMemberState.UNJOINED:
            return max(now, min(ds)) if ds else None
        if self._in_group() and self._last_poll is not None:
            ds.append(self._last_poll + self.max_poll_interval_ms)
        if self.coordinator.known:
            if self._hb_req is None and self._hb_next is not None:
                ds.append(now if self._ack_needed else self._hb_next)
            if self.state is ConsumerMemberState.RECONCILING:
                # a fresh step at once; then re-ask the hook
                fresh = self._rec is not None and self._rec["phase"] in ("commit", "assign") \
                    and not self._rec.get("asked")
                ds.append(now if fresh else now + self.retry_backoff_ms)
        return max(now, min(ds)) if ds else None

    def on_response(self, request: OutgoingRequest, body: Dict[str, Any], now: float) -> None:
        if request is self._leave_req:
            self._on_leave_done(body.get("error_code", 0))
        elif request is self._hb_req:
            self._hb_req = None
            self._on_heartbeat_response(request, body, now)

    def on_failure(self, request: OutgoingRequest, error: KafkaError, now: float) -> None:
        if request is self._leave_req:
            return self._on_leave_done(None)
        if request is not self._hb_req:
            return
        self._hb_req = None
        self._sent = None                          # send every field again
        if isinstance(error, UnsupportedVersionError):
            return self._fail(UnsupportedVersionError(
                f"group.protocol=consumer needs ConsumerGroupHeartbeat, which the coordinator does "
                f"not support ({error}); use group.protocol=classic with this broker"))
        self.coordinator.mark_unknown(f"ConsumerGroupHeartbeat failed: {error}", now,
                                      request.coordinator_epoch)
        self._hb_next = now + self.retry_backoff_ms

    # == joining ======================================================================
    def _join_if_needed(self) -> None:
        if (self.state is ConsumerMemberState.UNJOINED and (self.subscription or self.regex)
                and not self._poll_timed_out and not self._closing):
            log.info("group %r: member %s joining (consumer protocol)", self.group_id, self.member_id)
            self._move(ConsumerMemberState.JOINING)
            self.member_epoch = 0
            self._sent = None
            self._hb_next = 0
            self._first_reconcile = True

    def _in_group(self) -> bool:
        return self.member_epoch > 0 and self.state in (ConsumerMemberState.STABLE,
                                                        ConsumerMemberState.RECONCILING)

    # == heartbeats ===================================================================
    def _maybe_heartbeat(self, now: float, out: List[Any]) -> None:
        if self.state not in (ConsumerMemberState.JOINING, ConsumerMemberState.STABLE,
                              ConsumerMemberState.RECONCILING):
            return
        if self._hb_req is not None or self._hb_next is None:
            return
        if now < self._hb_next and not self._ack_needed:
            return
        self._hb_req = OutgoingRequest(COORDINATOR, "ConsumerGroupHeartbeat", self._heartbeat_body(),
                                       self, coordinator_epoch=self.coordinator.epoch,
                                       context=self.member_epoch,
                                       min_version=1 if self.regex is not None else 0)
        self._ack_needed = False
        if self.member_epoch == 0:
            self._join_sent = True
        # until the answer says otherwise; an answer sets the next one
        self._hb_next = now + (self.heartbeat_interval_ms or self.retry_backoff_ms)
        out.append(self._hb_req)

    def _heartbeat_body(self) -> Dict[str, Any]:
        joining = self.member_epoch == 0
        sent = self._sent if (self._sent is not None and not joining) else {}
        names = None if self.regex is not None else sorted(self.subscription)
        now_fields: Dict[str, Any] = {
            "rack_id": self.client_rack,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "subscribed_topic_names": names,
            "subscribed_topic_regex": self.regex,
            "server_assignor": self.remote_assignor,
            "topic_partitions": sorted((tid, tuple(sorted(ps))) for tid, ps in self._owned.items()
                                       if ps),
        }
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": self.member_epoch, "instance_id": self.group_instance_id,
                "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}
        for field, value in now_fields.items():
            if field in sent and sent[field] == value:
                continue                              # unchanged: null
            if field == "topic_partitions":
                body[field] = [{"topic_id": tid, "partitions": list(ps)} for tid, ps in value]
            elif field == "subscribed_topic_names":
                # switching from a regex to names: an empty regex clears it
                body[field] = value if value is not None else []
                if value is not None and sent.get("subscribed_topic_regex"):
                    body["subscribed_topic_regex"] = ""
            elif value is not None:
                body[field] = value
        self._sent = now_fields
        return body

    def _on_heartbeat_response(self, request: OutgoingRequest, body: Dict[str, Any], now: float) -> None:
        code = body.get("error_code", 0)
        if code:
            return self._on_heartbeat_error(request, code, body.get("error_message"), now)
        if self.state not in (ConsumerMemberState.JOINING, ConsumerMemberState.STABLE,
                              ConsumerMemberState.RECONCILING):
            return                                    # left meanwhile
        self.heartbeats_answered += 1
        if body.get("member_id"):
            self.member_id = body["member_id"]
        epoch = body.get("member_epoch", self.member_epoch)
        if epoch != self.member_epoch:
            log.info("group %r: member %s now at epoch %s", self.group_id, self.member_id, epoch)
        self.member_epoch = epoch
        interval = body.get("heartbeat_interval_ms") or 0
        if interval > 0:
            self.heartbeat_interval_ms = interval
        self._hb_next = now + (self.heartbeat_interval_ms or self.retry_backoff_ms)
        if self.state is ConsumerMemberState.JOINING and epoch > 0:
            self._move(ConsumerMemberState.STABLE)
            if self._last_poll is None:
                self._last_poll = now
        assignment = body.get("assignment")
        if assignment is not None:
            target: Dict[Any, FrozenSet[int]] = {}
            for t in assignment.get("topic_partitions") or ():
                target[t["topic_id"]] = target.get(t["topic_id"], frozenset()) | frozenset(t["partitions"])
            self._target = target
        if self.state is ConsumerMemberState.STABLE:
            self._maybe_reconcile(now)

    def _on_heartbeat_error(self, request: OutgoingRequest, code: int, message: Optional[str],
                            now: float) -> None:
        error = E.error_for_code(code, message, context=f"ConsumerGroupHeartbeat of group {self.group_id!r}")
        assert error is not None                      # (code is not 0)
        self._sent = None
        if code in COORDINATOR_ERRORS:
            self.coordinator.mark_unknown(f"ConsumerGroupHeartbeat: {error.name}", now,
                                          request.coordinator_epoch)
            self._hb_next = now
        elif code == E.CoordinatorLoadInProgressError.code or (
                error.retriable and code != E.UnknownMemberIdError.code):
            self._hb_next = now + self.retry_backoff_ms
        elif code in _FENCED:
            if request.context != self.member_epoch:
                return                                # about an epoch we already left behind
            self._fence(f"ConsumerGroupHeartbeat: {error.name}", now)
        elif code == E.TopicAuthorizationFailedError.code:
            # A subscribed topic without a DESCRIBE ACL. As Java (4.x): not
            # fatal - the member keeps its state and heartbeats on (an ACL
            # added later lets it in); poll raises the error meanwhile.
            log.error("group %r: %s", self.group_id, error)
            self._events.append(GroupError(error))
            # Again after the broker's interval (before it gave one: 1 s, Java's
            # default retry.backoff.max.ms, the backoff it reaches at once).
            self._hb_next = now + max(self.retry_backoff_ms, self.heartbeat_interval_ms or 1000)
        elif code == E.BrokerUnsupportedVersionError.code:
            self._fail(UnsupportedVersionError(
                f"the coordinator of group {self.group_id!r} does not support the consumer group "
                f"protocol ({error}); use group.protocol=classic"))
        else:
            # GROUP_AUTHORIZATION_FAILED, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
            # UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, INVALID_REQUEST,
            # GROUP_MAX_SIZE_REACHED, ...: Java fails the consumer.
            self._fail(error)

    def _fence(self, reason: str, now: float) -> None:
        log.warning("group %r: member %s fenced at epoch %s (%s): its partitions are lost; rejoining",
                    self.group_id, self.member_id, self.member_epoch, reason)
        if self.assignment:
            self._events.append(PartitionsLost(tuple(sorted(self.assignment)), reason))
        self.assignment = frozenset()
        self._owned = {}
        self._target = None
        self._rec = None
        self._move(ConsumerMemberState.UNJOINED)
        self._join_if_needed()
        self._hb_next = now

    # == reconciliation ===============================================================
    def _maybe_reconcile(self, now: float) -> None:
        if self._target is None or self.state is not ConsumerMemberState.STABLE:
            return
        owned_keys = {(tid, p) for tid, ps in self._owned.items() for p in ps}
        target_keys = {(tid, p) for tid, ps in self._target.items() for p in ps}
        revoked_keys = owned_keys - target_keys
        unresolved = sorted({tid for tid, _ in target_keys - owned_keys if tid not in self._names},
                            key=str)
        added_keys = {(tid, p) for tid, p in target_keys - owned_keys if tid in self._names}
        if unresolved and not self._metadata_asked:
            # Java: partitions of topics the metadata does not name yet wait
            # (the rest is reconciled now); a refresh is asked for.
            self._metadata_asked = True
            log.info("group %r: assigned topic ids %s are not in the metadata yet; refreshing it",
                     self.group_id, unresolved)
            self._events.append(MetadataNeeded(()))
        if not revoked_keys and not added_keys and not self._first_reconcile:
            return
        revoked = frozenset(TopicPartition(self._owned_name_by_id[tid], p) for tid, p in revoked_keys)
        added = frozenset(TopicPartition(self._names[tid], p) for tid, p in added_keys)
        self._round += 1
        self._rec = {"revoked": revoked, "revoked_keys": revoked_keys, "added": added,
                     "added_keys": added_keys, "round": self._round, "started": now,
                     "phase": "commit" if revoked else "assign"}
        self._move(ConsumerMemberState.RECONCILING)
        log.info("group %r: reconciling at epoch %s: revoke %s, assign %s", self.group_id,
                 self.member_epoch, sorted(revoked), sorted(added))
        # Advanced by poll() only: it runs after the driver took the events of
        # the previous step, so the hook sees a revocation whose listener is
        # still to run (answers and metadata arrive in between).

    def _advance_reconciliation(self, now: float) -> None:
        rec = self._rec
        if rec is None:
            return
        if rec["phase"] == "commit":
            # auto-commit of the consumed positions before the revocation
            if not self._hook_done(now, rec):
                return
            # Only the application's view changes now: the heartbeats keep
            # reporting the revoked partitions as owned until the listener
            # ran, so the broker does not hand them on before.
            self.assignment = self.assignment - rec["revoked"]
            self._events.append(PartitionsRevoked(tuple(sorted(rec["revoked"]))))
            rec["phase"] = "revoked"
            return                                    # the listener runs before our next poll
        if rec["phase"] == "revoked":
            # the listener ran and what it committed is done (the revocation
            # must have been handed out first: the hook cannot know of it before)
            if any(isinstance(e, PartitionsRevoked) for e in self._events):
                return
            if not self._hook_done(now, rec):
                return
            rec["phase"] = "assign"
        # assign
        self._rec = None
        self._remove_owned(rec["revoked_keys"])
        self.assignment = self.assignment | rec["added"]
        names = dict(self._owned_name_by_id)
        for tid, p in rec["added_keys"]:
            self._owned[tid] = self._owned.get(tid, frozenset()) | {p}
            names[tid] = self._names[tid]
        self._owned_name_by_id = names
        if rec["added"] or self._first_reconcile:
            self._events.append(PartitionsAssigned(tuple(sorted(rec["added"])), self.member_epoch))
        self._first_reconcile = False
        self._move(ConsumerMemberState.STABLE)
        self._ack_needed = True                       # the next heartbeat, at once, says what we own
        self._maybe_reconcile(now)                    # a newer target may have come meanwhile
        if self._rec is not None and self._rec["phase"] == "assign":
            self._advance_reconciliation(now)

    def _remove_owned(self, keys: Any) -> None:
        for tid, p in keys:
            left = self._owned.get(tid, frozenset()) - {p}
            if left:
                self._owned[tid] = left
            else:
                self._owned.pop(tid, None)
                self._owned_name_by_id = {k: v for k, v in self._owned_name_by_id.items() if k != tid}

    def _hook_done(self, now: float, rec: Dict[str, Any]) -> bool:
        rec["asked"] = True
        if self.prepare_join is None or self.prepare_join(now, rec["round"]):
            return True
        if now - rec["started"] < self.rebalance_timeout_ms:
            return False
        log.warning("group %r: commits before the revocation did not finish within %s ms; "
                    "revoking anyway", self.group_id, self.rebalance_timeout_ms)
        return True

    # == poll timeout, leaving ========================================================
    def _poll_expired(self, now: float) -> bool:
        return self._last_poll is not None and now - self._last_poll > self.max_poll_interval_ms

    def _on_poll_timeout(self, now: float, out: List[Any]) -> None:
        log.warning("group %r: the application did not poll within max.poll.interval.ms (%s ms); "
                    "leaving the group", self.group_id, self.max_poll_interval_ms)
        leave = self._leave_request()
        if leave is not None:
            out.append(leave)
        # Java (STALE state): the partitions are lost, not revoked: they may
        # be someone else's by the time the application looks.
        if self.assignment:
            self._events.append(PartitionsLost(tuple(sorted(self.assignment)),
                                               "consumer poll timeout has expired"))
        self._reset_membership()
        self._poll_timed_out = True

    def _leave_prepare(self, reason: str) -> None:
        if not self.assignment:
            return
        if self.member_epoch > 0:
            self._events.append(PartitionsRevoked(tuple(sorted(self.assignment))))
        else:
            self._events.append(PartitionsLost(tuple(sorted(self.assignment)), reason))
        self.assignment = frozenset()

    def _leave_request(self) -> Optional[OutgoingRequest]:
        # A join sent but not answered yet counts too: the member id is ours,
        # and the broker, answering one connection in order, handles the
        # leave after the join - else the member would hold partitions until
        # its session timed out.
        in_group = self.member_epoch > 0 or self._join_sent
        if not in_group or not self.coordinator.known or self._leave_req is not None:
            return None
        epoch = (LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.group_instance_id is not None
                 else LEAVE_GROUP_MEMBER_EPOCH)
        body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.group_instance_id, "rack_id": None, "rebalance_timeout_ms": -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": None}
        self._leave_req = OutgoingRequest(COORDINATOR, "ConsumerGroupHeartbeat", body, self,
                                          coordinator_epoch=self.coordinator.epoch, context=epoch)
        return self._leave_req

    def _send_leave(self, now: float) -> None:
        leave = self._leave_request()
        if leave is not None:
            self._pending_leave = leave
        self._reset_membership()

    def _reset_membership(self) -> None:
        self.member_epoch = 0
        self._join_sent = False
        self.assignment = frozenset()
        self._owned = {}
        self._owned_name_by_id = {}
        self._target = None
        self._rec = None
        self._hb_req = None
        self._hb_next = None
        self._sent = None
        self._ack_needed = False
        self._move(ConsumerMemberState.UNJOINED)

    def _on_leave_done(self, code: Optional[int]) -> None:
        self._leave_req = None
        if code:
            log.info("group %r: leaving answered %s", self.group_id, E.error_for_code(code))
        if self._closing and self.state is not ConsumerMemberState.CLOSED:
            self._move(ConsumerMemberState.CLOSED)   # (a fatal error may have closed it meanwhile)

    def _fail(self, error: KafkaError) -> None:
        if self.state in (ConsumerMemberState.FATAL, ConsumerMemberState.CLOSED):
            # A late answer (an OffsetCommit after close(), a second fatal
            # error): a closed member stays closed, a failed one keeps the
            # error the application was told about.
            log.warning("group %r: %s after the member was %s; ignored", self.group_id, error,
                        "closed" if self.state is ConsumerMemberState.CLOSED else "failed")
            return
        log.error("group %r: fatal group error: %s", self.group_id, error)
        self.fatal_error = error
        self._move(ConsumerMemberState.FATAL)
        self._hb_req = None
        self._rec = None
        self._events.append(GroupFatalError(error))

    # == subscription =================================================================
    def _set_subscription(self, topics: FrozenSet[str], now: float, changed: bool = False) -> None:
        changed = changed or topics != self.subscription
        self.subscription = topics
        self._join_if_needed()
        if changed and self._in_group() and self._hb_next is not None:
            self._hb_next = min(self._hb_next, now)   # tell the broker at once

    def _matching_topics(self, internal_topics: Any = ()) -> FrozenSet[str]:
        internal = set(internal_topics)
        assert self.pattern is not None
        return frozenset(t for t in self.topic_partitions
                         if t not in internal and self.pattern.fullmatch(t))

    def _on_coordinator_event(self, event: Any) -> None:
        # A lost coordinator: the heartbeat in flight will fail with the
        # connection; on a new one heartbeat at once with every field.
        if isinstance(event, CoordinatorLost):
            self._hb_req = None
            self._sent = None
        elif isinstance(event, CoordinatorFound) and self._hb_next is not None:
            self._hb_next = 0
        elif (isinstance(event, CoordinatorLookupFailed) and event.fatal and not self._closing
              and self.state in (ConsumerMemberState.JOINING, ConsumerMemberState.STABLE,
                                 ConsumerMemberState.RECONCILING)):
            # GROUP_AUTHORIZATION_FAILED from FindCoordinator: not retried, as
            # from the heartbeat (Java: GroupAuthorizationException from poll).
            self._fail(event.error)
