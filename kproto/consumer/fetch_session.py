"""KIP-227 incremental fetch sessions: one small state machine per node
(Java's ``FetchSessionHandler`` and ``FetchMetadata``, without the network).

Why: without a session every Fetch lists every partition the consumer
reads from that node and every answer lists every one of them, data or not.
With a session the broker remembers the partitions and their fetch offsets:
after the first (full) request each request lists only the partitions that
were added or whose fetch offset, leader epoch or max bytes changed, plus
the ones to forget, and each answer only the partitions with records, an
error or a changed high watermark / last stable offset / log start offset.
A partition absent from an incremental answer keeps its state.

A session's metadata is (session id, epoch), as in Java:

* ``(0, 0)`` *new*: the next request is full and asks for a session;
* ``(id, 0)``: full, closing session ``id`` and asking for a new one (after
  an error or a failed request);
* ``(id, 1..)`` *open*: the next request is incremental; the epoch counts up
  and wraps from 2**31-1 to 1;
* ``(id, -1)``: the final epoch, sent on close to end the session.

A broker that answers a full request with session id 0 keeps no session (it
may not support them, or its session cache is full): every request is then
full again, which is the protocol's no-session answer.

The session knows which partitions it holds (``offsets``: the fetch offset
and ``epochs``: the leader epoch last sent for each) and, from Fetch v13 on,
the id it named each topic by, for the forgotten list. The Fetcher asks
:meth:`FetchSession.plan` what to send, commits it with :meth:`sent`, and
gives the answer's top-level fields to :meth:`on_response` (or a failure to
:meth:`on_failure`).
"""
from __future__ import annotations

from typing import Dict, Optional

from kproto.cluster import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

#: Fetch v7 brought sessions (KIP-227): below it every request is full.
FIRST_SESSION_VERSION = 7

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
SESSION_ERRORS = frozenset({FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
                            FETCH_SESSION_TOPIC_ID_ERROR})


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Java's FetchMetadata.nextEpoch): a closed
    session stays closed, 2**31-1 wraps to 1 (0 is only for a new session)."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


class FetchSession:
    """The fetch session with one node (see the module docstring)."""

    # (No __slots__: compiled, fetch_session.pxd declares the fields of the C
    # class; interpreted, a plain class.)

    def __init__(self, node: int):
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        #: the partitions in the session and the fetch offset last sent for each
        self.offsets: Dict[TopicPartition, int] = {}
        #: the leader epoch last sent for each partition in the session
        self.epochs: Dict[TopicPartition, int] = {}
        #: topic -> the id it was sent with (Fetch v13+), for forgotten_topics_data
        self.topic_ids: Dict[str, object] = {}
        #: requests built so far, by kind (tests and benchmarks count them)
        self.incremental_sent = 0
        self.full_sent = 0
        #: the session errors the broker answered, by code (70, 71, 106)
        self.errors: Dict[int, int] = {}

    def __repr__(self) -> str:
        return (f"FetchSession(node={self.node}, id={self.session_id}, epoch={self.epoch}, "
                f"partitions={len(self.offsets)}, full={self.full_sent}, incremental={self.incremental_sent})")

    # -- the state ---------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        """Whether the next request lists every partition (epoch 0 or -1)."""
        return self.epoch == INITIAL_EPOCH or self.epoch == FINAL_EPOCH

    @property
    def state(self) -> str:
        """'new' (no session: the next request asks for one), 'reopening'
        (closing session ``session_id`` for a new one), 'open' (incremental)
        or 'closing' (the final epoch)."""
        if self.epoch == FINAL_EPOCH:
            return "closing"
        if self.epoch == INITIAL_EPOCH:
            return "new" if self.session_id == INVALID_SESSION_ID else "reopening"
        return "open"

    def _restart(self, keep_id: bool) -> None:
        """The next request is full: a new session, closing this one's id
        on the broker when ``keep_id`` (Java's nextCloseExisting), else
        from scratch (Java's INITIAL)."""
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.offsets, self.epochs, self.topic_ids = {}, {}, {}

    # -- building a request ---------------------------------------------------------
    def known(self):
        """What the next request is compared with: (offsets, epochs) of the
        partitions in the session, empty dicts for a full request (every
        partition is then listed)."""
        if self.is_full:
            return {}, {}
        return self.offsets, self.epochs

    def topic_id_changed(self, topic: str, topic_id) -> bool:
        """Whether ``topic`` is in the session under another id (the topic
        was deleted and made again): the caller restarts the session rather
        than mixing two topics of one name."""
        known = self.topic_ids.get(topic)
        return known is not None and topic_id is not None and known != topic_id

    def forgotten(self, offsets: Dict[TopicPartition, int]) -> Dict[str, list]:
        """The session's partitions the next request no longer fetches
        ({topic: [partition]}), for forgotten_topics_data: none in a full
        request (it replaces the session's partitions)."""
        out: Dict[str, list] = {}
        if self.is_full:
            return out
        # By topic, then partition: the same list whatever order the
        # session's partitions were added in (the kept fetch plan adds them
        # as they change, the walk over every partition in the positions' order).
        for tp in sorted(tp for tp in self.offsets if tp not in offsets):
            out.setdefault(tp.topic, []).append(tp.partition)
        return out

    def sent(self, offsets: Dict[TopicPartition, int], epochs: Dict[TopicPartition, int],
             topic_ids: Dict[str, object]) -> None:
        """The request for ``offsets`` (every partition the session holds
        after it, with its fetch offset) was built: it is what the broker
        will hold once it answers."""
        self.offsets, self.epochs, self.topic_ids = offsets, epochs, topic_ids
        if self.is_full:
            self.full_sent += 1
        else:
            self.incremental_sent += 1

    def final_metadata(self) -> Optional[tuple]:
        """(session id, FINAL_EPOCH) for the request that closes an open
        session (on close, as Java's consumer does), or None without one."""
        if self.session_id == INVALID_SESSION_ID:
            return None
        return self.session_id, FINAL_EPOCH

    # -- handling the answer ---------------------------------------------------------
    def on_response(self, sent_epoch: int, error_code: int, session_id: int) -> bool:
        """The answer to the request sent at ``sent_epoch``: moves the
        session on (Java's handleResponse). False when the answer's
        partitions are not to be used (a top-level error)."""
        if sent_epoch != self.epoch:
            return error_code == 0               # an answer to an older session: no state change
        if error_code:
            self.errors[error_code] = self.errors.get(error_code, 0) + 1
            # FETCH_SESSION_ID_NOT_FOUND: the broker has no such session (a
            # restart, or evicted from its cache): ask for a new one. Any
            # other error: close this one and ask for a new one.
            self._restart(keep_id=error_code != FETCH_SESSION_ID_NOT_FOUND)
            return False
        if self.is_full:
            if session_id == INVALID_SESSION_ID:
                self._restart(keep_id=False)     # no session kept: full again (0, 0)
            else:
                self.session_id, self.epoch = session_id, 1
            return True
        if session_id == INVALID_SESSION_ID:
            self._restart(keep_id=False)         # the broker closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def on_failure(self) -> None:
        """The request failed (disconnect, timeout): whether the broker saw
        it is unknown, so the next request is full and replaces the session
        (Java's handleError)."""
        self._restart(keep_id=True)
