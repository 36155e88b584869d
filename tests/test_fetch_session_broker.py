"""KIP-227 fetch sessions of kio.Consumer against real brokers: a consumer
over many partitions of which only some receive records reads every record
once and in order with sessions on, after partitions are removed (forgotten
in the session), after the broker's session errors (a session
id the broker does not know, a wrong epoch) and after a broker restart; and the
incremental requests are really sent (counted per node).

Tansu answers every full Fetch with session id 0 (it keeps no sessions):
the consumer then stays on full requests, which these tests check too."""
import os
import time
from unittest import mock

import pytest

from kio import Consumer, Producer, TopicPartition as TP
from kio.blocking import BlockingClient
from kio.testing import new_topic
import kproto.consumer.core as core_module
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions

PARTITIONS = 60
BUSY = (3, 17, 42)          # the partitions that receive records


def produce(bootstrap, topic, partitions, start, n):
    """n records per partition, values "<partition>:<i>" for i from start."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(start, start + n):
            for part in partitions:
                p.send(topic, b"%d:%d" % (part, i), partition=part)
        assert p.flush(30) == 0


def read(consumer, want, timeout=60.0):
    """{partition: [value]} until ``want`` ({partition: count}) records came."""
    got = {}
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(len(got.get(p, ())) < n for p, n in want.items()):
        for r in consumer.poll(0.2):
            got.setdefault(r.partition, []).append(r.value)
    return got


def expected(partitions, start, n):
    return {p: [b"%d:%d" % (p, i) for i in range(start, start + n)] for p in partitions}


def sessions(consumer):
    """The consumer's fetch sessions by node (read after its polls)."""
    return consumer._core.fetcher.sessions


def counts(consumer):
    s = list(sessions(consumer).values())
    return sum(x.full_sent for x in s), sum(x.incremental_sent for x in s)


def settle(consumer, condition, timeout=10.0):
    """Poll (no records expected) until ``condition()`` or the timeout;
    returns its last value (the network thread sends the next Fetch
    after the answer that brought the records)."""
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        assert consumer.poll(0.1) == []
    return condition()


def consumer_on(bootstrap, topic, partitions, **kw):
    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100, **kw)
    c.assign([TP(topic, p) for p in partitions])
    return c


def test_few_busy_partitions_among_many_read_once_in_order(bootstrap, make_topic, broker_kind):
    topic = make_topic(PARTITIONS)
    produce(bootstrap, topic, BUSY, 0, 50)
    with consumer_on(bootstrap, topic, range(PARTITIONS)) as c:
        assert read(c, {p: 50 for p in BUSY}) == expected(BUSY, 0, 50)
        for round_ in range(1, 4):                    # more records while the session is open
            produce(bootstrap, topic, BUSY, 50 * round_, 50)
            got = read(c, {p: 50 for p in BUSY})
            assert got == expected(BUSY, 50 * round_, 50), round_
        full, incremental = counts(c)
        if broker_kind == "kafka":
            assert incremental > full >= 1 and all(s.state == "open" for s in sessions(c).values())
        else:                                         # Tansu keeps no session: full requests only
            assert full >= 1 and incremental == 0
        # Removed partitions are forgotten in the session; the rest go on.
        kept = [p for p in range(PARTITIONS) if p % 2 == 1]
        c.assign([TP(topic, p) for p in kept])
        before = counts(c)[1]
        produce(bootstrap, topic, BUSY, 200, 20)
        busy_kept = [p for p in BUSY if p in kept]
        got = read(c, {p: 20 for p in busy_kept})
        assert got == expected(busy_kept, 200, 20)
        assert not set(got) - set(kept)
        if broker_kind == "kafka":
            assert counts(c)[1] > before


def test_fetch_sessions_off_reads_the_same(bootstrap, make_topic):
    """The twin: Fetcher.use_sessions = False sends full requests only."""
    topic = make_topic(PARTITIONS)
    produce(bootstrap, topic, BUSY, 0, 30)
    with consumer_on(bootstrap, topic, range(PARTITIONS)) as c:
        c._core.fetcher.use_sessions = False
        assert read(c, {p: 30 for p in BUSY}) == expected(BUSY, 0, 30)
        assert sessions(c) == {}


