"""The threading consumer: :class:`Consumer`, a thin driver around ConsumerCore.

A background thread, ``kio-consumer-network-thread | <client_id>``, owns the
sockets (:class:`kio._network.SocketLoop`) and runs the core: fetches,
heartbeats, commits and rebalances progress while the application processes
records between polls - the job of the Java client's heartbeat thread, with
the fetch of the next records already in flight (prefetch).

Threading contract (as in Java, the consumer is NOT thread-safe):

* one thread uses the consumer: the first thread that calls one of its
  methods owns it; a call from any other thread raises
  :class:`ConsumerThreadError` (only :meth:`Consumer.wakeup` may be called
  from anywhere);
* ``poll`` hands over records the network thread fetched; rebalance
  listeners (``on_assign``/``on_revoke``/``on_lost``, each called with a list
  of TopicPartition) and ``commit(asynchronous=True)`` callbacks run on the
  caller's thread inside ``poll``/``commit``/``close``, as in Java. A
  revocation holds the rebalance until the listener returned, so the
  listener can still commit;
* ``close()`` commits the consumed positions (with auto-commit), runs the
  revocation listener and leaves the group.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import (
    Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Pattern, Set, Tuple,
    Union,
)

from kio._common import rebalance_calls, sleep_time
from kio._network import SocketLoop
from kio._types import CommitCallback, Offsets, Partitions, RebalanceListener
from kio.producer import KafkaTimeoutError
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.config import Config
from kproto.consumer.core import ConsumerClosedError, ConsumerCore, OffsetAndTimestamp
from kproto.errors import KafkaError
from kproto.records import Record
from kio._common import now_ms as _now_ms  # the cores' one clock

__all__ = ["Consumer", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionBatch",
           "ConsumerThreadError", "ConsumerClosedError", "KafkaTimeoutError", "WakeupError"]

log = logging.getLogger("kio.consumer")


class ConsumerThreadError(KafkaError, RuntimeError):
    """The consumer was used from a second thread (it is not thread-safe)."""


class WakeupError(KafkaError):
    """poll() was interrupted by wakeup()."""


class PartitionBatch(NamedTuple):
    """The columnar records of one partition (lists, or Arrow arrays).

    With ``arrow=True`` ``timestamp_types`` is an int32 array (0 CreateTime,
    1 LogAppendTime), and ``headers`` a ``list<struct<key: string, value:
    binary>>`` array when ``poll_batch`` was asked for headers; otherwise
    they are None."""
    topic: str
    partition: int
    offsets: Any
    timestamps: Any
    keys: Any
    values: Any
    timestamp_types: Any = None
    headers: Any = None

    def __len__(self) -> int:
        """The number of records."""
        return len(self.offsets)


def arrow_partition_batch(tp: TopicPartition, cb: Any, headers: bool) -> PartitionBatch:
    """A PartitionBatch of Arrow arrays over one partition's ColumnBuffers
    (what ``poll_batch(arrow=True)`` of every driver returns)."""
    from kproto.records.arrow import arrow_columns, arrow_headers, arrow_timestamp_types
    return PartitionBatch(tp.topic, tp.partition, *arrow_columns(cb), arrow_timestamp_types(cb),
                          arrow_headers(cb) if headers else None)


class Consumer:
    """``Consumer(bootstrap_servers=..., group_id="g", auto_offset_reset="earliest")``
    or ``Consumer({"bootstrap.servers": ...})``; see the module docstring."""

    config: Config
    """The parsed settings (``consumer.config.group_id``)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._core = ConsumerCore(config, **kwargs)
        self.config = self._core.config
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Fetch responses run to max.partition.fetch.bytes (1 MiB) and more:
        # reading them in 1 MiB chunks halves the network thread's wake-ups
        # (and its CPU per record) compared with 256 KiB.
        self._net = SocketLoop(self._core, recv_size=1 << 20)
        self._owner = None
        self._on_assign = self._on_revoke = self._on_lost = None
        self._app_events = []            # rebalance events for the user's thread
        self._callbacks = []             # (callback, offsets, error) for the user's thread
        self._waiters = 0
        self._stop = False
        self._closed = False
        self._wakeup = False
        self._fatal: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kio-consumer-network-thread | {self.config.client_id}")
        self._thread.start()

    # == subscriptions ========================================================================
    def subscribe(self, topics: Union[str, Iterable[str], Pattern[str]],
                  on_assign: Optional[RebalanceListener] = None, on_revoke: Optional[RebalanceListener] = None,
                  on_lost: Optional[RebalanceListener] = None) -> None:
        """Join the group for ``topics``: a list of names, one name, a compiled
        regex or a string starting with ``^`` (a pattern). Listeners are
        called with a list of TopicPartition; ``on_lost`` defaults to
        ``on_revoke`` (as Java's onPartitionsLost)."""
        self._enter()
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        with self._lock:
            self._check_usable()
            now = _now_ms()
            if isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^")):
                self._core.subscribe_pattern(topics, now)
            else:
                self._core.subscribe(topics, now)
        self._net.wake()

    def assign(self, partitions: Partitions) -> None:
        """Manual assignment of these TopicPartitions (no group management);
        replaces the previous assignment."""
        self._enter()
        with self._lock:
            self._check_usable()
            self._core.assign(partitions, _now_ms())
        self._net.wake()

    def unsubscribe(self) -> None:
        """Leave the group (the revocation listener runs) or drop the manual
        assignment; records buffered for the partitions are dropped.
        subscribe() or assign() again to consume."""
        self._enter()
        with self._lock:
            self._core.unsubscribe(_now_ms())
        self._dispatch()
        self._net.wake()

    def assignment(self) -> Set[TopicPartition]:
        """The partitions assigned to this consumer now (by the group, or by assign())."""
        self._enter()
        with self._lock:
            return self._core.assignment()

    def subscription(self) -> Set[str]:
        """The topics subscribed to (for a pattern: the topics it matches now);
        empty without subscribe()."""
        self._enter()
        with self._lock:
            return self._core.subscription()

    # == records ===================================================================================
    def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[Record]:
        """Records fetched so far (up to ``max_records``, default
        max.poll.records), waiting up to ``timeout`` seconds for some
        (None: until there are). Rebalance listeners and commit callbacks
        run inside poll, on this thread."""
        return self._poll(timeout, lambda core: core.drain(max_records))

    def poll_batch(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None,
                   arrow: bool = False, headers: bool = False) -> List[PartitionBatch]:
        """Columnar poll: a list of :class:`PartitionBatch` (offsets,
        timestamps, keys, values as lists). With ``arrow=True`` they are
        pyarrow arrays built straight from the fetched bytes (int64, int64,
        binary, binary, and the int32 timestamp types; deserializers do not
        apply), plus the headers with ``headers=True`` (Arrow only; else use
        poll()). ``max_records`` defaults to everything buffered."""
        limit = max_records or (1 << 62)
        if headers and not arrow:
            raise ValueError("poll_batch(headers=True) needs arrow=True (poll() gives each record's headers)")
        if arrow:
            bufs = self._poll(timeout, lambda core: core.drain_buffers(limit, headers))
            return [arrow_partition_batch(tp, cb, headers) for tp, cb in bufs.items()]
        cols = self._poll(timeout, lambda core: core.drain_columns(limit))
        return [PartitionBatch(tp.topic, tp.partition, *c) for tp, c in cols.items()]

    def __iter__(self) -> Iterator[Record]:
        """Every record, as it arrives (``poll(1.0)`` in a loop), until the consumer is closed."""
        while not self._closed:
            yield from self.poll(1.0)

    def _poll(self, timeout, take):
        self._enter()
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check_usable()
            self._core.poll_called(_now_ms())
        self._net.wake()
        while True:
            self._dispatch()
            with self._lock:
                self._check_usable()
                if self._wakeup:
                    self._wakeup = False
                    raise WakeupError("poll() was interrupted by wakeup()")
                if self._core.client.auth_error is not None:
                    raise self._core.client.auth_error     # as Java's poll(): not a silent retry loop
                if not self._app_events and not self._callbacks:
                    out = take(self._core)
                    if out:
                        break
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return out
                    self._waiters += 1
                    try:
                        self._changed.wait(left)     # the network thread notifies: no polling
                    finally:
                        self._waiters -= 1
        self._net.wake()       # partitions drained: their next fetch can go out now
        return out

    # == commits ==================================================================================
    def commit(self, offsets: Optional[Offsets] = None, asynchronous: bool = False,
               callback: Optional[CommitCallback] = None,
               timeout: Optional[float] = None) -> Optional[Dict[TopicPartition, OffsetAndMetadata]]:
        """Commit ``offsets`` ({tp: next offset to consume, or OffsetAndMetadata};
        default: the positions of everything consumed). Synchronous by default
        (returns the committed offsets, raises on failure); with
        ``asynchronous=True`` it returns at once and ``callback(offsets, error)``
        runs on this thread in a later poll/commit/close (then commit returns
        None). ``timeout`` bounds a synchronous commit (default
        default.api.timeout.ms; then :class:`CommitTimeoutError`)."""
        self._enter()
        with self._lock:
            self._check_usable()
            now = _now_ms()
            if asynchronous:
                cb = None if callback is None else (
                    lambda offs, err, callback=callback: self._callbacks.append((callback, offs, err)))
                self._core.commit_async(offsets, now, cb)
                self._net.wake()
                return None
            h = self._core.commit_sync(offsets, now, None if timeout is None else int(timeout * 1000))
        self._net.wake()
        self._wait_for(lambda: h.done, None)
        self._dispatch()
        return h.result()

    def committed(self, partitions: Partitions,
                  timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndMetadata]]:
        """The group's committed offsets of these partitions: {tp:
        OffsetAndMetadata, or None (nothing committed)}."""
        self._enter()
        with self._lock:
            self._check_usable()
            h = self._core.committed(partitions, _now_ms(), None if timeout is None else int(timeout * 1000))
        self._net.wake()
        self._wait_for(lambda: h.done, None)
        return h.result()

    # == positions ==================================================================================
    def seek(self, partition: Tuple[str, int], offset: int) -> None:
        """Consume ``partition`` from ``offset`` on: the next record poll()
        returns for it is the one at ``offset`` (what was buffered is dropped)."""
        self._enter()
        with self._lock:
            self._core.seek(partition, offset)
        self._net.wake()

    def seek_to_beginning(self, partitions: Optional[Partitions] = None) -> None:
        """Consume these partitions (default: every assigned one) from their
        first offset (the log start offset, looked up on the next poll)."""
        self._enter()
        with self._lock:
            self._core.seek_to_beginning(partitions)
        self._net.wake()

    def seek_to_end(self, partitions: Optional[Partitions] = None) -> None:
        """Consume these partitions (default: every assigned one) from their
        end: only records written from now on (looked up on the next poll)."""
        self._enter()
        with self._lock:
            self._core.seek_to_end(partitions)
        self._net.wake()

    def position(self, partition: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The offset of the next record poll() returns for this partition;
        waits (up to ``timeout``, default default.api.timeout.ms) while it is
        being looked up (committed offset or auto.offset.reset)."""
        self._enter()
        tp = TopicPartition(*partition)
        with self._lock:
            pos = self._core.position(tp)
        if pos is not None:
            return pos
        self._net.wake()
        self._wait_for(lambda: self._core.position(tp) is not None, timeout,
                       f"the position of {tp.topic}-{tp.partition}")
        with self._lock:
            return self._core.position(tp)

    def pause(self, partitions: Partitions) -> None:
        """Stop fetching these partitions (poll() returns none of their
        records) until resume(); they stay assigned, their positions kept."""
        self._enter()
        with self._lock:
            self._core.pause(partitions)

    def resume(self, partitions: Partitions) -> None:
        """Fetch paused partitions again."""
        self._enter()
        with self._lock:
            self._core.resume(partitions)
        self._net.wake()

    def paused(self) -> Set[TopicPartition]:
        """The partitions paused with pause()."""
        self._enter()
        with self._lock:
            return self._core.paused()

    def lag(self, partition: Tuple[str, int]) -> Optional[int]:
        """Records between the position and the last high watermark the
        broker reported (None until a fetch answered)."""
        self._enter()
        with self._lock:
            return self._core.lag(partition)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """For {tp: timestamp in ms}: {tp: OffsetAndTimestamp of the first
        record at or after the timestamp, or None (there is none)}."""
        return self._lookup(lambda core, now, t: core.list_offsets(timestamps, now, t), timeout)

    def beginning_offsets(self, partitions: Partitions,
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the first offset in the log} (ListOffsets earliest; waits up to
        ``timeout``, default default.api.timeout.ms)."""
        res = self._lookup(lambda core, now, t: core.beginning_offsets(partitions, now, t), timeout)
        return {tp: None if v is None else v.offset for tp, v in res.items()}

    def end_offsets(self, partitions: Partitions,
                    timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the offset the next record written will get} (ListOffsets
        latest: the high watermark, or the last stable offset under
        read_committed; waits up to ``timeout``, default default.api.timeout.ms)."""
        res = self._lookup(lambda core, now, t: core.end_offsets(partitions, now, t), timeout)
        return {tp: None if v is None else v.offset for tp, v in res.items()}

    def _lookup(self, start, timeout):
        self._enter()
        with self._lock:
            self._check_usable()
            h = start(self._core, _now_ms(), None if timeout is None else int(timeout * 1000))
        self._net.wake()
        self._wait_for(lambda: h.done, None)
        return h.result()

    # == closing ====================================================================================
    def wakeup(self) -> None:
        """Make a blocked poll() raise WakeupError (thread-safe)."""
        with self._lock:
            self._wakeup = True
            self._changed.notify_all()

    def close(self, timeout: Optional[float] = None) -> None:
        """Commit consumed positions (auto-commit), run the revocation
        listener, leave the group, close the connections. ``timeout`` bounds
        the commit and the LeaveGroup (default default.api.timeout.ms)."""
        if self._closed:
            return
        self._enter()
        with self._lock:
            if self._fatal is None:
                self._core.begin_close(_now_ms(), None if timeout is None else int(timeout * 1000))
        self._net.wake()
        try:
            if self._fatal is None:
                self._wait_for(lambda: self._core.close_done or self._fatal is not None, None,
                               dispatch=True)
        finally:
            with self._lock:
                self._stop = True
            self._net.wake()
            self._thread.join()
            self._closed = True
            self._dispatch()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # == helpers (user's thread) =======================================================================
    def _enter(self):
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise ConsumerThreadError(
                f"kio.Consumer is not safe for multi-threaded access: it is used by thread "
                f"{self._owner} and was called from thread {me} ({threading.current_thread().name}); "
                f"use one consumer per thread")

    def _check_usable(self):
        if self._fatal is not None:
            raise ConsumerClosedError(f"the consumer's network thread failed: {self._fatal!r}") \
                from self._fatal
        if self._closed or self._core.closing:
            raise ConsumerClosedError("the consumer is closed")

    def _wait_for(self, cond, timeout, what="the operation", dispatch=True):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if dispatch:
                self._dispatch()
            with self._lock:
                if cond():
                    return
                if self._fatal is not None:
                    self._check_usable()
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise KafkaTimeoutError(f"timed out after {timeout} s waiting for {what}")
                self._waiters += 1
                try:
                    self._changed.wait(left)
                finally:
                    self._waiters -= 1

    def _dispatch(self):
        """Run rebalance listeners and commit callbacks on the user's thread."""
        if not self._app_events and not self._callbacks:
            return
        with self._lock:
            events, self._app_events = self._app_events, []
            callbacks, self._callbacks = self._callbacks, []
        calls, revoked, error = rebalance_calls(events, self._on_assign, self._on_revoke, self._on_lost)
        for fn, partitions in calls:
            try:
                fn(partitions)
            except Exception as e:  # noqa: BLE001 - rethrown after the rebalance may go on
                log.exception("rebalance listener raised")
                error = error or e
        if revoked:
            with self._lock:
                self._core.rebalance_listener_done(_now_ms())
            self._net.wake()
        for cb, offsets, err in callbacks:
            try:
                cb(offsets, err)
            except Exception:  # noqa: BLE001
                log.exception("commit callback %r raised", cb)
        if error is not None:
            raise error

    # == the network thread ==========================================================================
    def _run(self):
        core, net = self._core, self._net
        seen_progress = -1
        events = ()
        try:
            while True:
                with self._lock:
                    now = _now_ms()
                    if self._stop:
                        break
                    net.apply(core.poll(now), now)
                    net.write_all(now)
                    evs = core.events(ack=False)
                    if evs:
                        self._app_events.extend(evs)
                    # Wake the application only when something it may wait for
                    # can have changed: records, rebalance events, a completed
                    # request, a timer (commit and lookup timeouts), or a poll
                    # after the application woke us (what it asked for may be
                    # done at once: closing, a commit that cannot be sent).
                    # Not on every partial read of a large fetch response. The
                    # application waits without a timer: each of these counts.
                    progress = core.client.progress
                    woken, net.woken = net.woken, False
                    if self._waiters and (evs or core.data_ready or progress != seen_progress
                                          or not events or woken):
                        self._changed.notify_all()
                    seen_progress = progress
                    core.data_ready = False
                    deadline = core.next_deadline(now)
                    net.update_interest()
                events = net.select(sleep_time(deadline, _now_ms()))
                with self._lock:
                    net.handle(events, _now_ms())
        except BaseException as e:  # noqa: BLE001 - fail loudly, never hang the caller
            log.exception("the consumer network thread failed")
            with self._lock:
                self._fatal = e
                self._changed.notify_all()
        finally:
            with self._lock:
                try:
                    net.apply(core.close(_now_ms()), _now_ms())
                except Exception:  # noqa: BLE001
                    log.exception("closing the consumer core")
                net.close()
                self._changed.notify_all()
