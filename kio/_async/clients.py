"""Producer and Consumer for async frameworks, written once (the share
consumer and the admin: :mod:`kio._async.share`, :mod:`kio._async.admin`).

:mod:`kio.aio` and :mod:`kio.trio` bind these classes to their backend
(see :mod:`kio._async.engine`). The surface is the threading drivers', made
awaitable; the cores do the work. Cancellation safety comes from the cores
never awaiting: every change to a core happens between two awaits, so a
cancelled ``send``, ``poll`` or ``commit`` either happened completely or
not at all, and ``close`` runs shielded.
"""
from __future__ import annotations

import logging
import threading
import uuid
from contextlib import nullcontext
from types import GeneratorType as _GeneratorType
from typing import (
    TYPE_CHECKING, Any, AsyncIterator, Dict, Generator, Iterable, List, Mapping, Optional, Pattern,
    Protocol, Sequence, Tuple, Type, TypeVar, Union,
)

from kio._async.engine import Engine
from kio._shared.client_ops import DISPATCH
from kio._shared.common import Stepper, now_ms
from kio._shared.types import (
    AsyncCommitCallback, AsyncRebalanceListener, BulkCallback, DeliveryCallback, Headers, Offsets, Partitions,
)
from kio._shared.consumer_ops import ConsumerOps, PartitionBatch
from kio._shared.producer_ops import ProducerOps
from kproto.cluster import TopicPartition
from kproto.config import Config
from kproto.consumer import OffsetAndMetadata
from kproto.consumer.core import ConsumerCore, OffsetAndTimestamp
from kproto.records import Record
from kproto.producer._append import Allocator
from kproto.producer import (
    BulkDelivery, BulkResult, ProducerCore, RecordMetadata, attached_result, complete_results,
)

__all__ = ["AsyncProducer", "AsyncConsumer", "RecordHandle", "delivery_classes"]

log = logging.getLogger("kio.async")
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
        self._engine = Engine(core, self._io, recv_size=recv_size, after_poll=self._after_poll,
                              on_failure=self._engine_failed)
        self._waiters = 0
        self._closed = False

    def _engine_failed(self, exc: BaseException) -> None:
        """The network task failed (``_failure`` tells the waiters): the producer fails its records."""

    def _after_poll(self) -> bool:
        return self._waiters > 0

    def _ensure_started(self):
        if not self._engine.started:
            self._io.check_can_spawn(type(self).__name__)
            self._engine.start()

    # -- hooks of the shared method bodies (kio._shared.consumer_ops...), and the runner of their steps --
    def _start(self) -> None:
        self._ensure_started()

    def _kick(self) -> None:
        self._engine.kick()

    @property
    def _failure(self) -> Optional[BaseException]:
        return self._engine.fatal

    async def _wait_until(self, end: float) -> None:
        """Wait until something changed or ``end`` (``now_ms()``; INF: no
        limit) passed: a wait step of the shared method bodies."""
        if end > now_ms():              # (INF too)
            self._waiters += 1
            try:
                await self._engine.wait_until(end)
            finally:
                self._waiters -= 1

    async def _run(self, steps: Any) -> Any:
        """Run a blocking operation of the shared method bodies in this task: each wait it
        yields awaits the engine's ``changed`` event, each awaitable (a
        coroutine listener's) is awaited and its outcome sent back."""
        try:
            stepper = Stepper(steps)
            for step in stepper:
                if isinstance(step, float):
                    await self._wait_until(step)
                else:
                    try:
                        stepper.reply(await step)
                    except Exception as e:  # noqa: BLE001 - the listener's error, handled by the steps
                        stepper.fail(e)
            return stepper.result
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


