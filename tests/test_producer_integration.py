"""kio.Producer against the real brokers (Apache Kafka and Tansu), read back with a plain Fetch."""
import logging
import threading
import time
import uuid

import pytest

from kio import Consumer, KafkaTimeoutError, Producer, RecordMetadata, TopicPartition as TP
from kio.blocking import BlockingClient
from kproto.error_codes import raise_for_code
from kproto.producer import ProducerClosedError, SerializationError
from kproto.producer.partitioner import murmur2_partition
from kproto.records import read_batches


@pytest.fixture
def client(bootstrap):
    with BlockingClient(bootstrap) as c:
        yield c


def new_topic(client, partitions=1):
    name = "p-" + uuid.uuid4().hex[:10]
    r = client.request("CreateTopics", {"topics": [{"name": name, "num_partitions": partitions,
                                                    "replication_factor": 1, "assignments": [],
                                                    "configs": []}], "timeout_ms": 10000})
    raise_for_code(r["topics"][0]["error_code"], r["topics"][0].get("error_message"))
    return name


def fetch_all(client, topic, partition, expected, timeout=20):
    """Every record of one partition from offset 0 (batches too, for checks)."""
    leader = client.leaders(topic)[partition]
    version = min(client.node(leader).versions.pick("Fetch"), 12)
    records, batches, offset = [], [], 0
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        resp = client.request("Fetch", {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 24,
            "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 24}]}]},
            node_id=leader, version=version)
        (pr,) = resp["responses"][0]["partitions"]
        raise_for_code(pr["error_code"], None)
        for batch in read_batches(pr["records"] or b""):
            batches.append(batch)
            for r in batch.records():
                if r.offset >= offset:
                    records.append(r)
            offset = max(offset, batch.next_offset)
    return records, batches


def test_send_and_read_back_exactly(client, bootstrap):
    topic = new_topic(client)
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        futs = [p.send(topic, b"value-%d" % i, key=b"key-%d" % i, headers=[("h", b"%d" % i)],
                       timestamp_ms=1_700_000_000_000 + i) for i in range(500)]
        mds = [f.result(timeout=10) for f in futs]
    assert [m.offset for m in mds] == list(range(500))
    assert all(isinstance(m, RecordMetadata) and m.topic == topic and m.partition == 0 for m in mds)
    recs, batches = fetch_all(client, topic, 0, 500)
    assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in recs] == [
        (i, b"key-%d" % i, b"value-%d" % i, 1_700_000_000_000 + i, [("h", b"%d" % i)]) for i in range(500)]
    # idempotence is on by default: batches carry a producer id and sequences 0, n, ...
    assert all(b.producer_id >= 0 for b in batches)
    seqs = [b.base_sequence for b in batches]
    assert seqs[0] == 0 and seqs == sorted(seqs)


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(client, bootstrap, acks):
    topic = new_topic(client)
    with Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2}) as p:
        assert p.config.enable_idempotence == (acks == "all")
        futs = [p.send(topic, b"v%d" % i) for i in range(200)]
        assert p.flush(10) == 0
        mds = [f.result() for f in futs]
    if acks == 0:
        assert all(m.offset == -1 for m in mds)
    else:
        assert [m.offset for m in mds] == list(range(200))
    recs, _ = fetch_all(client, topic, 0, 200)
    assert [r.value for r in recs] == [b"v%d" % i for i in range(200)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(client, bootstrap, codec):
    topic = new_topic(client)
    values = [(b"compressible-%d-" % i) * 20 for i in range(300)]
    with Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20) as p:
        futs = [p.send(topic, v) for v in values]
        p.flush(10)
        assert all(f.result().offset >= 0 for f in futs)
    recs, batches = fetch_all(client, topic, 0, 300)
    assert [r.value for r in recs] == values
    assert {b.attributes & 7 for b in batches} == {{"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]}


def test_send_many_columnar(client, bootstrap):
    topic = new_topic(client)
    values = [b"bulk-%06d" % i for i in range(20000)]
    with Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=65536) as p:
        fut = p.send_many(topic, values, partition=0)
        res = fut.result(timeout=20)
    assert res.count == 20000 and res.topic == topic
    assert sum(c for _, _, c in res.ranges) == 20000
    recs, _ = fetch_all(client, topic, 0, 20000)
    assert [r.value for r in recs] == values


def test_keyed_partitioning_identical_to_confluent_kafka(client, bootstrap):
    ck = pytest.importorskip("confluent_kafka")
    ours, theirs = new_topic(client, 6), new_topic(client, 6)
    keys = [b"user-%d" % i for i in range(120)] + [b"", b"\x00\xff", "ünï".encode()]
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        futs = {k: p.send(ours, b"x", key=k) for k in keys}
        p.flush(10)
        kio_parts = {k: f.result().partition for k, f in futs.items()}
    cp = ck.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 2})
    ck_parts = {}

    def cb(err, msg):
        assert err is None
        ck_parts[msg.key()] = msg.partition()
    for k in keys:
        cp.produce(theirs, b"x", key=k, on_delivery=cb)
    cp.flush(10)
    assert ck_parts == kio_parts
    assert kio_parts == {k: murmur2_partition(k, 6) for k in keys}
    assert len(set(kio_parts.values())) == 6


