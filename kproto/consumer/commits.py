"""Offset commits (OffsetCommit) and committed-offset lookups (OffsetFetch) as a
sans-IO state machine, for subscribe mode (group generation and member id) and
assign mode ("simple" group: generation -1, member id "").

Kinds of commit (seed-notes section 2, Java's ConsumerCoordinator):

* **sync** - :meth:`OffsetCommitter.commit_sync` returns a :class:`CommitHandle`
  the driver waits on (``handle.done``) while it keeps polling; retriable
  errors are retried (after a fresh coordinator lookup when the coordinator is
  the problem) until the deadline, default.api.timeout.ms = 60 s, after which
  the handle fails with :class:`CommitTimeoutError` (a ``TimeoutError``);
* **async** - :meth:`commit_async` returns at once; the result goes to the
  callback (the default one logs failures). A retriable failure is *not*
  retried, but it leaves the shared coordinator marked unknown, so the NEXT
  commit of any kind triggers a fresh lookup (the KAFKA-13840 lesson);
* **auto** - :meth:`poll_called` (the application's poll) starts an async commit
  of the consumed positions when auto.commit.interval.ms has passed since the
  last one: a minimum interval, not a timer. :meth:`commit_before_rebalance`
  (the membership's ``prepare_join`` hook) and :meth:`close` commit the
  positions before partitions are revoked and on close.

All commits wait for the coordinator through the one shared
:class:`~kproto.consumer.coordinator.GroupCoordinator`.
"""
from __future__ import annotations

import logging
from typing import Callable, NamedTuple, Optional

from kproto import error_codes
from kproto.backoff import RetryBackoff
from kproto.consumer import COORDINATOR, OffsetAndMetadata, OutgoingRequest, TopicPartition
from kproto.consumer.coordinator import (
    COORDINATOR_ERRORS, CoordinatorLookupFailed,
)
from kproto.errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from kproto.requests import offset_fetch_body

__all__ = ["OffsetCommitter", "CommitHandle", "FetchHandle", "CommitCompleted", "CommitFailed",
           "OffsetsFetched", "CommitTimeoutError", "CommitFailedError"]

log = logging.getLogger(__name__)
E = error_codes

# Errors after which the coordinator must be looked up again (Java also treats a
# broker-side REQUEST_TIMED_OUT on a commit this way).
_MARK_UNKNOWN = COORDINATOR_ERRORS | {E.BrokerRequestTimedOutError.code}
_GROUP_RESET = {E.UnknownMemberIdError.code, E.IllegalGenerationError.code,
                E.FencedMemberEpochError.code}
# Consumer protocol (KIP-848): the commit carried an older member epoch than
# the broker's; Java retries a sync commit with the epoch the next heartbeat brings.
_STALE_EPOCH = E.StaleMemberEpochError.code


class CommitTimeoutError(KafkaTimeoutError):
    """A synchronous commit or committed-offsets fetch did not succeed in time."""

    retriable = True


class CommitFailedError(KafkaError):
    """Java's CommitFailedException: the member is no longer part of the
    generation (it was kicked out or the group rebalanced); the partitions may
    belong to another member now. Not retriable: rejoin (poll) first."""


class CommitCompleted(NamedTuple):
    offsets: dict
    sync: bool


class CommitFailed(NamedTuple):
    offsets: dict
    error: KafkaError
    sync: bool


class OffsetsFetched(NamedTuple):
    offsets: dict       # {TopicPartition: OffsetAndMetadata or None (nothing committed)}


class _Handle:
    __slots__ = ("done", "error", "_result", "deadline", "callback", "sync")

    def __init__(self, deadline, callback, sync):
        self.done = False
        self.error: Optional[KafkaError] = None
        self._result = None
        self.deadline = deadline
        self.callback = callback
        self.sync = sync

    def result(self):
        """The result once done; raises the error if it failed."""
        if not self.done:
            raise RuntimeError("the operation is not finished yet")
        if self.error is not None:
            raise self.error
        return self._result