class SteppedClient(_Client):
    """A client whose blocking operations are shared step generators (the
    producer's :class:`~kio._shared.producer_ops.ProducerOps`, the consumers'
    :class:`~kio._shared.client_ops.ClientOps`), run by ``_run``; not the
    admin, whose operations go through its ``_call``."""

    if TYPE_CHECKING:                 # the shared method bodies', which come after this class in the MRO
        def _client_instance_id_steps(self, timeout: Optional[float]) -> Any: ...

    async def client_instance_id(self, timeout: Optional[float] = None) -> uuid.UUID:
        """The client instance id (KIP-714) the broker assigned in
        GetTelemetrySubscriptions, waiting up to ``timeout`` seconds (default:
        the producer's max.block.ms, the consumers' default.api.timeout.ms;
        then KafkaTimeoutError) for its answer.
        IllegalStateError when there is none to wait for: ``enable.metrics.push``
        is off, or the broker has no telemetry APIs (or refused them)."""
        return await self._run(self._client_instance_id_steps(timeout))  # type: ignore[no-any-return]


# == producer ======================================================================================

class AsyncDelivery:
    """``await handle`` -> RecordMetadata (or raises the delivery error).

    Attached to its batch's shared outcome (:mod:`kproto.producer.outcome`):
    acknowledging a batch costs nothing per record, its state is read with
    :func:`kproto.producer.attached_result`, and a handle that is awaited
    registers itself to be woken. Made without ``__init__`` (``send`` sets
    what it needs), so every slot is read with a default here."""
    __slots__ = ("topic", "partition", "timestamp", "_outcome", "_delta", "_event")
    _outcome: Any
    _event: Any
    notify = False
    on_delivery = None            # records with a callback: AsyncCallbackDelivery
    new_event: Any = None         # set per backend

    @property
    def done(self) -> bool:
        """Whether the record is acknowledged or failed."""
        outcome = getattr(self, "_outcome", None)
        return outcome is not None and outcome.done

    def _outcome_done(self) -> None:
        self._event.set()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        outcome = self._outcome
        if not outcome.done:
            if getattr(self, "_event", None) is None:
                self._event = self.new_event()
                outcome.watch(self)
            yield from self._event.wait().__await__()
        metadata, error = attached_result(self)
        if error is not None:
            raise error
        return metadata  # type: ignore[no-any-return]


class AsyncCallbackDelivery(AsyncDelivery):
    """A record sent with ``on_delivery``: the same handle, the callback kept
    in its batch and called in the network task (kproto.producer.complete_results)."""
    __slots__ = ("on_delivery",)


class AsyncBulkDelivery(BulkDelivery):
    """``await handle`` -> BulkResult(topic, count, ranges): kproto's
    BulkDelivery, whose wake hook sets an event made on first await."""
    __slots__ = ("_event",)
    _event: Any
    new_event: Any = None

    def __init__(self, total: int, topic: str, on_delivery: Any = None) -> None:
        self._event = None
        super().__init__(total, topic, on_delivery, AsyncBulkDelivery._wake)

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    def __await__(self) -> Generator[Any, None, BulkResult]:
        if not self.done:
            if self._event is None:
                self._event = self.new_event()
            yield from self._event.wait().__await__()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[no-any-return]


