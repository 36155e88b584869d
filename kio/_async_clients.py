"""Producer and Consumer for async frameworks, written once (the share
consumer and the admin: :mod:`kio._async_share`, :mod:`kio._async_admin`).

:mod:`kio.aio` and :mod:`kio.trio` bind these classes to their backend
(see :mod:`kio._async_engine`). The surface is the threading drivers', made
awaitable; the cores do the work. Cancellation safety comes from the cores
never awaiting: every change to a core happens between two awaits, so a
cancelled ``send``, ``poll`` or ``commit`` either happened completely or
not at all, and ``close`` runs shielded.
"""
from __future__ import annotations

import logging
from contextlib import nullcontext
import time
from typing import (
    TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Generator, Iterable, List, Literal, Mapping, Optional, Pattern,
    Protocol, Sequence, Set, Tuple, Type, TypeVar, Union, overload,
)

from kio._async_engine import Engine
from kio._common import INF, next_step, now_ms, rebalance_calls, wall_ms
from kio._types import (
    AsyncCommitCallback, AsyncRebalanceListener, DeliveryCallback, Headers, Offsets, Partitions,
)
from kio._consumer_ops import ConsumerOps, PartitionBatch
from kio.producer import BulkResult, KafkaTimeoutError
from kproto.cluster import TopicPartition
from kproto.config import Config
from kproto.consumer import OffsetAndMetadata
from kproto.consumer.core import ConsumerClosedError, ConsumerCore, OffsetAndTimestamp
from kproto.errors import KafkaError
from kproto.records import Record
from kproto.producer import (
    BufferExhausted, BulkDelivery, DeliveryHandle, MetadataPending, ProducerClosedError, ProducerCore,
    RecordMetadata, complete_results,
)

__all__ = ["AsyncProducer", "AsyncConsumer", "RecordHandle", "delivery_classes"]

log = logging.getLogger("kio.async")
_time_ns, _monotonic = time.time_ns, time.monotonic
_C = TypeVar("_C", bound="_Client")


class RecordHandle(Protocol):
    """What an async ``send`` returns: ``await handle`` for the record's
    RecordMetadata (or raises its delivery error); ``handle.done``."""

    @property
    def done(self) -> bool:
        """Whether the record is acknowledged or failed."""

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        """Wait for the record's RecordMetadata."""


class _Client:
    """What the three clients share: the backend, the engine, waiting."""
    backend_class: Any = None     # set by kio.aio / kio.trio
    config: Config
    """The parsed settings."""

    def _setup(self, core, nursery, recv_size):
        self._core = core
        self.config = core.config
        self._io = self.backend_class(nursery)
        self._engine = Engine(core, self._io, recv_size=recv_size, after_poll=self._after_poll)
        self._waiters = 0
        self._closed = False

    def _after_poll(self) -> bool:
        return self._waiters > 0

    def _ensure_started(self):
        if not self._engine.started:
            self._io.check_can_spawn(type(self).__name__)
            self._engine.start()

    async def _wait(self, timeout):
        self._waiters += 1
        try:
            await self._engine.wait_changed(timeout)
        finally:
            self._waiters -= 1
        if self._engine.fatal is not None:
            raise KafkaError(f"the network task failed: {self._engine.fatal!r}") from self._engine.fatal

    async def _wait_done(self, handle, timeout=None, what="the operation"):
        """Wait until ``handle.done`` (the core enforces its own deadline;
        ``timeout`` seconds bounds the wait on top of it)."""
        end = None if timeout is None else now_ms() + timeout * 1000.0
        self._engine.kick()
        while not handle.done:
            left = None if end is None else (end - now_ms()) / 1000.0
            if left is not None and left <= 0:
                raise KafkaTimeoutError(f"timed out after {timeout} s waiting for {what}")
            await self._wait(left)
        return handle

    # -- hooks of the shared method bodies (kio._consumer_ops...), and the runner of their steps --
    def _start(self) -> None:
        self._ensure_started()

    def _kick(self) -> None:
        self._engine.kick()

    @property
    def _failure(self) -> Optional[BaseException]:
        return self._engine.fatal

    async def _run(self, steps: Any) -> Any:
        """Run a blocking operation of the shared method bodies in this task: each wait it
        yields awaits the engine's ``changed`` event, each awaitable (a
        coroutine listener's) is awaited and its outcome sent back."""
        try:
            value: Any = None
            error: Optional[BaseException] = None
            while True:
                done, step = next_step(steps, value, error)
                if done:
                    return step
                value = error = None
                if isinstance(step, float):
                    left = None if step == INF else (step - now_ms()) / 1000.0
                    if left is None or left > 0:
                        self._waiters += 1
                        try:
                            await self._engine.wait_changed(left)
                        finally:
                            self._waiters -= 1
                else:
                    try:
                        value = await step
                    except Exception as e:  # noqa: BLE001 - the listener's error, handled by the steps
                        error = e
        finally:
            steps.close()

    async def close(self, timeout: Optional[float] = None) -> None:
        """Finish the client's work (see ``_close``: flush, commit and leave
        the group...) and stop its network task; ``timeout`` bounds the
        flush or commit. Runs to the end even when the calling task is
        cancelled."""
        if self._closed:
            return
        await self._io.shielded(lambda: self._close(timeout))

    async def __aenter__(self: _C) -> _C:
        await self._io.enter()
        self._ensure_started()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.close()
        finally:
            await self._io.exit(*exc)


