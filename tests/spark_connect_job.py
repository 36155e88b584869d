"""The child process of tests/test_spark_connect.py: one Spark Connect
session (``SparkSession.builder.remote("local[2]")``, pyspark's local
Connect server in this process's JVM), one job, its results as JSON.

    python spark_connect_job.py JOB ARGS.json OUT.json

Rows come back as lists: binary values in hex, ``timestamp`` as epoch
microseconds (no time zone in between), headers as [key, hex value] pairs.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import spark_builder  # noqa: E402


def plain(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, list):               # headers: [Row(key, value)]
        return [[h.key, plain(h.value)] for h in value]
    return value


def rows(df):
    cols = [f"unix_micros({c}) as {c}" if c == "timestamp" else c for c in df.columns]
    return [[plain(v) for v in r] for r in df.selectExpr(*cols).collect()]


def kafka_reader(reader, args):
    return (reader.format("kio-kafka").option("kafka.bootstrap.servers", args["bootstrap"])
            .option("subscribe", args["topic"]).option("startingOffsets", "earliest"))


def roundtrip(spark, args):
    """kio.spark.write, then the same topic read back by format("kio-kafka"):
    a batch read, and a stream under Trigger.AvailableNow into the memory sink."""
    import kio.spark
    df = spark.range(args["rows"]).selectExpr(
        "cast(id as string) as key", "cast(concat('v', cast(id as string)) as binary) as value",
        "array(named_struct('key', 'seq', 'value', cast(cast(id as string) as binary))) as headers")
    report = kio.spark.write(df, topic=args["topic"], bootstrap_servers=args["bootstrap"], linger_ms=5)
    kio.spark.register(spark)
    batch = kafka_reader(spark.read, args).option("includeHeaders", "true").load()
    stream = (kafka_reader(spark.readStream, args).option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", str(args["rows"] // 4)).load())
    query = stream.writeStream.format("memory").queryName("kio_stream").trigger(availableNow=True).start()
    finished = query.awaitTermination(120)
    error = query.exception()
    return {"report": {"rows": report.rows, "bytes": report.bytes, "errors": report.errors,
                       "offsets": [[t, p, first, last] for (t, p), (first, last) in report.offsets.items()]},
            "columns": batch.columns, "batch": rows(batch), "stream_finished": finished,
            "stream_error": None if error is None else str(error),
            "stream": rows(spark.table("kio_stream")),
            "micro_batches": [p.numInputRows for p in query.recentProgress if p.numInputRows]}


def source_write(spark, args):
    """df.write.format("kio-kafka"); a write refused on the driver; and
    kio.spark.write(errors="column") with a row the broker cannot take."""
    import kio.spark
    kio.spark.register(spark)
    df = spark.range(args["rows"]).selectExpr(
        "cast(id as string) as key", "cast(concat('w', cast(id as string)) as binary) as value",
        "cast(id % 2 as int) as partition",
        "array(named_struct('key', 'seq', 'value', cast(cast(id as string) as binary))) as headers")
    (df.write.format("kio-kafka").option("kafka.bootstrap.servers", args["bootstrap"])
     .option("topic", args["topic"]).mode("append").save())
    try:
        df.write.format("kio-kafka").option("topic", args["topic"]).mode("append").save()
        refused = None
    except Exception as e:  # noqa: BLE001 - the test reads what the client got
        refused = f"{type(e).__module__}.{type(e).__name__}: {e}"
    bad = spark.createDataFrame([(b"c%d" % i, b"x%d" % i, 99 if i == 2 else i % 2) for i in range(4)],
                                "key binary, value binary, partition int")
    column = kio.spark.write(bad, topic=args["topic"], bootstrap_servers=args["bootstrap"], errors="column")
    # one action: the rows are sent on each (an orderBy would sample them first)
    return {"refused": refused, "column": sorted(rows(column))}


JOBS = {"roundtrip": roundtrip, "source_write": source_write}


def main():
    job, args_path, out_path = sys.argv[1:]
    with open(args_path) as f:
        args = json.load(f)
    spark = spark_builder("local[2]", "kio-connect-" + job, connect=True).getOrCreate()
    try:
        out = {"session": type(spark).__module__}
        out.update(JOBS[job](spark, args))
    finally:
        spark.stop()
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
