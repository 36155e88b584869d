"""``ProducerCore``: the whole Kafka producer as a sans-IO state machine.

It glues the pieces together - config, metadata (:mod:`kproto.cluster`),
connections (:mod:`kproto.client`), partitioner, accumulator, sender,
idempotence - behind one object a driver can run::

    core = ProducerCore({"bootstrap.servers": "h:9092", "linger.ms": 5})
    n = core.partitions_for("t", now)        # None: metadata not known yet (keep polling)
    h = core.append_serialized("t", b"v", b"k", None, None, ts, now)   # the handle, or AppendBlocked
    for action in core.poll(now):            # Connect(node, host, port) | Close(node, reason)
        ...
    # bytes: core.nodes_with_output(), core.output(node), core.sent(node, n, now)
    core.connected(node, now); core.received(node, data, now); core.disconnected(node, now, exc)
    core.next_deadline(now)                  # absolute ms, or None
    for result in core.events(): ...         # BatchResult per completed batch

The core never blocks and never reads the clock: where a send must wait
(metadata, buffer memory) it answers :class:`~kproto.producer.waits.AppendBlocked`
with the deadline (``max.block.ms``); the driver waits for a change or the
deadline and calls :meth:`ProducerCore.retry_append`, which raises the
timeout error once it passed (:mod:`kproto.producer.waits`). ``now`` is any millisecond clock; record
timestamps default to ``now`` too, so drivers pass wall-clock time for
``timestamp_ms`` (or use a wall clock for ``now``).
"""
from __future__ import annotations

import logging
import random
from functools import partial
from typing import Optional, Sequence

from kproto.client import DriverIO, network_for
from kproto.cluster import topic_authorization_error, validate_topic_name
from kproto.errors import KafkaError
from kproto.producer._append import FastAppend
from kproto.producer._callbacks import run_callbacks
from kproto.producer.accumulator import (
    BufferExhausted, RecordAccumulator, RecordTooLargeError,
)
from kproto.records import RECORD_BATCH_OVERHEAD
from kproto.client_metrics import network_metrics
from kproto.telemetry import MetricPoint, metric_name
from kproto.producer.config import parse_producer_config
from kproto.producer.idempotence import IdempotenceManager
from kproto.producer.partitioner import (
    InvalidPartitionError, StickyPartitioner, all_bytes_or_none, first_row_over, group_by_partition,
    murmur2_partition,
)
from kproto.producer.sender import BatchResult, DeliveryTimeoutError, Sender
from kproto.producer.waits import MEMORY, METADATA, AppendBlocked, block, retry
from kproto.producer.transactions import (
    TransactionAbortedError, TransactionManager, TransactionStateError, TxnResult,
)

__all__ = ["ProducerCore", "DeliveryHandle", "BulkDelivery", "RecordMetadata", "MetadataPending",
           "BufferExhausted", "RecordTooLargeError", "SerializationError", "InvalidPartitionError",
           "BatchResult", "DeliveryTimeoutError", "ProducerClosedError", "complete_results",
           "TxnResult", "TransactionStateError", "TransactionAbortedError", "AppendBlocked", "BulkResult", "attached_result"]


class MetadataPending(KafkaError):
    """The topic's partitions are not known yet (the driver waits and polls)."""

    retriable = True


class SerializationError(KafkaError, TypeError):
    """A key or value could not be turned into bytes."""


class ProducerClosedError(KafkaError):
    """The producer is closed (or closing) and takes no more records."""


class RecordMetadata(tuple):
    """(topic, partition, offset, timestamp) of an acknowledged record; offset
    is -1 when unknown (acks=0, or a duplicate the broker did not re-report)."""
    __slots__ = ()

    def __new__(cls, topic: str, partition: int, offset: int, timestamp: int) -> "RecordMetadata":
        return tuple.__new__(cls, (topic, partition, offset, timestamp))

    @property
    def topic(self) -> str:
        return self[0]

    @property
    def partition(self) -> int:
        return self[1]

    @property
    def offset(self) -> int:
        return self[2]

    @property
    def timestamp(self) -> int:
        """Create time (or the broker's log append time) in ms."""
        return self[3]

    def __repr__(self) -> str:
        return (f"RecordMetadata(topic={self[0]!r}, partition={self[1]}, offset={self[2]}, "
                f"timestamp={self[3]})")


