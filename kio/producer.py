"""The threading producer: :class:`Producer`, a thin driver around ProducerCore.

One background thread, named ``kio-producer-network-thread | <client_id>``,
owns every socket (``selectors``) and runs the core's loop; ``send`` only
serializes, appends under a lock and - when a batch became sendable - wakes
that thread through a socketpair. No network I/O ever happens on the caller's
thread.

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
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kio._common import sleep_time
from kio._network import SocketLoop
from kio._types import BulkCallback, DeliveryCallback, Headers
from kproto.config import Config
from kio._common import now_ms as _now_ms  # the cores' one clock
from kproto.errors import KafkaError, KafkaTimeoutError
from kproto.producer.inorder import InOrderAcks
from kproto.producer._append import Allocator
from kproto.producer.core import (
    BufferExhausted, MetadataPending, ProducerClosedError, ProducerCore, RecordMetadata,
    complete_results,
)

__all__ = ["Producer", "RecordMetadata", "KafkaTimeoutError", "BulkResult", "InOrderAcker"]

log = logging.getLogger("kio.producer")


_time, _monotonic = time.time, time.monotonic
_tuple_new = tuple.__new__


_INIT_LOCK = threading.Lock()


class DeliveryFuture(concurrent.futures.Future):
    """The future of one record; resolved on the network thread.

    A :class:`concurrent.futures.Future` (``result``, ``exception``,
    ``done``, ``add_done_callback``, ``concurrent.futures.wait`` and
    ``as_completed`` work) that costs one object per record: it is attached
    to its batch's shared outcome (:mod:`kproto.producer.outcome`) and reads
    its state from there, so completing a batch does nothing per record, and
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
    _completed = False                    # notify mode: set by _complete
    _offset = -1
    _error = None
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
        off, err = self._final()
        if err is None:
            super().set_result(RecordMetadata(self.topic, self.partition, off, self.timestamp))
        else:
            super().set_exception(err)

    def _kio_done(self):
        if self._completed:
            return True
        o = self._outcome
        return o is not None and o.done

    def _final(self):
        """(offset, error) once done."""
        o = self._outcome
        if o is None:
            return self._offset, self._error
        off, log_append_time, err = o.offset_of(self._delta)
        if log_append_time >= 0:
            self.timestamp = log_append_time
        return off, err

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
            off, err = self._final()
            if err is not None:
                raise err
            return RecordMetadata(self.topic, self.partition, off, self.timestamp)
        self._kio_init()
        return super().result(timeout)

    def exception(self, timeout=None):
        if self._kio_done():
            return self._final()[1]
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

    def _complete(self, topic, partition, base_offset, delta, count, log_append_time, error):
        """Notify mode: this record's outcome."""
        # Runs once per record on the network thread: locals over attribute
        # reads, and the metadata tuple made without RecordMetadata.__new__'s frame.
        off = -1
        if error is None:
            self.partition = partition
            if log_append_time is not None and log_append_time >= 0:
                self.timestamp = log_append_time
            if base_offset >= 0:
                off = base_offset + delta
            self._offset = off
        else:
            self._error = error
        self._completed = True            # state first, then the flag: see _kio_init
        if self._kio_future:
            self._kio_settle()
        on_delivery = self.on_delivery
        if on_delivery is not None:
            md = None if error is not None else _tuple_new(
                RecordMetadata, (self.topic, partition, off, self.timestamp))
            try:
                on_delivery(error, md)
            except Exception:  # noqa: BLE001 - a user callback must not kill the network thread
                log.exception("on_delivery callback %r raised", on_delivery)


# object.__new__(DeliveryFuture) at the cost of a C call (kproto's Allocator)
_new_future = Allocator(DeliveryFuture).new


class BulkResult(tuple):
    """Result of send_many: (topic, count, ranges) with ranges as
    (partition, first_offset, count) tuples."""
    __slots__ = ()

    @property
    def topic(self) -> str:
        return self[0]

    @property
    def count(self) -> int:  # type: ignore[override]  # a field, as before: not tuple.count
        """How many records were delivered."""
        return self[1]

    @property
    def ranges(self) -> List[Tuple[int, int, int]]:
        """(partition, first_offset, count) of each run of records written."""
        return self[2]


