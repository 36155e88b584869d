"""Share sessions, ShareFetch and ShareAcknowledge as a sans-IO machine.

One *share session* per partition leader (KIP-932): the first ShareFetch
(epoch 0) opens it with the partitions to read; each later request carries
the next epoch and only what changed (partitions added, acknowledgements,
partitions to forget in ``forgotten_topics_data``); ShareAcknowledge with
epoch -1 closes it, and the leader releases what the session still holds.
A session has at most one request in flight, so epochs stay in order.

What is acquired comes back as record batches plus ``acquired_records``
ranges (first, last, delivery count): only records inside those ranges are
this member's (a batch may hold records acquired by others), and an
acquired offset without a record the application can see (a transaction
marker, a compacted gap) is acknowledged as a GAP at once, as Java does.

RENEW (KIP-1222) extends the lock of a record still being processed: it
always leaves in a ShareAcknowledge with ``is_renew_ack`` (never on a fetch),
and once the leader answered, the record is handed out again by the next
drain, to be acknowledged once more, as Java's share consumer does.

Acknowledgements wait in ``_pending[node]`` and leave with the next request
to that leader: piggy-backed on its next ShareFetch, or in a
ShareAcknowledge when a commit waits for them or no fetch can go (records
of that leader still buffered). Every acknowledgement's outcome comes back
as an :class:`AcknowledgementsDone` event, and to the commit handles that
waited for it.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, List, NamedTuple, Optional, Set

from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.errors import DecodeError, KafkaError, UnsupportedVersionError
from kproto.records import Record, read_batches
from kproto.share import GAP, AcknowledgeType, ShareRecord, ShareStateError
from kproto.share.acks import ack_batches

__all__ = ["ShareFetcher", "ShareRequest", "CommitHandle", "AcknowledgementsDone"]

log = logging.getLogger(__name__)
E = error_codes

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_MAX_EPOCH = 2**31 - 1
_SESSION_ERRORS = frozenset({E.ShareSessionNotFoundError.code, E.InvalidShareSessionEpochError.code})
# Partition errors after which the leader we asked is no longer right.
_REFRESH_METADATA = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "KAFKA_STORAGE_ERROR",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "REPLICA_NOT_AVAILABLE",
})


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class AcknowledgementsDone(NamedTuple):
    """The broker answered acknowledgements: {TopicPartition: (offsets,
    error or None)}."""
    results: Dict[TopicPartition, tuple]


class CommitHandle:
    """A commit of acknowledgements (commit_sync / commit_async): ``done``;
    ``result()`` -> {TopicPartition: None (acknowledged) or the error}."""

    __slots__ = ("done", "deadline", "started", "error", "_results", "_waiting")

    def __init__(self, deadline: Optional[float]):
        self.done = False
        self.deadline = deadline
        self.started = deadline
        self.error: Optional[Exception] = None       # the commit as a whole failed (timed out)
        self._results: Dict[TopicPartition, Optional[KafkaError]] = {}
        self._waiting = 0

    def result(self) -> Dict[TopicPartition, Optional[KafkaError]]:
        if not self.done:
            raise RuntimeError("the commit is not finished yet")
        if self.error is not None:
            raise self.error
        return dict(self._results)

    def _add(self, tp, error):
        if self._results.get(tp) is None:
            self._results[tp] = error

    def _one_done(self):
        self._waiting -= 1
        if self._waiting <= 0:
            self.done = True

    def _expire(self, error):
        if not self.done:
            self.done = True
            self.error = error


class ShareRequest:
    """A request the fetcher wants sent to ``node`` (``api``: ShareFetch or
    ShareAcknowledge); handed back to ``on_response``/``on_failure``."""

    __slots__ = ("node", "api", "body", "epoch", "acks", "commits", "partitions", "names", "holding")

    def __init__(self, node, api, body, epoch, acks, commits, partitions, names):
        self.node = node
        self.api = api
        self.body = body
        self.epoch = epoch
        self.acks = acks                  # {tp: {offset: type}} carried by this request
        self.commits = commits            # CommitHandles waiting for it
        self.partitions = partitions      # ShareFetch: the session's partitions once answered
        self.names = names                # topic id -> name
        self.holding = False              # sent while the application held unacknowledged records

    def __repr__(self):
        return f"<ShareRequest {self.api} -> node {self.node} epoch {self.epoch}>"


class _Session:
    __slots__ = ("node", "epoch", "partitions", "inflight", "dry")

    def __init__(self, node):
        self.node = node
        self.epoch = INITIAL_EPOCH
        self.partitions: Set[TopicPartition] = set()    # what the leader's session holds
        self.inflight: Optional[ShareRequest] = None
        # A fetch sent while the application held unacknowledged records of
        # this leader came back empty: fetch again only once acknowledgements
        # are pending or the application's hands are empty (see _fetch).
        self.dry = False


class _Acquired:
    """The records one ShareFetch acquired on one partition, not yet handed out."""

    __slots__ = ("tp", "node", "batches", "next_batch", "record_iter", "left")

    def __init__(self, tp, node, batches, acquired):
        self.tp = tp
        self.node = node
        self.batches = batches
        self.next_batch = 0
        self.record_iter = None
        # offset -> delivery count of every acquired offset not handed out yet
        self.left: Dict[int, int] = {}
        for r in acquired:
            dc = r["delivery_count"]
            for off in range(r["first_offset"], r["last_offset"] + 1):
                self.left[off] = dc


class ShareFetcher:
    def __init__(self, group_id: str, member_id: str, *, max_wait_ms=500, min_bytes=1,
                 max_bytes=52428800, max_records=500, check_crcs=True, record_limit=False):
        self.group_id = group_id
        self.member_id = member_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.max_records = max_records
        self.check_crcs = check_crcs
        self.acquire_mode = 1 if record_limit else 0    # ShareFetch v2 ShareAcquireMode
        self.sessions: Dict[int, _Session] = {}
        self.assigned: Set[TopicPartition] = set()
        self._buffered: List[_Acquired] = []
        #: records handed to the application and not acknowledged yet:
        #: (topic, partition, offset) -> (leader node, TopicPartition)
        self.delivered: Dict[tuple, tuple] = {}
        self._pending: Dict[int, Dict[TopicPartition, Dict[int, int]]] = {}
        self._commits: Dict[int, List[CommitHandle]] = {}
        self._errors: List[Exception] = []
        self._events: list = []
        self.metadata_refresh_needed = False
        self.lock_timeout_ms: Optional[int] = None      # the broker's acquisition lock, as last told
        self.closing = False
        #: RENEW acknowledgements on their way: (topic, partition, offset) -> ((node, tp), record)
        self._renewing: Dict[tuple, tuple] = {}
        #: records whose lock the leader renewed, handed out again by the next drain
        self._renewed: List[tuple] = []
        self._renew_supported: Callable[[int], bool] = lambda node: True

    # -- assignment --------------------------------------------------------------------------
    def set_assignment(self, tps) -> None:
        """The partitions this member reads now. Records acquired from the
        others and not handed out yet are released (another member may
        process them at once instead of after the lock times out)."""
        self.assigned = set(tps)
        keep = []
        for buf in self._buffered:
            if buf.tp in self.assigned:
                keep.append(buf)
            else:
                self._release_rest(buf)
        self._buffered = keep

    def _release_rest(self, buf: _Acquired):
        acks = self._pending_for(buf.node, buf.tp)
        for off in buf.left:
            acks[off] = AcknowledgeType.RELEASE
        buf.left = {}

    def _pending_for(self, node, tp) -> Dict[int, int]:
        return self._pending.setdefault(node, {}).setdefault(tp, {})

    # -- acknowledging -----------------------------------------------------------------------
    def acknowledge(self, tp: TopicPartition, offset: int, kind: int, record: Optional[Record] = None) -> None:
        """``record`` is needed for RENEW: it is handed out again once renewed."""
        key = (tp[0], tp[1], offset)
        entry = self.delivered.pop(key, None)
        if entry is None:
            raise ShareStateError(
                f"{tp[0]}-{tp[1]} offset {offset}: not a record of the last poll that is still "
                f"unacknowledged (acknowledged already, or not delivered to this consumer)")
        self._pending_for(*entry)[offset] = kind
        if kind == AcknowledgeType.RENEW:
            self._renewing[key] = (entry, record)

    def acknowledge_delivered(self, kind: int = AcknowledgeType.ACCEPT) -> int:
        """Acknowledge every record handed out and not acknowledged yet
        (implicit mode); returns how many."""
        n = len(self.delivered)
        into: dict = {}                        # entry -> its pending dict (one lookup per partition)
        for (_, _, offset), entry in self.delivered.items():
            acks = into.get(entry)
            if acks is None:
                acks = into[entry] = self._pending_for(*entry)
            acks[offset] = kind
        self.delivered = {}
        return n

    def commit(self, now, deadline) -> CommitHandle:
        """Send every pending acknowledgement now (ShareAcknowledge) and
        report when the leaders answered."""
        h = CommitHandle(deadline)
        for s in self.sessions.values():
            if s.inflight is not None and s.inflight.acks:
                h._waiting += 1                      # acknowledgements on their way already
                s.inflight.commits.append(h)
        for node, parts in self._pending.items():
            if any(parts.values()):
                h._waiting += 1
                self._commits.setdefault(node, []).append(h)
        if h._waiting == 0:
            h.done = True
        return h

    @property
    def has_pending_acks(self) -> bool:
        return any(any(p.values()) for p in self._pending.values())

    # -- requests ----------------------------------------------------------------------------
    def requests(self, leader_of: Callable[[TopicPartition], Optional[int]],
                 topic_id_of: Callable[[str], object], ready: Callable[[int], bool], now,
                 renew_supported: Callable[[int], bool] = lambda node: True) -> List[ShareRequest]:
        """The requests to send now: at most one per session in flight.
        ``renew_supported(node)``: the leader takes RENEW (ShareAcknowledge v2)."""
        self._renew_supported = renew_supported
        wanted: Dict[int, Set[TopicPartition]] = {}
        if not self.closing:
            for tp in self.assigned:
                leader = leader_of(tp)
                if leader is None or leader < 0 or topic_id_of(tp.topic) is None:
                    self.metadata_refresh_needed = True
                    continue
                wanted.setdefault(leader, set()).add(tp)
        nodes = set(wanted) | set(self.sessions) | {n for n, p in self._pending.items() if any(p.values())}
        out = []
        for node in nodes:
            s = self.sessions.get(node)
            if s is not None and s.inflight is not None:
                continue
            req = self._request_for(node, s, wanted.get(node, set()), topic_id_of, ready, now)
            if req is not None:
                out.append(req)
        return out

    def _request_for(self, node, s, want, topic_id_of, ready, now) -> Optional[ShareRequest]:
        pending = {tp: a for tp, a in self._pending.get(node, {}).items() if a}
        commits = self._commits.get(node, [])
        if self.closing:
            if s is None or s.epoch == INITIAL_EPOCH:
                # No session on that leader: nothing acquired to release, and
                # acknowledgements cannot go without one.
                self._fail_acks(node, pending, commits, E.ShareSessionNotFoundError(
                    "no share session with this leader to acknowledge in"))
                self.sessions.pop(node, None)
                return None
            if not ready(node):
                return None
            return self._acknowledge(node, s, pending, commits, FINAL_EPOCH, topic_id_of)
        renew = any(k == AcknowledgeType.RENEW for a in pending.values() for k in a.values())
        if renew and not self._renew_supported(node):
            self._fail_renewals(node, pending, UnsupportedVersionError(
                f"node {node} does not take RENEW acknowledgements (ShareAcknowledge v2, KIP-1222, "
                f"Kafka 4.2+): the records' locks were not renewed"))
            renew = False
        buffered = any(b.node == node for b in self._buffered)
        can_fetch = bool(want) and not buffered
        if can_fetch and s is not None and s.dry:
            if pending or not self._holding(node):
                s.dry = False
            else:
                can_fetch = False
        if (s is not None and s.epoch != INITIAL_EPOCH and pending
                and (commits or renew or not can_fetch or any(tp not in want for tp in pending))):
            if not ready(node):
                return None
            return self._acknowledge(node, s, pending, commits, s.epoch, topic_id_of)
        if s is None or s.epoch == INITIAL_EPOCH:
            if pending:
                # The session those records were acquired in is gone (its
                # leader forgot it or the connection broke): the leader
                # released them; they come back to whoever fetches next.
                self._fail_acks(node, pending, commits, E.ShareSessionNotFoundError(
                    "the share session the records were acquired in was reset"))
                pending, commits = {}, []
        if not can_fetch:
            if s is not None and s.epoch == INITIAL_EPOCH and not want:
                self.sessions.pop(node, None)       # nothing to read there any more
            return None
        if not ready(node):
            return None
        if s is None:
            s = self.sessions[node] = _Session(node)
        return self._fetch(node, s, want, pending, commits, topic_id_of)

    def _fetch(self, node, s, want, pending, commits, topic_id_of) -> ShareRequest:
        # Every partition of the session may answer, listed in this request or not.
        names = {topic_id_of(tp.topic): tp.topic for tp in want | s.partitions}
        topics: Dict[object, list] = {}
        full = s.epoch == INITIAL_EPOCH
        carried = {}
        listed = set(want) if full else (want - s.partitions)
        for tp, acks in pending.items():
            if tp in want:                       # acks of partitions we no longer read go by ShareAcknowledge
                listed.add(tp)
                carried[tp] = acks
        for tp in sorted(listed):
            tid = topic_id_of(tp.topic)
            names[tid] = tp.topic
            # (No partition_max_bytes: it was only in v0, Kafka 4.0's early-access
            # share fetch; the request's max_bytes bounds the answer.)
            topics.setdefault(tid, []).append({
                "partition_index": tp.partition,
                "acknowledgement_batches": ack_batches(carried.get(tp, {}))})
        forgotten: Dict[object, list] = {}
        if not full:
            for tp in sorted(s.partitions - want):
                tid = topic_id_of(tp.topic)
                if tid is not None:
                    forgotten.setdefault(tid, []).append(tp.partition)
        # While the application holds records of this leader it has not
        # acknowledged, the broker must not hold the fetch: their
        # acknowledgements, made meanwhile, could only follow it (one request
        # per session), and a member at the leader's in-flight record limit
        # gets nothing until they arrive - a hold of fetch.max.wait.ms per poll.
        holding = self._holding(node)
        body = {"group_id": self.group_id, "member_id": self.member_id, "share_session_epoch": s.epoch,
                "max_wait_ms": 0 if holding else self.max_wait_ms,
                "min_bytes": self.min_bytes, "max_bytes": self.max_bytes,
                "max_records": self.max_records, "batch_size": self.max_records,
                "share_acquire_mode": self.acquire_mode,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in forgotten.items()]}
        for tp in carried:
            del self._pending[node][tp]
        # Commits waiting on this node are served only if all its acks ride along.
        served = commits if not self._pending.get(node) or not any(self._pending[node].values()) else []
        if served:
            self._commits.pop(node, None)
        req = ShareRequest(node, "ShareFetch", body, s.epoch, carried, served, set(want), names)
        req.holding = holding
        s.inflight = req
        return req

    def _holding(self, node) -> bool:
        """The application holds unacknowledged records of ``node``."""
        return any(entry[0] == node for entry in self.delivered.values())

    def _acknowledge(self, node, s, pending, commits, epoch, topic_id_of) -> ShareRequest:
        names = {}
        topics: Dict[object, list] = {}
        for tp in sorted(pending):
            tid = topic_id_of(tp.topic)
            if tid is None:
                continue
            names[tid] = tp.topic
            topics.setdefault(tid, []).append({"partition_index": tp.partition,
                                               "acknowledgement_batches": ack_batches(pending[tp])})
        body = {"group_id": self.group_id, "member_id": self.member_id, "share_session_epoch": epoch,
                "is_renew_ack": any(k == AcknowledgeType.RENEW for a in pending.values() for k in a.values()),
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]}
        self._pending.pop(node, None)
        self._commits.pop(node, None)
        req = ShareRequest(node, "ShareAcknowledge", body, epoch, pending, commits, None, names)
        s.inflight = req
        return req

    def _fail_renewals(self, node, pending, error):
        """Drop the RENEW acknowledgements of ``pending`` (in place), reporting ``error``."""
        failed = {}
        for tp, acks in pending.items():
            offs = [o for o, k in acks.items() if k == AcknowledgeType.RENEW]
            for o in offs:
                del acks[o]
                self._renewing.pop((tp[0], tp[1], o), None)
            if offs:
                failed[tp] = (offs, error)
        for tp in [tp for tp, a in pending.items() if not a]:
            del pending[tp]
        if failed:
            self._events.append(AcknowledgementsDone(failed))

    def _fail_acks(self, node, pending, commits, error):
        self._settle_renewals(pending, {tp: error for tp in pending})
        if pending:
            self._pending.pop(node, None)
            self._events.append(AcknowledgementsDone(
                {tp: (sorted(a), error) for tp, a in pending.items()}))
        for h in commits:
            for tp in pending:
                h._add(tp, error)
            h._one_done()
        self._commits.pop(node, None)

    # -- responses ---------------------------------------------------------------------------
    def on_failure(self, req: ShareRequest, error: Exception) -> None:
        """The request failed (connection lost, timeout): the session is
        gone with the connection's state; what it carried failed."""
        s = self.sessions.get(req.node)
        if s is not None and s.inflight is req:
            s.inflight = None
            s.epoch = INITIAL_EPOCH
            s.partitions = set()
            if req.epoch == FINAL_EPOCH:
                self.sessions.pop(req.node, None)
        self._ack_results(req, {tp: error for tp in req.acks})
        self.metadata_refresh_needed = True

    def on_response(self, req: ShareRequest, body: dict, now) -> None:
        s = self.sessions.get(req.node)
        if s is None or s.inflight is not req:
            return
        s.inflight = None
        if body.get("acquisition_lock_timeout_ms"):
            self.lock_timeout_ms = body["acquisition_lock_timeout_ms"]
        top = body.get("error_code", 0)
        if top:
            err = E.error_for_code(top, body.get("error_message"), context=f"{req.api} to node {req.node}")
            s.epoch, s.partitions = INITIAL_EPOCH, set()
            if req.epoch == FINAL_EPOCH:
                self.sessions.pop(req.node, None)
            if top not in _SESSION_ERRORS:
                self._errors.append(err)
            else:
                log.info("share session with node %s reset: %s", req.node, err)
            self._ack_results(req, {tp: err for tp in req.acks})
            return
        if req.epoch == FINAL_EPOCH:
            self.sessions.pop(req.node, None)
        else:
            s.epoch = _next_epoch(s.epoch)
            if req.partitions is not None:
                s.partitions = set(req.partitions)
        results: Dict[TopicPartition, Optional[KafkaError]] = {}
        if req.holding and req.api == "ShareFetch":
            s.dry = not any(p.get("acquired_records") for t in body.get("responses") or ()
                            for p in t["partitions"])
        for t in body.get("responses") or ():
            topic = req.names.get(t["topic_id"])
            if topic is None:
                continue
            for p in t["partitions"]:
                tp = TopicPartition(topic, p["partition_index"])
                if req.api == "ShareFetch":
                    if tp in req.acks:
                        results[tp] = E.error_for_code(p.get("acknowledge_error_code", 0),
                                                       p.get("acknowledge_error_message"),
                                                       context=f"acknowledging {topic}-{tp.partition}")
                    self._on_partition(req, tp, p)
                elif tp in req.acks:
                    results[tp] = E.error_for_code(p.get("error_code", 0), p.get("error_message"),
                                                   context=f"acknowledging {topic}-{tp.partition}")
        for tp in req.acks:
            results.setdefault(tp, None)
        self._ack_results(req, results)

    def _on_partition(self, req, tp, p):
        code = p.get("error_code", 0)
        if code:
            err = E.error_for_code(code, p.get("error_message"), context=f"share fetch {tp.topic}-{tp.partition}")
            if err.name in _REFRESH_METADATA:
                self.metadata_refresh_needed = True
            else:
                self._errors.append(err)
            return
        acquired = p.get("acquired_records") or []
        if not acquired:
            return
        records = p.get("records")
        try:
            batches = read_batches(records, check_crc=self.check_crcs) if records else []
        except DecodeError as exc:
            # Corrupt data: reject what was acquired (as Java does), so it is
            # not handed to member after member; the application hears why.
            self._errors.append(exc)
            acks = self._pending_for(req.node, tp)
            for r in acquired:
                for off in range(r["first_offset"], r["last_offset"] + 1):
                    acks[off] = AcknowledgeType.REJECT
            return
        buf = _Acquired(tp, req.node, batches, acquired)
        if tp not in self.assigned:
            self._release_rest(buf)
            return
        self._buffered.append(buf)

    def _settle_renewals(self, acks, results):
        """RENEW acknowledgements answered: a renewed record is handed out
        again by the next drain; one whose renewal failed is dropped (its
        lock runs out; the error reaches the acknowledgement callback)."""
        if not self._renewing:
            return
        for tp, a in acks.items():
            for off, kind in a.items():
                if kind != AcknowledgeType.RENEW:
                    continue
                held = self._renewing.pop((tp[0], tp[1], off), None)
                if held is not None and results.get(tp) is None and held[1] is not None:
                    self._renewed.append(held)

    def _ack_results(self, req, results):
        self._settle_renewals(req.acks, results)
        if req.acks:
            self._events.append(AcknowledgementsDone(
                {tp: (sorted(req.acks[tp]), results.get(tp)) for tp in req.acks}))
        for h in req.commits:
            for tp in req.acks:
                h._add(tp, results.get(tp))
            h._one_done()

    # -- handing out records -----------------------------------------------------------------
    def has_buffered(self) -> bool:
        return bool(self._buffered)

    def buffered_fetches(self) -> int:
        """How many acquired ShareFetch answers wait to be drained."""
        return len(self._buffered)

    def buffered_node(self, node) -> bool:
        return any(b.node == node for b in self._buffered)

    def drain(self, max_records: Optional[int] = None,
              convert: Optional[Callable] = None) -> List[ShareRecord]:
        """Up to ``max_records`` (default max.poll.records) acquired records;
        each becomes 'delivered' until it is acknowledged. A pending error
        (authorization, corruption) is raised first, once."""
        if self._errors:
            raise self._errors.pop(0)
        limit = max_records or self.max_records
        out: List[ShareRecord] = []
        while self._renewed and len(out) < limit:         # renewed locks: the application's again
            entry, rec = self._renewed.pop(0)
            if entry[1] in self.assigned:
                self.delivered[(rec.topic, rec.partition, rec.offset)] = entry
                out.append(rec)
        while self._buffered and len(out) < limit:
            buf = self._buffered[0]
            self._drain_one(buf, out, limit, convert)
            if buf.record_iter is None and buf.next_batch >= len(buf.batches):
                # Whatever acquired offset got no record is a gap: tell the leader now.
                if buf.left:
                    acks = self._pending_for(buf.node, buf.tp)
                    for off in buf.left:
                        acks[off] = GAP
                    buf.left = {}
                self._buffered.pop(0)
        return out

    def _drain_one(self, buf: _Acquired, out: list, limit: int, convert) -> None:
        topic, partition = buf.tp
        left = buf.left
        delivered = self.delivered
        entry = (buf.node, buf.tp)
        while len(out) < limit:
            if buf.record_iter is None:
                if buf.next_batch >= len(buf.batches) or not left:
                    buf.next_batch = len(buf.batches)
                    return
                batch = buf.batches[buf.next_batch]
                buf.next_batch += 1
                if batch.is_control:
                    continue                         # its offsets stay in ``left``: gaps
                buf.record_iter = batch.records(topic, partition, 0)
            for rec in buf.record_iter:
                dc = left.pop(rec.offset, None)
                if dc is None:
                    continue                         # acquired by another member, or not at all
                if convert is not None:
                    key, value = convert(rec)
                    rec = Record(rec.offset, rec.timestamp, rec.timestamp_type, key, value, rec.headers,
                                 topic, partition)
                rec._set_delivery_count(dc)
                out.append(rec)
                delivered[(topic, partition, rec.offset)] = entry
                if len(out) >= limit:
                    return
            buf.record_iter = None

    # -- events / closing --------------------------------------------------------------------
    def events(self) -> list:
        out, self._events = self._events, []
        return out

    def begin_close(self) -> None:
        """Close every session (ShareAcknowledge epoch -1, carrying what is
        pending): the leaders release whatever is still acquired - records
        buffered and never handed out, and in explicit mode those handed out
        and never acknowledged."""
        self.closing = True
        self.assigned = set()
        self._buffered = []
        self.delivered = {}
        # A lock renewal makes no sense any more: let the leaders release them.
        for parts in self._pending.values():
            for acks in parts.values():
                for off, kind in acks.items():
                    if kind == AcknowledgeType.RENEW:
                        acks[off] = AcknowledgeType.RELEASE
        self._renewing = {}
        self._renewed = []

    @property
    def closed(self) -> bool:
        return self.closing and not self.sessions
