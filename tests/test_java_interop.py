"""Interop with the Java client, on the Apache Kafka broker.

* records written by Kafka's own ``ProducerPerformance`` tool are read back by
  kio exactly (count, sizes, offsets, a compression codec kio must decode);
* a consumer group of kio, confluent-kafka and the Java ``ConsoleConsumer``
  shares a topic's partitions: each member reads the partitions it was given
  and together they read every record once the group is formed.
* the same with the KIP-848 consumer protocol: a kio member and the Java
  ``ConsoleConsumer``, both with ``group.protocol=consumer``.

The Java tools come from Maven Central (kio.testing.kafka_broker.tools_classpath).
"""
import subprocess
import threading
import time
import uuid

import confluent_kafka
import pytest

from kio import Consumer, Producer, TopicPartition as TP
from kio.testing.kafka_broker import java_binary, tools_classpath

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def java_tool(main_class, *args, **popen):
    return [java_binary(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", tools_classpath(),
            main_class, *args]


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_records_from_javas_producer_performance_are_read_back_exactly(bootstrap, make_topic,
                                                                       compression):
    topic = make_topic(2)
    n, size = 20000, 100
    run = subprocess.run(java_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
        "--record-size", str(size), "--throughput", "-1", "--producer-props",
        f"bootstrap.servers={bootstrap}", "acks=all", f"compression.type={compression}",
        "linger.ms=5"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = run.stdout.decode("utf-8", "replace")
    assert run.returncode == 0, out[-3000:]
    assert f"{n} records sent" in out, out[-3000:]

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP(topic, 0), TP(topic, 1)])
        got, end = [], time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            got += c.poll(0.5)
        ends = c.end_offsets([TP(topic, 0), TP(topic, 1)])
    assert len(got) == n and sum(ends.values()) == n
    assert all(len(r.value) == size and r.key is None for r in got)
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(ends[TP(topic, p)]))


def test_group_of_kio_confluent_kafka_and_the_java_console_consumer(bootstrap, make_topic):
    topic = make_topic(6)
    group = "mixed-java-" + uuid.uuid4().hex[:8]
    owned = {"kio": set(), "confluent": set()}
    read = {"kio": set(), "confluent": set(), "java": set()}     # (partition, value) pairs
    done = threading.Event()
    errors = []

    java = subprocess.Popen(java_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
        "--topic", topic, "--group", group,
        "--consumer-property", "partition.assignment.strategy="
                               "org.apache.kafka.clients.consumer.RangeAssignor",
        "--consumer-property", "session.timeout.ms=6000",
        "--consumer-property", "heartbeat.interval.ms=500",
        "--consumer-property", "auto.offset.reset=earliest",
        "--formatter-property", "print.partition=true"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def java_reader():
        for line in java.stdout:
            line = line.decode("utf-8", "replace").strip()
            if line.startswith("Partition:"):
                part, value = line[len("Partition:"):].split("\t", 1)
                read["java"].add((int(part), value))

    def ours():
        try:
            with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                          partition_assignment_strategy="range", session_timeout_ms=6000,
                          heartbeat_interval_ms=500) as c:
                c.subscribe([topic])
                while not done.is_set():
                    for r in c.poll(0.2):
                        read["kio"].add((r.partition, r.value.decode()))
                    owned["kio"] = {tp.partition for tp in c.assignment()}
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def theirs():
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                      "heartbeat.interval.ms": 500,
                                      "partition.assignment.strategy": "range"})
        try:
            c.subscribe([topic], on_assign=lambda _, parts: owned.__setitem__(
                "confluent", {p.partition for p in parts}))
            while not done.is_set():
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        read["confluent"].add((m.partition(), m.value().decode()))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (java_reader, ours, theirs)]
    for t in threads:
        t.start()
    try:
        # Range over 6 partitions and 3 members: 2 each once all three are in.
        end = time.monotonic() + 60
        while time.monotonic() < end and not errors and not (
                len(owned["kio"]) == 2 and len(owned["confluent"]) == 2
                and not owned["kio"] & owned["confluent"]):
            time.sleep(0.1)
        assert len(owned["kio"]) == 2 and len(owned["confluent"]) == 2, (owned, errors)
        java_parts = set(range(6)) - owned["kio"] - owned["confluent"]
        total = 600
        with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
            for i in range(total):
                p.send(topic, b"v%d" % i, partition=i % 6)
            assert p.flush(30) == 0
        want = {(i % 6, "v%d" % i) for i in range(total)}
        end = time.monotonic() + 45
        while time.monotonic() < end and read["kio"] | read["confluent"] | read["java"] != want:
            time.sleep(0.2)
        # the assignment while the wave was read (closing members rebalance the rest)
        during = {k: set(v) for k, v in owned.items()}
    finally:
        done.set()
        for t in threads[1:]:
            t.join(30)
        java.terminate()
        try:
            java.wait(20)
        except subprocess.TimeoutExpired:
            java.kill()
            java.wait(10)
        threads[0].join(10)
    assert not errors, errors
    assert read["kio"] | read["confluent"] | read["java"] == want
    # each member read exactly the partitions it owned
    assert {p for p, _ in read["kio"]} == during["kio"]
    assert {p for p, _ in read["confluent"]} == during["confluent"]
    assert {p for p, _ in read["java"]} == java_parts


def test_kio_and_the_java_console_consumer_in_one_consumer_protocol_group(bootstrap, make_topic):
    """group.protocol=consumer (KIP-848) on both sides: the broker splits the
    partitions between the kio member and the Java one, each reads its own."""
    from kio.admin import Admin
    topic = make_topic(4)
    group = "kip848-java-" + uuid.uuid4().hex[:8]
    java = subprocess.Popen(java_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
        "--topic", topic, "--group", group,
        "--consumer-property", "group.protocol=consumer",
        "--consumer-property", "auto.offset.reset=earliest",
        "--formatter-property", "print.partition=true"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    read = {"kio": set(), "java": set()}

    def java_reader():
        for line in java.stdout:
            line = line.decode("utf-8", "replace").strip()
            if line.startswith("Partition:"):
                part, value = line[len("Partition:"):].split("\t", 1)
                read["java"].add((int(part), value))

    reader = threading.Thread(target=java_reader, daemon=True)
    reader.start()
    try:
        with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      group_protocol="consumer") as c, Admin(bootstrap_servers=bootstrap) as admin:
            c.subscribe([topic])
            end = time.monotonic() + 60
            members = 0
            while time.monotonic() < end:
                c.poll(0.2)
                members = len(admin.describe_consumer_groups([group])[group].members)
                if members == 2 and len(c.assignment()) == 2:
                    break
            assert members == 2 and len(c.assignment()) == 2, (members, c.assignment())
            mine = {tp.partition for tp in c.assignment()}
            total = 400
            with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
                for i in range(total):
                    p.send(topic, b"v%d" % i, partition=i % 4)
                assert p.flush(30) == 0
            want = {(i % 4, "v%d" % i) for i in range(total)}
            end = time.monotonic() + 45
            while time.monotonic() < end and read["kio"] | read["java"] != want:
                for r in c.poll(0.2):
                    read["kio"].add((r.partition, r.value.decode()))
            assert {tp.partition for tp in c.assignment()} == mine          # no rebalance meanwhile
    finally:
        java.terminate()
        try:
            java.wait(20)
        except subprocess.TimeoutExpired:
            java.kill()
            java.wait(10)
        reader.join(10)
    assert read["kio"] | read["java"] == want
    assert {p for p, _ in read["kio"]} == mine
    assert {p for p, _ in read["java"]} == set(range(4)) - mine