# == producer ======================================================================================

class AsyncDelivery:
    """``await handle`` -> RecordMetadata (or raises the delivery error).

    Attached to its batch's shared outcome (:mod:`kproto.producer.outcome`):
    acknowledging a batch costs nothing per record, and a handle that is
    awaited registers itself to be woken."""
    __slots__ = ("topic", "partition", "timestamp", "_outcome", "_delta", "_event")
    notify = False
    on_delivery = None            # attached records with a callback: AsyncCallbackDelivery
    new_event = None              # set per backend

    def __init__(self):
        self._outcome = None
        self._event = None

    @property
    def done(self) -> bool:
        return self._outcome is not None and self._outcome.done

    def _outcome_done(self):
        self._event.set()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        outcome = self._outcome
        if not outcome.done:
            if self._event is None:
                self._event = self.new_event()
                outcome.watch(self)
            yield from self._event.wait().__await__()
        offset, log_append_time, error = outcome.offset_of(self._delta)
        if error is not None:
            raise error
        return RecordMetadata(self.topic, self.partition, offset,
                              log_append_time if log_append_time >= 0 else self.timestamp)


class _AwaitDone:
    """``await handle``: wait for ``done`` (an event made on first await and
    set by ``_resolved``), then raise the error or return ``_value()``."""
    __slots__ = ()

    def _resolved(self):
        if self._event is not None:
            self._event.set()

    def __await__(self):
        if not self.done:
            if self._event is None:
                self._event = self.new_event()
            yield from self._event.wait().__await__()
        if self.error is not None:
            raise self.error
        return self._value()


class AsyncCallbackDelivery(_AwaitDone, DeliveryHandle):
    """A record sent with ``on_delivery``: completed one by one, the callback
    runs in the network task; ``await handle`` works the same."""
    __slots__ = ("_event", "on_delivery")
    new_event = None

    def __init__(self, on_delivery):
        super().__init__()
        self._event = None
        self.on_delivery = on_delivery

    def _resolved(self):
        _AwaitDone._resolved(self)
        try:
            self.on_delivery(self.error, self.metadata)
        except Exception:  # noqa: BLE001 - a user callback must not kill the network task
            log.exception("on_delivery callback %r raised", self.on_delivery)

    def _value(self):
        return self.metadata

    if TYPE_CHECKING:
        def __await__(self) -> Generator[Any, None, RecordMetadata]: ...


class AsyncBulkDelivery(_AwaitDone, BulkDelivery):
    """``await handle`` -> BulkResult(topic, count, ranges)."""
    __slots__ = ("_event",)
    new_event = None

    def __init__(self, total, topic):
        super().__init__(total)
        self.topic = topic
        self._event = None
        if total == 0:
            self.done = True

    def _value(self):
        return BulkResult((self.topic, self.delivered, sorted(self.ranges)))

    if TYPE_CHECKING:
        def __await__(self) -> Generator[Any, None, BulkResult]: ...


