"""kio's group and transaction tools next to Kafka's own (kafka-tools: the
Java kafka-consumer-groups, kafka-groups and kafka-transactions commands) on
the same Apache Kafka 4.4 cluster: the same answers.

Kafka only: the Java tools need the APIs Tansu lacks (OffsetDelete,
ListTransactions, DescribeProducers...).
"""
import subprocess
import time
import uuid

import pytest

from kio import Admin, Consumer
from kio.testing.kafka_broker import java_binary, tools_classpath
from kproto.cluster import TopicPartition
from test_admin_groups_broker import joined, produce
from test_admin_transactions_broker import _hanging_transaction
from test_cli import kio, ok

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)
TP = TopicPartition


def java_tool(main, *args):
    r = subprocess.run([java_binary(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", tools_classpath(),
                        main, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


#: The first column's title in the tools' tables.
HEADERS = {"GROUP", "TransactionalId", "ProducerId", "CoordinatorId", "TRANSACTIONAL-ID", "COORDINATOR"}


def rows(text, width):
    """The table rows of ``width`` cells of a tool's output (titles and
    warnings left out), split on whitespace."""
    out = [line.split() for line in text.splitlines() if line.strip()]
    return [r for r in out if len(r) == width and r[0] not in HEADERS]


def test_reset_offsets_plans_as_kafka_consumer_groups(bootstrap, make_topic):
    topic = make_topic(2)
    group = "reset-" + uuid.uuid4().hex[:8]
    produce(bootstrap, topic, 6, 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TP(topic, 0): 2, TP(topic, 1): 5})
    for scenario in (["--to-earliest"], ["--to-latest"], ["--shift-by", "-3"], ["--shift-by", "4"],
                     ["--to-offset", "100"], ["--by-duration", "P1D"], ["--to-datetime", "2099-01-01T00:00:00.000"]):
        theirs = java_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                           bootstrap, "--reset-offsets", "--group", group, "--topic", topic, *scenario, "--dry-run")
        mine = ok(kio("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", group,
                      "--topic", topic, *scenario))
        assert sorted(rows(mine, 4)) == sorted(rows(theirs, 4)), scenario


def test_group_types_as_kafka_groups_lists_them(bootstrap, make_topic):
    topic = make_topic(1)
    simple, classic, modern = ("gt-" + uuid.uuid4().hex[:8] for _ in range(3))
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(simple, {TP(topic, 0): 0})
    a = joined(bootstrap, classic, topic)
    b = joined(bootstrap, modern, topic, group_protocol="consumer")
    try:
        theirs = {r[0]: r[1].lower() for r in rows(java_tool(
            "org.apache.kafka.tools.GroupsCommand", "--bootstrap-server", bootstrap, "--list"), 3)}
        theirs.update({r[0]: r[1].lower() for r in rows(java_tool(
            "org.apache.kafka.tools.GroupsCommand", "--bootstrap-server", bootstrap, "--list"), 2)})
        mine = {r[0]: r[1] for r in rows(ok(kio("groups", "list", "--bootstrap-server", bootstrap)), 3)}
        for g in (simple, classic, modern):
            assert mine[g] == theirs[g], g
        assert (mine[simple], mine[classic], mine[modern]) == ("classic", "classic", "consumer")
    finally:
        b.close()
        a.close()


def test_transactions_as_kafka_transactions_shows_them(bootstrap, make_topic):
    topic = make_topic(1)
    tid = "tx-" + uuid.uuid4().hex[:8]
    producer = _hanging_transaction(bootstrap, topic, tid)
    try:
        tool = "org.apache.kafka.tools.TransactionsCommand"
        theirs = {r[0]: (r[2], r[3]) for r in rows(java_tool(tool, "--bootstrap-server", bootstrap, "list"), 4)}
        mine = {r[0]: (r[1], r[2]) for r in rows(ok(kio("transactions", "list", "--bootstrap-server", bootstrap)), 3)}
        assert mine[tid] == theirs[tid] and mine[tid][1] == "Ongoing"
        theirs = rows(java_tool(tool, "--bootstrap-server", bootstrap, "describe-producers", "--topic", topic,
                                "--partition", "0"), 6)
        with Admin(bootstrap_servers=bootstrap) as admin:
            states = admin.describe_producers([TP(topic, 0)])[TP(topic, 0)]
        mine = [[str(s.producer_id), str(s.producer_epoch), str(s.last_sequence),
                 str(s.current_transaction_start_offset)] for s in states]
        assert sorted(mine) == sorted([r[0], r[1], r[3], r[5]] for r in theirs)
        # Java's describe: the same coordinator, producer, epoch, state, timeout and partitions
        theirs = java_tool(tool, "--bootstrap-server", bootstrap, "describe", "--transactional-id", tid)
        their_row = next(line.split() for line in theirs.splitlines() if tid in line.split())
        mine = ok(kio("transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", tid))
        my_row = next(line.split("\t") for line in mine.splitlines() if tid in line.split("\t"))
        assert my_row[0] == their_row[0] and my_row[1] == their_row[1]             # coordinator, id
        assert my_row[2:6] == their_row[2:6]                       # producer id, epoch, state, timeout
        assert f"{topic}-0" in their_row
    finally:
        producer.close(timeout=5)
