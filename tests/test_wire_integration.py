"""The sans-IO core against the real broker, through the minimal blocking driver.

ApiVersions, Metadata, CreateTopics, Produce (v2 batches, every codec) and
Fetch (by topic name and by topic id) read back exactly what was written; and
interop both ways with confluent-kafka (librdkafka).
"""
import time
import uuid

import confluent_kafka as ck
import pytest

from conftest import wait_for_leaders
from kio.blocking import BlockingClient
from kproto import messages
from kproto.error_codes import TopicAlreadyExistsError, raise_for_code
from kproto.errors import UnsupportedVersionError
from kproto.records import BatchBuilder, read_batches

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def client(bootstrap):
    with BlockingClient(bootstrap, client_id="kproto-it") as c:
        yield c


def _new_topic(client, partitions=1):
    name = f"it-{uuid.uuid4().hex[:12]}"
    resp = client.request("CreateTopics", {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1}],
        "timeout_ms": 10000})
    (t,) = resp["topics"]
    raise_for_code(t["error_code"], t["error_message"])
    wait_for_leaders(client, name, partitions)
    return name


def _sample_records(n, ts0):
    """A mix that exercises every field: null keys/values, empty values, headers."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        if i % 7 == 3:
            value = None                     # tombstone
        elif i % 11 == 4:
            value = b""
        else:
            value = (b"value-%d-" % i) * (1 + i % 13)
        headers = [] if i % 3 == 0 else [("h", b"%d" % i), ("empty", b""), ("null", None), ("ünï", b"\xff")]
        out.append((ts0 + i, key, value, headers))
    return out


def _produce(client, topic, partition, batch_bytes, acks=-1):
    leader = client.leaders(topic)[partition]
    resp = client.request("Produce", {"transactional_id": None, "acks": acks, "timeout_ms": 10000,
                                      "topic_data": [{"name": topic, "partition_data": [
                                          {"index": partition, "records": batch_bytes}]}]},
                          node_id=leader,   # v13 names topics by id only: v12 at most
                          version=client.node(leader).versions.pick("Produce", max_version=12))
    (pr,) = resp["responses"][0]["partition_responses"]
    raise_for_code(pr["error_code"], pr["error_message"])
    return pr["base_offset"]


def _fetch_all(client, topic, partition, expected, version=None, topic_id=None):
    """Fetch from offset 0 until `expected` records arrived; return Record objects."""
    leader = client.leaders(topic)[partition]
    if version is None:
        version = client.node(leader).versions.pick("Fetch")
    if version >= 13 and topic_id is None:       # v13+ names topics by id only
        md = client.metadata([topic])
        topic_id = [t for t in md["topics"] if t["name"] == topic][0]["topic_id"]
    records, offset, deadline = [], 0, time.monotonic() + 20
    while len(records) < expected and time.monotonic() < deadline:
        topic_key = {"topic": topic} if topic_id is None else {"topic_id": topic_id}
        resp = client.request("Fetch", {
            "replica_id": -1, "max_wait_ms": 200, "min_bytes": 1, "max_bytes": 1 << 22,
            "isolation_level": 0,
            "topics": [{**topic_key, "partitions": [{
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 22}]}]},
            node_id=leader, version=version)
        (pr,) = resp["responses"][0]["partitions"]
        raise_for_code(pr["error_code"], None)
        for batch in read_batches(pr["records"] or b""):
            for r in batch.records():
                if r.offset >= offset:
                    records.append(r)
            offset = max(offset, batch.next_offset)
    return records


def test_api_versions_negotiation(client):
    conn = client.any_connection()
    table = conn.versions
    # Every API the foundation needs for produce/consume is shared with the broker.
    for name in ["ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "CreateTopics",
                 "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit",
                 "OffsetFetch", "InitProducerId"]:
        v = table.pick(name)
        api = messages.api(name)
        assert api.min_version <= v <= api.max_version
        lo, hi = table.broker_range(name)
        assert lo <= v <= hi
    # ApiVersions itself was negotiated at the newest version both support.
    assert table.pick("ApiVersions") == min(messages.api("ApiVersions").max_version,
                                           table.broker_range("ApiVersions")[1])


def test_api_versions_every_version_against_the_broker(client, broker):
    conn = client.any_connection()
    lo, hi = conn.versions.broker_range("ApiVersions")
    # Kafka 4.4 serves every version we know (v0-v5); Tansu 0.6 stops at v4.
    assert (lo, hi) == ((0, messages.api("ApiVersions").max_version) if broker.kind == "kafka" else (0, 4))
    for v in range(lo, min(hi, messages.api("ApiVersions").max_version) + 1):
        body = conn.request("ApiVersions", {"client_software_name": "kproto-it",
                                            "client_software_version": "1"}, version=v)
        assert body["error_code"] == 0
        assert any(k["api_key"] == 0 for k in body["api_keys"])


def test_unsupported_api_is_named(client):
    conn = client.any_connection()
    table = conn.versions
    with pytest.raises(UnsupportedVersionError, match="Fetch"):
        table.pick("Fetch", min_version=99)


def test_metadata_and_create_topics(client):
    topic = _new_topic(client, partitions=3)
    md = client.metadata([topic])
    (t,) = [t for t in md["topics"] if t["name"] == topic]
    assert t["error_code"] == 0
    assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader_id"] in client.nodes for p in t["partitions"])
    # Creating it again is a clear, typed broker error.
    resp = client.request("CreateTopics", {"topics": [{
        "name": topic, "num_partitions": 3, "replication_factor": 1}], "timeout_ms": 10000})
    with pytest.raises(TopicAlreadyExistsError):
        raise_for_code(resp["topics"][0]["error_code"], resp["topics"][0]["error_message"])


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_fetch_round_trip(client, codec):
    topic = _new_topic(client)
    sent = _sample_records(300, ts0=1_700_000_000_000)
    builder = BatchBuilder(codec, 1 << 20)
    for ts, key, value, headers in sent:
        assert builder.append(ts, key, value, headers)
    assert _produce(client, topic, 0, builder.build()) == 0
    got = _fetch_all(client, topic, 0, len(sent))
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(sent)]


def test_fetch_by_topic_id_and_by_name_agree(client):
    conn = client.any_connection()
    if conn.versions.pick("Fetch") < 13:
        pytest.fail("the broker should support Fetch v13+ (topic ids)")
    topic = _new_topic(client)
    builder = BatchBuilder("lz4", 1 << 20)
    for i in range(50):
        builder.append(1_000 + i, b"k%d" % i, b"v%d" % i)
    _produce(client, topic, 0, builder.build())
    md = client.metadata([topic])
    topic_id = [t for t in md["topics"] if t["name"] == topic][0]["topic_id"]
    by_name = _fetch_all(client, topic, 0, 50, version=12)
    by_id = _fetch_all(client, topic, 0, 50, version=13, topic_id=topic_id)
    assert [(r.offset, r.key, r.value) for r in by_name] == [(r.offset, r.key, r.value) for r in by_id]
    assert len(by_id) == 50


def test_several_batches_and_pipelined_requests(client):
    topic = _new_topic(client)
    leader = client.leaders(topic)[0]
    conn = client.node(leader)
    pending, expected = [], []
    for b in range(20):
        builder = BatchBuilder("gzip" if b % 2 else "lz4", 1 << 16)
        for i in range(100):
            v = b"batch%d-rec%d" % (b, i)
            builder.append(2_000 + i, None, v)
            expected.append(v)
        pending.append(conn.send("Produce", {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
                                             "topic_data": [{"name": topic, "partition_data": [
                                                 {"index": 0, "records": builder.build()}]}]},
                                   version=conn.versions.pick("Produce", max_version=12)))   # by name
        if len(pending) == 5:           # five produce requests in flight on one connection
            conn.wait(*pending)
            pending.clear()
    conn.wait(*pending)
    got = _fetch_all(client, topic, 0, len(expected))
    assert [r.value for r in got] == expected
    assert [r.offset for r in got] == list(range(len(expected)))


# -- interop with confluent-kafka (librdkafka) ----------------------------------

def _ck_consume_all(bootstrap, topic, expected, timeout=30):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_reads_our_batches(client, bootstrap, codec):
    topic = _new_topic(client)
    sent = _sample_records(200, ts0=1_650_000_000_000)
    builder = BatchBuilder(codec, 1 << 20)
    for ts, key, value, headers in sent:
        builder.append(ts, key, value, headers)
    _produce(client, topic, 0, builder.build())
    msgs = _ck_consume_all(bootstrap, topic, len(sent))
    assert len(msgs) == len(sent)
    for m, (ts, key, value, headers) in zip(msgs, sent):
        assert m.key() == key
        assert m.value() == value
        assert m.timestamp()[1] == ts
        assert (m.headers() or []) == [(k, v) for k, v in headers]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_confluent_kafka_batches(client, bootstrap, codec):
    topic = _new_topic(client)
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                     "linger.ms": 20, "batch.num.messages": 1000})
    sent = _sample_records(500, ts0=1_600_000_000_000)
    for ts, key, value, headers in sent:
        p.produce(topic, value=value, key=key, partition=0, timestamp=ts,
                  headers=headers or None)
    assert p.flush(20) == 0
    got = _fetch_all(client, topic, 0, len(sent))
    assert len(got) == len(sent)
    for r, (ts, key, value, headers) in zip(got, sent):
        assert (r.key, r.value, r.timestamp) == (key, value, ts)
        assert list(r.headers) == headers
