"""PySpark and Kafka: kio.spark against Spark's own Kafka connector and the
pandas-UDF pattern, writing and reading, in one run on one broker.

Writers: ``kio.spark.write`` (mapInArrow, send_many), Spark's native sink
``df.write.format("kafka")`` (spark-sql-kafka-0-10, fetched by
kio.spark.connector), and a pandas UDF calling confluent-kafka's
``produce()`` per row. Readers: the ``kio-kafka`` data source and Spark's
native ``spark.read.format("kafka")``, each reading back a topic written in
the same round into Spark's ``noop`` sink (every column materialized, nothing
stored). A floor job only iterates the Arrow batches in mapInArrow: what
Spark alone costs, which no sink can beat.

One local[2] Spark session, one local broker (Apache Kafka by default),
N rows of a 100-byte value, keyed (a distinct 16-byte key) and keyless,
each job to its own 3-partition topic, each client with its defaults
(kio.spark: batch.size 1 MiB, linger.ms 5, idempotent acks=all;
confluent-kafka: batch.size 1 MB, linger.ms 5, acks=all; Spark's sink: the
Java client's defaults of the kafka-clients release the connector ships).
Each figure is rows/s of the whole Spark job (wall time from submitting it
to its end; for writers every record acknowledged), best of --repeat
alternating rounds; beside it the CPU time all cores were busy during the
job (``/proc/stat``) and the broker's CPU time. The load average before the
run is printed too: the machine is shared, the figures are only as quiet as
it was.

    python bench/bench_spark.py --rows 1000000 --repeat 3
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _bench import broker_label, create_topic, local_broker  # noqa: E402

KIO = "kio.spark.write (mapInArrow, send_many)"
NATIVE = 'Spark native df.write.format("kafka")'
CONFLUENT = "pandas UDF + confluent-kafka produce()"
FLOOR = "floor: mapInArrow iterating, no sink"
KIO_READ = 'kio read: format("kio-kafka")'
NATIVE_READ = 'Spark native read: format("kafka")'
CORES = os.cpu_count() or 1

_CONFLUENT: dict = {}


def confluent_udf_writer(bootstrap, topic, keyed):
    """The usual pattern: a pandas UDF producing row by row, flushing at the end of each batch."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    conf = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000}

    def produce_all(keys, values):
        import confluent_kafka
        p = _CONFLUENT.get(topic)
        if p is None:
            p = _CONFLUENT[topic] = confluent_kafka.Producer(conf)
        for k, v in zip(keys, values):
            while True:
                try:
                    p.produce(topic, v, k)
                    break
                except BufferError:
                    p.poll(0.01)
        left = p.flush(60)
        if left:
            raise RuntimeError(f"{left} records not delivered")
        return pd.Series([len(values)] * len(values))

    if keyed:
        @pandas_udf("long")
        def produce(keys: pd.Series, values: pd.Series) -> pd.Series:
            return produce_all(keys, values)
    else:
        @pandas_udf("long")
        def produce(values: pd.Series) -> pd.Series:
            return produce_all([None] * len(values), values)
    return produce