def _fetch_round(client, f, leaders, ids, answers):
    """One Fetch per node through the blocking client (the codec's dict
    answer path); returns the records drained."""
    def version_of(node):
        return client.node(node).versions.pick("Fetch")

    for req in f.fetch_requests(leaders.get, version_of, ids.get):
        resp = client.request("Fetch", req.body, node_id=req.node, version=req.version)
        answers.append(((req.body["session_id"], req.body["session_epoch"]),
                        resp["error_code"], resp["session_id"]))
        f.on_fetch_response(req, resp)
    return [(r.partition, r.value) for r in f.drain()]


def test_the_brokers_session_errors_restart_the_session(bootstrap, broker_kind):
    """A wrong epoch (INVALID_FETCH_SESSION_EPOCH) and an unknown session id
    (FETCH_SESSION_ID_NOT_FOUND: what an evicted session or a restarted
    broker answers) from the real broker: the next request is full and
    opens a new session; no record is lost or read twice."""
    topic = new_topic(bootstrap, 20, prefix="fs")
    busy = (2, 11)
    with BlockingClient(bootstrap, client_id="fsess-it") as client:
        md = client.metadata([topic])
        (t,) = [t for t in md["topics"] if t["name"] == topic]
        leaders = {TP(topic, p["partition_index"]): p["leader_id"] for p in t["partitions"]}
        ids = {topic: t["topic_id"]}
        pos = Positions("earliest")
        pos.assign(list(leaders))
        for tp in leaders:
            pos.seek(tp, 0)
        f = Fetcher(pos, fetch_max_wait_ms=50)
        got, answers = [], []

        def read_all(n):
            end = time.monotonic() + 30
            while len(got) < n and time.monotonic() < end:
                got.extend(_fetch_round(client, f, leaders, ids, answers))

        produce(bootstrap, topic, busy, 0, 10)
        read_all(20)
        (session,) = f.sessions.values()
        if broker_kind == "kafka":
            for _ in range(3):
                _fetch_round(client, f, leaders, ids, answers)
            assert session.state == "open" and session.incremental_sent >= 3
            session.epoch += 5                        # not the epoch the broker expects
            _fetch_round(client, f, leaders, ids, answers)
            assert answers[-1][1] == 71 and session.state == "reopening"
            produce(bootstrap, topic, busy, 10, 10)
            read_all(40)
            after_error = [a[1] for a in answers].index(71) + 1
            assert answers[after_error][0][1] == 0         # full, closing the session for a new one
            assert session.state == "open"
            session.session_id ^= 0x5A5A              # a session the broker does not know
            _fetch_round(client, f, leaders, ids, answers)
            assert answers[-1][1] == 70 and session.state == "new"
        else:
            # Tansu (recorded): every answer says session id 0 - no session,
            # so every request stays full and asks for one (epoch 0).
            for _ in range(3):
                _fetch_round(client, f, leaders, ids, answers)
            assert {a[0] for a in answers} == {(0, 0)} and {a[2] for a in answers} == {0}
            produce(bootstrap, topic, busy, 10, 10)
            read_all(40)
        produce(bootstrap, topic, busy, 20, 10)
        read_all(60)
        for p in busy:
            assert [v for part, v in got if part == p] == [b"%d:%d" % (p, i) for i in range(30)]
        assert len(got) == 60


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory):
    """A Kafka broker of this module's own, to restart (Tansu keeps no
    sessions, nor its log across a restart)."""
    if "kafka" not in [k.strip() for k in os.environ.get("KIO_TEST_BROKERS", "kafka").split(",")]:
        pytest.skip("the restart test runs on Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.kafka_broker import KafkaBroker
    log = str(tmp_path_factory.mktemp("fsess") / "kafka.log")
    b = KafkaBroker(log_path=log, heap="320m").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.broker        # its own Kafka (own_kafka), not the matrix's `broker` fixture
def test_a_broker_restart_under_an_open_session_loses_no_record(own_kafka):
    """The broker restarts under an open session: the failed Fetch drops
    it, the next is full and opens a new one; every record is read once,
    in order, and incremental requests go on after."""
    bootstrap = own_kafka.bootstrap_servers
    topic = new_topic(bootstrap, 30, prefix="fs")
    busy = (1, 29)
    produce(bootstrap, topic, busy, 0, 20)
    with consumer_on(bootstrap, topic, range(30)) as c:
        assert read(c, {p: 20 for p in busy}) == expected(busy, 0, 20)
        assert settle(c, lambda: counts(c)[1] >= 1)
        own_kafka.restart()
        full_before = counts(c)[0]
        produce(bootstrap, topic, busy, 20, 20)
        assert read(c, {p: 20 for p in busy}, 90) == expected(busy, 20, 20)
        assert counts(c)[0] > full_before
        incremental = counts(c)[1]
        produce(bootstrap, topic, busy, 40, 20)
        assert read(c, {p: 20 for p in busy}) == expected(busy, 40, 20)
        assert settle(c, lambda: counts(c)[1] > incremental)


def _raw_incremental_fetch(bootstrap, node, session_id, epoch):
    """One incremental Fetch of no partitions in session ``session_id`` at
    ``epoch``, sent by a client of its own: the broker's error code (0: it
    holds the session at that epoch; 70 FETCH_SESSION_ID_NOT_FOUND: it holds
    no such session; 71: it holds it at another epoch)."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [], "forgotten_topics_data": [], "rack_id": ""}
    with BlockingClient(bootstrap, client_id="fsess-probe") as client:
        return client.request("Fetch", body, node_id=node)["error_code"]


class _NoFinalEpoch(Fetcher):
    """A Fetcher that sends no final epoch on close (a subclass: the compiled
    Fetcher, a C class, takes no method replaced on an instance)."""

    def close_session_requests(self, version_of):
        return []


def test_close_ends_the_sessions_on_the_broker_and_the_group_reads_on(bootstrap, make_topic, broker_kind):
    """A group consumer's close() sends the final epoch (-1) for each open
    session and waits for the answers, as Java's consumer does: counted by
    the consumer's own metrics, and checked on the broker - the closed
    session's id is unknown to it afterwards (70), where a consumer closed
    without the final epoch leaves its session open (0 or 71). A second consumer
    of the group then reads on from the committed offsets, nothing lost or
    read twice."""
    import uuid
    topic = make_topic(PARTITIONS)
    group = f"fs-close-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, BUSY, 0, 30)

    # the control: a consumer closed without the final epoch keeps its session
    with mock.patch.object(core_module, "Fetcher", _NoFinalEpoch):
        kept = consumer_on(bootstrap, topic, range(PARTITIONS))
    assert type(kept._core.fetcher) is _NoFinalEpoch
    assert read(kept, {p: 30 for p in BUSY}) == expected(BUSY, 0, 30)
    settle(kept, lambda: counts(kept)[1] >= 1)
    # read before close(): the Fetch in flight then fails and resets the handler
    left_open = {n: (s.session_id, s.epoch) for n, s in sessions(kept).items() if s.state == "open"}
    kept.close()

    c1 = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, fetch_max_wait_ms=100)
    c1.subscribe([topic])
    assert read(c1, {p: 30 for p in BUSY}) == expected(BUSY, 0, 30)
    c1.commit()
    settle(c1, lambda: counts(c1)[1] >= 1)
    opened = {n: (s.session_id, s.epoch) for n, s in sessions(c1).items() if s.state == "open"}
    c1.close()
    m = c1._core.metrics()
    assert m["fetch_sessions_closed_sent"] == len(opened)
    assert m["fetch_sessions_closed_answered"] == len(opened)
    if broker_kind == "kafka":
        assert opened and left_open                   # Kafka keeps sessions; Tansu none
        for node, (session_id, epoch) in left_open.items():
            # the broker holds it (0, or 71 if a Fetch in flight at close moved its epoch on)
            assert _raw_incremental_fetch(bootstrap, node, session_id, epoch) in (0, 71)
        for node, (session_id, epoch) in opened.items():
            assert _raw_incremental_fetch(bootstrap, node, session_id, epoch) == 70
    else:
        assert not opened and m["fetch_sessions_closed_sent"] == 0

    produce(bootstrap, topic, BUSY, 30, 30)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, fetch_max_wait_ms=100) as c2:
        c2.subscribe([topic])
        assert read(c2, {p: 30 for p in BUSY}) == expected(BUSY, 30, 30)
        assert settle(c2, lambda: True) and c2.poll(0.5) == []