class AsyncProducer(SteppedClient, ProducerOps):
    """``async with Producer(bootstrap_servers=...) as p: md = await (await p.send("t", b"v"))``.
    The method bodies are :class:`kio._shared.producer_ops.ProducerOps`', shared with
    the threading Producer; this class only awaits their waits on the engine."""
    delivery_class: Type[AsyncDelivery] = AsyncDelivery
    callback_delivery_class: Type[AsyncCallbackDelivery] = AsyncCallbackDelivery
    bulk_class: Type[AsyncBulkDelivery] = AsyncBulkDelivery

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        core = ProducerCore(config, **kwargs)
        self._init_ops(core)
        self._setup(core, nursery, 1 << 18)
        # send()'s wake-ups for a batch it opened (_kick_deadline) only lower
        # the accumulator's next round: the engine sleeps again towards it
        # without asking the network client (as the threading driver does).
        self._engine.deadline_after_kick = core.next_deadline_after_appends
        # One task runs the core and the application's calls: the lock is never
        # contended; a Lock's C acquire/release is the cheapest no-op per record.
        self._lock = threading.Lock()
        self._idle = self._unready = True
        self._fatal: Optional[BaseException] = None
        self._new_handle = Allocator(self.delivery_class).new
        self._new_callback_handle = Allocator(self.callback_delivery_class).new

    def _after_poll(self) -> bool:
        results = self._core.events()
        if results:
            complete_results(results)
        return self._waiters > 0

    def _engine_failed(self, exc: BaseException) -> None:
        self._fatal = exc                 # an attribute, not a property: send() reads it per record
        self._unready = True
        complete_results(self._fail_pending(exc))

    # -- hooks of ProducerOps ---------------------------------------------------------------------
    def _kick_deadline(self) -> None:
        self._engine.kick(round=False)

    def _start(self) -> None:
        self._ensure_started()
        self._idle = False
        self._unready = self._closing or self._closed or self._fatal is not None

    def _blocking(self, steps: Any) -> Any:
        return steps                      # send() awaits them

    def _new_bulk(self, total: int, topic: str, on_delivery: Any) -> Tuple[Any, Any]:
        handle = self.bulk_class(total, topic, on_delivery)
        return handle, handle

    # -- the public surface: the threading Producer's, awaitable ----------------------------------
    async def send(self, topic: str, value: object = None, key: object = None, partition: Optional[int] = None,
                   headers: Optional[Headers] = None, timestamp_ms: Optional[int] = None,
                   on_delivery: Optional[DeliveryCallback] = None) -> RecordHandle:
        """Queue one record, waiting (up to max.block.ms) only for metadata or
        buffer space; returns a handle: ``await handle`` for its RecordMetadata.

        Arguments as the threading :meth:`kio.Producer.send`'s;
        ``on_delivery(error, metadata)`` runs in the network task."""
        handle = self._send(topic, value, key, partition, headers, timestamp_ms, on_delivery)
        if type(handle) is _GeneratorType:
            handle = await self._run(handle)
        return handle  # type: ignore[no-any-return]

    async def send_many(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                        partition: Optional[int] = None, headers: Optional[Sequence[Optional[Headers]]] = None,
                        timestamp_ms: Optional[int] = None,
                        on_delivery: Optional[BulkCallback] = None) -> AsyncBulkDelivery:
        """Queue many records (sequences or Arrow arrays); ``await`` the returned
        handle for a BulkResult (topic, count, ranges), or the first delivery
        error; ``on_delivery(error, result)`` runs once every record is resolved."""
        return await self._run(self._send_many_steps(topic, values, keys, partition, headers, timestamp_ms,
                                                     on_delivery))  # type: ignore[no-any-return]

    async def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now and wait for every acknowledgement; returns
        how many records are still pending (0 unless ``timeout`` ran out)."""
        return await self._run(self._flush_steps(timeout))  # type: ignore[no-any-return]

    async def partitions_for(self, topic: str, timeout: Optional[float] = None) -> int:
        """Partition count of ``topic``, waiting for its metadata up to
        ``timeout`` seconds (default max.block.ms), then KafkaTimeoutError."""
        return await self._run(self._partitions_for_steps(topic, timeout))  # type: ignore[no-any-return]

    async def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Find the coordinator and get a producer id (fencing older
        producers with the same transactional id); waits up to ``timeout``
        seconds (default max.block.ms)."""
        await self._run(self._init_transactions_steps(timeout))

    async def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_id: str,
                                          timeout: Optional[float] = None) -> None:
        """Commit consumer offsets ({(topic, partition): next offset}) as part
        of the transaction."""
        await self._run(self._send_offsets_steps(offsets, group_id, timeout))

    async def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, wait for them, then commit.
        Raises if a record failed (then call abort_transaction)."""
        await self._run(self._commit_transaction_steps(timeout))

    async def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort: unsent records fail with TransactionAbortedError, the
        coordinator writes abort markers."""
        await self._run(self._abort_transaction_steps(timeout))

    async def _close(self, timeout: Optional[float]) -> None:
        """Flush (up to ``timeout``), fail what is left, stop the network task, close the core."""
        if self._closed:
            return
        if self._engine.started:
            await self._run(self._close_steps(timeout))
            await self._engine.stop()
        self._mark_closed(False)
        self._core.close(now_ms())
        complete_results(self._core.events())
        self._mark_closed(True)


# == consumer ======================================================================================

