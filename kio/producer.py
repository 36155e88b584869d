"""The threading producer: :class:`Producer`, a thin driver around ProducerCore.

One background thread, named ``kio-producer-network-thread | <client_id>``,
owns every socket (``epoll``) and runs the core's loop; ``send`` only
serializes, appends under a lock and - when it opened or filled a batch -
sets that thread's deadline timer to the batch's due time (Linux's timerfd:
the thread sleeps on until then) or, without one, wakes it through a
socketpair. No network I/O ever happens on the caller's thread.

Threading contract:

* ``send``/``send_many``/``flush``/``metrics`` are thread-safe.
* ``send`` blocks the caller (up to ``max.block.ms``) only while the topic's
  metadata is unknown or ``buffer.memory`` is full; then it raises
  :class:`KafkaTimeoutError`.
* Futures are :class:`concurrent.futures.Future` objects (``result``,
  ``exception``, ``done``, ``add_done_callback``, ``concurrent.futures.wait``
  and ``as_completed`` work; they cannot be cancelled).
* ``on_delivery(err, metadata)`` callbacks and future done-callbacks run on the
  network thread: keep them short, do not block in them. An exception raised
  by a callback is logged and does not hurt the producer.
* ``flush`` makes everything queued sendable now and waits for every record to
  be acknowledged or failed; ``close`` flushes (up to ``timeout``), then fails
  whatever is left with :class:`ProducerClosedError` - no record is dropped
  without its future/callback hearing about it.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kio._shared.common import runs_body_of
from kio._shared.producer_ops import ProducerOps
from kio._threaded.driver import ThreadDriver
from kio._shared.types import BulkCallback, DeliveryCallback, Headers
from kproto.config import Config
from kproto.errors import KafkaTimeoutError
from kproto.producer.inorder import InOrderAcks
from kproto.producer._append import Allocator
from kproto.producer.core import (
    BulkDelivery, BulkResult, ProducerClosedError, ProducerCore, RecordMetadata, attached_result,
    complete_results,
)

__all__ = ["Producer", "RecordMetadata", "KafkaTimeoutError", "BulkResult", "InOrderAcker"]

log = logging.getLogger("kio.producer")


_INIT_LOCK = threading.Lock()


class DeliveryFuture(concurrent.futures.Future):
    """The future of one record; resolved on the network thread.

    A :class:`concurrent.futures.Future` (``result``, ``exception``,
    ``done``, ``add_done_callback``, ``concurrent.futures.wait`` and
    ``as_completed`` work) that costs one object per record: it is attached
    to its batch's shared outcome (:mod:`kproto.producer.outcome`) and reads
    its state from there (:func:`kproto.producer.attached_result`), so
    completing a batch does nothing per record, and
    a future the application drops is freed at once instead of waiting in
    the batch for the broker. An ``on_delivery`` callback is kept in the
    batch without the future (ProducerBatch.callbacks) and called once the
    batch is final, after the future is. Cannot be cancelled (a record
    handed to the producer is on its way, as in Java).

    ``send()`` makes it without running ``Future.__init__`` (a Condition and
    two lists per record would cost more than the rest of send): the public
    methods answer from the outcome while nobody waits. The first use that
    needs the Future machinery - waiting on a pending record, a done-callback
    added before delivery, ``wait``/``as_completed``, ``repr`` - runs
    ``Future.__init__`` then, and the outcome is handed over through the
    documented ``set_result``/``set_exception``. Nothing here reads or writes
    an attribute of ``Future``'s own: whatever state its code (or ``wait``)
    looks up before ``__init__`` ran is missing, which lands in
    :meth:`__getattr__`, which initialises. So this keeps working whatever
    private names a Python version gives that state.
    """

    # What the core writes on every record (kproto's append, in C on its fast
    # path): slots, which take a fraction of the instructions an instance
    # dict's entries take to write. send() makes the future without __init__
    # and the core sets all five before send() returns it.
    __slots__ = ("topic", "partition", "timestamp", "_outcome", "_delta")
    # Class-level defaults: a record's future sets only what differs (speed).
    # None of these names may be one Future.__init__ sets (a test checks).
    notify = False                        # see kproto.producer.outcome
    on_delivery = None
    _kio_future = False                   # Future.__init__ has run
    _kio_settled = False                  # the outcome was handed to the Future

    def __init__(self, on_delivery=None):
        # No super().__init__(): made on demand, see the class docstring.
        self.topic = self.partition = self.timestamp = None
        self._outcome = None              # attached: the batch's BatchOutcome and this record's delta
        self._delta = 0
        if on_delivery is not None:
            self.on_delivery = on_delivery

    def __getattr__(self, name):
        # Only reached for an attribute that is missing. Before the Future
        # is initialised that is Future's own state, looked up by its methods
        # or by concurrent.futures.wait(): initialise and look again.
        if self._kio_future or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._kio_init()
        return object.__getattribute__(self, name)

    def _kio_init(self):
        """Run Future.__init__ once, then keep the Future in step with the record."""
        if self._kio_future:
            return
        with _INIT_LOCK:
            if self._kio_future:
                return
            super().__init__()
            # The record is on its way: RUNNING (Future's cancel() refuses too).
            super().set_running_or_notify_cancel()
            self._kio_future = True
            if self._outcome is not None:
                self._outcome.watch(self)
        # Flag first, then look at the state; a completion sets the state
        # first, then looks at the flag: one of the two always settles.
        if self._kio_done():
            self._kio_settle()

    def _kio_settle(self):
        """Hand the outcome to the initialised Future, exactly once."""
        with _INIT_LOCK:
            if self._kio_settled:
                return
            self._kio_settled = True
        metadata, err = attached_result(self)
        if err is None:
            super().set_result(metadata)
        else:
            super().set_exception(err)

    def _kio_done(self):
        o = self._outcome
        return o is not None and o.done

    # -- the documented Future interface ---------------------------------------------------
    def done(self):
        return self._kio_done()

    def running(self):
        return not self._kio_done()

    def cancelled(self):
        return False

    def cancel(self):
        return False

    def result(self, timeout=None):
        if self._kio_done():
            metadata, err = attached_result(self)
            if err is not None:
                raise err
            return metadata
        self._kio_init()
        return super().result(timeout)

    def exception(self, timeout=None):
        if self._kio_done():
            return attached_result(self)[1]
        self._kio_init()
        return super().exception(timeout)

    def add_done_callback(self, fn):
        if self._kio_future or not self._kio_done():
            # Through Future, so callbacks run once each and in order.
            self._kio_init()
            super().add_done_callback(fn)
            return
        try:
            fn(self)
        except Exception:  # noqa: BLE001 - as Future does: log, never raise into the caller
            log.exception("done callback %r of %r raised", fn, self)

    # -- called by kproto.producer.complete_results ----------------------------------------
    def _outcome_done(self):
        """A watched, attached future's batch is final."""
        self._kio_settle()


