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

__all__ = ["KioKafkaDataSource", "KAFKA_SCHEMA"]

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

#: rows per Arrow batch a read task yields
_ROWS_PER_BATCH = 10_000


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
        return KAFKA_SCHEMA

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

    def partitions(self):
        from kio.consumer import Consumer
        with Consumer(dict(self.config)) as c:
            ranges = _offsets.plan_ranges(self.options, lambda: _list_topics(self.config),
                                          c.beginning_offsets, c.end_offsets)
        return [_RangePartition(r) for r in ranges]

    def read(self, partition):
        if isinstance(partition, _RangePartition):   # else nothing was planned: Spark still
            yield from read_range(self.config, partition.range, self.timeout)  # runs one empty task


def read_range(config: dict, r: _offsets.OffsetRange, timeout: float):
    """Arrow batches of records [r.start, r.end) of one topic-partition, read
    by a kio Consumer in manual-assignment mode; a range that stops growing
    for ``timeout`` seconds fails the task instead of hanging it."""
    import pyarrow as pa

    from kio.consumer import Consumer, TopicPartition
    tp = TopicPartition(r.topic, r.partition)
    rows = _Rows()
    deadline = time.monotonic() + timeout
    with Consumer(dict(config)) as c:
        c.assign([tp])
        c.seek(tp, r.start)
        position = r.start
        while position < r.end:
            if time.monotonic() > deadline:
                raise KafkaError(f"kio-kafka: reading {r.topic}-{r.partition} offsets "
                                 f"[{r.start}, {r.end}) stalled at {position} for "
                                 f"{timeout} s (option readTimeoutSeconds)")
            for rec in c.poll(1.0):
                if rec.offset >= r.end:
                    break
                rows.add(rec)
                if len(rows) >= _ROWS_PER_BATCH:
                    yield rows.batch(pa)
                    rows = _Rows()
            position = max(position, c.position(tp))
    if len(rows):
        yield rows.batch(pa)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kio-kafka")``: each micro-batch reads the
    offset ranges between Spark's checkpointed offsets and the partitions'
    ends (capped by maxOffsetsPerTrigger); Spark checkpoints the offsets,
    nothing is committed to Kafka (as with Spark's own Kafka source)."""

    def __init__(self, options):
        self.options = options
        self.config = _offsets.consumer_config(options)
        self.timeout = float(_offsets.option(options, "readTimeoutSeconds", "120"))
        self.max_rows, self.fail_on_data_loss = _offsets.stream_options(options)
        self._target = None                    # end offsets of a Trigger.AvailableNow run
        self._consumer = None                  # for ListOffsets, on the driver only

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
        end = _offsets.stream_latest(_offsets.offsets_from_json(start), self._partitions_now(),
                                     c.beginning_offsets, c.end_offsets, max_rows, self._target)
        return _offsets.offsets_to_json(end)

    def prepareForTriggerAvailableNow(self):
        tps = self._partitions_now()
        self._target = self._offsets_client().end_offsets(tps) if tps else {}

    def partitions(self, start, end):
        ranges = _offsets.stream_ranges(_offsets.offsets_from_json(start), _offsets.offsets_from_json(end),
                                        self._offsets_client().beginning_offsets, self.fail_on_data_loss)
        return [_RangePartition(r) for r in ranges]

    def read(self, partition):
        return read_range(self.config, partition.range, self.timeout)

    def commit(self, end):
        pass                                   # Spark's checkpoint holds the offsets

    def stop(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _list_topics(config) -> dict:
    """{topic: partition count} of the cluster."""
    from kio.blocking import BlockingClient
    with BlockingClient(config["bootstrap.servers"]) as client:
        md = client.metadata(None)
    return {t["name"]: len(t["partitions"]) for t in md["topics"] if not t.get("error_code")}


class _Rows:
    """Records gathered column by column into one Arrow batch."""

    def __init__(self):
        self.cols = ([], [], [], [], [], [], [], [])

    def __len__(self):
        return len(self.cols[0])

    def add(self, rec):
        c = self.cols
        c[0].append(rec.key)
        c[1].append(rec.value)
        c[2].append(rec.topic)
        c[3].append(rec.partition)
        c[4].append(rec.offset)
        c[5].append(rec.timestamp)
        c[6].append(rec.timestamp_type)
        c[7].append([{"key": k, "value": v} for k, v in rec.headers] if rec.headers else [])

    def batch(self, pa):
        k, v, t, p, o, ts, tt, h = self.cols
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        return pa.RecordBatch.from_arrays([
            pa.array(k, pa.binary()), pa.array(v, pa.binary()), pa.array(t, pa.string()),
            pa.array(p, pa.int32()), pa.array(o, pa.int64()),
            pa.array(ts, pa.int64()).cast(pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC")),
            pa.array(tt, pa.int32()), pa.array(h, pa.list_(header)),
        ], names=[f.name for f in KAFKA_SCHEMA.fields])


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
