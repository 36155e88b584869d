"""The consumer written once: what :class:`kio.Consumer` (threads) and the
async consumers (:mod:`kio.aio`, :mod:`kio.trio`) share.

Every method body lives here, once. A method that does not wait (assign,
seek, pause, lag...) is a plain method of :class:`ConsumerOps`. A method that
waits (poll, commit, committed, position, the offset lookups, close) is
written as a generator of *steps*, ``_<name>_steps``: it changes the core,
then ``yield``s what it waits for, and ``return``s the result. A step is

* a float: wait until something changed or this ``now_ms()`` deadline
  passed (``INF``: no deadline), then go on (the generator checks again);
* anything else: an awaitable a rebalance listener or commit callback
  returned (a coroutine function's call) - the async runner awaits it and
  sends its result back, the threading runner refuses it with TypeError.

A driver only runs the steps: the threading :class:`kio.Consumer` waits on
its Condition (the network thread notifies), the async consumers await the
engine's ``changed`` event. So ``Consumer.commit`` is
``self._run(self._commit_steps(...))`` and ``AsyncConsumer.commit`` is
``await self._run(self._commit_steps(...))``; a fix here fixes all three.

The hooks a driver provides: ``_lock`` (a threading.Lock, or a
``nullcontext`` where one task runs everything), ``_enter()`` (the threading
driver's one-thread check), ``_start()`` (the async drivers start their
network task), ``_kick()`` (wake the network side) and ``_failure`` (the
exception that ended the network thread or task, or None). What the share
consumer's bodies (:mod:`kio._shared.share_ops`) need as well - those hooks, the
closed checks, the poll loop, the waits - is :class:`kio._shared.client_ops.ClientOps`.
"""
from __future__ import annotations

import logging
import re
from typing import Any, ClassVar, Dict, Iterable, List, Mapping, NamedTuple, Optional, Pattern, Set, Tuple, Union

from kio._shared.client_ops import ClientOps, WakeupError, callback_steps, ms as _ms
from kio._shared.common import INF, Steps, now_ms
from kio._shared.types import Offsets, Partitions
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.consumer.core import ConsumerCore, OffsetAndTimestamp
from kproto.consumer.membership import GroupFatalError, PartitionsAssigned, PartitionsLost, PartitionsRevoked

__all__ = ["ConsumerOps", "Steps", "INF", "WakeupError", "PartitionBatch", "arrow_partition_batch"]

log = logging.getLogger("kio.consumer")

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


PartitionBatch.__module__ = "kio.consumer"


def arrow_partition_batch(tp: TopicPartition, cb: Any, headers: bool) -> PartitionBatch:
    """A PartitionBatch of Arrow arrays over one partition's ColumnBuffers
    (what ``poll_batch(arrow=True)`` of every driver returns)."""
    from kproto.records.arrow import arrow_columns, arrow_headers, arrow_timestamp_types
    return PartitionBatch(tp.topic, tp.partition, *arrow_columns(cb), arrow_timestamp_types(cb),
                          arrow_headers(cb) if headers else None)


def _offsets_only(res: Mapping[TopicPartition, Optional[OffsetAndTimestamp]]) -> Dict[TopicPartition, Optional[int]]:
    return {tp: None if v is None else v.offset for tp, v in res.items()}


def rebalance_calls(events, on_assign, on_revoke, on_lost):
    """What the application's listeners must be told, in order:
    ([(listener, partitions)], revoked, fatal_error). ``on_lost`` defaults to
    ``on_revoke`` (Java's onPartitionsLost); ``revoked`` says the core waits
    for ``rebalance_listener_done`` once they have run."""
    calls = []
    revoked = False
    fatal = None
    for ev in events:
        if isinstance(ev, PartitionsRevoked):
            revoked = True
            if on_revoke is not None:
                calls.append((on_revoke, list(ev.partitions)))
        elif isinstance(ev, PartitionsLost):
            fn = on_lost or on_revoke
            if fn is not None:
                calls.append((fn, list(ev.partitions)))
        elif isinstance(ev, PartitionsAssigned):
            if on_assign is not None:
                calls.append((on_assign, list(ev.partitions)))
        elif isinstance(ev, GroupFatalError):
            fatal = fatal or ev.error
    return calls, revoked, fatal