class BulkFuture(concurrent.futures.Future):
    """The future of one send_many call: resolves when every record is
    resolved; raises the first error if any record failed."""

    def __init__(self, total, topic, on_delivery=None):
        super().__init__()
        self.total, self.topic, self.on_delivery = total, topic, on_delivery
        self.delivered = self.failed = 0
        self.first_error = None
        self.ranges = []
        self.partition = self.timestamp = None
        if total == 0:
            self.set_result(BulkResult((topic, 0, [])))

    def _complete(self, topic, partition, base_offset, delta, count, log_append_time, error):
        if error is None:
            self.delivered += count
            self.ranges.append((partition, base_offset + delta if base_offset >= 0 else -1, count))
        else:
            self.failed += count
            self.first_error = self.first_error or error
        if self.delivered + self.failed >= self.total and not self.done():
            if self.first_error is not None:
                self.set_exception(self.first_error)
            else:
                self.set_result(BulkResult((self.topic, self.delivered, sorted(self.ranges))))
            if self.on_delivery is not None:
                try:
                    self.on_delivery(self.first_error, self.result() if self.first_error is None else None)
                except Exception:  # noqa: BLE001
                    log.exception("on_delivery callback %r raised", self.on_delivery)


class Producer:
    """``Producer(bootstrap_servers=..., linger_ms=5, acks="all")`` or
    ``Producer({"bootstrap.servers": ...})``; see the module docstring."""

    config: Config
    """The parsed settings (``producer.config.linger_ms``)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._core = ProducerCore(config, **kwargs)
        cfg = self._core.config
        self.config = cfg
        self._max_block_ms = cfg.max_block_ms
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)   # metadata, memory, completions
        self._net = SocketLoop(self._core)      # sockets, selector, wake-up pair
        self._closing = False
        self._closed = False
        self._fatal: Optional[BaseException] = None
        self._metadata_version = -1
        self._progress = -1
        self._txn_waiting = 0
        self._plain = cfg.key_serializer is None and cfg.value_serializer is None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kio-producer-network-thread | {cfg.client_id}")
        self._thread.start()

    # -- user API ---------------------------------------------------------------------------
    def send(self, topic: str, value: object = None, key: object = None, partition: Optional[int] = None,
             headers: Optional[Headers] = None, timestamp_ms: Optional[int] = None,
             on_delivery: Optional[DeliveryCallback] = None) -> concurrent.futures.Future[RecordMetadata]:
        """Queue one record; returns a Future resolving to its RecordMetadata
        (or raising the delivery error).

        ``value`` and ``key`` are bytes, str (UTF-8) or None, or anything the
        configured serializers take; ``partition`` None lets the partitioner
        choose (by key); ``headers`` are (str, bytes) pairs or a dict;
        ``timestamp_ms`` defaults to now. ``on_delivery(error, metadata)``
        runs on the network thread once the record is acknowledged or failed.
        Blocks only while the topic's metadata is unknown or buffer.memory is
        full, up to max.block.ms, then raises :class:`KafkaTimeoutError`."""
        core = self._core
        if self._plain and type(value) is bytes and (key is None or type(key) is bytes):
            key_b, value_b = key, value                             # nothing to serialize
        else:
            key_b, value_b = core.serialize(topic, key, value)      # outside the lock
        # Per-record costs count here: no __init__ call without a callback,
        # acquire/release instead of a with-block (both cheaper by ~0.1 us).
        fut = _new_future()                         # DeliveryFuture, __init__ not run
        if on_delivery is not None:                 # DeliveryFuture(on_delivery), without its frame
            fut.on_delivery = on_delivery
        ts = _time() * 1000.0 if timestamp_ms is None else timestamp_ms    # float ms: the core makes it an int
        lock = self._lock
        lock.acquire()
        try:
            if self._closing or self._closed or self._fatal is not None:
                self._check_usable()
            try:
                core.append_serialized(topic, value_b, key_b, partition, headers, ts, _monotonic() * 1000.0, fut)
            except (MetadataPending, BufferExhausted) as e:
                self._send_blocked(e, topic, value_b, key_b, partition, headers, ts, fut)
            # Wake the network thread only when it has something new to do
            # (a batch opened or filled up); appends to an open batch need nothing.
            acc = core.accumulator
            wake = acc.wakeup
            acc.wakeup = False
        finally:
            lock.release()
        if wake:
            self._wake()
        return fut

    def _send_blocked(self, e, topic, value_b, key_b, partition, headers, ts, fut):
        """send() found no metadata or no buffer space: wait, up to max.block.ms, and retry."""
        deadline = self._block(e, topic, None)
        while True:
            try:
                self._core.append_serialized(topic, value_b, key_b, partition, headers, ts, _now_ms(), fut)
                return
            except (MetadataPending, BufferExhausted) as e2:
                deadline = self._block(e2, topic, deadline)

    def send_many(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]] = None,
                  partition: Optional[int] = None, headers: Optional[Sequence[Optional[Headers]]] = None,
                  timestamp_ms: Optional[int] = None,
                  on_delivery: Optional[BulkCallback] = None) -> concurrent.futures.Future[BulkResult]:
        """Queue many records in one call (sequences of bytes/str/None, or
        Arrow arrays). Returns one Future resolving to a BulkResult
        (topic, count, ranges) or raising the first delivery error.

        ``keys`` and ``headers`` (one header list or None per record) are
        as long as ``values``; ``on_delivery(error, result)`` runs once, when
        every record is resolved."""
        core = self._core
        values, keys = core.serialize_columns(topic, values, keys)     # outside the lock
        fut = BulkFuture(len(values), topic, on_delivery)
        wall = int(time.time() * 1000)
        ts = wall if timestamp_ms is None else timestamp_ms
        start, deadline = 0, None
        while start < len(values):
            with self._lock:
                self._check_usable()
                try:
                    _, n = core.send_many(topic, values, keys, partition, headers, ts, now=_now_ms(),
                                          handle=fut, start=start, default_timestamp_ms=wall)
                    start += n
                    if start < len(values):
                        raise BufferExhausted("buffer.memory is full")
                except (MetadataPending, BufferExhausted) as e:
                    if isinstance(e, BufferExhausted):
                        self._wake_locked()
                    deadline = self._block(e, topic, deadline)
            self._wake()
        return fut

    def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now and wait until every record is acknowledged or
        failed; returns how many are still pending (0 unless timeout ran out)."""
        self._not_on_network_thread("flush")
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._core.begin_flush()
            try:
                self._wake_locked()
                while self._core.pending and self._thread.is_alive():
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._changed.wait(left)
                return self._pending_records()
            finally:
                self._core.end_flush()

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush (up to ``timeout`` seconds), fail what is left with
        ProducerClosedError, close connections and stop the network thread."""
        if self._closed:
            return
        self._not_on_network_thread("close")
        remaining = self.flush(timeout)
        with self._lock:
            self._closing = True
            if remaining:
                self._core.abort_pending(ProducerClosedError(
                    f"the producer was closed (timeout={timeout}s) before these records were delivered"))
            self._wake_locked()
        self._thread.join()
        self._closed = True

    def metrics(self) -> Dict[str, Any]:
        """The producer's counters and gauges ({name: value}: records and
        bytes sent, batches, retries, errors, buffer use, ...)."""
        with self._lock:
            return self._core.metrics()

    def partitions_for(self, topic: str, timeout: Optional[float] = None) -> int:
        """Partition count of ``topic`` (waits for metadata up to max.block.ms)."""
        with self._lock:
            deadline = None
            while True:
                n = self._core.partitions_for(topic, _now_ms())
                if n is not None:
                    return n
                deadline = self._block(MetadataPending(topic), topic, deadline)

    # -- transactions (transactional_id set) -----------------------------------------------
    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Find the coordinator and get a producer id (fencing older
        producers with the same transactional id). Blocks up to ``timeout``
        seconds (default max.block.ms)."""
        self._txn_call(lambda: self._core.init_transactions(), timeout)

    def begin_transaction(self) -> None:
        """Start a transaction (after :meth:`init_transactions`): the records
        sent from now on are committed or aborted together."""
        with self._lock:
            self._core.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_id: str,
                                    timeout: Optional[float] = None) -> None:
        """Commit consumer offsets ({(topic, partition): next offset}) as part
        of the transaction."""
        self._txn_call(lambda: self._core.send_offsets_to_transaction(offsets, group_id), timeout)

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, wait for them, then commit.
        Raises if a record failed (then call abort_transaction)."""
        self._txn_call(lambda: self._core.commit_transaction(), timeout)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort: unsent records fail with TransactionAbortedError, the
        coordinator writes abort markers."""
        self._txn_call(lambda: self._core.abort_transaction(), timeout)

    def _txn_call(self, start, timeout):
        self._not_on_network_thread("a transaction call")
        limit = self._max_block_ms / 1000.0 if timeout is None else timeout
        end = time.monotonic() + limit
        with self._lock:
            self._check_usable()
            res = start()
            self._txn_waiting += 1
            try:
                self._wake_locked()
                while not res.done:
                    left = end - time.monotonic()
                    if left <= 0:
                        raise KafkaTimeoutError(f"{res.name} did not complete within {limit:.3f} s")
                    self._changed.wait(left)
                    if self._fatal is not None:
                        self._check_usable()
            finally:
                self._txn_waiting -= 1
        if res.error is not None:
            raise res.error

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._closed and self._thread.is_alive():
                self._closing = True
                self._wake()
        except Exception:  # noqa: BLE001
            pass

    # -- helpers for callers (lock held) ----------------------------------------------------------
    def _check_usable(self):
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed; it takes no more records")
        if self._fatal is not None:
            raise ProducerClosedError(f"the producer's network thread failed: {self._fatal!r}") \
                from self._fatal

    def _not_on_network_thread(self, what):
        if threading.current_thread() is self._thread:
            raise KafkaError(f"{what} from a delivery callback would deadlock: callbacks run on "
                             f"the producer's network thread")

    def _pending_records(self):
        return sum(b.record_count for b in self._core.accumulator.incomplete)

    def _block(self, exc, topic, deadline):
        """Wait (lock held) for the network thread to change something; raise
        KafkaTimeoutError after max.block.ms."""
        now = time.monotonic()
        if self._core.client.auth_error is not None:
            raise self._core.client.auth_error     # wrong credentials: waiting will not help
        if threading.current_thread() is self._thread:
            # Waiting here would stop the very thread that makes progress.
            raise KafkaTimeoutError(f"send() from a delivery callback cannot wait for "
                                    f"{'metadata' if isinstance(exc, MetadataPending) else 'buffer memory'}")
        if deadline is None:
            deadline = now + self._max_block_ms / 1000.0
        if now >= deadline:
            if isinstance(exc, MetadataPending):
                err = self._core.metadata_error(topic)
                trouble = self._core.client.connection_trouble()
                raise KafkaTimeoutError(
                    f"topic {topic!r} not present in metadata after {self._max_block_ms} ms"
                    + (f" (last error: {err})" if err is not None else "")
                    + (f" (no broker answered: {trouble})" if err is None and trouble else "")) from None
            raise KafkaTimeoutError(
                f"failed to allocate memory within the configured max blocking time "
                f"{self._max_block_ms} ms (buffer.memory={self.config.buffer_memory})") from None
        self._wake_locked()
        self._changed.wait(deadline - now)
        self._check_usable()
        return deadline

    def _wake_locked(self):
        self._net.wake()

    def _wake(self):
        # Unlocked read of the flag: at worst one extra byte on the socketpair.
        self._net.wake()

    # -- the network thread -----------------------------------------------------------------------
    def _run(self):
        core = self._core
        net = self._net
        try:
            while True:
                with self._lock:
                    now = _now_ms()
                    net.apply(core.poll(now), now)
                    net.write_all(now)
                    results = core.events()
                    version = core.cluster.version
                    progress = core.client.progress
                    # The application's waits (send blocked on metadata or memory,
                    # flush, transactions) have no polling timer: wake them whenever
                    # what they wait for can have changed - completions, metadata,
                    # a connection event (an authentication failure ends a blocked
                    # send at once), a transaction step.
                    if (results or version != self._metadata_version or progress != self._progress
                            or self._txn_waiting):
                        self._metadata_version = version
                        self._progress = progress
                        self._changed.notify_all()
                    done = self._closing and not core.pending
                    deadline = core.next_deadline(now)
                    net.update_interest()
                complete_results(results)       # user callbacks: outside the lock
                if done:
                    break
                events = net.select(sleep_time(deadline, _now_ms()))
                with self._lock:
                    net.handle(events, _now_ms())
        except BaseException as e:  # noqa: BLE001 - fail loudly, never hang the callers
            log.exception("the producer network thread failed")
            with self._lock:
                self._fatal = e
                try:
                    core.abort_pending(ProducerClosedError(f"the producer network thread failed: {e!r}"))
                except Exception:  # noqa: BLE001
                    log.exception("failing pending records")
                results = core.events()
                self._changed.notify_all()
            complete_results(results)
        finally:
            with self._lock:
                try:
                    core.close(_now_ms())
                    results = core.events()
                except Exception:  # noqa: BLE001
                    results = []
                net.close_all()
                self._changed.notify_all()
            complete_results(results)
            net.close()


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