class CommitHandle(_Handle):
    """A commit in progress. ``offsets`` {TopicPartition: OffsetAndMetadata};
    ``done``, ``error``, ``result()`` (the offsets, or raises)."""

    __slots__ = ("offsets",)

    def __init__(self, offsets, deadline, callback, sync):
        super().__init__(deadline, callback, sync)
        self.offsets = offsets


class FetchHandle(_Handle):
    """A committed-offsets lookup; ``result()`` is {TopicPartition:
    OffsetAndMetadata or None}."""

    __slots__ = ("partitions",)

    def __init__(self, partitions, deadline):
        super().__init__(deadline, None, True)
        self.partitions = partitions


class _Op:
    """One queued commit or fetch: waits for the coordinator, is sent, retried."""
    __slots__ = ("handle", "kind", "request", "retry_at", "generation", "last_error",
                 "after_heartbeat", "backoff")

    def __init__(self, handle, kind, now, backoff):
        self.handle = handle
        self.kind = kind            # "commit" | "fetch"
        self.request = None
        self.retry_at = now
        self.backoff = backoff      # RetryBackoff: Java's commitSync sleeps retryBackoff.backoff(attempts++)
        self.generation = None
        self.last_error = None      # the retriable error being retried (for the timeout text)
        self.after_heartbeat = None  # STALE_MEMBER_EPOCH: wait for a heartbeat answer past this count


def _retry_worthy(error) -> bool:
    """Retriable, or STALE_MEMBER_EPOCH (not retriable as such - the same
    request fails again - but worth retrying with the next member epoch)."""
    return getattr(error, "retriable", False) or getattr(error, "code", None) == _STALE_EPOCH


def default_commit_callback(offsets, error):
    """Java's DefaultOffsetCommitCallback: log failures, nothing else."""
    if error is not None:
        log.error("Offset commit with offsets %s failed: %s", offsets, error)


