"""The executor side of the Spark sinks: Arrow record batches in, records out
through one cached producer per Python worker process, a report back.

Column conventions are those of Spark's own Kafka sink: ``value`` (required;
binary or string), optional ``key`` (binary or string), ``topic`` (per row, used
when no ``topic`` option is given), ``partition`` (int; null lets the
partitioner choose), ``headers`` (array of struct<key: string, value:
binary>) and ``timestamp`` (timestamp, or long milliseconds). As in
Spark's sink, a ``topic`` option overrides the ``topic`` column. Rows go to
the producer's bulk path, ``send_many``, one call per (topic, partition)
group of each Arrow batch.

Nothing here imports pyspark: these functions run inside Spark's Python
workers (``mapInArrow`` and the ``kio-kafka`` data source writer) and are
plain functions of Arrow batches, so they are tested without Spark too.
"""
from __future__ import annotations

import atexit
import threading
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from kproto.errors import KafkaError
from kproto.producer.core import arrow_as_binary

__all__ = ["producer", "send_batches", "send_batches_transactional", "send_rows", "REPORT_FIELDS",
           "RESULT_FIELDS", "SparkWriteError"]

#: one report row per (topic, partition) a task wrote to, or per failure
REPORT_FIELDS = (("topic", "string"), ("partition", "int"), ("rows", "long"), ("bytes", "long"),
                 ("first_offset", "long"), ("last_offset", "long"), ("error", "string"))

#: what send_rows adds to each input row
RESULT_FIELDS = (("kafka_partition", "int"), ("kafka_offset", "long"), ("error", "string"))

_KNOWN_COLUMNS = {"value", "key", "topic", "partition", "headers", "timestamp"}

_producers: Dict[tuple, object] = {}
_producers_lock = threading.Lock()


class SparkWriteError(KafkaError):
    """Records of a Spark partition could not be delivered (fails the task)."""


def _config_key(config: dict) -> tuple:
    return tuple(sorted((str(k).replace("_", "."), repr(v)) for k, v in config.items()))


def producer(config: dict):
    """The producer of this Python worker process for ``config``: created on
    first use, then reused by every task the worker runs (Spark reuses
    Python workers), flushed and closed when the worker exits."""
    key = _config_key(config)
    with _producers_lock:
        p = _producers.get(key)
        if p is None or p._closed:
            from kio.producer import Producer
            p = _producers[key] = Producer(dict(config))
            if len(_producers) == 1:
                atexit.register(_close_all)
        return p


def _close_all():
    with _producers_lock:
        ps = list(_producers.values())
        _producers.clear()
    for p in ps:
        try:
            p.close(10)
        except Exception:  # noqa: BLE001 - the worker is exiting anyway
            pass


def _check_columns(names, topic):
    if "value" not in names:
        raise ValueError(f"the DataFrame needs a 'value' column (binary or string); it has {sorted(names)}")
    unknown = set(names) - _KNOWN_COLUMNS
    if unknown:
        raise ValueError(f"unexpected column(s) {sorted(unknown)}: Kafka rows have "
                         f"{sorted(_KNOWN_COLUMNS)} (select or drop the others first)")
    if topic is None and "topic" not in names:
        raise ValueError("no topic: pass topic=... or give the DataFrame a 'topic' column")


def _timestamps_ms(col):
    """A Spark timestamp (Arrow timestamp, any unit) or long column -> ms."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if pa.types.is_timestamp(col.type):
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1000000}[col.type.unit]
        ints = col.cast(pa.int64())
        ints = pc.multiply(ints, 1000) if per_ms is None else pc.divide(ints, per_ms)
        return ints.to_pylist()
    if pa.types.is_integer(col.type):
        return col.cast(pa.int64()).to_pylist()
    raise ValueError(f"the 'timestamp' column must be a timestamp or long milliseconds, not {col.type}")


def _headers(col):
    out = []
    for hs in col.to_pylist():
        if hs is None:
            out.append(None)
        else:
            out.append([(h["key"], h["value"]) for h in hs])
    return out


def _groups(topics, partitions, n) -> Dict[Tuple[str, Optional[int]], List[int]]:
    groups: Dict[Tuple[str, Optional[int]], List[int]] = {}
    for i in range(n):
        groups.setdefault((topics[i], partitions[i]), []).append(i)
    return groups


def _task_partition() -> int:
    """The Spark partition this task writes (0 outside Spark)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return 0
    ctx = TaskContext.get()
    return 0 if ctx is None else ctx.partitionId()


