"""kio.spark from a Spark Connect session (``SparkSession.builder.remote("local[2]")``)
against the real broker: the mapInArrow sink, the kio-kafka data source's
batch read, stream read and write, each checked row for row against what a
kio Consumer reads from the broker.

A local Connect session starts pyspark's Connect server in the JVM of the
Python process that asks for it, and a process has one JVM gateway: so each
job runs in its own child process (tests/spark_connect_job.py), bounded by
a timeout, and hands its rows back as JSON. The child asserts nothing; it
reports which session class it ran, and the tests require Connect's. The
connect extra (grpcio...) is part of the test install: without it the
child fails, and so do these tests.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kio import Consumer, TopicPartition as TP

# Apache Kafka only: the reads end at ListOffsets LATEST, which Tansu answers
# below the high watermark when batches hold several records (a Tansu
# deviation; tests/test_spark.py works around it with one-record batches).
# What is tested here is Connect, not the broker.
pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "spark_connect_job.py")
TIMEOUT = 180              # a child: its JVM and Connect server start, the job, the stop
KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def run_job(job, args, tmp_path):
    """Run spark_connect_job.py ``job`` in a child process (its own session,
    so its JVM and Python workers go when it is killed) and return its JSON."""
    args_path, out_path, log_path = tmp_path / "args.json", tmp_path / "out.json", tmp_path / "child.log"
    args_path.write_text(json.dumps(args))
    with open(log_path, "wb") as log:
        child = subprocess.Popen([sys.executable, JOB, job, str(args_path), str(out_path)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            code = child.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = f"killed after {TIMEOUT} s"
    if code != 0 or not out_path.exists():
        tail = log_path.read_bytes()[-6000:].decode("utf-8", "replace")
        pytest.fail(f"the Spark Connect job {job!r} ended with {code}:\n{tail}")
    out = json.loads(out_path.read_text())
    # the job must have run on Spark Connect, not on a classic session
    assert out["session"] == "pyspark.sql.connect.session", out["session"]
    return out


def by_position(rows):
    """Rows in (partition, offset) order."""
    return sorted(rows, key=lambda row: (row[3], row[4]))


def broker_rows(bootstrap, topic, partitions, expected, timeout=30):
    """Every record of ``topic`` read by a kio Consumer, in the shape of the
    job's rows (Spark's Kafka schema; hex bytes, epoch microseconds)."""
    out = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TP(topic, p) for p in range(partitions)])
        end = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < end:
            for r in c.poll(0.5):
                headers = [[k, v.hex()] for k, v in r.headers] or None   # Spark: null, not []
                out.append([None if r.key is None else r.key.hex(), r.value.hex(), topic, r.partition,
                            r.offset, r.timestamp * 1000, r.timestamp_type, headers])
    assert len(out) == expected, f"{len(out)} of {expected} records in {topic}"
    return by_position(out)


def test_write_then_batch_and_stream_reads_through_spark_connect(bootstrap, make_topic, tmp_path):
    topic, n = make_topic(3), 3000
    out = run_job("roundtrip", {"bootstrap": bootstrap, "topic": topic, "rows": n}, tmp_path)

    report = out["report"]
    assert report["rows"] == n and report["errors"] == []
    assert report["bytes"] == sum(len(b"v%d" % i) for i in range(n))
    expected = broker_rows(bootstrap, topic, 3, n)
    assert sorted((bytes.fromhex(r[0]), bytes.fromhex(r[1]), tuple(map(tuple, r[7]))) for r in expected) == \
        sorted((b"%d" % i, b"v%d" % i, (("seq", (b"%d" % i).hex()),)) for i in range(n))
    for t, p, first, last in report["offsets"]:   # the report's offsets are the log's
        offs = [r[4] for r in expected if r[3] == p]
        assert t == topic and (first, last) == (min(offs), max(offs))

    assert out["columns"] == KAFKA_COLUMNS
    assert by_position(out["batch"]) == expected

    assert out["stream_finished"] is True and out["stream_error"] is None
    assert by_position(out["stream"]) == expected
    batches = out["micro_batches"]              # maxOffsetsPerTrigger n/4 held under Connect too
    assert sum(batches) == n and len(batches) >= 4 and max(batches) <= n // 4 + 3, batches


def test_data_source_write_and_per_row_results_through_spark_connect(bootstrap, make_topic, tmp_path):
    topic, n = make_topic(2), 1000
    out = run_job("source_write", {"bootstrap": bootstrap, "topic": topic, "rows": n}, tmp_path)

    # a refused write: kio's message reaches the Connect client
    assert out["refused"] is not None and out["refused"].startswith("pyspark.errors.exceptions.connect.")
    assert "needs option kafka.bootstrap.servers" in out["refused"]

    # errors="column": key, value, partition + kafka_partition, kafka_offset, error
    column = out["column"]
    assert [r[0] for r in column] == [(b"c%d" % i).hex() for i in range(4)]
    assert column[2][3:5] == [None, None] and "not in the range [0, 1]" in column[2][5]
    written = {(r[3], r[4]): r[1] for r in column if r[5] is None}
    assert sorted(p for p, _ in written) == [0, 1, 1]

    got = broker_rows(bootstrap, topic, 2, n + 3)
    ds_rows = [r for r in got if bytes.fromhex(r[1]).startswith(b"w")]
    assert sorted((bytes.fromhex(r[0]), bytes.fromhex(r[1]), r[3], tuple(map(tuple, r[7]))) for r in ds_rows) == \
        sorted((b"%d" % i, b"w%d" % i, i % 2, (("seq", (b"%d" % i).hex()),)) for i in range(n))
    assert {(r[3], r[4]): r[1] for r in got if bytes.fromhex(r[1]).startswith(b"x")} == written