def process_cpu(pid) -> float:
    """user+system CPU seconds of a running process (the broker), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds all cores have spent busy (not idle/iowait) since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def count_batches(batches):
    """The Spark-only floor: a mapInArrow task that iterates its Arrow batches and sends nothing."""
    import pyarrow as pa
    rows = 0
    for rb in batches:
        rows += rb.num_rows
    yield pa.RecordBatch.from_pydict({"n": [rows]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--only", action="append", help="run only jobs whose name contains this")
    args = ap.parse_args()
    load_before = os.getloadavg()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(HERE), os.environ.get("PYTHONPATH"))
                                               if p)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import kio.spark
    try:
        from kio.spark.connector import connector_version, spark_jars_option
        version = connector_version()
        jars = spark_jars_option(version)
    except Exception as e:  # noqa: BLE001 - the native rows are skipped, said loudly
        print(f"Spark's Kafka connector is unavailable, its rows are skipped: {e}", file=sys.stderr)
        version, jars = None, ""
    builder = (SparkSession.builder.master("local[2]").appName("kio-bench")
               .config("spark.ui.enabled", "false"))
    if jars:
        builder = builder.config("spark.jars", jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kio.spark.register(spark)
    spark_version = spark.version
    n = args.rows
    frames = {
        True: spark.range(n).selectExpr(
            "cast(lpad(cast(id as string), 16, '0') as binary) as key",
            "cast(concat(lpad(cast(id as string), 16, '0'), repeat('x', 84)) as binary) as value").cache(),
        False: spark.range(n).selectExpr(
            "cast(concat(lpad(cast(id as string), 16, '0'), repeat('x', 84)) as binary) as value").cache(),
    }
    for df in frames.values():
        df.count()
    results = {}                       # (name, keyed) -> (rows/s, secs, busy, broker_cpu)
    with local_broker(args.broker) as broker:
        bs = broker.bootstrap_servers
        written = {}                   # keyed -> a topic holding n rows, for the readers

        def write_kio(keyed):
            topic = create_topic(bs, 3)
            report = kio.spark.write(frames[keyed], topic=topic, bootstrap_servers=bs)
            assert report.rows == n, report
            written[keyed] = topic

        def write_native(keyed):
            topic = create_topic(bs, 3)
            frames[keyed].write.format("kafka").option("kafka.bootstrap.servers", bs).option("topic", topic).save()

        def write_confluent(keyed):
            topic = create_topic(bs, 3)
            udf = confluent_udf_writer(bs, topic, keyed)
            cols = ("key", "value") if keyed else ("value",)
            done = frames[keyed].select(udf(*cols).alias("n")).agg(F.count("n")).collect()[0][0]
            assert done == n, done

        def floor(keyed):
            assert sum(r.n for r in frames[keyed].mapInArrow(count_batches, "n long").collect()) == n

        def reader(fmt):
            def read(keyed):
                df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bs)
                      .option("subscribe", written[keyed]).load())
                df.write.format("noop").mode("overwrite").save()
            return read

        jobs = [(KIO, write_kio), (CONFLUENT, write_confluent), (FLOOR, floor), (KIO_READ, reader("kio-kafka"))]
        if version is not None:
            jobs[1:1] = [(NATIVE, write_native)]
            jobs.append((NATIVE_READ, reader("kafka")))
        if args.only:
            jobs = [j for j in jobs if j[0] == KIO or any(o in j[0] for o in args.only)]
        # Each job runs --repeat times, alternating (the first rounds also
        # start the Python workers and import the clients); the best counts.
        for _ in range(args.repeat):
            for keyed in (True, False):
                for name, run in jobs:
                    b0, m0, t0 = process_cpu(broker.process.pid), machine_busy(), time.perf_counter()
                    run(keyed)
                    secs = time.perf_counter() - t0
                    broker_cpu = process_cpu(broker.process.pid) - b0
                    busy = machine_busy() - m0
                    label = "keyed" if keyed else "keyless"
                    print(f"{name:42s} {label:8s} {n / secs:12,.0f} rows/s ({secs:.2f} s; CPU busy {busy:.2f} of "
                          f"{secs * CORES:.2f} s, broker {broker_cpu:.2f} s)", flush=True)
                    if n / secs > results.get((name, keyed), (0,))[0]:
                        results[(name, keyed)] = (n / secs, secs, busy, broker_cpu)
        label = broker_label(broker)
    spark.stop()
    print()
    print(f"{n:,} rows (100 B value; keyed: + 16 B key) to/from 3 partitions, local[2], {label}, "
          f"Spark {spark_version} with spark-sql-kafka {version}, best of "
          f"{args.repeat}; {CORES} cores; Python {sys.version.split()[0]}; load average before the run "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print()
    print("| job | keys | rows/s | vs pandas UDF | vs Spark native | wall | CPU busy | broker CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, keyed), (rate, secs, busy, broker_cpu) in results.items():
        udf = results.get((CONFLUENT, keyed))
        native = results.get((NATIVE_READ if "read" in name else NATIVE, keyed))
        vs_udf = f"{rate / udf[0]:.2f}x" if udf and "read" not in name else "-"
        vs_native = f"{rate / native[0]:.2f}x" if native and name not in (FLOOR,) else "-"
        print(f"| {name} | {'keyed' if keyed else 'keyless'} | {rate:,.0f} | {vs_udf} | {vs_native} | {secs:.2f} s "
              f"| {busy:.2f} s | {broker_cpu:.2f} s |")
    print()
    # What a writer adds to the machine's CPU beyond Spark's floor and the
    # broker: the writer's own cost (its code, client, the JVM's share).
    for keyed in (True, False):
        fl = results.get((FLOOR, keyed))
        if fl is None:
            continue
        for name in (KIO, NATIVE, CONFLUENT):
            r = results.get((name, keyed))
            if r is not None:
                own = r[2] - fl[2] - r[3]
                print(f"{name:42s} {'keyed' if keyed else 'keyless':8s} own CPU {own:5.2f} s = "
                      f"{own / n * 1e6:.2f} us/row")
        # A sink that cost nothing would still need Spark's floor plus the
        # broker's work on the same cores: the best ratio this machine allows.
        udf, kio_w = results.get((CONFLUENT, keyed)), results.get((KIO, keyed))
        if udf and kio_w:
            ceiling = max(fl[1], (fl[2] + kio_w[3]) / CORES)
            print(f"{'keyed' if keyed else 'keyless'}: a sink costing nothing >= {ceiling:.2f} s (Spark floor "
                  f"{fl[2]:.2f} + broker {kio_w[3]:.2f} CPU-s on {CORES} cores): at most "
                  f"{udf[1] / ceiling:.2f}x the pandas UDF")


if __name__ == "__main__":
    main()