# object.__new__(DeliveryFuture) at the cost of a C call (kproto's Allocator)
_new_future = Allocator(DeliveryFuture).new


class BulkFuture(concurrent.futures.Future):
    """The future of one send_many call: resolves to a BulkResult when every
    record is resolved, or raises the first error if one failed. The
    counting is :class:`kproto.producer.BulkDelivery`'s (``delivery``);
    this only wakes the waiters."""

    def __init__(self, total: int, topic: str, on_delivery: Optional[BulkCallback] = None) -> None:
        super().__init__()
        self.set_running_or_notify_cancel()
        self.delivery = BulkDelivery(total, topic, on_delivery, self._settle)

    @property
    def delivered(self) -> int:
        """How many records were acknowledged so far."""
        return self.delivery.delivered  # type: ignore[no-any-return]

    @property
    def failed(self) -> int:
        """How many records failed so far."""
        return self.delivery.failed  # type: ignore[no-any-return]

    @property
    def ranges(self) -> List[Tuple[int, int, int]]:
        """(partition, first_offset, count) of each run written so far (also when some failed)."""
        return self.delivery.ranges  # type: ignore[no-any-return]

    def _settle(self, delivery: BulkDelivery) -> None:
        if delivery.error is not None:
            self.set_exception(delivery.error)
        else:
            self.set_result(delivery.value)