class AsyncProducer(_Client):
    """``async with Producer(bootstrap_servers=...) as p: md = await (await p.send("t", b"v"))``."""
    delivery_class: Type[AsyncDelivery] = AsyncDelivery
    callback_delivery_class: Type[AsyncCallbackDelivery] = AsyncCallbackDelivery
    bulk_class: Type[AsyncBulkDelivery] = AsyncBulkDelivery

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        self._setup(ProducerCore(config, **kwargs), nursery, 1 << 18)
        self._max_block_ms = self.config.max_block_ms
        self._closing = False
        self._plain = self._core.key_serializer is None and self._core.value_serializer is None

    def _after_poll(self) -> bool:
        results = self._core.events()
        if results:
            complete_results(results)
        return self._waiters > 0

    def _check_usable(self):
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed; it takes no more records")
        if self._engine.fatal is not None:
            raise ProducerClosedError(f"the producer's network task failed: {self._engine.fatal!r}")

    async def _block(self, exc, topic, deadline):
        """Wait for the network task to change something; KafkaTimeoutError after max.block.ms."""
        if self._core.client.auth_error is not None:
            raise self._core.client.auth_error     # wrong credentials: waiting will not help
        now = now_ms()
        first = deadline is None
        if first:
            deadline = now + self._max_block_ms
        if now >= deadline:
            if isinstance(exc, MetadataPending):
                trouble = self._core.client.connection_trouble()
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata after {self._max_block_ms} ms"
                                        + (f" (no broker answered: {trouble})" if trouble else ""))
            raise KafkaTimeoutError(f"failed to allocate memory within max.block.ms ({self._max_block_ms} ms)")
        acc = self._core.accumulator
        if first or acc.wakeup:
            # The core needs a poll for what the append asked for (the topic's
            # metadata, draining to free memory, a batch it filled). Not on
            # every retry: the main task notifies waiters after each of its
            # polls, and a kick per wake-up made the two tasks wake each other
            # without end - a spinning core while no broker answers.
            acc.wakeup = False
            self._engine.kick()
        await self._wait((deadline - now) / 1000.0)
        self._check_usable()
        return deadline

    async def send(self, topic: str, value: object = None, key: object = None, partition: Optional[int] = None,
                   headers: Optional[Headers] = None, timestamp_ms: Optional[int] = None,
                   on_delivery: Optional[DeliveryCallback] = None) -> RecordHandle:
        """Queue one record, waiting (up to max.block.ms) only for metadata or
        buffer space; returns a handle: ``await handle`` for its RecordMetadata.

        Arguments as the threading :meth:`kio.Producer.send`'s;
        ``on_delivery(error, metadata)`` runs in the network task."""
        if self._engine._main is None:
            self._ensure_started()
        if self._closing or self._closed or self._engine.fatal is not None:
            self._check_usable()
        core = self._core
        # Per-record costs count here: no serializer call for plain bytes,
        # clocks read inline.
        if self._plain and type(value) is bytes and (key is None or type(key) is bytes):
            key_b, value_b = key, value
        else:
            key_b, value_b = core.serialize(topic, key, value)
        handle = self.delivery_class() if on_delivery is None else self.callback_delivery_class(on_delivery)
        ts = _time_ns() // 1000000 if timestamp_ms is None else timestamp_ms
        try:
            core.append_serialized(topic, value_b, key_b, partition, headers, ts, _monotonic() * 1000.0, handle)
        except (MetadataPending, BufferExhausted) as e:
            deadline = await self._block(e, topic, None)
            while True:
                try:
                    core.append_serialized(topic, value_b, key_b, partition, headers, ts, now_ms(), handle)
                    break
                except (MetadataPending, BufferExhausted) as e2:
                    deadline = await self._block(e2, topic, deadline)
        acc = core.accumulator
        if acc.wakeup:
            acc.wakeup = False
            self._engine.kick()
        return handle

    async def send_many(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                        partition: Optional[int] = None, headers: Optional[Sequence[Optional[Headers]]] = None,
                        timestamp_ms: Optional[int] = None) -> AsyncBulkDelivery:
        """Queue many records (sequences or Arrow arrays); ``await`` the returned
        handle for a BulkResult (topic, count, ranges), or the first delivery error."""
        self._ensure_started()
        core = self._core
        values, keys = core.serialize_columns(topic, values, keys)
        handle = self.bulk_class(len(values), topic)
        wall = wall_ms()
        ts = wall if timestamp_ms is None else timestamp_ms
        start, deadline = 0, None
        while start < len(values):
            self._check_usable()
            try:
                _, n = core.send_many(topic, values, keys, partition, headers, ts, now=now_ms(),
                                      handle=handle, start=start, default_timestamp_ms=wall)
                start += n
                if start < len(values):
                    raise BufferExhausted("buffer.memory is full")
            except (MetadataPending, BufferExhausted) as e:
                deadline = await self._block(e, topic, deadline)
        self._engine.kick()
        return handle

    async def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now and wait for every acknowledgement; returns
        how many records are still pending (0 unless ``timeout`` ran out)."""
        self._ensure_started()
        end = None if timeout is None else now_ms() + timeout * 1000.0
        self._core.begin_flush()
        try:
            self._engine.kick()
            while self._core.pending and self._engine.fatal is None:
                left = None if end is None else (end - now_ms()) / 1000.0
                if left is not None and left <= 0:
                    break
                await self._wait(left)
            return sum(b.record_count for b in self._core.accumulator.incomplete)
        finally:
            self._core.end_flush()

    async def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic`` (waits for metadata up to max.block.ms)."""
        self._ensure_started()
        deadline = None
        while True:
            n = self._core.partitions_for(topic, now_ms())
            if n is not None:
                return n
            deadline = await self._block(MetadataPending(topic), topic, deadline)

    def metrics(self) -> Dict[str, Any]:
        """The producer's counters and gauges ({name: value})."""
        return self._core.metrics()

    # -- transactions -----------------------------------------------------------------------------
    async def _txn(self, start, timeout):
        self._ensure_started()
        self._check_usable()
        res = start()
        await self._wait_done(res, self._max_block_ms / 1000.0 if timeout is None else timeout, res.name)
        if res.error is not None:
            raise res.error

    async def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Find the coordinator and get a producer id (fencing older
        producers with the same transactional id); waits up to ``timeout``
        seconds (default max.block.ms)."""
        await self._txn(self._core.init_transactions, timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent from now on are committed
        or aborted together."""
        self._core.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_id: str,
                                          timeout: Optional[float] = None) -> None:
        """Commit consumer offsets ({(topic, partition): next offset}) as part
        of the transaction."""
        await self._txn(lambda: self._core.send_offsets_to_transaction(offsets, group_id), timeout)

    async def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, wait for them, then commit.
        Raises if a record failed (then call abort_transaction)."""
        await self._txn(self._core.commit_transaction, timeout)

    async def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort: unsent records fail with TransactionAbortedError, the
        coordinator writes abort markers."""
        await self._txn(self._core.abort_transaction, timeout)

    async def _close(self, timeout):
        """Flush (up to ``timeout``), fail what is left, stop the network task."""
        if self._closed:
            return
        if self._engine.started:
            remaining = await self.flush(timeout)
            self._closing = True
            if remaining:
                self._core.abort_pending(ProducerClosedError(
                    f"the producer was closed (timeout={timeout}s) before these records were delivered"))
            await self._engine.stop()
        self._closing = True
        self._core.close(now_ms())
        complete_results(self._core.events())
        self._closed = True