class ConsumerOps(ClientOps):
    """The consumer's methods, shared by every driver (see the module docstring)."""

    _what = "consumer"
    #: poll() and poll_batch() run without the steps runner: the same looks
    #: and waits in a plain loop (the threading consumer's
    #: PolledThreadDriver._poll_now, the asyncio and trio consumers'
    #: PolledClient._poll_now). False: through the steps, the general path
    #: every driver runs - the fast path's twin, which tests compare it with.
    poll_fast: ClassVar[bool] = True
    _core: ConsumerCore
    _listeners: Tuple[Any, Any, Any]
    # _app_events: rebalance events; _callbacks: (callback, offsets, error) of asynchronous commits

    def _init_ops(self, core: ConsumerCore) -> None:
        self._init_client_ops(core)
        self._listeners = (None, None, None)

    def _core_events(self) -> List[Any]:
        return self._core.events(ack=False)

    def _poll_started(self, now: float) -> bool:
        return self._core.poll_called(now)

    # == subscriptions ==========================================================================
    def _subscribe(self, topics: Union[str, Iterable[str], Pattern[str]], listeners: Tuple[Any, Any, Any]) -> None:
        self._enter()
        self._start()
        with self._lock:
            self._check_usable()
            self._listeners = listeners
            if isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^")):
                self._core.subscribe_pattern(topics, now_ms())
            else:
                self._core.subscribe(topics, now_ms())
        self._kick()

    def assign(self, partitions: Partitions) -> None:
        """Manual assignment of these TopicPartitions (no group management);
        replaces the previous assignment."""
        self._enter()
        self._start()
        with self._lock:
            self._check_usable()
            self._core.assign(partitions, now_ms())
        self._kick()

    def _unsubscribe_steps(self) -> Steps[None]:
        with self._lock:
            self._check_open()
            self._core.unsubscribe(now_ms())
        yield from self._dispatch_steps()
        self._kick()

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

    # == records ================================================================================
    def _poll_records_steps(self, timeout: Optional[float], max_records: Optional[int]) -> Steps[Any]:
        return (yield from self._poll_steps(timeout, self._core.drain, max_records))

    def _batch_take(self, max_records: Optional[int], arrow: bool, headers: bool) -> Tuple[Any, int]:
        """poll_batch()'s drain of the core and its argument (the record limit)."""
        limit = max_records or (1 << 62)
        if headers and not arrow:
            raise ValueError("poll_batch(headers=True) needs arrow=True (poll() gives each record's headers)")
        if arrow:
            core = self._core
            return (lambda n: core.drain_buffers(n, headers)), limit
        return self._core.drain_columns, limit

    @staticmethod
    def _batches(drained: Dict[TopicPartition, Any], arrow: bool, headers: bool) -> List[PartitionBatch]:
        """What poll_batch() returns for what its drain gave."""
        if arrow:
            return [arrow_partition_batch(tp, cb, headers) for tp, cb in drained.items()]
        return [PartitionBatch(tp.topic, tp.partition, *c) for tp, c in drained.items()]

    def _poll_batch_steps(self, timeout: Optional[float], max_records: Optional[int], arrow: bool,
                          headers: bool) -> Steps[List[PartitionBatch]]:
        take, limit = self._batch_take(max_records, arrow, headers)
        return self._batches((yield from self._poll_steps(timeout, take, limit)), arrow, headers)

    # == commits ================================================================================
    def _commit_steps(self, offsets: Optional[Offsets], asynchronous: bool, callback: Any,
                      timeout: Optional[float]) -> Steps[Optional[Dict[TopicPartition, OffsetAndMetadata]]]:
        self._start()
        with self._lock:
            self._check_usable()
            if asynchronous:
                cb = None if callback is None else (
                    lambda offs, err, callback=callback: self._callbacks.append((callback, offs, err)))
                self._core.commit_async(offsets, now_ms(), cb)
            else:
                h = self._core.commit_sync(offsets, now_ms(), _ms(timeout))
        self._kick()
        if asynchronous:
            return None
        yield from self._until(lambda: h.done)
        yield from self._dispatch_steps()
        return h.result()

    def _committed_steps(self, partitions: Partitions, timeout: Optional[float]
                         ) -> Steps[Dict[TopicPartition, Optional[OffsetAndMetadata]]]:
        return (yield from self._handle_steps(lambda core, now, t: core.committed(partitions, now, t), timeout))

    # == positions ==============================================================================
    def seek(self, partition: Tuple[str, int], offset: int) -> None:
        """Consume ``partition`` from ``offset`` on: the next record poll()
        returns for it is the one at ``offset`` (what was buffered is dropped)."""
        self._enter()
        with self._lock:
            self._check_open()
            self._core.seek(partition, offset)
        self._kick()

    def seek_to_beginning(self, partitions: Optional[Partitions] = None) -> None:
        """Consume these partitions (default: every assigned one) from their
        first offset (the log start offset, looked up on the next poll)."""
        self._enter()
        with self._lock:
            self._check_open()
            self._core.seek_to_beginning(partitions)
        self._kick()

    def seek_to_end(self, partitions: Optional[Partitions] = None) -> None:
        """Consume these partitions (default: every assigned one) from their
        end: only records written from now on (looked up on the next poll)."""
        self._enter()
        with self._lock:
            self._check_open()
            self._core.seek_to_end(partitions)
        self._kick()

    def _position_steps(self, partition: Tuple[str, int], timeout: Optional[float]) -> Steps[int]:
        self._start()
        tp = TopicPartition(*partition)
        with self._lock:
            self._check_open()
            pos = self._core.position(tp)
        if pos is None:
            self._kick()
            yield from self._until(lambda: self._core.position(tp) is not None, timeout,
                                   f"the position of {tp.topic}-{tp.partition}")
            with self._lock:
                pos = self._core.position(tp)
        return pos

    def pause(self, partitions: Partitions) -> None:
        """Stop fetching these partitions (poll() returns none of their
        records) until resume(); they stay assigned, their positions kept."""
        self._enter()
        with self._lock:
            self._check_open()
            self._core.pause(partitions)

    def resume(self, partitions: Partitions) -> None:
        """Fetch paused partitions again."""
        self._enter()
        with self._lock:
            self._check_open()
            self._core.resume(partitions)
        self._kick()

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

    def _offsets_for_times_steps(self, timestamps: Mapping[TopicPartition, int], timeout: Optional[float]
                                 ) -> Steps[Dict[TopicPartition, Optional[OffsetAndTimestamp]]]:
        return (yield from self._handle_steps(lambda core, now, t: core.list_offsets(timestamps, now, t), timeout))

    def _beginning_offsets_steps(self, partitions: Partitions, timeout: Optional[float]
                                 ) -> Steps[Dict[TopicPartition, Optional[int]]]:
        return _offsets_only((yield from self._handle_steps(
            lambda core, now, t: core.beginning_offsets(partitions, now, t), timeout)))

    def _end_offsets_steps(self, partitions: Partitions, timeout: Optional[float]
                           ) -> Steps[Dict[TopicPartition, Optional[int]]]:
        return _offsets_only((yield from self._handle_steps(
            lambda core, now, t: core.end_offsets(partitions, now, t), timeout)))

    # == callbacks ==============================================================================
    def _dispatch_steps(self) -> Steps[None]:
        """Run rebalance listeners and commit callbacks in the application's
        thread or task (a coroutine's result is yielded to be awaited)."""
        if not self._app_events and not self._callbacks:
            return
        with self._lock:
            events, self._app_events = self._app_events, []
            callbacks, self._callbacks = self._callbacks, []
        calls, revoked, error = rebalance_calls(events, *self._listeners)
        for fn, partitions in calls:
            try:
                yield from callback_steps(fn, partitions)
            except Exception as e:  # noqa: BLE001 - rethrown once the rebalance may go on
                log.exception("rebalance listener raised")
                error = error or e
        if revoked:
            with self._lock:
                self._core.rebalance_listener_done(now_ms())
            self._kick()
        for cb, offsets, err in callbacks:
            try:
                yield from callback_steps(cb, offsets, err)
            except Exception:  # noqa: BLE001
                log.exception("commit callback %r raised", cb)
        if error is not None:
            raise error