class DeliveryHandle:
    """The outcome of one ``send``: ``done``, ``error``, ``metadata``.

    Completed one by one (``notify``; see :mod:`kproto.producer.outcome` for
    the handles that read their batch's outcome instead). Once final it calls
    ``wake(handle)`` - the driver's hook: set a Future, an event - and then
    ``callback(error, metadata)``, the application's ``on_delivery``, whose
    exception is logged, never raised into the driver."""
    __slots__ = ("topic", "partition", "timestamp", "offset", "error", "done", "callback", "wake", "_delta")
    # Kept in its batch and completed one by one (see kproto.producer.outcome
    # for handles that set this false and read the batch's outcome instead).
    notify = True

    def __init__(self, callback=None, wake=None):
        self.callback = callback
        self.wake = wake
        self.done = False
        self.error = None
        self.offset = -1

    def _complete(self, topic, partition, base_offset, delta, count, log_append_time, error):
        self.partition = partition
        if error is None:
            self.offset = base_offset + delta if base_offset >= 0 else -1
            if log_append_time is not None and log_append_time >= 0:
                self.timestamp = log_append_time
        self.error = error
        self.done = True
        self._resolved()

    def _resolved(self):
        """Final: wake the driver's waiter, then run the application's callback."""
        if self.wake is not None:
            self.wake(self)
        callback = self.callback
        if callback is not None:
            try:
                callback(self.error, self.value if self.error is None else None)
            except Exception:  # noqa: BLE001 - a user callback must not kill the network thread or task
                log.exception("on_delivery callback %r raised", callback)

    @property
    def value(self):
        """What the send delivered: its RecordMetadata."""
        return RecordMetadata(self.topic, self.partition, self.offset, self.timestamp)

    @property
    def metadata(self):
        if not self.done or self.error is not None:
            return None
        return self.value


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
    def ranges(self) -> list:
        """(partition, first_offset, count) of each run of records written."""
        return self[2]


class BulkDelivery(DeliveryHandle):
    """The outcome of one ``send_many``: done when every record is resolved.
    ``delivered``/``failed`` count records, ``error`` is the first error,
    ``ranges`` lists (partition, first_offset, count) of what was written;
    ``value`` is the BulkResult. ``wake`` and ``callback(error, BulkResult)``
    run once, when the last record is resolved (at once for no records)."""
    __slots__ = ("total", "delivered", "failed", "ranges")

    def __init__(self, total, topic=None, callback=None, wake=None):
        super().__init__(callback, wake)
        self.total = total
        self.topic = topic
        self.delivered = 0
        self.failed = 0
        self.ranges = []
        self.partition = None
        self.timestamp = None
        if total == 0:
            self.done = True
            self._resolved()

    def _complete(self, topic, partition, base_offset, delta, count, log_append_time, error):
        if error is None:
            self.delivered += count
            self.ranges.append((partition, base_offset + delta if base_offset >= 0 else -1, count))
        else:
            self.failed += count
            if self.error is None:
                self.error = error
        if self.delivered + self.failed >= self.total and not self.done:
            self.done = True
            self._resolved()

    @property
    def value(self):
        return BulkResult((self.topic, self.delivered, sorted(self.ranges)))


def attached_result(handle):
    """(RecordMetadata, None) or (None, error) of a done record handle
    attached to its batch's outcome (``notify`` false: the drivers' futures
    and awaitables, see :mod:`kproto.producer.outcome`)."""
    offset, log_append_time, error = handle._outcome.offset_of(handle._delta)
    if error is not None:
        return None, error
    if log_append_time >= 0:
        handle.timestamp = log_append_time
    return RecordMetadata(handle.topic, handle.partition, offset, handle.timestamp), None


log = logging.getLogger("kproto.producer")
_tuple_new = tuple.__new__
#: what :meth:`ProducerCore.events` gives when nothing completed
_NO_RESULTS: tuple = ()


def complete_results(results):
    """Resolve every handle of these BatchResults (drivers call this outside
    their lock; a handle's ``_resolved`` may run user code). Handles attached
    to a batch's outcome need nothing per record: those somebody waits on
    registered with :meth:`BatchOutcome.watch` and are woken here."""
    for r in results:
        topic, partition, base, lat, err = r.topic, r.partition, r.base_offset, r.log_append_time, r.error
        if r.outcome is not None:       # None: no handle was attached to the batch
            for outcome in r.outcome.finish(base, lat, err):
                if outcome.watchers is not None:
                    for handle in list(outcome.watchers):
                        handle._outcome_done()
        cbs = r.callbacks
        if cbs:     # on_delivery callbacks of attached records, merged with the parts (in C)
            run_callbacks(r, cbs, RecordMetadata, log)
            continue
        for part in r.parts:            # iter_parts(), inlined: this runs once per record
            if type(part) is tuple:
                handle, delta, count = part
                handle._complete(topic, partition, base, delta, count, lat, err)
            else:
                part._complete(topic, partition, base, part._delta, 1, lat, err)


