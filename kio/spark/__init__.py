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
code in :mod:`kio.spark.sink` needs only pyarrow.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from kio.spark.sink import (
    REPORT_FIELDS, SparkWriteError, producer, report_batches, send_batches, send_batches_transactional,
)

__all__ = ["write", "register", "producer", "WriteReport", "SparkWriteError", "REPORT_SCHEMA"]

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
    topic, partition, headers, timestamp - Spark's Kafka sink conventions).

    ``errors="raise"`` (default): a failed delivery fails the Spark task with
    a :class:`SparkWriteError` naming the topic and the cause.
    ``errors="report"``: failures are returned in ``WriteReport.errors``.
    ``transactional_id_prefix``: each Spark partition is written in one Kafka
    transaction (transactional.id ``<prefix>-<partition>``), so
    read_committed consumers see a partition's rows all together, once per
    successful attempt; errors are then always raised."""
    from kio.spark.sink import _check_columns
    _check_columns(df.columns, topic)
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', not {errors!r}")
    conf = _producer_config(bootstrap_servers, producer_config)

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
    """Make ``format("kio-kafka")`` available in this Spark session."""
    from kio.spark.source import KioKafkaDataSource
    spark.dataSource.register(KioKafkaDataSource)
