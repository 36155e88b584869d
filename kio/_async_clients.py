"""Producer, Consumer and Admin for async frameworks, written once.

:mod:`kio.aio` and :mod:`kio.trio` bind these classes to their backend
(see :mod:`kio._async_engine`). The surface is the threading drivers', made
awaitable; the cores do the work. Cancellation safety comes from the cores
never awaiting: every change to a core happens between two awaits, so a
cancelled ``send``, ``poll`` or ``commit`` either happened completely or
not at all, and ``close`` runs shielded.
"""
from __future__ import annotations

import inspect
import logging
import threading
from contextlib import nullcontext
import uuid
from types import GeneratorType as _GeneratorType
from typing import (
    TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Generator, Iterable, List, Literal, Mapping, Optional, Pattern,
    Protocol, Sequence, Set, Tuple, Type, TypeVar, Union, overload,
)

from kio._async_engine import Engine
from kio._common import INF, next_step, now_ms, rebalance_calls
from kio._types import (
    AsyncCommitCallback, AsyncRebalanceListener, BulkCallback, DeliveryCallback, Headers, Offsets, Partitions,
)
from kio._consumer_ops import ConsumerOps, PartitionBatch
from kio._producer_ops import ProducerOps
from kproto.admin import (
    AdminCore, AdminHandle, ClusterDescription, ConfigEntry, ConfigResource, ConsumerGroupDescription,
    ConsumerGroupListing, ConsumerLag, DeletedRecords, ListOffsetsResultInfo, NewPartitions, NewTopic,
    TopicDescription, TopicListing,
)
from kproto.cluster import TopicPartition
from kproto.config import Config
from kproto.consumer import OffsetAndMetadata
from kproto.consumer.core import ConsumerClosedError, ConsumerCore, OffsetAndTimestamp
from kproto.errors import KafkaError, KafkaTimeoutError
from kproto.share import AcknowledgeType, ShareRecord
from kproto.share.admin import ShareGroupDescription, ShareGroupListing, SharePartitionOffset
from kproto.records import Record
from kproto.producer._append import Allocator
from kproto.producer import (
    BulkDelivery, BulkResult, ProducerCore, RecordMetadata, attached_result, complete_results,
)

__all__ = ["AsyncProducer", "AsyncConsumer", "AsyncShareConsumer", "AsyncAdmin", "RecordHandle", "delivery_classes"]

log = logging.getLogger("kio.async")
_C = TypeVar("_C", bound="_Client")
#: ``callback(offsets, error)`` of the async share consumers: a plain or coroutine function
AsyncAcknowledgementCallback = Callable[[Dict[TopicPartition, List[int]], Optional[BaseException]], Any]


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


class AsyncProducer(_Client, ProducerOps):
    """``async with Producer(bootstrap_servers=...) as p: md = await (await p.send("t", b"v"))``.
    The method bodies are :class:`kio._producer_ops.ProducerOps`', shared with
    the threading Producer; this class only awaits their waits on the engine."""
    delivery_class: Type[AsyncDelivery] = AsyncDelivery
    callback_delivery_class: Type[AsyncCallbackDelivery] = AsyncCallbackDelivery
    bulk_class: Type[AsyncBulkDelivery] = AsyncBulkDelivery
    _network_name = "network task"

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        core = ProducerCore(config, **kwargs)
        self._init_ops(core)
        self._setup(core, nursery, 1 << 18)
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

class AsyncConsumer(_Client, ConsumerOps):
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

    def _after_poll(self) -> bool:
        core = self._core
        evs = core.events(ack=False)
        if evs:
            self._app_events.extend(evs)
        core.data_ready = False
        return self._waiters > 0

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

    async def _close(self, timeout):
        """Commit (auto-commit), run the revocation listener, leave the group,
        stop the network task."""
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


# == admin ==========================================================================================

