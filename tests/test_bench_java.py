"""bench/java/KioBench.java, the Java client's rows of bench_partitions.py and
bench_latency.py: each mode once on a tiny workload against Apache Kafka,
through the Python side the benches use (bench/_java.py compiles it with the
machine's javac), and its JSON checked."""
import importlib
import os
import sys
import threading

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

N = 2000


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, BENCH)
    try:
        yield {name: importlib.import_module(name) for name in ("_java", "bench_partitions", "bench_latency")}
    finally:
        sys.path.remove(BENCH)


def _sane_rate(r):
    assert r["records"] >= N and r["rate"] > 0 and r["us"] > 0 and r["secs"] > 0
    assert 20 < r["rss_mb"] < 2048            # the JVM's own VmHWM, not a parent's


def test_the_java_rows_of_bench_partitions_produce_and_read_back_every_record(bench, bootstrap, make_topic):
    bp = bench["bench_partitions"]
    topic = make_topic(3)
    spec = {"bootstrap": bootstrap, "topic": topic, "records": N, "partitions": 3}
    rows = {(client, role): fn for client, _, role, fn in bp.ROWS if client == "java"}
    produced = rows["java", "produce"](spec)
    assert produced["records"] == N and produced["errors"] == 0
    _sane_rate(produced)
    # the topic holds exactly N: each consumer reads N, every partition written (random keys)
    for role in ("assigned", "group"):
        got = rows["java", role](spec)
        assert got["records"] == N, got
        _sane_rate(got)
        assert got["first_secs"] <= got["secs"]
    from kio import Consumer, TopicPartition
    with Consumer(bootstrap_servers=bootstrap) as c:
        ends = c.end_offsets([TopicPartition(topic, p) for p in range(3)])
    assert sum(ends.values()) == N and all(ends.values())
    # the warm-JVM row: the workload twice in one JVM, the last reported
    warm = {(client, role): fn for client, _, role, fn in bp.ROWS if client == "java, warm JVM"}
    again = warm["java, warm JVM", "produce"]({**spec, "topic": make_topic(3)})
    assert again["records"] == N and again["errors"] == 0 and len(again["earlier_us"]) == 1
    _sane_rate(again)


def test_the_java_rows_of_bench_latency_follow_its_protocol(bench, bootstrap, make_topic, capsys, monkeypatch):
    bl = bench["bench_latency"]
    rate, total = 1000, 1000
    topic = make_topic(1)
    # the consumer's side as bench_latency's child runs it: it says ready on
    # stdout, waits for a line on stdin, and is then given the records
    go_r, go_w = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(go_r))
    result = {}
    consumer = threading.Thread(target=lambda: result.update(
        out=bl.consume_java(bootstrap, topic, total, bl.time.monotonic() + 60)))
    consumer.start()
    try:
        deadline = bl.time.monotonic() + 60
        while "ready" not in capsys.readouterr().out.split():
            assert consumer.is_alive() and bl.time.monotonic() < deadline
            bl.time.sleep(0.05)
        before = bl.stamp()
        produced_cpu = bl.produce_java(bootstrap, topic, rate, total, False)
    finally:
        os.write(go_w, b"go\n")
        os.close(go_w)
        consumer.join(90)
    lat, to_broker, used = result["out"]
    assert len(lat) == len(to_broker) == total
    assert all(0 <= x < 30_000_000 for x in lat), (min(lat), max(lat))   # µs, each arrival after its send
    assert all(x <= y for x, y in zip(to_broker, lat))     # its timestamp before it arrived
    # the JVM's CPU counter has a 10 ms granularity: a second of work is above it
    assert produced_cpu > 0 and used > 0, (produced_cpu, used)
    assert bl.stamp() - before > 0.8e6                     # paced: 1,000 records at 1,000/s take ~1 s
    assert bl.pace_alone("java", rate, total) > 0
