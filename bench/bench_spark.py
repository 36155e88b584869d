"""Writing a DataFrame to Kafka from PySpark: kio.spark.write vs the common
alternative, a pandas UDF calling confluent-kafka's produce() per row.

One local[2] Spark session and one local Tansu broker for both; N rows of a
16-byte key and a 100-byte value, each writer to its own 3-partition topic,
each client with its defaults (kio.spark: batch.size 1 MiB, linger.ms 5,
idempotent acks=all; confluent-kafka: batch.size 1 MB, linger.ms 5, acks=all).
The figure is rows/s of the whole Spark job (wall time from submitting it to
its end, every record acknowledged), best of --repeat alternating runs; the
broker's CPU time and the CPU time all cores were busy during that run are
shown beside it (the broker shares the cores). A third job, the floor, only
iterates the Arrow batches in mapInArrow: what Spark alone costs. From it and
the broker's CPU the script prints the best ratio any sink could reach on
this machine. The
DataFrame is cached and counted first, so both writers start from the same
materialized rows.

    python bench/bench_spark.py --rows 1000000
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _bench import create_topic  # noqa: E402
from kio.broker import LocalBroker  # noqa: E402


def confluent_udf_writer(bootstrap, topic):
    """The usual pattern: a pandas UDF producing row by row, flushing at the end of each batch."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    conf = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000}

    @pandas_udf("long")
    def produce(keys: pd.Series, values: pd.Series) -> pd.Series:
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
        return pd.Series([len(keys)] * len(keys))
    return produce


_CONFLUENT: dict = {}
KIO = "kio.spark.write (mapInArrow, send_many)"
CONFLUENT = "pandas UDF + confluent-kafka produce()"
FLOOR = "floor: mapInArrow iterating, no sink"
CORES = os.cpu_count() or 1


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
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(HERE), os.environ.get("PYTHONPATH"))
                                               if p)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import kio.spark
    spark = (SparkSession.builder.master("local[2]").appName("kio-bench")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    n = args.rows
    df = spark.range(n).selectExpr(
        "cast(lpad(cast(id as string), 16, '0') as binary) as key",
        "cast(concat(lpad(cast(id as string), 16, '0'), repeat('x', 84)) as binary) as value").cache()
    df.count()
    results = {}
    with LocalBroker() as broker:
        bs = broker.bootstrap_servers

        def run_kio():
            topic = create_topic(bs, 3)
            report = kio.spark.write(df, topic=topic, bootstrap_servers=bs)
            assert report.rows == n, report

        def run_confluent():
            topic = create_topic(bs, 3)
            udf = confluent_udf_writer(bs, topic)
            done = df.select(udf("key", "value").alias("n")).agg(F.count("n")).collect()[0][0]
            assert done == n, done

        def run_floor():
            assert sum(r.n for r in df.mapInArrow(count_batches, "n long").collect()) == n

        # Each job runs --repeat times, alternating (the first runs also start
        # the Python workers and import the clients); the best run counts. The
        # floor job shows what Spark alone costs: no sink can beat it.
        for _ in range(args.repeat):
            for name, run in ((KIO, run_kio), (CONFLUENT, run_confluent), (FLOOR, run_floor)):
                b0, m0, t0 = process_cpu(broker.process.pid), machine_busy(), time.perf_counter()
                run()
                secs = time.perf_counter() - t0
                broker_cpu = process_cpu(broker.process.pid) - b0
                busy = machine_busy() - m0
                print(f"{name:44s} {n / secs:12,.0f} rows/s ({secs:.2f} s; CPU busy {busy:.2f} of "
                      f"{secs * CORES:.2f} s, broker {broker_cpu:.2f} s)", flush=True)
                if n / secs > results.get(name, (0,))[0]:
                    results[name] = (n / secs, secs, busy, broker_cpu)
    spark.stop()
    base = results[CONFLUENT][0]
    print()
    print(f"{n:,} rows (16 B key, 100 B value) to 3 partitions, local[2], one broker, best of "
          f"{args.repeat}; {CORES} cores; Python {sys.version.split()[0]}")
    for name, (rate, secs, busy, broker_cpu) in results.items():
        print(f"{name:44s} {rate:12,.0f} rows/s {rate / base:6.2f}x  ({secs:.2f} s; CPU busy {busy:.2f} s, "
              f"broker {broker_cpu:.2f} s)")
    # What each writer adds to the machine's CPU beyond Spark's floor and the
    # broker: the writer's own cost (its Python code, client and the JVM's
    # share of running a UDF).
    for name in (KIO, CONFLUENT):
        own = results[name][2] - results[FLOOR][2] - results[name][3]
        print(f"{name:44s} own CPU {own:5.2f} s = {own / n * 1e6:.2f} us/row")
    # A sink that cost nothing would still need Spark's floor plus the broker's
    # work on the same cores: the best ratio this machine allows.
    floor_busy, broker_kio = results[FLOOR][2], results[KIO][3]
    ceiling = max(results[FLOOR][1], (floor_busy + broker_kio) / CORES)
    print(f"a sink costing nothing: >= {ceiling:.2f} s (Spark floor {floor_busy:.2f} + broker {broker_kio:.2f} "
          f"CPU-s on {CORES} cores), at most {results[CONFLUENT][1] / ceiling:.2f}x")


if __name__ == "__main__":
    main()
