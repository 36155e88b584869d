"""A topic made with ``create_topics`` is usable by the next admin call.

CreateTopics answers once the controller has the topic; the broker that
answers the next Metadata request may not know it yet (Tansu lags too), so
"create, then describe" used to fail now and then with
UNKNOWN_TOPIC_OR_PARTITION. The core retries that error, within the call's
deadline, for topics it created itself recently (see kproto/admin.py's module
docstring); a topic it did not create, or deleted since, still fails at once.
"""
import uuid

import pytest

from kio import Admin, TopicPartition
from kproto import error_codes

try:
    from test_admin_core import FakeCluster, Sim
except ImportError:  # pragma: no cover
    from tests.test_admin_core import FakeCluster, Sim


def _created_by(sim, fc, name, partitions=1):
    """``name`` created through the core (the fake controller accepts it and
    its Metadata says UNKNOWN_TOPIC_OR_PARTITION until the test says otherwise)."""
    fc.brokers[1].on("CreateTopics", lambda req: {"topics": [
        {"name": t["name"], "error_code": 0} for t in req.body["topics"]]})
    fc.topics[name] = partitions
    fc.topic_codes[name] = 3
    h = sim.core.create_topics([name], now=sim.now)
    sim.run(h)
    assert h.result() == {name: None}


def _lagging_metadata(fc, name, answers):
    """Metadata says UNKNOWN_TOPIC_OR_PARTITION for ``name`` in its next
    ``answers`` replies (a ``_cluster()``'s DescribeTopicPartitions answers
    count too)."""
    seen = len(fc.metadata_requests) + len(fc.described)

    def caught_up():
        if len(fc.metadata_requests) + len(fc.described) - seen >= answers:
            fc.topic_codes.pop(name, None)

    def lagging(req):
        caught_up()
        return fc._metadata(1, req)

    fc.before_describe = caught_up
    fc.brokers[1].on("Metadata", lagging)


def _cluster():
    """A FakeCluster that also answers DescribeTopicPartitions (what
    describe_topics asks a broker that has it) from its topics and codes."""
    fc = FakeCluster()
    fc.described = []
    fc.before_describe = lambda: None

    def describe(req):
        fc.before_describe()
        fc.described.append(req)
        out = []
        for t in req.body["topics"]:
            n = t["name"]
            code = fc.topic_codes.get(n, 0 if n in fc.topics else 3)
            parts = [] if code else [
                {"partition_index": p, "error_code": 0, "leader_id": fc.leader(n, p), "leader_epoch": 0,
                 "replica_nodes": [fc.leader(n, p)], "isr_nodes": [fc.leader(n, p)], "offline_replicas": []}
                for p in range(fc.topics[n])]
            out.append({"name": n, "error_code": code, "topic_id": uuid.uuid5(uuid.NAMESPACE_DNS, n),
                        "is_internal": False, "partitions": parts})
        return {"topics": out, "next_cursor": None}
    fc.on_all("DescribeTopicPartitions", describe)
    return fc


def test_describe_after_create_waits_for_the_metadata_of_the_new_topic():
    fc = _cluster()
    sim = Sim(fc)
    _created_by(sim, fc, "fresh", partitions=2)
    _lagging_metadata(fc, "fresh", answers=3)
    h = sim.core.describe_topics(["fresh"], now=sim.now)
    sim.run(h)
    assert [p.partition for p in h.result()["fresh"].partitions] == [0, 1]
    assert sim.core.retries >= 3


def test_list_offsets_after_create_waits_too():
    fc = _cluster()
    fc.brokers[1].on("ListOffsets", lambda req: {"topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1, "offset": 0}
            for p in t["partitions"]]} for t in req.body["topics"]]})
    sim = Sim(fc)
    _created_by(sim, fc, "fresh")
    _lagging_metadata(fc, "fresh", answers=2)
    h = sim.core.list_offsets({TopicPartition("fresh", 0): "latest"}, now=sim.now)
    sim.run(h)
    assert h.result()[TopicPartition("fresh", 0)].offset == 0


def test_an_unknown_topic_not_created_here_fails_at_once():
    fc = _cluster()
    sim = Sim(fc)
    h = sim.core.describe_topics(["ghost"], now=sim.now)
    sim.run(h)
    assert isinstance(h.items["ghost"].error, error_codes.UnknownTopicOrPartitionError)
    assert sim.now < 100 and sim.core.retries == 0


def test_a_created_topic_that_stays_unknown_times_out_naming_it():
    fc = _cluster()
    sim = Sim(fc, **{"default.api.timeout.ms": 2000})
    _created_by(sim, fc, "fresh")
    h = sim.core.describe_topics(["fresh"], timeout_ms=1500, now=sim.now)
    sim.run(h)
    err = h.items["fresh"].error
    assert isinstance(err, TimeoutError) and "describe_topics timed out after 1500 ms" in str(err)


def test_unknown_is_final_once_deleted_here_or_long_after_the_creation():
    fc = _cluster()
    sim = Sim(fc, **{"default.api.timeout.ms": 5000})
    _created_by(sim, fc, "gone")
    fc.brokers[1].on("DeleteTopics", lambda req: {"responses": [
        {"name": t["name"], "error_code": 0} for t in req.body["topics"]]})
    sim.run(sim.core.delete_topics(["gone"], now=sim.now))
    _created_by(sim, fc, "old")
    sim.now += 5000                                    # default.api.timeout.ms after the creation
    start, retries = sim.now, sim.core.retries
    h = sim.core.describe_topics(["gone", "old"], now=sim.now)
    sim.run(h)
    for name in ("gone", "old"):
        assert isinstance(h.items[name].error, error_codes.UnknownTopicOrPartitionError), name
    assert sim.now - start < 100 and sim.core.retries == retries


def test_create_then_describe_thirty_times_on_the_broker(bootstrap):
    """The README's Admin example's first two lines, 30 times in a row."""
    prefix = f"fresh-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        for i in range(30):
            name = f"{prefix}-{i}"
            admin.create_topics([name], num_partitions=2, timeout=30)
            described = admin.describe_topics([name], timeout=30)[name]
            assert [p.partition for p in described.partitions] == [0, 1], name
        admin.delete_topics([f"{prefix}-{i}" for i in range(30)], timeout=30)