def test_unknown_topic_without_auto_creation_fails_within_max_block(bootstrap):
    with Producer(bootstrap_servers=bootstrap, allow_auto_create_topics=False, max_block_ms=1000) as p:
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata after 1000 ms"):
            p.send("no-such-topic-" + uuid.uuid4().hex[:6], b"v")
        assert 0.9 <= time.monotonic() - t0 < 3


def test_callbacks_run_on_network_thread_and_errors_are_logged(client, bootstrap, caplog):
    topic = new_topic(client)
    seen = []
    done = threading.Event()

    def cb(err, md):
        seen.append((err, md.offset, threading.current_thread().name))
        if len(seen) == 3:
            done.set()
        raise RuntimeError("boom in a callback")
    with caplog.at_level(logging.ERROR, logger="kio.producer"):
        with Producer(bootstrap_servers=bootstrap, client_id="cbtest") as p:
            for i in range(3):
                p.send(topic, b"v", on_delivery=cb)
            assert done.wait(10)
            f = p.send(topic, b"after")                       # the producer is still fine
            assert f.result(10).offset == 3
    assert [s[1] for s in seen] == [0, 1, 2]
    assert all(s[0] is None and s[2] == "kio-producer-network-thread | cbtest" for s in seen)
    assert "boom in a callback" in caplog.text


def test_serialization(client, bootstrap):
    topic = new_topic(client)
    with Producer(bootstrap_servers=bootstrap, value_serializer=lambda v: repr(v).encode()) as p:
        with pytest.raises(SerializationError, match="key of type int"):
            p.send(topic, 1, key=2)
        md = p.send(topic, {"a": 1}, key="clé").result(10)
    recs, _ = fetch_all(client, topic, 0, 1)
    assert md.offset == 0 and recs[0].value == b"{'a': 1}" and recs[0].key == "clé".encode()


def test_close_fails_pending_records_with_clear_error(client, bootstrap):
    topic = new_topic(client)
    p = Producer(bootstrap_servers=bootstrap, linger_ms=60000, batch_size=1 << 20)
    p.partitions_for(topic)
    futs = [p.send(topic, b"v%d" % i) for i in range(100)]
    p.close(timeout=0)
    assert all(f.done() for f in futs)
    errors = {type(f.exception()) for f in futs}
    assert errors <= {ProducerClosedError, type(None)}
    with pytest.raises(ProducerClosedError):
        p.send(topic, b"late")


def test_flush_delivers_everything_from_many_threads(client, bootstrap):
    topic = new_topic(client, 3)
    with Producer(bootstrap_servers=bootstrap, linger_ms=50) as p:
        futs = []
        lock = threading.Lock()

        def work(t):
            mine = [p.send(topic, b"%d-%d" % (t, i), key=b"%d" % t) for i in range(500)]
            with lock:
                futs.extend(mine)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.flush() == 0
        assert all(f.done() and f.exception() is None for f in futs)
        m = p.metrics()
    assert m["records_sent"] == 2000 and m["records_failed"] == 0
    per_part = {}
    for f in futs:
        per_part.setdefault(f.result().partition, []).append(f.result().offset)
    for part, offsets in per_part.items():
        recs, _ = fetch_all(client, topic, part, len(offsets))
        assert sorted(offsets) == [r.offset for r in recs]
        # per key (= per thread) the order of sends is the order in the log
        by_thread = {}
        for r in recs:
            t, i = r.value.split(b"-")
            by_thread.setdefault(t, []).append(int(i))
        assert all(v == list(range(500)) for v in by_thread.values())


