"""The ``kio-kafka`` Python data source (``pyspark.sql.datasource``, Spark 4).

Batch read: the driver plans one input partition per topic-partition offset
range (see :mod:`kio.spark.offsets`); each task reads its range with a kio
Consumer in manual-assignment mode and yields Arrow batches with the schema
of Spark's Kafka source. Streaming read (``readStream``): each micro-batch
is planned the same way between the offsets Spark checkpointed and the
partitions' current ends. Write: Arrow batches go through the same executor
code as ``kio.spark.write`` (:mod:`kio.spark.sink`).

Register it once per session with ``kio.spark.register(spark)``.
"""
from __future__ import annotations

import time

from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamReader, InputPartition,
)
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from kio.spark import offsets as _offsets
from kio.spark import sink as _sink
from kproto.errors import ConfigError, KafkaError

__all__ = ["KioKafkaDataSource", "KAFKA_SCHEMA", "KAFKA_SCHEMA_NO_HEADERS"]

KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])
#: without option includeHeaders=true (Spark's default): no headers column
KAFKA_SCHEMA_NO_HEADERS = StructType(KAFKA_SCHEMA.fields[:-1])


class _RangePartition(InputPartition):
    def __init__(self, r: _offsets.OffsetRange):
        super().__init__(tuple(r))
        self.range = r