class OffsetCommitter:
    """Commits and committed-offset lookups for one group.

    ``membership``: the :class:`GroupMembership` in subscribe mode, None in
    assign mode. ``positions``: a callable returning the consumed positions
    {TopicPartition: OffsetAndMetadata} (the fetcher's), used by auto-commit.
    """

    def __init__(self, coordinator, *, membership=None, enable_auto_commit=True,
                 auto_commit_interval_ms=5000, default_api_timeout_ms=60000,
                 retry_backoff_ms=100, retry_backoff_max_ms=1000,
                 positions: Optional[Callable[[], dict]] = None,
                 default_callback=default_commit_callback, require_stable=True, rng=None):
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.membership = membership
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.rng = rng
        self.positions = positions
        self.default_callback = default_callback
        # KIP-447: wait for pending transactional offsets (UNSTABLE_OFFSET_COMMIT).
        self.require_stable = require_stable
        self._ops = []                      # queued and in-flight, in order
        self._events = []
        self._next_auto_commit = None
        self._auto_handle = None
        self._rebalance_round = None
        self._rebalance_handle = None
        coordinator.add_listener(self._on_coordinator_event)

    # == application inputs ===========================================================
    def commit_sync(self, offsets, now, timeout_ms=None) -> CommitHandle:
        """Commit and keep retrying retriable errors until success or the
        deadline (default.api.timeout.ms). The driver polls until handle.done."""
        t = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return self._commit(offsets, now, sync=True, deadline=now + t, callback=None)

    def commit_async(self, offsets, now, callback=None) -> CommitHandle:
        """Commit once; callback(offsets, error_or_None) when done (errors are
        not retried; a retriable one leaves the coordinator to be rediscovered
        by the next commit)."""
        return self._commit(offsets, now, sync=False, deadline=None,
                            callback=callback or self.default_callback)

    def fetch_committed(self, partitions, now, timeout_ms=None) -> FetchHandle:
        """The committed offsets of these partitions (None where nothing is committed)."""
        t = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        h = FetchHandle(tuple(sorted(TopicPartition(*tp) for tp in partitions)), now + t)
        if not h.partitions:
            self._finish(h, None, result={})
            return h
        self._ops.append(self._op(h, "fetch", now))
        return h

    def poll_called(self, now) -> Optional[CommitHandle]:
        """The application's poll: start an auto-commit when it is due.
        Returns its handle when one was started."""
        self._last_now = now
        if not self.enable_auto_commit or self.positions is None:
            return None
        if self._next_auto_commit is None:
            self._next_auto_commit = now + self.auto_commit_interval_ms
            return None
        if now < self._next_auto_commit:
            return None
        if self._auto_handle is not None and not self._auto_handle.done:
            return None                       # the previous one is still on its way
        self._next_auto_commit = now + self.auto_commit_interval_ms
        return self._auto_commit(now)

    def commit_before_rebalance(self, now, round_) -> bool:
        """GroupMembership's prepare_join hook. With auto-commit, the first call
        of a round commits the consumed positions (before revocation); every
        call returns True only once no commit is outstanding - so commits made
        by the application's revocation listener also finish before the member
        rejoins, with the current generation (Java runs the listener inside
        onJoinPrepare). Retriable failures of the auto-commit are retried until
        the membership stops waiting (rebalance.timeout.ms)."""
        if self.membership is not None and self.membership.commit_generation() is None:
            return True          # generation lost: the partitions are lost, not committed
        if self.enable_auto_commit and self.positions is not None:
            if round_ != self._rebalance_round:
                self._rebalance_round = round_
                self._rebalance_handle = self._auto_commit(now)
            h = self._rebalance_handle
            if h is not None and h.done and h.error is not None and _retry_worthy(h.error):
                self._rebalance_handle = self._auto_commit(now)
        return not any(op.kind == "commit" for op in self._ops)

    def close(self, now, timeout_ms=None) -> Optional[CommitHandle]:
        """On close with auto-commit: a sync commit of the positions (wait for
        the handle, then close the membership). None when there is nothing to do."""
        if not self.enable_auto_commit or self.positions is None:
            return None
        offsets = self.positions() or {}
        if not offsets:
            return None
        return self.commit_sync(offsets, now, timeout_ms)

    @property
    def pending_async_commits(self) -> int:
        return sum(1 for op in self._ops if op.kind == "commit" and not op.handle.sync)

    def events(self) -> list:
        out, self._events = self._events, []
        return out

    # == driver contract ==============================================================
    def poll(self, now) -> list:
        self._last_now = now
        out = []
        for op in list(self._ops):
            h = op.handle
            if h.deadline is not None and now >= h.deadline:
                what = "committing offsets" if op.kind == "commit" else "fetching committed offsets"
                self._finish(h, CommitTimeoutError(
                    f"timeout expired before successfully {what} for group {self.group_id!r}"
                    + (f" (last error: {op.last_error})" if op.last_error else "")), op=op)
                continue
            if op.request is not None or now < op.retry_at:
                continue
            if op.after_heartbeat is not None:
                if self._waits_for_heartbeat(op):
                    continue                    # the fresh member epoch is not known yet
                op.after_heartbeat = None
            if not self.coordinator.want(now):
                continue
            req = self._build(op, now)
            if req is not None:
                out.append(req)
        return out

    def next_deadline(self, now) -> Optional[float]:
        ds = []
        for op in self._ops:
            if op.handle.deadline is not None:
                ds.append(op.handle.deadline)
            if op.request is None and self.coordinator.known and not self._waits_for_heartbeat(op):
                ds.append(op.retry_at)
        return max(now, min(ds)) if ds else None

    def _waits_for_heartbeat(self, op) -> bool:
        # (a heartbeat answer is an I/O event: no timer of ours for it)
        return (op.after_heartbeat is not None and self.membership is not None
                and getattr(self.membership, "heartbeats_answered", None) == op.after_heartbeat)

    def on_response(self, request, body, now) -> None:
        op = request.context
        if op not in self._ops or op.request is not request:
            return                              # already timed out / superseded
        op.request = None
        if op.kind == "commit":
            self._on_commit_response(op, request, body, now)
        else:
            self._on_fetch_response(op, request, body, now)

    def on_failure(self, request, error, now) -> None:
        op = request.context
        if not isinstance(error, UnsupportedVersionError):
            self.coordinator.mark_unknown(f"{request.api_name} failed: {error}", now,
                                          request.coordinator_epoch)
        if op not in self._ops or op.request is not request:
            return
        op.request = None
        self._retry_or_fail(op, error, now)

    # == internals ====================================================================
    def _commit(self, offsets, now, sync, deadline, callback) -> CommitHandle:
        offsets = {TopicPartition(*tp): (om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om))
                   for tp, om in dict(offsets).items()}
        h = CommitHandle(offsets, deadline, callback, sync)
        if not offsets:
            self._finish(h, None, result=offsets)    # Java: nothing to commit succeeds at once
            return h
        self._ops.append(self._op(h, "commit", now))
        return h

    def _op(self, handle, kind, now) -> _Op:
        return _Op(handle, kind, now, RetryBackoff(self.retry_backoff_ms, self.retry_backoff_max_ms, self.rng))

    def _auto_commit(self, now) -> Optional[CommitHandle]:
        offsets = self.positions() or {}
        if not offsets:
            return None
        self._auto_handle = self.commit_async(offsets, now, callback=self._auto_commit_done)
        return self._auto_handle

    def _auto_commit_done(self, offsets, error):
        if error is None:
            log.debug("auto-commit of offsets %s for group %r succeeded", offsets, self.group_id)
        elif _retry_worthy(error):
            # Java: retry sooner than the interval after a retriable failure.
            log.debug("auto-commit of offsets %s failed, will retry: %s", offsets, error)
            if self._next_auto_commit is not None and self._last_now is not None:
                self._next_auto_commit = min(self._next_auto_commit,
                                             self._last_now + self.retry_backoff_ms)
        else:
            log.warning("auto-commit of offsets %s failed: %s", offsets, error)

    _last_now = None

    def _generation(self):
        """(generation, member_id, instance_id) or an error to fail with."""
        m = self.membership
        if m is None:
            return (-1, "", None), None           # assign mode: a "simple" group
        g = m.commit_generation()
        if g is not None:
            return g, None
        if m.rebalance_in_progress:
            return None, E.RebalanceInProgressError(
                "offset commit cannot be completed: the group is rebalancing; poll to finish the "
                "rebalance, then commit again")
        return None, CommitFailedError(
            "offset commit cannot be completed since the consumer is not part of an active group")

    def _build(self, op, now) -> Optional[OutgoingRequest]:
        if op.kind == "fetch":
            topics = {}
            for tp in op.handle.partitions:
                topics.setdefault(tp.topic, []).append(tp.partition)
            t_list = [{"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())]
            body = offset_fetch_body(self.group_id, t_list, self.require_stable)
            req = OutgoingRequest(COORDINATOR, "OffsetFetch", body, self, context=op,
                                  coordinator_epoch=self.coordinator.epoch)
        else:
            gen, error = self._generation()
            if error is not None:
                self._finish(op.handle, error, op=op)
                return None
            op.generation = gen[0]
            topics = {}
            for tp, om in sorted(op.handle.offsets.items()):
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
            body = {"group_id": self.group_id, "generation_id_or_member_epoch": gen[0],
                    "member_id": gen[1], "group_instance_id": gen[2], "retention_time_ms": -1,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            req = OutgoingRequest(COORDINATOR, "OffsetCommit", body, self, context=op,
                                  coordinator_epoch=self.coordinator.epoch,
                                  min_version=7 if gen[2] is not None else 0)
        op.request = req
        return req

    def _on_commit_response(self, op, request, body, now) -> None:
        first = None
        unauthorized = set()
        for t in body.get("topics") or ():
            for p in t["partitions"]:
                code = p["error_code"]
                if code == E.TopicAuthorizationFailedError.code:
                    unauthorized.add(t["name"])
                elif code and first is None:
                    first = code
        if unauthorized:
            return self._finish(op.handle, E.TopicAuthorizationFailedError(
                f"not authorized to commit offsets of topics {sorted(unauthorized)}"), op=op)
        if first is None:
            return self._finish(op.handle, None, op=op, result=op.handle.offsets)
        error = E.error_for_code(first, context=f"OffsetCommit for group {self.group_id!r}")
        if first in _MARK_UNKNOWN:
            self.coordinator.mark_unknown(f"OffsetCommit: {error.name}", now, request.coordinator_epoch)
        if first in _GROUP_RESET:
            if self.membership is not None:
                self.membership.on_commit_error(error, op.generation, now)
            error = CommitFailedError(
                "commit cannot be completed since the group has already rebalanced and assigned the "
                f"partitions to another member ({error.name}); poll again to rejoin")
        elif first in (E.RebalanceInProgressError.code, E.FencedInstanceIdError.code):
            if self.membership is not None:
                self.membership.on_commit_error(error, op.generation, now)
        elif first == _STALE_EPOCH and self.membership is not None:
            # retried (sync) once a heartbeat answered: it brings the current epoch
            op.after_heartbeat = getattr(self.membership, "heartbeats_answered", None)
            self.membership.on_commit_error(error, op.generation, now)
        self._retry_or_fail(op, error, now)

    def _on_fetch_response(self, op, request, body, now) -> None:
        groups = body.get("groups") or []
        if groups:
            g = next((x for x in groups if x["group_id"] == self.group_id), groups[0])
            code, topics = g["error_code"], g["topics"]
        else:
            code, topics = body.get("error_code", 0), body.get("topics") or []
        if code:
            error = E.error_for_code(code, context=f"OffsetFetch for group {self.group_id!r}")
            if code in COORDINATOR_ERRORS:
                self.coordinator.mark_unknown(f"OffsetFetch: {error.name}", now, request.coordinator_epoch)
            return self._retry_or_fail(op, error, now)
        result = {}
        retriable = None
        for t in topics:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                pcode = p["error_code"]
                if pcode:
                    error = E.error_for_code(pcode, context=f"OffsetFetch of {tp.topic}-{tp.partition}")
                    if pcode == E.UnstableOffsetCommitError.code:
                        retriable = error           # pending transactional offsets: wait
                        continue
                    return self._finish(op.handle, error, op=op)
                off = p["committed_offset"]
                result[tp] = None if off < 0 else OffsetAndMetadata(
                    off, p["metadata"] or "", p["committed_leader_epoch"])
        if retriable is not None:
            return self._retry_or_fail(op, retriable, now)
        for tp in op.handle.partitions:
            result.setdefault(tp, None)
        self._finish(op.handle, None, op=op, result=result)

    def _retry_or_fail(self, op, error, now) -> None:
        """Sync operations retry retriable errors until their deadline; async
        commits fail to their callback (the coordinator, if it was the
        problem, is already marked unknown for the next commit)."""
        self._last_now = now
        if op.handle.sync and _retry_worthy(error):
            op.last_error = error
            op.retry_at = now + op.backoff.failed()
            return
        self._finish(op.handle, error, op=op)

    def _finish(self, h, error, op=None, result=None) -> None:
        if op is not None and op in self._ops:
            self._ops.remove(op)
        if h.done:
            return
        h.done = True
        h.error = error
        h._result = result
        if isinstance(h, CommitHandle):
            self._events.append(CommitCompleted(h.offsets, h.sync) if error is None
                                else CommitFailed(h.offsets, error, h.sync))
            if h.callback is not None:
                try:
                    h.callback(h.offsets, error)
                except Exception:           # a user callback must not break the core
                    log.exception("offset commit callback raised")
        elif error is None:
            self._events.append(OffsetsFetched(result))

    def _on_coordinator_event(self, event) -> None:
        if not isinstance(event, CoordinatorLookupFailed):
            return
        for op in list(self._ops):
            if op.request is not None:
                continue
            # Async commits waiting for the coordinator fail (retriably) to their
            # callback; sync ones keep waiting until their deadline unless the
            # lookup failed for good (e.g. GROUP_AUTHORIZATION_FAILED).
            if event.fatal or (op.kind == "commit" and not op.handle.sync):
                self._finish(op.handle, event.error, op=op)