def test_flush_returns_only_after_the_futures_it_waited_for_are_done(client, bootstrap):
    # flush() called at the moment the broker's answer has been read but its
    # completions not yet handed to the futures (a gap between two rounds of
    # the network thread) used to return 0 with the futures still pending;
    # the random pauses before flush() land in that gap now and then (a few
    # rounds in a thousand before the fix). Bounded: 600 rounds, ~3 s.
    import random
    rng = random.Random(16)
    topic = new_topic(client, 2)
    early = 0
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        for i in range(600):
            bulk = p.send_many(topic, [b"v"] * 20, keys=[b"%d" % k for k in range(20)])
            one = p.send(topic, b"one")
            time.sleep(rng.random() * 0.004)
            assert p.flush(30) == 0
            early += not (bulk.done() and one.done())
        m = p.metrics()
    assert early == 0, f"flush returned before its futures were done in {early} of 600 rounds"
    assert m["records_sent"] == 600 * 21 and m["records_failed"] == 0


def _read_committed(bootstrap, topic, partitions, want, timeout=15):
    ck = pytest.importorskip("confluent_kafka")
    cons = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex[:8],
                        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
    cons.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got, end = [], time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < end:
            m = cons.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset(), m.value()))
    finally:
        cons.close()
    return got


def test_transaction_committed_is_read_by_confluent_read_committed_consumer(client, bootstrap):
    topic = new_topic(client, 2)
    with Producer(bootstrap_servers=bootstrap, transactional_id="tx-" + uuid.uuid4().hex[:6]) as p:
        p.init_transactions(10)
        p.begin_transaction()
        futs = [p.send(topic, b"c%d" % i, partition=i % 2) for i in range(10)]
        p.send_offsets_to_transaction({(topic, 0): 3}, "txn-group")
        p.commit_transaction(10)
        assert all(f.result(0).offset >= 0 for f in futs)
    got = _read_committed(bootstrap, topic, 2, 10)
    assert sorted(v for _, _, v in got) == sorted(b"c%d" % i for i in range(10))
    # the commit marker follows the records in each partition
    for part in range(2):
        _, batches = fetch_all(client, topic, part, 5)
        control = [b for b in batches if b.attributes & 0x20]
        assert control and [r.key for r in control[-1].records()] == [b"\x00\x00\x00\x01"]   # COMMIT


def test_transaction_aborted_writes_abort_marker(client, bootstrap, broker):
    topic = new_topic(client)
    with Producer(bootstrap_servers=bootstrap, transactional_id="tx-" + uuid.uuid4().hex[:6]) as p:
        p.init_transactions(10)
        p.begin_transaction()
        aborted = [p.send(topic, b"a%d" % i, partition=0) for i in range(5)]
        assert p.flush(10) == 0                          # on the broker, then aborted
        p.abort_transaction(10)
        p.begin_transaction()
        committed = [p.send(topic, b"k%d" % i, partition=0) for i in range(3)]
        p.commit_transaction(10)
    assert [f.result().offset for f in aborted] == [0, 1, 2, 3, 4]
    assert [f.result().offset for f in committed] == [6, 7, 8]
    # EndTxn returns once the transaction coordinator decided; the partition
    # leader writes the marker right after (Kafka 4's transaction protocol
    # v2), so a read at once can end before the COMMIT marker: wait for it.
    end = time.monotonic() + 10
    while True:
        recs, batches = fetch_all(client, topic, 0, 9)
        markers = [(b.base_offset, [r.key for r in b.records()]) for b in batches if b.attributes & 0x20]
        if len(markers) >= 2 or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert markers == [(5, [b"\x00\x00\x00\x00"]), (9, [b"\x00\x00\x00\x01"])]   # ABORT, COMMIT
    # The committed records are visible to a read_committed consumer, the
    # aborted ones are not: Kafka lists the aborted transaction in its Fetch
    # answers. (Tansu deviation: it lists no aborted transactions, so such a
    # consumer also sees a0..a4 there.)
    got = _read_committed(bootstrap, topic, 1, 8, timeout=5 if broker.kind == "kafka" else 15)
    if broker.kind == "kafka":
        assert [(o, v) for _, o, v in got] == [(6, b"k0"), (7, b"k1"), (8, b"k2")]
        # ... and so does our own read_committed consumer.
        with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      isolation_level="read_committed") as c:
            c.assign([TP(topic, 0)])
            mine, end = [], time.monotonic() + 10
            while len(mine) < 3 and time.monotonic() < end:
                mine += c.poll(0.2)
            assert [(r.offset, r.value) for r in mine] == [(6, b"k0"), (7, b"k1"), (8, b"k2")]
            assert c.position(TP(topic, 0)) == 10
    else:
        assert [v for _, _, v in got if v.startswith(b"k")] == [b"k0", b"k1", b"k2"]


