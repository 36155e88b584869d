"""The producer written once: what :class:`kio.Producer` (threads) and the
async producers (:mod:`kio.aio`, :mod:`kio.trio`) share.

As :mod:`kio._shared.consumer_ops`: every method body lives here, once. A method
that does not wait (``metrics``, ``begin_transaction``) is a plain method; a
method that waits (``flush``, ``partitions_for``, the transaction calls,
``close``) is a generator of steps, ``_<name>_steps``, that yields a
``now_ms()`` deadline (``INF``: none) and returns the result; the threading
driver runs it on its Condition, the async drivers on the engine's event.

``send`` is the per-record path and makes no generator: :meth:`ProducerOps._send`
appends and returns the handle. Only when the core answers
:class:`~kproto.producer.waits.AppendBlocked` (no metadata yet, buffer memory
full) does it hand :meth:`_blocked_steps` to the driver's ``_blocking``: the
threading driver runs them at once (``send`` returns the handle), the async
drivers return them for ``send`` to await. The deadline, the retry and the
timeout error are the core's; these steps only wait.

The hooks a driver provides: ``_lock`` (a ``threading.Lock``: the threading
driver's, shared with its network thread; an uncontended one for the async
drivers, whose acquire and release cost less per record than a
``nullcontext``), ``_start()`` (the async drivers start their network task;
``_idle`` says one must; ``_unready`` sends ``send`` down its slow path - not
started, closing or closed - in one attribute read per record), ``_kick()``, ``_fatal`` (the exception that ended
the network side), ``_on_network_thread()`` (a delivery callback calling in:
it must not wait), ``_blocking(steps)``, ``_new_handle``/``_new_callback_handle``
(kproto's ``Allocator(cls).new``) and ``_new_bulk``.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from kio._shared.common import INF, Steps, now_ms, wall_ms
from kio._shared.telemetry_ops import MetricSubscriptionOps, instance_id_steps
from kproto.errors import KafkaError, KafkaTimeoutError
from kproto.producer import AppendBlocked, ProducerClosedError, ProducerCore, TxnResult

__all__ = ["ProducerOps"]

log = logging.getLogger("kio.producer")

_time, _monotonic = time.time, time.monotonic


class ProducerOps(MetricSubscriptionOps):
    """The producer's methods, shared by every driver (see the module docstring)."""

    _core: ProducerCore
    _lock: Any
    _closing: bool
    _closed: bool
    _plain: bool
    _idle: bool                     # the network side must be started first (async, before first use)
    _unready: bool                  # _idle, closing or closed: send() takes its slow path
    _new_handle: Any                # () -> a record's handle without on_delivery, __init__ not run (Allocator)
    _new_callback_handle: Any       # ... with on_delivery (an attribute of the handle)
    _delivering = False             # the threading driver runs completions outside its lock: flush waits for them

    def _init_ops(self, core: ProducerCore) -> None:
        self._core = core
        self.config = core.config
        self._closing = False
        self._closed = False
        # Instance attributes, not class defaults: send() reads them per record
        # and Python 3.11 has no fast path for a class attribute read through an instance.
        self._idle = self._unready = False
        self._plain = core.key_serializer is None and core.value_serializer is None

    # -- the driver's hooks -------------------------------------------------------------------
    def _start(self) -> None:
        """Start the network side (the async drivers; the threading one runs from __init__)."""

    def _kick(self) -> None:
        raise NotImplementedError

    def _kick_deadline(self) -> None:
        """send() opened or filled a batch: the network side must wake by the
        accumulator's ``next_round_ms`` (the batch's linger time, or now),
        which the core's next_deadline includes. A driver that can wake to
        look at its deadline again without running a round does that; the
        default runs one."""
        self._kick()

    _fatal: Optional[BaseException]

    def _on_network_thread(self) -> bool:
        """Whether the caller is a delivery callback on the driver's network thread."""
        return False

    def _blocking(self, steps: Steps[Any]) -> Any:
        """``send`` must wait: the threading driver runs ``steps``, the async ones return them."""
        raise NotImplementedError

    def _new_bulk(self, total: int, topic: str, on_delivery: Any) -> Tuple[Any, Any]:
        """(what send_many returns, the kproto BulkDelivery the core completes)."""
        raise NotImplementedError

    # -- checks ---------------------------------------------------------------------------------
    def _mark_closed(self, closed: bool) -> None:
        """close() began (``closed`` False) or ended: no more records."""
        self._closing = True
        self._closed = self._closed or closed
        self._unready = True

    def _prepare_send(self) -> None:
        """send()'s slow path: start the network side, or refuse (closed, failed)."""
        if self._idle:
            self._start()
        self._check_usable()

    def _check_usable(self) -> None:
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed; it takes no more records")
        fatal = self._fatal
        if fatal is not None:
            raise ProducerClosedError(f"the producer's network side failed: {fatal!r}") from fatal

    def _refuse_on_network_thread(self, what: str) -> None:
        if self._on_network_thread():
            raise KafkaError(f"{what} from a delivery callback would deadlock: callbacks run on "
                             f"the producer's network thread")

    def _fail_pending(self, exc: BaseException) -> Any:
        """The network side failed: fail every unresolved record (no record
        waits for an answer that cannot come); returns the results to complete."""
        try:
            self._core.abort_pending(ProducerClosedError(f"the producer's network side failed: {exc!r}"))
        except Exception:  # noqa: BLE001
            log.exception("failing pending records")
        return self._core.events()

    def _take_wakeup(self) -> bool:
        """Lock held: the core opened or filled a batch and wants a poll."""
        acc = self._core.accumulator
        wake, acc.wakeup = acc.wakeup, False
        return wake

    # == sending ================================================================================
    def _send(self, topic: str, value: object = None, key: object = None, partition: Optional[int] = None,
              headers: Any = None, timestamp_ms: Optional[int] = None, on_delivery: Any = None) -> Any:
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
        # Per-record costs count here: the handle made without __init__ (the
        # core sets its state), acquire/release instead of a with-block.
        # (An attribute read, then a call: LOAD_METHOD has no fast path for a
        # callable kept on the instance.)
        new = self._new_handle if on_delivery is None else self._new_callback_handle
        handle = new()
        if on_delivery is not None:
            handle.on_delivery = on_delivery
        ts = _time() * 1000.0 if timestamp_ms is None else timestamp_ms    # float ms: the core makes it an int
        lock = self._lock
        lock.acquire()
        try:
            if self._unready or self._fatal is not None:
                self._prepare_send()
            answer = core.append_serialized(topic, value_b, key_b, partition, headers, ts,
                                            _monotonic() * 1000.0, handle)
            # Wake the network side only when it has something new to do (a
            # batch opened or filled up); appends to an open batch need nothing.
            # (_take_wakeup inlined: one frame less per record.)
            acc = core.accumulator
            wake = acc.wakeup
            acc.wakeup = False
        finally:
            lock.release()
        if wake:
            if core.new_batch_needs_round:      # (a transaction's AddPartitionsToTxn goes out now)
                self._kick()
            else:
                self._kick_deadline()
        if answer is not handle:
            return self._blocking(self._blocked_steps(answer))
        return handle

    def _blocked_steps(self, blocked: AppendBlocked) -> Steps[Any]:
        """Wait for what the core's answer waits for, retrying after every
        change, until the core takes the call or raises its timeout."""
        if self._on_network_thread():
            # Waiting here would stop the very thread that makes progress.
            raise KafkaTimeoutError(f"{blocked.operation} from a delivery callback cannot wait for "
                                    f"{blocked.waiting_for}")
        core = self._core
        self._kick()            # the core needs a poll for what it waits for (metadata, draining)
        while True:
            with self._lock:
                self._check_usable()
                answer = core.retry_append(blocked, now_ms())
                wake = self._take_wakeup()
            if wake or blocked.wants_poll:
                # Only when the retry gave the core something new to do: the
                # network side wakes this wait after its polls, and a kick per
                # wake-up would make both sides spin.
                self._kick()
            if answer is not blocked:
                return answer
            yield blocked.until

    def _send_many_steps(self, topic: str, values: Sequence[Any], keys: Optional[Sequence[Any]],
                         partition: Optional[int], headers: Optional[Sequence[Any]],
                         timestamp_ms: Any, on_delivery: Any) -> Steps[Any]:
        self._start()
        core = self._core
        values, keys = core.serialize_columns(topic, values, keys)     # outside the lock
        with self._lock:
            self._check_usable()
        result, delivery = self._new_bulk(len(values), topic, on_delivery)
        if not len(values):
            return result
        with self._lock:
            answer = core.append_many(topic, values, keys, partition, headers, timestamp_ms, now_ms(), delivery,
                                      wall_ms())
        self._kick()
        if answer is not delivery:
            yield from self._blocked_steps(answer)
            self._kick()
        return result

    def _flush_steps(self, timeout: Optional[float]) -> Steps[int]:
        self._refuse_on_network_thread("flush")
        self._start()
        core = self._core
        end = INF if timeout is None else now_ms() + timeout * 1000.0
        with self._lock:
            core.begin_flush()
        try:
            self._kick()
            while True:
                with self._lock:
                    if (not core.pending and not self._delivering) or self._fatal is not None:
                        return core.pending_records
                if now_ms() >= end:
                    with self._lock:
                        return core.pending_records
                yield end
        finally:
            with self._lock:
                core.end_flush()

    def _partitions_for_steps(self, topic: str, timeout: Optional[float]) -> Steps[int]:
        self._start()
        with self._lock:
            self._check_usable()
            answer = self._core.wait_for_partitions(topic, now_ms(), None if timeout is None else timeout * 1000.0)
        if type(answer) is AppendBlocked:
            answer = yield from self._blocked_steps(answer)
        return answer  # type: ignore[no-any-return]

    def metrics(self) -> Dict[str, Any]:
        """The producer's counters and gauges ({name: value}: records and
        bytes sent, batches, retries, errors, buffer use, connections,
        requests, ...)."""
        with self._lock:
            return self._core.metrics()

    def _client_instance_id_steps(self, timeout: Optional[float]) -> Steps[uuid.UUID]:
        self._start()
        return (yield from instance_id_steps(self._lock, self._check_usable, self._core.client.telemetry,
                                             self.config.max_block_ms, timeout))

    # == transactions (transactional_id set) =======================================================
    def _txn_steps(self, call: Any, timeout: Optional[float]) -> Steps[None]:
        self._refuse_on_network_thread("a transaction call")
        self._start()
        limit = self.config.max_block_ms / 1000.0 if timeout is None else timeout
        end = now_ms() + limit * 1000.0
        with self._lock:
            self._check_usable()
            res: TxnResult = call()
        self._kick()
        while True:
            with self._lock:
                if res.done:
                    break
                if self._fatal is not None:
                    self._check_usable()
            if now_ms() >= end:
                raise KafkaTimeoutError(f"{res.name} did not complete within {limit:.3f} s")
            yield end
        if res.error is not None:
            raise res.error

    def _init_transactions_steps(self, timeout: Optional[float]) -> Steps[None]:
        return self._txn_steps(self._core.init_transactions, timeout)

    def begin_transaction(self) -> None:
        """Start a transaction (after ``init_transactions``): the records
        sent from now on are committed or aborted together."""
        with self._lock:
            self._check_usable()
            self._core.begin_transaction()

    def _send_offsets_steps(self, offsets: Mapping[Tuple[str, int], Any], group_id: str,
                            timeout: Optional[float]) -> Steps[None]:
        return self._txn_steps(lambda: self._core.send_offsets_to_transaction(dict(offsets), group_id), timeout)

    def _commit_transaction_steps(self, timeout: Optional[float]) -> Steps[None]:
        return self._txn_steps(self._core.commit_transaction, timeout)

    def _abort_transaction_steps(self, timeout: Optional[float]) -> Steps[None]:
        return self._txn_steps(self._core.abort_transaction, timeout)

    # == closing ====================================================================================
    def _close_steps(self, timeout: Optional[float]) -> Steps[None]:
        """Flush (up to ``timeout``), then fail what is left with
        ProducerClosedError; the driver then stops its network side, which
        closes the core."""
        self._refuse_on_network_thread("close")
        end = INF if timeout is None else now_ms() + timeout * 1000.0
        remaining = yield from self._flush_steps(timeout)
        with self._lock:
            self._mark_closed(False)
            if remaining:
                self._core.abort_pending(ProducerClosedError(
                    f"the producer was closed (timeout={timeout}s) before these records were delivered"))
            # KIP-714: the terminating telemetry push starts (if a subscription
            # is active); waited for below, before the connections close.
            telemetry_done = self._core.client.telemetry_closed(now_ms())
        self._kick()
        end = min(end, now_ms() + self._core.config.request_timeout_ms)
        while not telemetry_done and self._fatal is None and now_ms() < end:
            yield end
            with self._lock:
                telemetry_done = self._core.client.telemetry_closed(now_ms())
