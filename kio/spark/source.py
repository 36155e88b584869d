"""The ``kio-kafka`` Python data source (``pyspark.sql.datasource``, Spark 4).

Batch read: the driver plans one input partition per topic-partition offset
range (see :mod:`kio.spark.offsets`); each task reads its range with a kio
Consumer in manual-assignment mode and yields Arrow batches with the schema
of Spark's Kafka source. Write: Arrow batches go through the same executor
code as ``kio.spark.write`` (:mod:`kio.spark.sink`).

Register it once per session with ``kio.spark.register(spark)``.
"""
from __future__ import annotations

import time

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition
from pyspark.sql.datasource import WriterCommitMessage
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

    def writer(self, schema, overwrite):
        return _Writer(_offsets.normalize(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options):
        self.options = options
        self.config = _offsets.consumer_config(options)
        self.timeout = float(_offsets.option(options, "readTimeoutSeconds", "120"))

    def partitions(self):
        from kio.blocking import BlockingClient
        from kio.consumer import Consumer

        def list_topics():
            with BlockingClient(self.config["bootstrap.servers"]) as client:
                md = client.metadata(None)
            return {t["name"]: len(t["partitions"]) for t in md["topics"] if not t.get("error_code")}

        with Consumer(dict(self.config)) as c:
            ranges = _offsets.plan_ranges(self.options, list_topics, c.beginning_offsets, c.end_offsets)
        return [_RangePartition(r) for r in ranges]

    def read(self, partition):
        import pyarrow as pa

        from kio.consumer import Consumer, TopicPartition
        if not isinstance(partition, _RangePartition):
            return                   # nothing planned: Spark still runs one empty partition
        r = partition.range
        tp = TopicPartition(r.topic, r.partition)
        rows = _Rows()
        deadline = time.monotonic() + self.timeout
        with Consumer(dict(self.config)) as c:
            c.assign([tp])
            c.seek(tp, r.start)
            position = r.start
            while position < r.end:
                if time.monotonic() > deadline:
                    raise KafkaError(f"kio-kafka: reading {r.topic}-{r.partition} offsets "
                                     f"[{r.start}, {r.end}) stalled at {position} for "
                                     f"{self.timeout} s (option readTimeoutSeconds)")
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