def _row_columns(rb, topic):
    """The Kafka columns of one Arrow batch as Python lists (None: absent)."""
    names = rb.schema.names
    _check_columns(names, topic)

    def col(name, convert=None):
        if name not in names:
            return None
        return convert(rb.column(name)) if convert else rb.column(name).to_pylist()
    return (col("value"), col("key"), col("headers", _headers), col("timestamp", _timestamps_ms),
            col("topic") if topic is None else None, col("partition"))


def send_rows(batches: Iterable, topic: Optional[str], config: dict, *,
              flush_timeout: Optional[float] = None) -> Iterator:
    """Per-row delivery results instead of failing the task: each input
    batch comes back with RESULT_FIELDS appended - the partition and offset
    a row was written to, or its error (null when delivered). Rows go
    through ``send()`` one by one, so each has its own outcome; a row that
    cannot even be queued (a bad partition, a record too large) gets the
    error at once. The batch is flushed before it is yielded."""
    import pyarrow as pa
    p = producer(config)
    for rb in batches:
        values, keys, headers, stamps, topics, parts = _row_columns(rb, topic)
        outcomes = []
        for i in range(rb.num_rows):
            t = topics[i] if topics is not None and topics[i] is not None else topic
            try:
                if t is None:
                    raise ValueError("the row has a null 'topic' and no topic option was given")
                outcomes.append(p.send(t, values[i], key=None if keys is None else keys[i],
                                       partition=None if parts is None else parts[i],
                                       headers=None if headers is None else headers[i],
                                       timestamp_ms=None if stamps is None else stamps[i]))
            except Exception as e:  # noqa: BLE001 - the row's error column says it
                outcomes.append(e)
        wait = _flush_wait(p, flush_timeout)
        pending = p.flush(wait)
        if pending:
            raise SparkWriteError(f"kio.spark: {pending} records still undelivered after flush ({wait} s)")
        partitions, offsets, errors = [], [], []
        for o in outcomes:
            exc = o if isinstance(o, BaseException) else o.exception(0)
            if exc is None:
                md = o.result(0)
                partitions.append(md.partition)
                offsets.append(md.offset)
                errors.append(None)
            else:
                partitions.append(None)
                offsets.append(None)
                errors.append(f"{type(exc).__name__}: {exc}")
        arrays = list(rb.columns) + [pa.array(partitions, pa.int32()), pa.array(offsets, pa.int64()),
                                     pa.array(errors, pa.string())]
        yield pa.RecordBatch.from_arrays(arrays, names=rb.schema.names + [n for n, _ in RESULT_FIELDS])


def send_batches_transactional(batches: Iterable, topic: Optional[str], config: dict, prefix: str, *,
                               flush_timeout: Optional[float] = None) -> List[tuple]:
    """send_batches inside one Kafka transaction per Spark partition, with
    transactional.id ``<prefix>-<partition>``: a task attempt's rows become
    visible to read_committed consumers all together or not at all, and a
    retried attempt fences the failed one (same transactional id)."""
    conf = dict(config)
    conf["transactional.id"] = f"{prefix}-{_task_partition()}"
    p = producer(conf)
    if not getattr(p, "_kio_spark_txn_ready", False):
        p.init_transactions(flush_timeout)
        p._kio_spark_txn_ready = True
    p.begin_transaction()
    try:
        rows = send_batches(batches, topic, conf, errors="raise", flush_timeout=flush_timeout)
        p.commit_transaction(flush_timeout)
    except BaseException:
        try:
            p.abort_transaction(flush_timeout)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass
        raise
    return rows