class Producer(ProducerOps, ThreadDriver):
    """``Producer(bootstrap_servers=..., linger_ms=5, acks="all")`` or
    ``Producer({"bootstrap.servers": ...})``; see the module docstring.

    The method bodies are :class:`kio._shared.producer_ops.ProducerOps`', shared
    with the asyncio and trio producers; this class runs their waits on a
    Condition its network thread notifies."""

    config: Config
    """The parsed settings (``producer.config.linger_ms``)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        core = ProducerCore(config, **kwargs)
        self._init_ops(core)
        self._new_handle = self._new_callback_handle = _new_future
        self._metadata_version = -1
        self._start_network(core, f"kio-producer-network-thread | {core.config.client_id}", deadline_timer=True)

    # -- the public surface: ProducerOps' bodies, run on this thread ----------------------------
    # No wrapper frame on the per-record path: send() runs the shared body
    # itself (a wait, rare, runs through _blocking).
    @runs_body_of(ProducerOps._send)
    def send(self, topic: str, value: object = None, key: object = None, partition: Optional[int] = None,
             headers: Optional[Headers] = None, timestamp_ms: Optional[int] = None,
             on_delivery: Optional[DeliveryCallback] = None) -> concurrent.futures.Future[RecordMetadata]:
        """Queue one record; returns a Future resolving to its
        :class:`RecordMetadata` (or raising the delivery error).

        ``value`` and ``key`` are bytes, str (UTF-8) or None, or anything the
        configured serializers take; ``partition`` None lets the partitioner
        choose (by key); ``headers`` are (str, bytes) pairs or a dict;
        ``timestamp_ms`` defaults to now. ``on_delivery(error, metadata)``
        runs on the network thread once the record is acknowledged or failed
        (error None and metadata set, or the reverse). Blocks only while the
        topic's metadata is unknown or buffer.memory is full, up to
        max.block.ms, then raises :class:`KafkaTimeoutError`; a record larger
        than max.request.size raises :class:`RecordTooLargeError` at once."""
        raise AssertionError("replaced by ProducerOps._send")  # pragma: no cover

    def send_many(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                  partition: Optional[int] = None, headers: Optional[Sequence[Optional[Headers]]] = None,
                  timestamp_ms: Optional[int] = None,
                  on_delivery: Optional[BulkCallback] = None) -> concurrent.futures.Future[BulkResult]:
        """Queue many records in one call (sequences of bytes/str/None, or
        Arrow arrays). Returns one Future resolving to a BulkResult
        (topic, count, ranges) or raising the first delivery error.

        ``keys`` and ``headers`` (one header list or None per record) are
        as long as ``values``; ``on_delivery(error, result)`` runs once, when
        every record is resolved. Waits, as send, up to max.block.ms."""
        return self._run(self._send_many_steps(topic, values, keys, partition, headers, timestamp_ms,
                                               on_delivery))

    def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now and wait until every record is acknowledged or
        failed; returns how many are still pending (0 unless timeout ran out)."""
        return self._run(self._flush_steps(timeout))

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush (up to ``timeout`` seconds), fail what is left with
        ProducerClosedError, close connections and stop the network thread."""
        if self._closed:
            return
        self._run(self._close_steps(timeout))
        self._stop_network()
        self._mark_closed(True)

    def partitions_for(self, topic: str, timeout: Optional[float] = None) -> int:
        """Partition count of ``topic``, waiting for its metadata up to
        ``timeout`` seconds (default max.block.ms), then KafkaTimeoutError."""
        return self._run(self._partitions_for_steps(topic, timeout))

    def client_instance_id(self, timeout: Optional[float] = None) -> uuid.UUID:
        """The client instance id (KIP-714) the broker assigned in
        GetTelemetrySubscriptions, waiting up to ``timeout`` seconds (default
        max.block.ms; then KafkaTimeoutError) for its answer.
        IllegalStateError when there is none to wait for: ``enable.metrics.push``
        is off, or the broker has no telemetry APIs (or refused them)."""
        return self._run(self._client_instance_id_steps(timeout))

    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Find the coordinator and get a producer id (fencing older
        producers with the same transactional id). Blocks up to ``timeout``
        seconds (default max.block.ms)."""
        self._run(self._init_transactions_steps(timeout))

    def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_id: str,
                                    timeout: Optional[float] = None) -> None:
        """Commit consumer offsets ({(topic, partition): next offset}) as part
        of the transaction."""
        self._run(self._send_offsets_steps(offsets, group_id, timeout))

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, wait for them, then commit.
        Raises if a record failed (then call abort_transaction)."""
        self._run(self._commit_transaction_steps(timeout))

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort: unsent records fail with TransactionAbortedError, the
        coordinator writes abort markers."""
        self._run(self._abort_transaction_steps(timeout))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the driver: hooks of ProducerOps and of the network thread ------------------------------
    def _kick(self) -> None:
        self._net.wake()

    def _kick_deadline(self) -> None:
        # send() opened (or filled) a batch: the network thread must wake by
        # its due time, which lowered the core's next_round_ms. Not at all
        # when it sleeps towards that time or an earlier one already; else
        # the socket loop's deadline timer is set (one syscall here), and
        # the network thread sleeps on until the batch is due - no wake-up
        # now to work its deadline out again (issue 27: at 1,000 records/s
        # that was a wake-up for half the batches, ~30 µs of CPU each).
        # Without a deadline timer (not Linux) the thread is woken without
        # a round (ThreadDriver._network_loop) and looks at its deadline.
        with self._lock:
            if self._loop_ended:
                return            # the loop is gone (its timer closed): nothing to wake
            planned = self._planned
            due = self._core.next_deadline_after_appends(planned)
            if due is None or due == planned:
                return
            if self._net.wake_by(due):
                self._planned = due
                return
        self._net.wake(round=False)

    def _on_network_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _blocking(self, steps: Any) -> Any:
        return self._run(steps)

    def _new_bulk(self, total: int, topic: str, on_delivery: Any) -> Tuple[Any, Any]:
        fut = BulkFuture(total, topic, on_delivery)
        return fut, fut.delivery

    def _after_round(self, timer: bool) -> Any:
        # The application's waits (a send blocked on metadata or memory, flush,
        # transactions) wake when what they wait for can have changed:
        # completions, metadata, a connection event (an authentication failure
        # ends a blocked send at once), a timer, or a round after they woke us.
        # With no waiter (send() does not wait: most rounds) nothing is
        # compared: a wait that starts later looks at the core before it
        # sleeps, and a notify the stale marks cause then is only a look more.
        results = self._core.events()
        if self._waiters:
            version = self._core.cluster.version
            moved = self._network_moved(timer)
            if results or version != self._metadata_version or moved:
                self._notify()
            self._metadata_version = version
        if results:
            self._delivering = True
            return results
        return None

    def _deadline_after_wake(self, now: float) -> Optional[float]:
        # Woken by send() for a batch it opened or filled (_kick_deadline):
        # only the accumulator's due time can have moved (already capped:
        # the plan was, and this only lowers it).
        self._planned = deadline = self._core.next_deadline_after_appends(self._planned)
        return deadline

    def _outside_lock(self, work: Any) -> None:
        try:
            complete_results(work)            # user callbacks: outside the lock
        finally:
            with self._lock:
                # A flush returns once the callbacks of what it waited for ran (as Java's).
                self._delivering = False
                self._notify_if_waiting()

    def _on_failure(self, exc: BaseException) -> Any:
        self._fatal = exc
        return self._fail_pending(exc)

    def _on_close(self, now: float) -> Any:
        self._net.apply(self._core.close(now), now)
        return self._core.events()