class AsyncAdmin(_Client):
    """``async with Admin(bootstrap_servers=...) as admin: await admin.list_topics()``.

    The operations of the threading :class:`kio.Admin`, awaitable: each
    takes ``timeout`` (seconds; default default.api.timeout.ms) and
    ``raise_errors`` (False: return the :class:`AdminHandle`)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        self._setup(AdminCore(config, **kwargs), nursery, 1 << 18)

    async def _op(self, name: str, *args: Any, timeout: Optional[float] = None, raise_errors: bool = True,
                  **kwargs: Any) -> Any:
        """Run the core operation ``name`` (``now`` supplied, ``timeout`` in
        seconds instead of ``timeout_ms``) to its end."""
        self._ensure_started()
        if timeout is not None:
            kwargs["timeout_ms"] = int(timeout * 1000)
        handle = getattr(self._core, name)(*args, now=now_ms(), **kwargs)
        await self._wait_done(handle)
        return handle.result() if raise_errors else handle

    @overload
    async def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = ...,
                      replication_factor: int = ..., validate_only: bool = ..., timeout: Optional[float] = ...,
                      raise_errors: Literal[True] = ...) -> Dict[str, Optional[uuid.UUID]]: ...

    @overload
    async def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = ...,
                      replication_factor: int = ..., validate_only: bool = ..., timeout: Optional[float] = ...,
                      raise_errors: Literal[False]) -> AdminHandle: ...

    async def create_topics(self, topics: Iterable[Union[str, NewTopic]], *, num_partitions: int = -1,
                      replication_factor: int = -1, validate_only: bool = False,
                      timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Create topics: NewTopic values, or names (with ``num_partitions`` and
        ``replication_factor``; -1 is the broker's default). Returns {name:
        topic id} (a :class:`uuid.UUID`; None from a broker that reports no
        ids). A name Kafka does not allow fails with InvalidTopicError, one
        that exists with TopicAlreadyExistsError. ``validate_only``: only check."""
        new = [t if isinstance(t, NewTopic) else NewTopic(t, num_partitions, replication_factor)
               for t in topics]
        return await self._op("create_topics", new, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    async def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                      raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    async def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                      raise_errors: Literal[False]) -> AdminHandle: ...

    async def delete_topics(self, topics: Iterable[str], *, timeout: Optional[float] = None,
                      raise_errors: bool = True) -> Any:
        """Delete topics by name: {name: None}; a missing topic fails with
        UnknownTopicOrPartitionError."""
        return await self._op("delete_topics", topics, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def list_topics(self, *, list_internal: bool = ..., timeout: Optional[float] = ...,
                    raise_errors: Literal[True] = ...) -> Dict[str, TopicListing]: ...

    @overload
    async def list_topics(self, *, list_internal: bool = ..., timeout: Optional[float] = ...,
                    raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_topics(self, *, list_internal: bool = False, timeout: Optional[float] = None,
                    raise_errors: bool = True) -> Any:
        """Every topic: {name: TopicListing(name, topic_id, internal)}, by name;
        internal topics (``__consumer_offsets``...) only with ``list_internal``."""
        return await self._op("list_topics", list_internal=list_internal, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    async def describe_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                        raise_errors: Literal[True] = ...) -> Dict[str, TopicDescription]: ...

    @overload
    async def describe_topics(self, topics: Iterable[str], *, timeout: Optional[float] = ...,
                        raise_errors: Literal[False]) -> AdminHandle: ...

    async def describe_topics(self, topics: Iterable[str], *, timeout: Optional[float] = None,
                        raise_errors: bool = True) -> Any:
        """{name: TopicDescription(name, topic_id, internal, partitions)}, the
        partitions as PartitionInfo (leader, replicas, isr, ...); a missing
        topic fails with UnknownTopicOrPartitionError."""
        return await self._op("describe_topics", topics, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def describe_cluster(self, *, timeout: Optional[float] = ...,
                         raise_errors: Literal[True] = ...) -> ClusterDescription: ...

    @overload
    async def describe_cluster(self, *, timeout: Optional[float] = ...,
                         raise_errors: Literal[False]) -> AdminHandle: ...

    async def describe_cluster(self, *, timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """ClusterDescription(cluster_id, controller, nodes): the brokers as
        Node(id, host, port, rack)."""
        return await self._op("describe_cluster", timeout=timeout, raise_errors=raise_errors)

    @overload
    async def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    async def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = ..., timeout: Optional[float] = ...,
                          raise_errors: Literal[False]) -> AdminHandle: ...

    async def create_partitions(self, new_partitions: Mapping[str, Union[int, NewPartitions]], *,
                          validate_only: bool = False, timeout: Optional[float] = None,
                          raise_errors: bool = True) -> Any:
        """Grow topics to {name: total partition count, or NewPartitions(total_count,
        assignments)}: {name: None}."""
        return await self._op("create_partitions", new_partitions, validate_only=validate_only, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    async def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = ...,
                         timeout: Optional[float] = ...,
                         raise_errors: Literal[True] = ...) -> Dict[ConfigResource, Dict[str, ConfigEntry]]: ...

    @overload
    async def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = ...,
                         timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    async def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                         timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """The settings of topics and brokers (``ConfigResource.topic(name)``,
        ``ConfigResource.broker(node_id)``): {resource: {name: ConfigEntry}}."""
        return await self._op("describe_configs", resources, include_synonyms=include_synonyms, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    async def list_consumer_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                             raise_errors: Literal[True] = ...) -> List[ConsumerGroupListing]: ...

    @overload
    async def list_consumer_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                             raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_consumer_groups(self, *, states: Optional[Iterable[str]] = None, timeout: Optional[float] = None,
                             raise_errors: bool = True) -> Any:
        """Every group of every broker: [ConsumerGroupListing(group_id,
        is_simple, state, ...)]; ``states`` keeps only groups in these states
        (e.g. ["Stable", "Empty"])."""
        return await self._op("list_consumer_groups", states=states, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def describe_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                                 raise_errors: Literal[True] = ...) -> Dict[str, ConsumerGroupDescription]: ...

    @overload
    async def describe_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                                 raise_errors: Literal[False]) -> AdminHandle: ...

    async def describe_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                                 raise_errors: bool = True) -> Any:
        """{group: ConsumerGroupDescription(state, assignor, members, ...)},
        each member's assignment decoded."""
        return await self._op("describe_consumer_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                               raise_errors: Literal[True] = ...) -> Dict[str, None]: ...

    @overload
    async def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                               raise_errors: Literal[False]) -> AdminHandle: ...

    async def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                               raise_errors: bool = True) -> Any:
        """Delete groups (and their committed offsets): {group: None}; a group
        with members fails with NonEmptyGroupError."""
        return await self._op("delete_consumer_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def list_consumer_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ...,
                                    *, require_stable: bool = ..., timeout: Optional[float] = ...,
                                    raise_errors: Literal[True] = ...
                                    ) -> Dict[TopicPartition, OffsetAndMetadata]: ...

    @overload
    async def list_consumer_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = ...,
                                    *, require_stable: bool = ..., timeout: Optional[float] = ...,
                                    raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_consumer_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None,
                                    *, require_stable: bool = True, timeout: Optional[float] = None,
                                    raise_errors: bool = True) -> Any:
        """{TopicPartition: OffsetAndMetadata} committed by ``group_id`` (all its
        partitions, or ``partitions``); partitions without a commit are left out."""
        return await self._op("list_consumer_group_offsets", group_id, partitions, require_stable=require_stable,
                        timeout=timeout, raise_errors=raise_errors)

    @overload
    async def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = ...,
                           raise_errors: Literal[True] = ...) -> Dict[TopicPartition, ConsumerLag]: ...

    @overload
    async def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = ...,
                           raise_errors: Literal[False]) -> AdminHandle: ...

    async def consumer_group_lag(self, group_id: str, *, timeout: Optional[float] = None,
                           raise_errors: bool = True) -> Any:
        """{TopicPartition: ConsumerLag(committed, end_offset, lag)} for every
        partition ``group_id`` committed (end offset: the high watermark)."""
        return await self._op("consumer_group_lag", group_id, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = ...,
                     timeout: Optional[float] = ...,
                     raise_errors: Literal[True] = ...) -> Dict[TopicPartition, ListOffsetsResultInfo]: ...

    @overload
    async def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = ...,
                     timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_offsets(self, specs: Mapping[TopicPartition, Union[int, str]], *, isolation_level: int = 0,
                     timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{TopicPartition: ListOffsetsResultInfo(offset, timestamp, leader_epoch)}
        for {TopicPartition: spec}, spec one of OffsetSpec.EARLIEST/LATEST/
        MAX_TIMESTAMP, 'earliest'/'latest', or a timestamp in ms (the first
        offset with a timestamp >= it; offset -1 when there is none).
        ``isolation_level`` 1 = read_committed."""
        return await self._op("list_offsets", specs, isolation_level=isolation_level, timeout=timeout,
                        raise_errors=raise_errors)

    @overload
    async def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = ...,
                       raise_errors: Literal[True] = ...) -> Dict[TopicPartition, DeletedRecords]: ...

    @overload
    async def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = ...,
                       raise_errors: Literal[False]) -> AdminHandle: ...

    async def delete_records(self, before: Mapping[TopicPartition, int], *, timeout: Optional[float] = None,
                       raise_errors: bool = True) -> Any:
        """Delete the records before {TopicPartition: offset} (-1: the high
        watermark, i.e. all): {TopicPartition: DeletedRecords(low_watermark)}."""
        return await self._op("delete_records", before, timeout=timeout, raise_errors=raise_errors)

    # -- share groups (KIP-932) ----------------------------------------------------------------
    @overload
    async def list_share_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[True] = ...) -> List[ShareGroupListing]: ...

    @overload
    async def list_share_groups(self, *, states: Optional[Iterable[str]] = ..., timeout: Optional[float] = ...,
                                raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_share_groups(self, *, states: Optional[Iterable[str]] = None,
                                timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Every share group of every broker: [ShareGroupListing(group_id,
        state, coordinator)]; ``states`` keeps only groups in these states."""
        return await self._op("list_share_groups", states=states, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def describe_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                                    raise_errors: Literal[True] = ...) -> Dict[str, ShareGroupDescription]: ...

    @overload
    async def describe_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = ...,
                                    raise_errors: Literal[False]) -> AdminHandle: ...

    async def describe_share_groups(self, group_ids: Iterable[str], *, timeout: Optional[float] = None,
                                    raise_errors: bool = True) -> Any:
        """{group: ShareGroupDescription(state, epochs, assignor, members,
        coordinator)}, each member with its subscription and assignment."""
        return await self._op("describe_share_groups", group_ids, timeout=timeout, raise_errors=raise_errors)

    @overload
    async def list_share_group_offsets(self, group_id: str,
                                       partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                       timeout: Optional[float] = ...,
                                       raise_errors: Literal[True] = ...) -> Dict[TopicPartition, SharePartitionOffset]: ...

    @overload
    async def list_share_group_offsets(self, group_id: str,
                                       partitions: Optional[Iterable[TopicPartition]] = ..., *,
                                       timeout: Optional[float] = ...,
                                       raise_errors: Literal[False]) -> AdminHandle: ...

    async def list_share_group_offsets(self, group_id: str,
                                       partitions: Optional[Iterable[TopicPartition]] = None, *,
                                       timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """{TopicPartition: SharePartitionOffset(start_offset, leader_epoch,
        lag)} of a share group: every partition it has read, or ``partitions``."""
        return await self._op("list_share_group_offsets", group_id, partitions, timeout=timeout,
                              raise_errors=raise_errors)

    @overload
    async def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                        validate_only: bool = ..., timeout: Optional[float] = ...,
                                        raise_errors: Literal[True] = ...) -> Dict[ConfigResource, None]: ...

    @overload
    async def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                        validate_only: bool = ..., timeout: Optional[float] = ...,
                                        raise_errors: Literal[False]) -> AdminHandle: ...

    async def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, Any]], *,
                                        validate_only: bool = False, timeout: Optional[float] = None,
                                        raise_errors: bool = True) -> Any:
        """Change some settings of topics, brokers or groups and keep the rest:
        ``{ConfigResource: {name: value, or None for the default}}``, e.g.
        ``{ConfigResource.group("jobs"): {"share.auto.offset.reset": "earliest"}}``."""
        return await self._op("incremental_alter_configs", changes, validate_only=validate_only, timeout=timeout,
                              raise_errors=raise_errors)

    async def _close(self, timeout):
        if self._engine.started:
            await self._engine.stop()
        self._core.close(now_ms())
        self._closed = True


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