def _to_bytes(value, serializer, what, topic):
    # None is never serialized: a null value is a tombstone, a null key "no key".
    if serializer is not None and value is not None:
        try:
            out = serializer(value)
        except Exception as e:
            raise SerializationError(f"{what} serializer {_name(serializer)} failed on a value of type "
                                     f"{type(value).__name__} for topic {topic!r}: {e}") from e
        if out is None or type(out) is bytes:
            return out
        if isinstance(out, (bytearray, memoryview)):
            return bytes(out)
        raise SerializationError(f"{what} serializer {_name(serializer)} returned "
                                 f"{type(out).__name__}, not bytes or None")
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise SerializationError(
        f"cannot send a {what} of type {type(value).__name__} to topic {topic!r}: without a "
        f"{what}_serializer only bytes, str and None are accepted; configure {what}.serializer "
        f"(a callable returning bytes)")


def _name(f):
    return getattr(f, "__qualname__", None) or repr(f)


class ProducerCore(DriverIO):
    def __init__(self, config=None, *, rng=None, **kwargs):
        from kproto.config import Config
        cfg = config if isinstance(config, Config) else parse_producer_config(config, **kwargs)
        self.config = cfg
        self.rng = rng or random.Random()
        self.cluster, self.client = network_for(
            cfg, rng=self.rng, max_in_flight=cfg.max_in_flight_requests_per_connection,
            allow_auto_topic_creation=cfg.allow_auto_create_topics,
            metadata_max_idle_ms=cfg.metadata_max_idle_ms, telemetry_type="producer")
        self.accumulator = RecordAccumulator(
            batch_size=cfg.batch_size, linger_ms=cfg.linger_ms, buffer_memory=cfg.buffer_memory,
            compression=cfg.compression_type, delivery_timeout_ms=cfg.delivery_timeout_ms,
            max_request_size=cfg.max_request_size, compression_level=cfg.compression_level)
        self.accumulator.leader = self.cluster.leader
        self.idempotence = None
        if cfg.enable_idempotence:
            self.idempotence = IdempotenceManager(cfg.transactional_id, cfg.transaction_timeout_ms)
        self.partitioner = StickyPartitioner(self.rng)
        self.user_partitioner = cfg.partitioner if callable(cfg.partitioner) else None
        self.key_serializer = cfg.key_serializer
        self.value_serializer = cfg.value_serializer
        self._metrics = {"records_sent": 0, "records_failed": 0, "batches_sent": 0,
                         "requests": 0, "responses": 0, "retries": 0, "splits": 0,
                         "retries_to_new_leader": 0, "backoffs_cut_by_new_leader": 0,
                         "request_latency_ms_total": 0.0, "errors": {}}
        self.sender = Sender(cfg, self.client, self.cluster, self.accumulator, self.idempotence,
                             self.partitioner, self._metrics, self.rng)
        self._bind_io()           # the driver's socket calls go straight to the network client
        if self.client.telemetry is not None:
            self.client.telemetry.extra_metrics = self._telemetry_metrics
        self.transactions = None
        if cfg.transactional_id is not None:
            self.transactions = TransactionManager(cfg.transactional_id, self.idempotence,
                                                   cfg.transaction_timeout_ms, cfg.retry_backoff_ms,
                                                   cfg.retry_backoff_max_ms, self.rng)
            self.sender.txn = self.transactions
        self._txn_flush = None
        self._sender_next: Optional[float] = None      # the sender's next due time, after its last round
        self.closed = False
        self._queued = 0
        # Records smaller than this need no exact size check (fast path of send).
        self._small_record = min(cfg.max_request_size, cfg.buffer_memory) - 1024
        # append_serialized's common case in C (kproto/producer/_append.pyx),
        # bound over the method below, which it calls for everything else;
        # ``del core.append_serialized`` leaves the Python implementation only.
        self._fast_append = None
        if self.user_partitioner is None:
            self._fast_append = FastAppend(self, self.append_serialized, DeliveryHandle)
            self.append_serialized = self._fast_append.append

    # -- metadata ---------------------------------------------------------------------
    def partitions_for(self, topic, now=None) -> Optional[int]:
        """Partition count of ``topic``, or None while unknown (a refresh is requested).
        Raises InvalidTopicError for a name Kafka does not allow."""
        cluster = self.cluster
        n = cluster.partition_count(topic)
        if n is None:
            # Checked here, on the way to a topic's first metadata request and
            # never on the per-record path: a known topic passed already.
            if topic not in cluster.topics:
                validate_topic_name(topic)
            elif cluster.unauthorized_topics((topic,)):
                # The broker's last answer refused the topic (no DESCRIBE ACL):
                # fail now rather than wait out max.block.ms. As Java, the
                # error is told once; the next call asks the broker again (an
                # ACL may have been added meanwhile) and waits for its answer.
                del cluster.topic_errors[topic]
                cluster.request_update()
                raise topic_authorization_error((topic,))
            cluster.add_topic(topic, now)
            cluster.request_update()
        return n

    def metadata_error(self, topic):
        """The last error the broker gave for this topic's metadata (or None)."""
        return self.cluster.topic_errors.get(topic)

    # -- appending --------------------------------------------------------------------
    def serialize(self, topic, key, value):
        """(key_bytes, value_bytes); pure, safe to call outside the driver's lock."""
        return (_to_bytes(key, self.key_serializer, "key", topic),
                _to_bytes(value, self.value_serializer, "value", topic))

    def serialize_columns(self, topic, values, keys=None):
        """(values, keys) as lists of bytes/None, through the configured
        serializers (pure, safe outside the driver's lock)."""
        values = _pylist(values)
        keys = None if keys is None else _pylist(keys)
        if self.value_serializer is not None:
            values = [_to_bytes(v, self.value_serializer, "value", topic) for v in values]
        if keys is not None and self.key_serializer is not None:
            keys = [_to_bytes(k, self.key_serializer, "key", topic) for k in keys]
        return values, keys

    def _partition(self, topic, key, partition, n):
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < n:
                raise InvalidPartitionError(
                    f"partition {partition!r} of topic {topic!r} is not in the range [0, {n - 1}] "
                    f"(the topic has {n} partitions)")
            return partition
        if self.user_partitioner is not None:
            p = self.user_partitioner(key, n, self.cluster.available_partitions(topic))
            if type(p) is not int or not 0 <= p < n:
                raise InvalidPartitionError(
                    f"the partitioner {_name(self.user_partitioner)} returned {p!r} for topic "
                    f"{topic!r}, not in [0, {n - 1}]")
            return p
        if key is not None:
            return murmur2_partition(key, n)
        sticky = self.partitioner.current(topic, n)
        if sticky is not None:          # the common case: no list of available partitions needed
            return sticky
        return self.partitioner.partition(topic, None, n, self.cluster.available_partitions(topic))

    def _check_open(self):
        if self.closed:
            raise ProducerClosedError("the producer is closed; it takes no more records")
        if self.sender.fatal_error is not None:
            raise self.sender.fatal_error

    def send(self, topic, value, key=None, partition=None, headers=None, timestamp_ms=None, *,
             now, handle=None, serialized=False):
        """Append one record; returns its DeliveryHandle (``handle`` if given).

        The keyword form for callers that do not wait (tests, scripts): where
        :meth:`append_serialized` answers AppendBlocked this raises
        MetadataPending (partitions unknown) or BufferExhausted (no room: retry
        later); also RecordTooLargeError, InvalidPartitionError, SerializationError."""
        if not serialized:
            key, value = self.serialize(topic, key, value)
        answer = self.append_serialized(topic, value, key, partition, headers,
                                        now if timestamp_ms is None else timestamp_ms, now, handle)
        if type(answer) is AppendBlocked:
            raise answer.exception()
        return answer

    def append_serialized(self, topic, value, key, partition, headers, timestamp_ms, now, handle=None):
        """``send`` for a key and value that are already bytes or None, with
        positional arguments and an explicit timestamp: the per-record path
        of drivers (every keyword and default costs on each record).

        This is the Python implementation: each core binds
        ``append_serialized`` to ``FastAppend.append`` (see ``__init__``),
        which does the common case in C and calls this for the rest.

        Returns the handle, or an :class:`AppendBlocked` when the record must
        wait for the topic's metadata or for buffer memory (the driver waits,
        then calls :meth:`retry_append`)."""
        if self.closed or self.sender.fatal_error is not None:
            self._check_open()
        parts = self.cluster.partitions.get(topic)      # fast path of partitions_for()
        if not parts:
            if self.partitions_for(topic, now) is None:
                return block(self, METADATA, topic, now, partial(
                    self._append_again, (topic, value, key, partition, headers, timestamp_ms, handle)))
            parts = self.cluster.partitions[topic]
        n = len(parts)
        if partition is None or self.user_partitioner is not None or type(partition) is not int \
                or not 0 <= partition < n:
            partition = self._partition(topic, key, partition, n)
        if headers is not None:
            headers = _headers(headers)
        klen = 0 if key is None else len(key)
        vlen = 0 if value is None else len(value)
        if headers is None and klen + vlen < self._small_record:
            size = klen + vlen + 64          # cannot exceed any limit: skip the exact estimate
        else:
            size = self.accumulator.check_record_size(klen, vlen, headers)
        if handle is None:
            handle = DeliveryHandle()
        ts = timestamp_ms if type(timestamp_ms) is int else int(timestamp_ms)
        if self.transactions is not None:
            self.transactions.maybe_add_partition((topic, partition))
        handle.topic = topic
        handle.partition = partition
        handle.timestamp = ts
        # RecordAccumulator.append's common case inlined (one Python frame less
        # per record, ~5% of send()'s instructions, bench/send_cost.py): the
        # partition's last batch is open and takes the record at its current
        # size. Anything else (no batch, a full one, one that must grow) goes
        # through append(), which retries the same builder.append first.
        acc = self.accumulator
        dq = acc.queues.get((topic, partition))
        if dq:
            batch = dq[-1]
            if not batch.full:
                builder = batch.builder
                n = builder.record_count
                if builder.append(ts, key, value, headers):
                    handle._delta = n
                    if handle.notify:
                        batch.parts_list().append(handle)
                    else:
                        handle._outcome = batch.outcome
                        if handle.on_delivery is not None:
                            batch.callbacks_list().extend((handle.on_delivery, n, ts))
                    if builder.room == 0:
                        acc._filled(batch, now)     # at batch.size: sendable now
                    self._queued += 1
                    return handle
        try:
            acc.append(topic, partition, ts, key, value, headers, handle, now, size)
        except BufferExhausted:
            return block(self, MEMORY, topic, now, partial(
                self._append_again, (topic, value, key, partition, headers, ts, handle)))
        self._queued += 1
        return handle

    def _append_again(self, args, now):
        topic, value, key, partition, headers, ts, handle = args
        return self.append_serialized(topic, value, key, partition, headers, ts, now, handle)

    def retry_append(self, blocked: AppendBlocked, now: float):
        """Try a call that answered ``blocked`` again (after a wait): returns
        its result (the handle), ``blocked`` itself while it must still wait,
        or raises KafkaTimeoutError once ``blocked.until`` passed (an
        authentication failure at once)."""
        return retry(self, blocked, now)

    def wait_for_partitions(self, topic, now, wait_ms=None):
        """Partition count of ``topic``, or an AppendBlocked waiting for its
        metadata (``wait_ms``, default max.block.ms; retry with
        :meth:`retry_append`)."""
        n = self.partitions_for(topic, now)
        if n is not None:
            return n
        return block(self, METADATA, topic, now, partial(self._partitions_again, topic),
                     "partitions_for()", wait_ms)

    def _partitions_again(self, topic, now):
        return self.wait_for_partitions(topic, now)

    def append_many(self, topic, values, keys, partition, headers, timestamp_ms, now, handle,
                    default_timestamp_ms, start=0):
        """:meth:`send_many` for drivers: appends ``values[start:]`` and returns
        ``handle`` once every record is taken, or an AppendBlocked (metadata
        unknown, or buffer memory full part way: the retry resumes there)."""
        try:
            _, n = self.send_many(topic, values, keys, partition, headers, timestamp_ms, now=now, handle=handle,
                                  start=start, default_timestamp_ms=default_timestamp_ms)
        except MetadataPending:
            waiting_for = METADATA
        else:
            start += n
            if start >= len(values):
                return handle
            waiting_for = MEMORY
        return block(self, waiting_for, topic, now, partial(
            self._append_many_again, (topic, values, keys, partition, headers, timestamp_ms, handle,
                                      default_timestamp_ms, start)), "send_many()")

    def _append_many_again(self, args, now):
        topic, values, keys, partition, headers, timestamp_ms, handle, default_ts, start = args
        return self.append_many(topic, values, keys, partition, headers, timestamp_ms, now, handle, default_ts, start)

    def send_many(self, topic, values, keys=None, partition=None, headers=None, timestamp_ms=None, *,
                  now, handle=None, start=0, default_timestamp_ms=None):
        """Append ``values[start:]`` (bytes/str/None sequences, or Arrow arrays)
        in one call; returns (handle, appended). ``appended`` < remaining means
        buffer.memory ran out: call again with ``start`` advanced (and the same
        handle) once memory is back. Keys/values must be bytes, str or None:
        pass them through :meth:`serialize_columns` first when serializers are
        configured. ``headers``: None or one header list per record.
        ``timestamp_ms``: one int, or one int/None per record; None stands
        for ``default_timestamp_ms`` (the driver's wall clock; else ``now``)."""
        self._check_open()
        values = _column(values, "values")
        keys = None if keys is None else _column(keys, "keys")
        if headers is not None:
            headers = [None if h is None else _headers(h) for h in headers]
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        if headers is not None and len(headers) != len(values):
            raise ValueError(f"{len(headers)} header lists for {len(values)} values")
        self._check_bulk_sizes(values, keys, headers, start)
        n = self.partitions_for(topic, now)
        if n is None:
            raise MetadataPending(f"partitions of topic {topic!r} are not known yet")
        if handle is None:
            handle = BulkDelivery(len(values), topic)
        ts = _bulk_timestamps(timestamp_ms, len(values),
                              now if default_timestamp_ms is None else default_timestamp_ms)
        acc = self.accumulator
        if keys is None or partition is not None:
            p = self._partition(topic, None, partition, n)
            if self.transactions is not None:
                self.transactions.maybe_add_partition((topic, p))
            handle.partition = p
            done = acc.append_many(topic, p, ts, keys, values, headers, handle, now, start)
        else:
            done = self._send_many_keyed(topic, values, keys, headers, ts, handle, now, start, n)
        self._queued += done
        return handle, done

    def _check_bulk_sizes(self, values, keys, headers, start):
        """The check send() makes on each record (max.request.size and
        buffer.memory), made on every row before any is appended: a row too
        large fails the whole call with RecordTooLargeError naming its index,
        so nothing of the call is sent and the caller can drop or split it.
        Without headers, a C loop finds the rows that come near the limits
        and only those are sized exactly."""
        check = self.accumulator.check_record_size
        total = len(values)
        if headers is None:
            r = first_row_over(keys, values, start, self._small_record)
        else:
            r = start if start < total else -1
        while r >= 0:
            k = None if keys is None else keys[r]
            v = values[r]
            try:
                check(0 if k is None else len(k), 0 if v is None else len(v),
                      None if headers is None else headers[r])
            except RecordTooLargeError as e:
                raise RecordTooLargeError(f"send_many() row {r}: {e}; nothing of this call was sent",
                                          index=r) from None
            if headers is None:
                r = first_row_over(keys, values, r + 1, self._small_record)
            else:
                r = r + 1 if r + 1 < total else -1

    def _send_many_keyed(self, topic, values, keys, headers, ts, handle, now, start, n):
        """Keyed send_many: rows go to murmur2 partitions, taken in chunks
        whose memory is bounded before anything is appended, so progress is
        always a prefix of the rows (the driver resumes from ``start`` once
        memory is back) and a partition's rows stay in order."""
        acc = self.accumulator
        chunk = _KEYED_CHUNK
        i = start
        total = len(values)
        while i < total:
            j = min(total, i + chunk)
            if self.user_partitioner is None:
                groups, sizes, largest = group_by_partition(keys, values, i, j, n,
                                                            self._partition(topic, None, None, n))
            else:
                groups, sizes, largest = {}, {}, 0
                for r in range(i, j):
                    p = self._partition(topic, keys[r], None, n)
                    g = groups.setdefault(p, ([], [], []))
                    g[0].append(r)
                    g[1].append(keys[r])
                    g[2].append(values[r])
                    size = len(keys[r] or b"") + len(values[r] or b"")
                    sizes[p] = sizes.get(p, 0) + size
                    largest = max(largest, size)
            header_bytes = largest_headers = 0
            if headers is not None:
                for r in range(i, j):
                    h = sum(4 * len(hk) + len(hv or b"") + 10 for hk, hv in headers[r] or ())
                    header_bytes += h
                    largest_headers = max(largest_headers, h)
            need = self._keyed_memory_bound(topic, groups, sizes, largest + largest_headers, header_bytes)
            if acc.used_memory + need > acc.buffer_memory:
                # A chunk that needs more than half the buffer would stall the
                # pipeline (it waits for nearly every batch to complete): take
                # fewer rows. Otherwise wait for the memory in-flight batches
                # give back, rather than crawl on in tiny chunks.
                if j - i > 1 and need > acc.buffer_memory // 2:
                    chunk = max(1, chunk // 2)
                    continue
                if acc.used_memory:
                    acc.waiting_for_memory = True
                    break
                # nothing is held: a single row gets whatever batch it can
            for p, (idx, ks, vs) in groups.items():
                if self.transactions is not None:
                    self.transactions.maybe_add_partition((topic, p))
                hs = None if headers is None else [headers[r] for r in idx]
                tss = ts if type(ts) is int else [ts[r] for r in idx]
                got = acc.append_many(topic, p, tss, ks, vs, hs, handle, now, 0)
                if got < len(idx):
                    if j - i == 1 and not got:
                        return i - start       # one row, not appended: wait for memory
                    # The estimate above is an upper bound, so this means a bug:
                    # fail the rest loudly rather than reorder or drop silently.
                    handle._complete(topic, p, -1, 0, total - i - got, -1, AssertionError(
                        f"keyed send_many: batches refused {len(idx) - got} rows despite the memory check"))
                    return total - start
            i = j
            chunk = min(_KEYED_CHUNK, chunk * 2)
        return i - start

    def _keyed_memory_bound(self, topic, groups, sizes, largest, header_bytes):
        """An upper bound of the buffer.memory that appending these groups
        takes: per partition, the new batches (batch.size each) its rows need
        beyond what its open batch still holds. A batch refuses a record only
        when less room than that record is left, so each batch but the last
        holds at least its capacity minus the largest record."""
        acc = self.accumulator
        batch_size = acc.batch_size
        largest += _MAX_RECORD_OVERHEAD
        per_batch = batch_size - RECORD_BATCH_OVERHEAD - largest
        need = 0
        for p, rows in groups.items():
            count = len(rows[0])
            pending = sizes[p] + count * _MAX_RECORD_OVERHEAD + header_bytes
            room, growth = acc.open_room((topic, p))
            if pending <= room:
                continue
            pending -= max(0, room - largest)
            batches = count if per_batch < 1 else min(count, -(-pending // per_batch))
            # Batches open at acc.initial_reserve and double (accumulator):
            # each reserves at most batch.size, and one that grew to L refused
            # a record at L/2, so L < 2 * (its records + a record + overhead).
            # The open batch may also grow, by at most ``growth``.
            grown = growth + 2 * pending + batches * (acc.initial_reserve + 2 * (largest + RECORD_BATCH_OVERHEAD))
            need += min(batches * batch_size + growth, grown)
        return need

    # -- transactions (transactional.id set) ------------------------------------------------
    def _txn(self):
        if self.transactions is None:
            raise TransactionStateError("transactions need transactional.id in the configuration")
        return self.transactions

    def init_transactions(self) -> TxnResult:
        return self._txn().init_transactions()

    def begin_transaction(self):
        self._txn().begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_id: str) -> TxnResult:
        """``offsets``: {(topic, partition): offset of the next record to consume}."""
        return self._txn().send_offsets_to_transaction(offsets, group_id)

    def commit_transaction(self) -> TxnResult:
        """Sends everything of the transaction now; EndTxn once all is acknowledged."""
        res = self._txn().commit_transaction()
        self.begin_flush()
        self._txn_flush = res
        return res

    def abort_transaction(self) -> TxnResult:
        """Unsent records of the transaction fail with TransactionAbortedError."""
        return self._txn().abort_transaction()

    # -- flushing / closing ---------------------------------------------------------------
    def begin_flush(self):
        self.accumulator.flushing += 1

    def end_flush(self):
        self.accumulator.flushing = max(0, self.accumulator.flushing - 1)

    @property
    def pending(self) -> bool:
        """Records not yet resolved: queued, in flight, or completed but not
        yet handed to the driver by :meth:`events` (their handles are not
        resolved until then, so a flush that returned here would return
        before the futures it waited for are done)."""
        return self.accumulator.has_incomplete or bool(self.sender.results)

    @property
    def pending_records(self) -> int:
        """How many records are not resolved yet (what a flush that ran out of time leaves)."""
        return sum(b.record_count for b in self.accumulator.incomplete) + self.sender.results_records

    @property
    def buffer_available(self) -> int:
        return self.accumulator.buffer_memory - self.accumulator.used_memory

    def abort_pending(self, error=None, now=None):
        """Fail every unresolved record (close with a timeout that ran out)."""
        err = error or ProducerClosedError("the producer was closed before these records were delivered")
        self.sender.abort_incomplete(err)

    def close(self, now):
        """No more sends; closes every connection. Returns Close actions.
        Call ``abort_pending`` first for records that must not be waited for."""
        self.closed = True
        self.abort_pending(ProducerClosedError("the producer was closed before these records were delivered"))
        return self.client.close(now)

    # -- the driver interface ------------------------------------------------------------------
    def poll(self, now) -> list:
        """The core's round (the driver contract, :mod:`kproto.driver`): the
        network client's, then the sender's; the Connect / Close actions."""
        if self._txn_flush is not None and self._txn_flush.done:
            self._txn_flush = None
            self.end_flush()
        client = self.client
        actions = client.poll(now)
        if not client.closing:
            self._sender_next = self.sender.run_once(now)
            more = client.poll_requests(now)
            if more:
                actions.extend(more)
        return actions

    @property
    def new_batch_needs_round(self) -> bool:
        """What a driver does when ``accumulator.wakeup`` says an append
        opened or filled a batch: True - run a round now; False - only
        re-read :meth:`next_deadline`, which already counts the batch's
        linger (a round before it would find nothing due). A transactional
        producer's new partition needs AddPartitionsToTxn before its batch
        may leave, and that request goes out at once (as Java's Sender
        sends it on its next loop, not after linger.ms)."""
        return self.transactions is not None

    def next_deadline(self, now) -> Optional[float]:
        """When :meth:`poll` must run next at the latest (None: only on I/O):
        the first of the sender's, the accumulator's and the network client's."""
        best = self._sender_next
        # A batch opened or filled since the sender's round lowered this to
        # when it is due (RecordAccumulator._wants_round): a driver woken for
        # it only needs this deadline, not a round.
        due = self.accumulator.next_round_ms
        if due is not None and (best is None or due < best):
            best = due
        d = self.client.next_deadline(now)
        if d is not None and (best is None or d < best):
            best = d
        return best

    def next_deadline_after_appends(self, planned: Optional[float]) -> Optional[float]:
        """:meth:`next_deadline` when, since the call that gave ``planned``,
        only appends happened - no :meth:`poll`, no I/O, no other call that
        wakes the driver for a round: a batch opened or filled lowered the
        accumulator's next round (``next_round_ms``, what such a wake-up is
        for), and the network client's timers are where they were. Without
        asking the network client again (a driver woken once a batch by
        ``send()`` at low rates: ~10k instructions each)."""
        due = self.accumulator.next_round_ms
        if due is not None and (planned is None or due < planned):
            return due
        return planned

    def events(self) -> Sequence:
        """Completed batches since the last call (BatchResult); resolve their
        handles with :func:`complete_results`. Nothing completed (most
        rounds at a low rate): one shared empty tuple, no new list a round."""
        sender = self.sender
        out = sender.results
        if not out:
            return _NO_RESULTS
        sender.results, sender.results_records = [], 0
        return out

    def _telemetry_metrics(self, now) -> list:
        """The producer's own KIP-714 metrics (Java's producer-metrics names)."""
        m = self._metrics
        return [MetricPoint(metric_name("producer-metrics", "record-send-total"), m["records_sent"], True),
                MetricPoint(metric_name("producer-metrics", "record-error-total"), m["records_failed"], True),
                MetricPoint(metric_name("producer-metrics", "buffer-available-bytes"), self.buffer_available)]

    def metrics(self) -> dict:
        """The producer's counters (``requests``/``responses``: Produce
        requests) and the network client's (:func:`~kproto.client_metrics.network_metrics`:
        every request)."""
        m = network_metrics(self.client)
        m.update(self._metrics)
        m["records_queued"] = self._queued + (self._fast_append.appended if self._fast_append else 0)
        m["errors"] = dict(m["errors"])
        m["request_latency_ms_avg"] = (m["request_latency_ms_total"] / m["responses"]) if m["responses"] else 0.0
        m["buffer_used_bytes"] = self.accumulator.used_memory
        m["batches_incomplete"] = len(self.accumulator.incomplete)
        m["in_flight_batches"] = len(self.sender.in_flight)
        if self.idempotence is not None:
            m["producer_id"] = self.idempotence.producer_id
            m["producer_epoch"] = self.idempotence.epoch
            m["epoch_bumps"] = self.idempotence.epoch_bumps
        return m


def _pylist(seq):
    return arrow_as_binary(seq).to_pylist() if hasattr(seq, "to_pylist") else seq



#: rows a keyed send_many groups by partition at a time
_KEYED_CHUNK = 4096
#: a record's bytes beyond its key, value and header bytes: length, attributes,
#: timestamp and offset deltas, key and value lengths, header count (varints)
_MAX_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5

def _headers(headers):
    """[(str, bytes|str|None), ...] (or a dict) -> what the batch builder takes."""
    if isinstance(headers, dict):
        headers = list(headers.items())
    out = []
    for h in headers:
        try:
            k, v = h
        except (TypeError, ValueError):
            raise SerializationError(f"a header must be a (str key, bytes value) pair, not {h!r}") from None
        if not isinstance(k, str):
            raise SerializationError(f"a header key must be str, not {type(k).__name__}")
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
            raise SerializationError(f"header {k!r}: the value must be bytes, str or None, "
                                     f"not {type(v).__name__}")
        out.append((k, v))
    return out


def _bulk_timestamps(timestamp_ms, n, default):
    """send_many's timestamps: one int for every record (None: default), or
    one per record (an int, or None for default)."""
    if timestamp_ms is None:
        return int(default)
    if isinstance(timestamp_ms, int):
        return timestamp_ms
    if hasattr(timestamp_ms, "to_pylist"):
        timestamp_ms = timestamp_ms.to_pylist()
    tss = list(timestamp_ms)
    if len(tss) != n:
        raise ValueError(f"{len(tss)} timestamps for {n} values")
    default = int(default)
    for i, t in enumerate(tss):
        if t is None:
            tss[i] = default
        elif type(t) is not int:
            raise TypeError(f"timestamps are int milliseconds or None, not {type(t).__name__}")
    return tss


def _column(seq, what):
    """A list of bytes/None from a sequence or an Arrow array."""
    seq = _pylist(seq)
    if type(seq) not in (list, tuple):
        seq = list(seq)
    if all_bytes_or_none(seq):              # the common case, checked in C
        return seq
    return [v.encode("utf-8") if isinstance(v, str) else _bytes_or_fail(v, what) for v in seq]


def arrow_as_binary(arr):
    """Arrow string columns as binary (a zero-copy cast: UTF-8 bytes already),
    so to_pylist makes bytes and nothing is encoded again per value."""
    import pyarrow as pa
    t = arr.type
    if pa.types.is_string(t):
        return arr.cast(pa.binary())
    if pa.types.is_large_string(t):
        return arr.cast(pa.large_binary())
    return arr


def _bytes_or_fail(v, what):
    if v is None or isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise SerializationError(f"send_many {what} must be bytes, str or None, not {type(v).__name__}")