# == consumer ======================================================================================

class PolledClient(_Client):
    """An async client the application polls, whose method bodies are shared
    step generators (:class:`kio._client_ops.ClientOps`: the consumer, the
    share consumer): the core's events are collected after each of its
    polls, and close runs the shared close steps."""

    if TYPE_CHECKING:                 # ClientOps', which comes after this class in the MRO
        def _collect_events(self) -> bool: ...
        def _close_steps(self, timeout: Optional[float]) -> Any: ...
        def _dispatch_steps(self) -> Any: ...

    def _after_poll(self) -> bool:
        self._collect_events()
        return self._waiters > 0

    async def _close(self, timeout: Optional[float]) -> None:
        """Close the core (commits, leaving the group...), stop the network
        task, then run the callbacks of what the close settled."""
        if self._closed:
            return
        try:
            if self._engine.started:
                await self._run(self._close_steps(timeout))
        finally:
            if self._engine.started:
                await self._engine.stop()
            self._closed = True
            await self._run(self._dispatch_steps())


class AsyncConsumer(PolledClient, ConsumerOps):
    """``records = await consumer.poll(1.0)``; ``async for record in consumer``.
    Rebalance listeners may be plain functions or coroutine functions; they
    run in the task that polls, commits or closes. The method bodies are
    :class:`kio._consumer_ops.ConsumerOps`', shared with the threading
    Consumer; this class only awaits their waits on the engine."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        core = ConsumerCore(config, **kwargs)
        self._init_ops(core)
        self._setup(core, nursery, 1 << 20)
        self._lock = nullcontext()          # one task runs the core and the application's calls

    # -- the public surface: the threading Consumer's, awaitable --------------------------------------
    def subscribe(self, topics: Union[str, Iterable[str], Pattern[str]],
                  on_assign: Optional[AsyncRebalanceListener] = None,
                  on_revoke: Optional[AsyncRebalanceListener] = None,
                  on_lost: Optional[AsyncRebalanceListener] = None) -> None:
        """Join the group for ``topics``: a list of names, one name, a compiled
        regex or a string starting with ``^`` (a pattern). Listeners (plain or
        coroutine functions) are called with a list of TopicPartition in the
        task that polls; ``on_lost`` defaults to ``on_revoke``."""
        self._subscribe(topics, (on_assign, on_revoke, on_lost))

    async def unsubscribe(self) -> None:
        """Leave the group (the revocation listener runs) or drop the manual
        assignment; records buffered for the partitions are dropped."""
        await self._run(self._unsubscribe_steps())

    async def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[Record]:
        """Records fetched so far (up to ``max_records``, default
        max.poll.records), waiting up to ``timeout`` seconds for some (None:
        until there are). Rebalance listeners and commit callbacks run here."""
        return await self._run(self._poll_records_steps(timeout, max_records))

    async def poll_batch(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None,
                         arrow: bool = False, headers: bool = False) -> List[PartitionBatch]:
        """Columnar poll: a list of :class:`kio.consumer.PartitionBatch` (lists,
        or pyarrow arrays with ``arrow=True``, headers too with
        ``headers=True``), as the threading Consumer's."""
        return await self._run(self._poll_batch_steps(timeout, max_records, arrow, headers))

    def __aiter__(self) -> AsyncIterator[Record]:
        """Every record, as it arrives, until the consumer is closed."""
        return self._records()

    async def _records(self):
        while not self._closed:
            for record in await self.poll(1.0):
                yield record

    async def commit(self, offsets: Optional[Offsets] = None, asynchronous: bool = False,
                     callback: Optional[AsyncCommitCallback] = None,
                     timeout: Optional[float] = None) -> Optional[Dict[TopicPartition, OffsetAndMetadata]]:
        """As the threading Consumer's: synchronous by default (returns the
        committed offsets); ``asynchronous=True`` returns at once and
        ``callback(offsets, error)`` runs in a later poll/commit/close."""
        return await self._run(self._commit_steps(offsets, asynchronous, callback, timeout))

    async def committed(self, partitions: Partitions,
                        timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndMetadata]]:
        """The group's committed offsets of these partitions: {tp:
        OffsetAndMetadata, or None (nothing committed)}."""
        return await self._run(self._committed_steps(partitions, timeout))

    async def position(self, partition: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The offset of the next record poll() returns for this partition;
        waits (up to ``timeout``) while it is being looked up."""
        return await self._run(self._position_steps(partition, timeout))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout: Optional[float] = None
                                ) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """For {tp: timestamp in ms}: {tp: OffsetAndTimestamp of the first
        record at or after the timestamp, or None}."""
        return await self._run(self._offsets_for_times_steps(timestamps, timeout))

    async def beginning_offsets(self, partitions: Partitions,
                                timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the first offset in the log}."""
        return await self._run(self._beginning_offsets_steps(partitions, timeout))

    async def end_offsets(self, partitions: Partitions,
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the offset the next record written will get} (the last stable
        offset under read_committed)."""
        return await self._run(self._end_offsets_steps(partitions, timeout))



def delivery_classes(module: str, event_class: Any) -> Tuple[
        Type[AsyncDelivery], Type[AsyncCallbackDelivery], Type[AsyncBulkDelivery]]:
    """The producer's handle classes for one framework (its event type), for
    the Producer classes of :mod:`kio.aio` and :mod:`kio.trio`."""
    def make(name, base):
        # __slots__ = (): handles stay without a __dict__, one small object per record
        return type(name, (base,), {"__module__": module, "__qualname__": name, "__slots__": (),
                                    "new_event": event_class})
    return (make("Delivery", AsyncDelivery), make("CallbackDelivery", AsyncCallbackDelivery),
            make("BulkDelivery", AsyncBulkDelivery))