class KioKafkaDataSource(DataSource):
    """``spark.read.format("kio-kafka")`` / ``df.write.format("kio-kafka")``."""

    @classmethod
    def name(cls):
        return "kio-kafka"

    def schema(self):
        return KAFKA_SCHEMA if _offsets.include_headers(_offsets.normalize(self.options)) else KAFKA_SCHEMA_NO_HEADERS

    def reader(self, schema):
        return _Reader(_offsets.normalize(self.options))

    def streamReader(self, schema):
        return _StreamReader(_offsets.normalize(self.options))

    def writer(self, schema, overwrite):
        return _Writer(_offsets.normalize(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options):
        self.options = options
        self.config = _offsets.consumer_config(options)
        self.timeout = float(_offsets.option(options, "readTimeoutSeconds", "120"))
        self.headers = _offsets.include_headers(options)
        self.fail_on_data_loss = _offsets.fail_on_data_loss(options)
        _offsets.batch_specs(options)          # refused here, on the driver, before any task

    def partitions(self):
        from kio.consumer import Consumer
        with Consumer(dict(self.config)) as c:
            ranges = _offsets.plan_ranges(self.options, lambda: _list_topics(self.config),
                                          c.beginning_offsets, c.end_offsets)
        return [_RangePartition(r) for r in ranges]

    def read(self, partition):
        if isinstance(partition, _RangePartition):   # else nothing was planned: Spark still
            yield from read_range(self.config, partition.range, self.timeout, self.headers,  # runs one empty task
                                  self.fail_on_data_loss)


def read_range(config: dict, r: _offsets.OffsetRange, timeout: float, headers: bool = False,
               fail_on_data_loss: bool = True):
    """Arrow batches of records [r.start, r.end) of one topic-partition, read
    by a kio Consumer in manual-assignment mode through the columnar path
    (``poll_batch(arrow=True)``: Arrow arrays built from the fetched bytes,
    no Python object per record), with Spark's Kafka schema (the headers
    column with ``headers``; null for a record without headers, as Spark
    gives). A range that makes no progress for ``timeout`` seconds fails the
    task instead of hanging it.

    Records of the range deleted since it was planned (retention,
    DeleteRecords) are data loss: the consumer's auto.offset.reset is
    'none' (:func:`kio.spark.offsets.consumer_config`), so the fetch's
    OFFSET_OUT_OF_RANGE comes here, and ``fail_on_data_loss`` decides as
    at planning: fail the task, or warn and go on from the log start."""
    from kio.consumer import Consumer, TopicPartition
    from kio.errors import OffsetOutOfRangeError
    tp = TopicPartition(r.topic, r.partition)
    conf = dict(config)
    conf["auto.offset.reset"] = "none"
    with Consumer(conf) as c:
        c.assign([tp])
        c.seek(tp, r.start)
        position = r.start
        deadline = time.monotonic() + timeout
        while position < r.end:
            if time.monotonic() > deadline:
                raise KafkaError(f"kio-kafka: reading {r.topic}-{r.partition} offsets "
                                 f"[{r.start}, {r.end}) stalled at {position} for "
                                 f"{timeout} s (option readTimeoutSeconds)")
            try:
                batches = c.poll_batch(1.0, arrow=True, headers=headers)
            except OffsetOutOfRangeError:
                log_start = c.beginning_offsets([tp])[tp]
                if position >= log_start:      # past the end: the log was cut back (truncated)
                    raise _offsets.DataLossError(
                        f"{r.topic}-{r.partition}: offset {position} is out of range (the log now "
                        f"ends at {c.end_offsets([tp])[tp]}); some data may have been lost") from None
                position = _offsets.data_lost(tp, position, log_start, fail_on_data_loss, r.end)
                c.seek(tp, position)
                continue
            for pb in batches:
                rb = _spark_batch(pb, r.end, headers)
                if rb is not None:
                    yield rb
            # the position moves past aborted records and transaction markers too
            now = c.position(tp)
            if now > position:
                position = now
                deadline = time.monotonic() + timeout


def _empty_as_null(headers):
    """Spark's Kafka source gives null, not an empty array, for a record
    without headers."""
    import pyarrow as pa
    import pyarrow.compute as pc
    empty = pc.equal(pc.list_value_length(headers), 0)
    if not pc.any(empty).as_py():
        return headers
    return pa.ListArray.from_arrays(headers.offsets, headers.values, type=headers.type, mask=empty)


def _spark_batch(pb, end: int, headers: bool):
    """One PartitionBatch (Arrow) as a RecordBatch of Spark's Kafka schema,
    cut before offset ``end``; None when nothing is left."""
    import numpy as np
    import pyarrow as pa
    offsets = pb.offsets
    n = int(np.searchsorted(offsets.to_numpy(zero_copy_only=True), end))   # offsets ascend
    if n == 0:
        return None
    topic = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([pb.topic])).cast(pa.string())
    stamps = pb.timestamps.cast(pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC"))
    arrays = [pb.keys, pb.values, topic, pa.array(np.full(n, pb.partition, np.int32)), offsets, stamps,
              pb.timestamp_types]
    schema = KAFKA_SCHEMA_NO_HEADERS
    if headers:
        arrays.append(_empty_as_null(pb.headers))
        schema = KAFKA_SCHEMA
    if n < len(offsets):
        arrays = [a if i in (2, 3) else a.slice(0, n) for i, a in enumerate(arrays)]
    return pa.RecordBatch.from_arrays(arrays, names=[f.name for f in schema.fields])


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kio-kafka")``: each micro-batch reads the
    offset ranges between Spark's checkpointed offsets and the partitions'
    ends (capped by maxOffsetsPerTrigger); Spark checkpoints the offsets,
    nothing is committed to Kafka (as with Spark's own Kafka source)."""

    def __init__(self, options):
        self.options = options
        self.config = _offsets.consumer_config(options)
        self.timeout = float(_offsets.option(options, "readTimeoutSeconds", "120"))
        self.stream = _offsets.stream_options(options)
        self.max_rows, self.fail_on_data_loss = self.stream.max_rows, self.stream.fail_on_data_loss
        self.headers = _offsets.include_headers(options)
        self._target = None                    # end offsets of a Trigger.AvailableNow run
        self._consumer = None                  # for ListOffsets, on the driver only
        self._last_trigger_ms = None           # when the last micro-batch was planned (minOffsetsPerTrigger)

    def __getstate__(self):                    # Spark ships the reader to the read tasks
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    def _offsets_client(self):
        if self._consumer is None:
            from kio.consumer import Consumer
            self._consumer = Consumer(dict(self.config))
        return self._consumer

    def _partitions_now(self):
        return _offsets.topic_partitions(self.options, lambda: _list_topics(self.config))

    def initialOffset(self):
        c = self._offsets_client()
        start = _offsets.stream_initial(self.options, self._partitions_now(), c.beginning_offsets,
                                        c.end_offsets)
        return _offsets.offsets_to_json(start)

    def getDefaultReadLimit(self):
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def latestOffset(self, start, limit):
        c = self._offsets_client()
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        begin = _offsets.offsets_from_json(start)
        end = _offsets.stream_latest(begin, self._partitions_now(), c.beginning_offsets, c.end_offsets,
                                     max_rows, self._target)
        # minOffsetsPerTrigger: wait for more records (at most maxTriggerDelay),
        # as Spark's source does; not under Trigger.AvailableNow, whose run
        # must end with what was there when it began.
        now_ms = time.monotonic() * 1000.0
        if self._last_trigger_ms is None:
            self._last_trigger_ms = now_ms
        if self._target is None and _offsets.delay_batch(self.stream.min_rows, self.stream.max_trigger_delay_ms,
                                                         begin, end, now_ms, self._last_trigger_ms):
            return start
        self._last_trigger_ms = now_ms
        return _offsets.offsets_to_json(end)

    def prepareForTriggerAvailableNow(self):
        tps = self._partitions_now()
        self._target = self._offsets_client().end_offsets(tps) if tps else {}

    def partitions(self, start, end):
        ranges = _offsets.stream_ranges(_offsets.offsets_from_json(start), _offsets.offsets_from_json(end),
                                        self._offsets_client().beginning_offsets, self.fail_on_data_loss)
        return [_RangePartition(r) for r in ranges]

    def read(self, partition):
        return read_range(self.config, partition.range, self.timeout, self.headers, self.fail_on_data_loss)

    def commit(self, end):
        pass                                   # Spark's checkpoint holds the offsets

    def stop(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _list_topics(config) -> dict:
    """{topic: partition count} of the cluster, asked with the source's own
    connection settings (TLS, SASL, client id...)."""
    from kio.admin import Admin
    from kproto.config import COMMON
    common = {s.name for s in COMMON}
    with Admin({k: v for k, v in config.items() if k in common}) as admin:
        names = list(admin.list_topics())
        # (raise_errors=False: a topic deleted since the listing is left out.)
        described = admin.describe_topics(names, raise_errors=False).values() if names else {}
    return {name: len(d.partitions) for name, d in described.items()}


class _Report(WriterCommitMessage):
    def __init__(self, rows):
        self.rows = rows


class _Writer(DataSourceArrowWriter):
    def __init__(self, options):
        self.topic = options.get("topic")
        conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in conf:
            raise ConfigError("the kio-kafka sink needs option kafka.bootstrap.servers")
        from kio.spark import _producer_config
        self.config = _producer_config(None, conf)    # bad keys/values fail on the driver

    def write(self, iterator):
        return _Report(_sink.send_batches(iterator, self.topic, self.config))

    def commit(self, messages):
        self.report = [row for m in messages if m is not None for row in m.rows]