# == share consumer ==================================================================================

class AsyncShareConsumer(_Client):
    """``records = await share_consumer.poll(1.0)``; ``async for record in
    share_consumer``: the threading :class:`kio.ShareConsumer`, awaitable
    (KIP-932 share groups). The acknowledgement commit callback may be a
    plain or a coroutine function; it runs in the task that polls, commits
    or closes."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        from kproto.share.core import ShareConsumerCore
        self._setup(ShareConsumerCore(config, **kwargs), nursery, 1 << 20)
        self._app_events: list = []
        self._ack_callback: Optional[AsyncAcknowledgementCallback] = None

    @property
    def member_id(self) -> str:
        """This member's id in the share group."""
        return self._core.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> Optional[int]:
        """How long the leaders lock records acquired for this member (as the
        last share fetch answered; None before one did)."""
        return self._core.fetcher.lock_timeout_ms

    def _after_poll(self) -> bool:
        evs = self._core.events()
        if evs:
            self._app_events.extend(evs)
        self._core.data_ready = False
        return self._waiters > 0

    def _check_usable(self):
        if self._engine.fatal is not None:
            raise ConsumerClosedError(f"the share consumer's network task failed: {self._engine.fatal!r}")
        if self._closed or self._core.closing:
            raise ConsumerClosedError("the share consumer is closed")

    async def _dispatch(self):
        from kio.share_consumer import ack_callback_calls
        if not self._app_events:
            return
        events, self._app_events = self._app_events, []
        if self._ack_callback is None:
            return
        for offsets, err in ack_callback_calls(events):
            try:
                r = self._ack_callback(offsets, err)
                if inspect.isawaitable(r):
                    await r
            except Exception:  # noqa: BLE001
                log.exception("acknowledgement commit callback %r raised", self._ack_callback)

    def subscribe(self, topics: Union[str, Iterable[str]]) -> None:
        """Join the share group for these topics (replaces the subscription)."""
        self._ensure_started()
        self._check_usable()
        self._core.subscribe(topics, now_ms())
        self._engine.kick()

    def unsubscribe(self) -> None:
        """Leave the share group; subscribe() joins it again. Records of the
        last poll not acknowledged (or, in implicit mode, committed) are
        released, as in Java."""
        self._check_usable()
        self._core.unsubscribe(now_ms())
        self._engine.kick()

    def subscription(self) -> Set[str]:
        """The topics subscribed to."""
        return self._core.subscription()

    def assignment(self) -> Set[TopicPartition]:
        """The partitions the broker gave this member (shared with others)."""
        return self._core.assignment()

    def set_acknowledgement_commit_callback(self, callback: Optional[AsyncAcknowledgementCallback]) -> None:
        """``callback(offsets, error)`` (plain or coroutine function) runs
        whenever a leader answered acknowledgements."""
        self._ack_callback = callback

    async def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[ShareRecord]:
        """Acquired records (ShareRecord, with ``delivery_count``), waiting up
        to ``timeout`` seconds; settles the last poll's records first
        (implicit: accepts them; explicit: raises ShareStateError if one is
        unacknowledged)."""
        self._ensure_started()
        self._check_usable()
        self._core.poll_started(now_ms())
        self._engine.kick()
        end = None if timeout is None else now_ms() + timeout * 1000.0
        while True:
            await self._dispatch()
            self._check_usable()
            if self._core.client.auth_error is not None:
                raise self._core.client.auth_error
            out = self._core.drain(max_records)
            if out:
                self._engine.kick()
                return out
            left = None if end is None else (end - now_ms()) / 1000.0
            if left is not None and left <= 0:
                return out
            await self._wait(left)

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        """Every record, as it arrives, until the share consumer is closed."""
        return self._records()

    async def _records(self):
        while not self._closed:
            for record in await self.poll(1.0):
                yield record

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record of the last poll (explicit mode): ACCEPT, RELEASE or REJECT."""
        self._check_usable()
        self._core.acknowledge(record, type)        # leaves with the next request (poll, commit)

    async def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[KafkaError]]:
        """Send the acknowledgements made so far and wait for the leaders:
        {TopicPartition: None or the error}."""
        self._ensure_started()
        self._check_usable()
        h = self._core.commit(now_ms(), None if timeout is None else int(timeout * 1000))
        await self._wait_done(h)
        await self._dispatch()
        return h.result()

    async def commit_async(self) -> None:
        """Send the acknowledgements made so far without waiting for the answer."""
        self._ensure_started()
        self._check_usable()
        self._core.commit(now_ms())
        self._engine.kick()
        await self._dispatch()

    async def _close(self, timeout):
        """Send the acknowledgements made so far (in implicit mode the last
        poll's records are released unless committed, as in Java), close the
        share sessions, leave the group, stop the network task."""
        if self._closed:
            return
        if self._engine.started and self._engine.fatal is None:
            self._core.begin_close(now_ms(), None if timeout is None else int(timeout * 1000))
            self._engine.kick()
            while not self._core.close_done and self._engine.fatal is None:
                await self._dispatch()
                await self._wait(None)
            await self._engine.stop()
        self._closed = True
        await self._dispatch()