class PolledClient(SteppedClient):
    """An async client the application polls, whose method bodies are shared
    step generators (:class:`kio._shared.client_ops.ClientOps`: the consumer, the
    share consumer): the core's events are collected after each of its
    polls, and close runs the shared close steps."""

    _kicks_here = False           # kicks are the calling task's round (see _here)
    _round_due = False            # one came meanwhile

    if TYPE_CHECKING:                 # ClientOps', which comes after this class in the MRO
        def _collect_events(self) -> bool: ...
        def _close_steps(self, timeout: Optional[float]) -> Any: ...
        def _dispatch_steps(self) -> Any: ...
        def _poll_begin(self, timeout: Optional[float]) -> float: ...
        def _poll_look(self, end: float, take: Any, arg: Any) -> Any: ...

    def _kick(self) -> None:
        if self._kicks_here:
            self._round_due = True
        else:
            self._engine.kick()

    def _here(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` (no await in it), its kicks run as one round of the
        core in this task when it returns or raises (Engine.round_here):
        what it changed in the core - records taken, the poll's timer, an
        auto-commit due - goes out at once (the next Fetch leaves before
        poll() returns, as in Java's consumer) without waking the engine's
        main task for it and back."""
        self._kicks_here = True
        try:
            return fn(*args)
        finally:
            self._kicks_here = False
            if self._round_due or self._engine.round_owed:
                self._round_due = False
                self._engine.round_here()

    async def _poll_now(self, timeout: Optional[float], take: Any, arg: Any) -> Any:
        """poll()'s fast path: the looks and waits of the shared poll
        (:meth:`kio._shared.client_ops.ClientOps._poll_steps`) in a plain
        loop, without a generator, a Stepper or the runner per call - at a
        low rate a poll() is one look, one wait for the engine's ``changed``
        event (the reader fed the answer to the core), one look that takes
        the records and the core's one round of the answer, in this task:
        the round that sends the next Fetch. The steps are the twin
        (``ConsumerOps.poll_fast = False``); callbacks the collected events
        call for (rebalance listeners, commit callbacks: rare) run through
        the steps runner before the next look, as the steps run them."""
        engine = self._engine
        end = self._here(self._poll_begin, timeout)
        while True:
            out = self._here(self._poll_look, end, take, arg)
            if out is None:
                # An answer read meanwhile leaves its round to this poll
                # (Engine.polls_waiting): the next look runs it - or this
                # task now, when it is cancelled.
                engine.polls_waiting += 1
                try:
                    await self._wait_until(end)
                except BaseException:
                    if engine.round_owed:
                        engine.round_here()
                    raise
                finally:
                    engine.polls_waiting -= 1
            elif out is DISPATCH:
                await self._run(self._dispatch_steps())
            else:
                return out

    def _after_poll(self) -> bool:
        self._collect_events()
        return self._waiters > 0

    def wakeup(self) -> None:
        """Make a waiting ``poll()`` (or the next one) raise WakeupError, as
        the threading consumer's; called from another task of the same
        event loop."""
        self._wakeup = True
        self._engine.notify()

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
    :class:`kio._shared.consumer_ops.ConsumerOps`', shared with the threading
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
        if self.poll_fast:
            return await self._poll_now(timeout, self._core.drain, max_records)  # type: ignore[no-any-return]
        return await self._run(self._poll_records_steps(timeout, max_records))

    async def poll_batch(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None,
                         arrow: bool = False, headers: bool = False) -> List[PartitionBatch]:
        """Columnar poll: a list of :class:`kio.consumer.PartitionBatch` (lists,
        or pyarrow arrays with ``arrow=True``, headers too with
        ``headers=True``), as the threading Consumer's."""
        if self.poll_fast:
            take, limit = self._batch_take(max_records, arrow, headers)
            return self._batches(await self._poll_now(timeout, take, limit), arrow, headers)
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
    def make(name: str, base: Any) -> Any:
        # __slots__ = (): handles stay without a __dict__, one small object per record
        return type(name, (base,), {"__module__": module, "__qualname__": name, "__slots__": (),
                                    "new_event": event_class})
    return (make("Delivery", AsyncDelivery), make("CallbackDelivery", AsyncCallbackDelivery),
            make("BulkDelivery", AsyncBulkDelivery))