class InOrderAcker:
    """Thread-safe in-order acknowledgement for a Producer (see
    :mod:`kproto.producer.inorder`): ``send`` takes a slot (blocking while
    ``capacity`` records are outstanding), and ``on_release(token, error)`` is
    called for each record strictly in the order ``send`` was called, however
    the deliveries complete. ``on_release`` runs on the producer's network
    thread (or the sending thread for a send that failed at once)::

        acker = InOrderAcker(producer, on_release=lambda pos, err: source.ack(pos))
        acker.send("topic", value, token=binlog_position)
    """

    def __init__(self, producer: Producer, on_release: Callable[[Any, Optional[BaseException]], Any],
                 capacity: int = 10000) -> None:
        self.producer = producer
        self.on_release = on_release
        self._acks = InOrderAcks(capacity)
        self._cond = threading.Condition()

    def send(self, topic: str, value: object = None, token: Any = None, timeout: Optional[float] = None,
             **kwargs: Any) -> concurrent.futures.Future[RecordMetadata]:
        """Send one record through the producer (``kwargs`` as
        :meth:`Producer.send`'s, but no ``on_delivery``) and remember
        ``token``: ``on_release(token, error)`` is called once this record and
        every record sent before it are resolved. Waits (up to ``timeout``)
        while ``capacity`` records are outstanding, then raises
        :class:`KafkaTimeoutError`."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                seq = self._acks.acquire(token)
                if seq is not None:
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise KafkaTimeoutError(f"{self._acks.capacity} records are still unacknowledged")
                self._cond.wait(left)
        try:
            return self.producer.send(topic, value, on_delivery=lambda err, md: self._done(seq, err),
                                      **kwargs)
        except BaseException as e:
            self._done(seq, e)
            raise

    def _done(self, seq, err):
        with self._cond:
            released = self._acks.complete(seq, err)
            self._cond.notify_all()
        for _, token, error in released:
            try:
                self.on_release(token, error)
            except Exception:  # noqa: BLE001
                log.exception("in-order release callback %r raised", self.on_release)

    @property
    def acked_position(self) -> int:
        """Every record whose sequence number (0, 1, ... in send order) is
        below this has been released."""
        return self._acks.acked_position
