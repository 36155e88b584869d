"""PySpark integration: write DataFrames to Kafka, read topics into DataFrames.

* ``kio.spark.write(df, topic=..., bootstrap_servers=..., **producer_config)``
  - a ``mapInArrow`` sink: each Spark partition's Arrow batches go to one
  cached producer per Python worker (bulk path), flushed at the end of the
  partition; returns a :class:`WriteReport` to the driver.
* ``kio.spark.register(spark)`` then ``spark.read.format("kio-kafka")`` /
  ``df.write.format("kio-kafka")`` - the Python data source
  (:mod:`kio.spark.source`), with the options and schema of Spark's Kafka
  source.
* ``kio.spark.producer(config)`` - the cached per-worker producer, for pandas
  UDFs and other code that sends rows itself.

Delivery semantics: at-least-once. A task that fails (a delivery error, a
timeout) is retried by Spark and sends its partition again; records it had
already written are written twice. Idempotence (on by default) removes
duplicates from the producer's own retries within a task, not across task
attempts.

pyspark is imported only by :func:`write` and :func:`register`; the executor
code in :mod:`kio.spark.sink` needs only pyarrow. Both first check, once per
session, that Spark's Python workers can import kio and pyarrow
(:mod:`kio.spark.workers`): a worker interpreter without them (``PYSPARK_PYTHON``
unset, so ``python3`` from ``PATH``) fails at once with a
:class:`SparkWorkerError` naming it, instead of deep inside the first job.

A classic session and a Spark Connect one (``SparkSession.builder.remote(...)``)
take the same code path: only DataFrame APIs that Connect has are used
(``mapInArrow``, ``spark.dataSource.register``; no ``df.rdd``, no
``sparkContext``), and what runs on Spark's side (the ``mapInArrow`` function,
the data source class) is pickled by reference to kio's modules, which the
server's Python workers import.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from kio.spark.workers import SparkWorkerError, check_workers
from kio.spark.sink import (
    REPORT_FIELDS, RESULT_FIELDS, SparkWriteError, producer, report_batches, send_batches,
    send_batches_transactional, send_rows,
)

__all__ = ["write", "register", "producer", "WriteReport", "SparkWriteError", "SparkWorkerError",
           "REPORT_SCHEMA"]

REPORT_SCHEMA = ", ".join(f"{name} {ty}" for name, ty in REPORT_FIELDS)


class WriteReport(NamedTuple):
    """What :func:`write` did: rows and bytes delivered, per (topic,
    partition) the offsets written (first, last), and the errors (with
    ``errors="report"``) as (topic, partition, rows, message)."""
    rows: int
    bytes: int
    offsets: Dict[Tuple[str, int], Tuple[int, int]]
    errors: List[Tuple[str, int, int, str]]


#: A Spark partition is one bulk write: big batches (librdkafka's default
#: size) cut the broker's work per record several times over the Java
#: client's 16 KiB. An explicit batch.size wins.
BULK_BATCH_SIZE = 1 << 20


def _producer_config(bootstrap_servers, producer_config: dict) -> dict:
    conf = dict(producer_config)
    if bootstrap_servers is not None:
        conf["bootstrap.servers"] = bootstrap_servers
    if not any(str(k).replace("_", ".") == "batch.size" for k in conf):
        conf["batch.size"] = BULK_BATCH_SIZE
    from kproto.producer.config import parse_producer_config
    parse_producer_config(dict(conf))         # bad keys/values fail here, on the driver
    return conf


def write(df, topic: Optional[str] = None, bootstrap_servers=None, *, errors: str = "raise",
          flush_timeout: Optional[float] = None, transactional_id_prefix: Optional[str] = None,
          **producer_config) -> WriteReport:
    """Send every row of ``df`` to Kafka (columns: value, and optionally key,
    topic, partition, headers, timestamp - Spark's Kafka sink conventions;
    as there, ``topic`` overrides a topic column).

    ``errors="raise"`` (default): a failed delivery fails the Spark task with
    a :class:`SparkWriteError` naming the topic and the cause.
    ``errors="report"``: failures are returned in ``WriteReport.errors``.
    ``errors="column"``: returns a DataFrame instead - the input rows with
    ``kafka_partition``, ``kafka_offset`` and ``error`` (null when the row
    was delivered) appended. It is lazy like any DataFrame: rows are sent
    when an action runs on it, and again on every action, so persist it or
    write it out once.
    ``transactional_id_prefix``: each Spark partition is written in one Kafka
    transaction (transactional.id ``<prefix>-<partition>``), so
    read_committed consumers see a partition's rows all together, once per
    successful attempt; errors are then always raised. A failure upstream
    of the sink in the same Spark stage ends the sink's input as if the
    partition were complete, so that partial partition is committed:
    materialize ``df`` first (``df.cache(); df.count()``, a checkpoint, or
    a shuffle before the write) so such failures happen in an earlier stage."""
    from kio.spark.sink import _check_columns
    _check_columns(df.columns, topic)
    if errors not in ("raise", "report", "column"):
        raise ValueError(f"errors must be 'raise', 'report' or 'column', not {errors!r}")
    if errors == "column" and transactional_id_prefix is not None:
        raise ValueError("errors='column' reports each row's own outcome; a transactional write "
                         "commits or aborts a partition as a whole: use one or the other")
    conf = _producer_config(bootstrap_servers, producer_config)
    check_workers(df.sparkSession)
    if errors == "column":
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType
        types = {"int": IntegerType(), "long": LongType(), "string": StringType()}
        schema = StructType(df.schema.fields + [StructField(name, types[ty]) for name, ty in RESULT_FIELDS])
        return df.mapInArrow(lambda batches: send_rows(batches, topic, conf, flush_timeout=flush_timeout),
                             schema)

    def task(batches):
        if transactional_id_prefix is not None:
            rows = send_batches_transactional(batches, topic, conf, transactional_id_prefix,
                                              flush_timeout=flush_timeout)
        else:
            rows = send_batches(batches, topic, conf, errors=errors, flush_timeout=flush_timeout)
        return report_batches(rows)

    rows = df.mapInArrow(task, REPORT_SCHEMA).collect()
    return summarize(tuple(r) for r in rows)


def summarize(rows) -> WriteReport:
    """Merge report rows (REPORT_FIELDS order) from every task."""
    total = size = 0
    offsets: Dict[Tuple[str, int], Tuple[int, int]] = {}
    errs = []
    for topic, partition, n, nbytes, first, last, error in rows:
        if error is not None:
            errs.append((topic, partition, n, error))
            continue
        total += n
        size += nbytes
        lo, hi = offsets.get((topic, partition), (first, last))
        offsets[(topic, partition)] = (min(lo, first), max(hi, last))
    return WriteReport(total, size, dict(sorted(offsets.items())), errs)


def register(spark) -> None:
    """Make ``format("kio-kafka")`` available in this Spark session (after
    checking that its Python workers can import kio: :class:`SparkWorkerError`)."""
    check_workers(spark)
    from kio.spark.source import KioKafkaDataSource
    spark.dataSource.register(KioKafkaDataSource)