def send_batches(batches: Iterable, topic: Optional[str], config: dict, *, errors: str = "raise",
                 flush_timeout: Optional[float] = None) -> List[tuple]:
    """Send every row of ``batches`` (pyarrow RecordBatches), wait for the
    acknowledgements, and return the report rows (REPORT_FIELDS order).

    ``errors="raise"``: the first failed delivery raises SparkWriteError
    (the Spark task fails and is retried: at-least-once). ``errors="report"``:
    failures come back as report rows with their error text instead."""
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', not {errors!r}")
    import pyarrow.compute as pc
    p = producer(config)
    sent = []                                  # (topic, partition or None, future, rows, bytes)
    failed = []                                # report rows of calls that failed at once
    for rb in batches:
        names = rb.schema.names
        _check_columns(names, topic)
        n = rb.num_rows
        if n == 0:
            continue
        value_col = rb.column("value")
        # bytes for the report, from Arrow (exact per batch; a batch split by
        # topic/partition columns shares them out by row count)
        value_bytes = pc.sum(pc.binary_length(value_col)).as_py() or 0
        # string columns are cast to binary (zero-copy): bytes straight from Arrow
        values = arrow_as_binary(value_col).to_pylist()
        keys = arrow_as_binary(rb.column("key")).to_pylist() if "key" in names else None
        headers = _headers(rb.column("headers")) if "headers" in names else None
        stamps = _timestamps_ms(rb.column("timestamp")) if "timestamp" in names else None
        # as in Spark's sink, the topic option overrides the topic column
        topics = rb.column("topic").to_pylist() if "topic" in names and topic is None else None
        parts = rb.column("partition").to_pylist() if "partition" in names else None
        if topics is None and parts is None:
            groups = {(topic, None): None}
        else:
            groups = _groups(topics if topics is not None else [topic] * n,
                             parts if parts is not None else [None] * n, n)
        for (t, part), idx in groups.items():
            if t is None:
                t = topic
            if t is None:
                raise ValueError("a row has a null 'topic' and no topic option was given")

            def pick(col, idx=idx):
                return col if col is None or idx is None else [col[i] for i in idx]

            vs = pick(values)
            size = value_bytes if idx is None else value_bytes * len(idx) // n
            try:
                fut = p.send_many(t, vs, keys=pick(keys), partition=part, headers=pick(headers),
                                  timestamp_ms=pick(stamps))
            except Exception as e:  # noqa: BLE001 - reported or raised below, never dropped
                if getattr(e, "index", None) is not None:      # RecordTooLargeError: which row
                    e = type(e)(f"row {e.index if idx is None else idx[e.index]} of the Arrow batch: {e}",
                                index=e.index)
                if errors == "raise":
                    raise SparkWriteError(f"kio.spark: sending {len(vs)} rows to topic {t!r} failed: "
                                          f"{type(e).__name__}: {e}") from e
                failed.append((t, part if part is not None else -1, len(vs), size, -1, -1,
                               f"{type(e).__name__}: {e}"))
                continue
            sent.append((t, part, fut, len(vs), size))
    wait = _flush_wait(p, flush_timeout)
    pending = p.flush(wait)
    if pending:
        raise SparkWriteError(f"kio.spark: {pending} records still undelivered after flush ({wait} s)")
    return _report(sent, failed, errors)


def _flush_wait(p, flush_timeout: Optional[float]) -> float:
    """How long a task waits for its acknowledgements: ``flush_timeout``, or
    by default the producer's delivery.timeout.ms plus a margin. Every record
    is acknowledged or failed within delivery.timeout.ms, so waiting longer
    would only hang the task (and the Spark job) on a stuck producer; failing
    it lets Spark retry it instead."""
    if flush_timeout is not None:
        return flush_timeout
    return p.config.delivery_timeout_ms / 1000.0 + 30.0


def _report(sent, failed, errors) -> List[tuple]:
    per_part: Dict[Tuple[str, int], list] = {}
    rows = list(failed)
    for t, part, fut, n, size in sent:
        exc = fut.exception(0)
        if exc is not None:
            if errors == "raise":
                raise SparkWriteError(f"kio.spark: delivery to topic {t!r} failed for {fut.failed} of {n} "
                                      f"rows: {type(exc).__name__}: {exc}") from exc
            rows.append((t, part if part is not None else -1, fut.failed, 0, -1, -1,
                         f"{type(exc).__name__}: {exc}"))
        # A keyed call spreads over partitions; its bytes are apportioned by
        # row count, in integers that add up to exactly the bytes sent.
        done = 0
        for partition, first, count in fut.ranges:
            acc = per_part.setdefault((t, partition), [0, 0, None, None])
            acc[0] += count
            acc[1] += size * (done + count) // n - size * done // n
            done += count
            last = first + count - 1
            acc[2] = first if acc[2] is None else min(acc[2], first)
            acc[3] = last if acc[3] is None else max(acc[3], last)
    for (t, partition), (count, size, first, last) in sorted(per_part.items()):
        rows.append((t, partition, count, size, first, last, None))
    return rows


def report_batches(rows: List[tuple]) -> Iterator:
    """The report rows as one Arrow batch (the mapInArrow output)."""
    import pyarrow as pa
    cols = list(zip(*rows)) if rows else [[] for _ in REPORT_FIELDS]
    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64()}
    yield pa.RecordBatch.from_arrays([pa.array(list(c), types[ty]) for c, (_, ty) in zip(cols, REPORT_FIELDS)],
                                     names=[name for name, _ in REPORT_FIELDS])