def test_in_order_acker_releases_in_submission_order_across_partitions(client, bootstrap):
    from kio import InOrderAcker
    topic = new_topic(client, 4)
    released = []
    with Producer(bootstrap_servers=bootstrap, linger_ms=1) as p:
        acker = InOrderAcker(p, on_release=lambda token, err: released.append((token, err)), capacity=50)
        for i in range(1000):
            acker.send(topic, b"v%d" % i, token=i, key=b"k%d" % i)
        assert p.flush(10) == 0
    assert released == [(i, None) for i in range(1000)]
    assert acker.acked_position == 1000


def test_reconnects_and_delivers_after_a_broker_restart(tmp_path):
    # Its own broker: a restart with memory storage loses every topic and
    # every producer id, so the producer must reconnect, refresh metadata and
    # get a new producer id (Tansu refuses the KIP-360 epoch bump).
    from kio.testing.broker import LocalBroker
    with LocalBroker(log_path=str(tmp_path / "tansu.log")) as b:
        with Producer(bootstrap_servers=b.bootstrap_servers, request_timeout_ms=3000,
                      delivery_timeout_ms=30000) as p:
            assert p.send("restarted", b"before", partition=0).result(10).offset == 0
            b.restart()
            md = p.send("restarted", b"after", partition=0).result(30)
            assert md.offset == 0                       # a fresh, auto-created topic
            m = p.metrics()
        assert m["records_sent"] == 2 and m["records_failed"] == 0
        with BlockingClient(b.bootstrap_servers) as c:
            recs, _ = fetch_all(c, "restarted", 0, 1)
        assert [r.value for r in recs] == [b"after"]


def test_send_waits_for_buffer_memory_then_delivers_everything(client, bootstrap):
    topic = new_topic(client)
    value = b"m" * 1000
    with Producer(bootstrap_servers=bootstrap, buffer_memory=64 * 1024, batch_size=16 * 1024,
                  linger_ms=50, max_block_ms=10000) as p:
        futs = [p.send(topic, value) for _ in range(3000)]     # ~3 MB through a 64 KB buffer
        assert p.flush(30) == 0
        assert p.metrics()["buffer_used_bytes"] == 0
    assert [f.result().offset for f in futs] == list(range(3000))


def test_send_many_larger_than_buffer_memory(client, bootstrap):
    topic = new_topic(client)
    values = [b"%06d" % i * 10 for i in range(50000)]          # 3 MB, buffer 256 KB
    with Producer(bootstrap_servers=bootstrap, buffer_memory=256 * 1024, batch_size=32 * 1024) as p:
        res = p.send_many(topic, values, partition=0).result(30)
    assert res.count == 50000
    recs, _ = fetch_all(client, topic, 0, 50000)
    assert [r.value for r in recs] == values


def test_send_many_with_serializers_headers_and_arrow(client, bootstrap):
    pa = pytest.importorskip("pyarrow")
    topic = new_topic(client)
    with Producer(bootstrap_servers=bootstrap, value_serializer=lambda v: b"<%d>" % v) as p:
        res = p.send_many(topic, [1, 2, 3], keys=None, partition=0,
                          headers=[[("n", "un")], None, {"n": b"trois"}]).result(10)
        assert res.count == 3
        p.send(topic, 4, headers={"h": "str-value"}).result(10)
    with Producer(bootstrap_servers=bootstrap) as p:
        p.send_many(topic, pa.array([b"a1", b"a2"], type=pa.binary()), partition=0).result(10)
        p.send_many(topic, pa.array(["s1", None]), partition=0).result(10)
    recs, _ = fetch_all(client, topic, 0, 8)
    assert [r.value for r in recs] == [b"<1>", b"<2>", b"<3>", b"<4>", b"a1", b"a2", b"s1", None]
    assert [list(r.headers) for r in recs[:4]] == [[("n", b"un")], [], [("n", b"trois")], [("h", b"str-value")]]


def test_flush_from_a_callback_is_refused_not_deadlocked(client, bootstrap):
    topic = new_topic(client)
    errors = []
    called = threading.Event()
    with Producer(bootstrap_servers=bootstrap) as p:
        def cb(err, md):
            try:
                p.flush()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            p.send(topic, b"from-callback")          # appending from a callback is fine
            called.set()
        p.send(topic, b"v", on_delivery=cb)
        assert called.wait(10)
        assert p.flush(10) == 0
    assert len(errors) == 1 and "would deadlock" in str(errors[0])
    recs, _ = fetch_all(client, topic, 0, 2)
    assert [r.value for r in recs] == [b"v", b"from-callback"]
