"""The KAFKA-13840 scenario against the real broker: the group coordinator's
connection is cut (or the broker restarts) under a running kio.Consumer, in
every commit mode (sync, async, auto) with manual assignment and with a
subscription. Commits must resume by themselves, with no restart of the
consumer: the committed offset seen by another client moves past the cut.

The cut is a real one: the test shuts the coordinator connection's socket
down, so the network thread reads EOF as it would from a broker that went
away, and the core's shared coordinator discovery has to find it again.

Both group protocols: ``group.protocol=consumer`` (KIP-848) runs against
Kafka only (Tansu lacks ConsumerGroupHeartbeat); its broker-restart variant
restarts a Kafka broker of its own (Kafka keeps its log and the group's
offsets across the restart, and the partition's leader epoch grows: the
consumer's fetches must not stay fenced by the old one).
"""
import socket
import time
import uuid

import pytest

from kio import Consumer, Producer, TopicPartition as TP
from kio.testing.broker import LocalBroker, free_port

GROUP = dict(session_timeout_ms=6000, heartbeat_interval_ms=500)
# KIP-848: the broker sets the session timeout and the heartbeat interval
CONSUMER_PROTOCOL = dict(group_protocol="consumer")


def produce(bootstrap, topic, start, n):
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(start, start + n):
            p.send(topic, b"v%d" % i, partition=0)
        assert p.flush(30) == 0


def cut_coordinator(c):
    """Shut down the socket of the consumer's coordinator connection; returns it."""
    with c._lock:
        coord = c._core.coordinator
        assert coord.known, "no coordinator yet"
        sock = c._net.socks.get(coord.connection_id)
        assert sock is not None, "no coordinator connection"
        sock.shutdown(socket.SHUT_RDWR)
        return sock


def coordinator_socket(c):
    with c._lock:
        cid = c._core.coordinator.connection_id
        return None if cid is None else c._net.socks.get(cid)


def committed_offset(bootstrap, group, tp):
    with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as other:
        om = other.committed([tp], timeout=10)[tp]
        return None if om is None else om.offset


def consume_and_commit(c, mode, n, results):
    """Poll until n records arrived, committing as ``mode`` says."""
    got = []
    end = time.monotonic() + 30
    while len(got) < n and time.monotonic() < end:
        recs = c.poll(0.2)
        got.extend(recs)
        if recs and mode == "sync":
            c.commit(timeout=15)
        elif recs and mode == "async":
            c.commit(asynchronous=True, callback=lambda offsets, err: results.append(err))
    return got


def wait_committed(c, bootstrap, group, tp, offset, timeout=20):
    """Keep polling (auto-commit and async callbacks run from poll) until
    another client sees ``offset`` committed."""
    end = time.monotonic() + timeout
    seen = None
    while time.monotonic() < end:
        c.poll(0.2)
        seen = committed_offset(bootstrap, group, tp)
        if seen == offset:
            return seen
    return seen


@pytest.mark.parametrize("mode", ["sync", "async", "auto"])
@pytest.mark.parametrize("how", ["assign", "subscribe"])
def test_commits_resume_after_the_coordinator_connection_is_cut(bootstrap, make_topic, mode, how):
    commits_resume_after_cut(bootstrap, make_topic, mode, how, GROUP)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
@pytest.mark.parametrize("mode", ["sync", "async", "auto"])
@pytest.mark.parametrize("how", ["assign", "subscribe"])
def test_consumer_protocol_commits_resume_after_the_coordinator_connection_is_cut(
        bootstrap, make_topic, mode, how):
    commits_resume_after_cut(bootstrap, make_topic, mode, how, CONSUMER_PROTOCOL)


def commits_resume_after_cut(bootstrap, make_topic, mode, how, group_settings):
    topic = make_topic(1)
    tp = TP(topic, 0)
    group = "g-" + uuid.uuid4().hex[:8]
    produce(bootstrap, topic, 0, 50)
    results = []
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=(mode == "auto"), auto_commit_interval_ms=200,
                  **group_settings) as c:
        if how == "assign":
            c.assign([tp])
        else:
            c.subscribe([topic])
        assert len(consume_and_commit(c, mode, 50, results)) == 50
        assert wait_committed(c, bootstrap, group, tp, 50) == 50
        dead = cut_coordinator(c)
        produce(bootstrap, topic, 50, 30)
        got = consume_and_commit(c, mode, 30, results)
        assert [r.offset for r in got] == list(range(50, 80))
        # the commits after the cut land without restarting anything
        assert wait_committed(c, bootstrap, group, tp, 80) == 80
        if mode == "async":
            assert results and results[-1] is None        # the last async commit succeeded
        # (Like Java, a lost connection alone does not forget the coordinator:
        # the client reconnects, and looks it up again only if requests to it
        # fail; the scripted core tests cover the NOT_COORDINATOR paths.)
        assert c._core.coordinator.known
        live = coordinator_socket(c)
        assert live is not None and live is not dead        # a new connection carried the commits


@pytest.mark.broker        # a Tansu of its own, not the matrix's `broker` fixture
@pytest.mark.parametrize("mode, how", [("async", "assign"), ("auto", "subscribe")])
def test_commits_resume_after_the_broker_restarts(mode, how, tmp_path):
    """A broker restart on the same address (memory storage: topic and group
    start empty again, so the test creates the topic anew). It runs once, not
    once per broker of the matrix: it never used the matrix's broker."""
    port = free_port()
    broker = LocalBroker(port=port, log_path=str(tmp_path / "tansu.log")).start()
    bootstrap = broker.bootstrap_servers
    topic = "restart-" + uuid.uuid4().hex[:8]
    tp = TP(topic, 0)
    group = "g-" + uuid.uuid4().hex[:8]
    results = []
    try:
        produce(bootstrap, topic, 0, 20)
        with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=(mode == "auto"), auto_commit_interval_ms=200,
                      reconnect_backoff_max_ms=200, **GROUP) as c:
            if how == "assign":
                c.assign([tp])
            else:
                c.subscribe([topic])
            assert len(consume_and_commit(c, mode, 20, results)) == 20
            assert wait_committed(c, bootstrap, group, tp, 20) == 20

            epoch = c._core.coordinator.epoch
            broker.stop()
            # Down for a while: commits/heartbeats fail, the coordinator is
            # marked unknown and lookups fail too - the state KAFKA-13840 got
            # stuck in. The consumer keeps polling throughout.
            end = time.monotonic() + 2.5
            while time.monotonic() < end:
                c.poll(0.2)
                if mode == "async":
                    c.commit(asynchronous=True, callback=lambda offsets, err: results.append(err))
            broker = LocalBroker(port=port, log_path=str(tmp_path / "tansu2.log")).start()
            # The new broker has an empty log: the consumer's position (20) is
            # past its end until 25 records are there again.
            produce(bootstrap, topic, 0, 25)
            end = time.monotonic() + 45
            got = []
            while time.monotonic() < end and not any(r.offset == 24 for r in got):
                recs = c.poll(0.2)
                got.extend(recs)
                if recs and mode == "async":
                    c.commit(asynchronous=True, callback=lambda offsets, err: results.append(err))
            assert any(r.offset == 24 for r in got), [r.offset for r in got]
            assert wait_committed(c, bootstrap, group, tp, 25, timeout=30) == 25
            assert c._core.coordinator.epoch > epoch    # rediscovered by itself after the outage
            if mode == "async":
                assert results and results[-1] is None     # (held for the coordinator, as Java does)
    finally:
        broker.stop()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_commits_resume_after_the_kafka_broker_restarts(tmp_path, protocol):
    """The KAFKA-13840 situation against Kafka, with both group protocols: the coordinator
    goes away (the JVM's restart takes seconds), heartbeats, commits and
    lookups fail meanwhile; afterwards the member finds the coordinator by
    itself - rejoining if the broker fenced it - reads on and its auto-commits
    land again."""
    from kio.admin import Admin
    from kio.testing.kafka_broker import KafkaBroker

    broker = KafkaBroker(log_path=str(tmp_path / "kafka.log")).start()
    bootstrap = broker.bootstrap_servers
    topic = "restart-" + uuid.uuid4().hex[:8]
    tp = TP(topic, 0)
    group = "g-" + uuid.uuid4().hex[:8]
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([topic], num_partitions=1, replication_factor=1)
        produce(bootstrap, topic, 0, 20)
        with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      auto_commit_interval_ms=200, reconnect_backoff_max_ms=200,
                      **(CONSUMER_PROTOCOL if protocol == "consumer" else GROUP)) as c:
            c.subscribe([topic])
            assert len(consume_and_commit(c, "auto", 20, [])) == 20
            assert wait_committed(c, bootstrap, group, tp, 20) == 20
            epoch = c._core.coordinator.epoch
            member = c._core.membership.member_id
            broker._stop_process(10.0)   # (stop() would delete the log: restart() in two halves)
            end = time.monotonic() + 2.5
            while time.monotonic() < end:
                c.poll(0.2)
            broker.start()               # same port, same log
            produce(bootstrap, topic, 20, 5)
            got = []
            end = time.monotonic() + 60
            while time.monotonic() < end and not any(r.offset == 24 for r in got):
                got += c.poll(0.2)
            assert [r.offset for r in got] == list(range(20, 25))
            assert wait_committed(c, bootstrap, group, tp, 25, timeout=30) == 25
            assert c._core.coordinator.epoch > epoch       # rediscovered by itself
            if protocol == "consumer":
                assert c._core.membership.member_id == member  # the same (client-made) member id
    finally:
        broker.stop()


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_dead_coordinator_costs_a_lookup_a_second_not_a_busy_loop(bootstrap, make_topic, protocol, caplog):
    """Issue 23 point 7, against Kafka: for ~5 s the group coordinator is a
    broker that is down while the cluster still names it - Kafka answers
    every FindCoordinator, and the test points the answers at a node whose
    port refuses connections (a one-broker cluster cannot stop its
    coordinator and still answer). Each lookup finds a coordinator whose
    connection fails at once. The member has nothing to fetch (paused, as a
    member without partitions): nothing else paces its loop. Before the
    backoff, found/lost alternated as fast as Kafka answered: ~9,000 lookups
    and INFO lines in 5 s (3 s of CPU). Now: retry.backoff.ms growing to
    retry.backoff.max.ms, then one lookup a second, the same node logged
    once, the losses rate-limited; and the member recovers by itself."""
    import logging

    topic = make_topic(1)
    tp = TP(topic, 0)
    group = "g-" + uuid.uuid4().hex[:8]
    produce(bootstrap, topic, 0, 10)
    dead_port = free_port()                        # nothing listens: connections are refused
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  auto_commit_interval_ms=200, **(CONSUMER_PROTOCOL if protocol == "consumer" else GROUP)) as c:
        c.subscribe([topic])
        assert len(consume_and_commit(c, "auto", 10, [])) == 10
        assert wait_committed(c, bootstrap, group, tp, 10) == 10
        c.pause([tp])
        lookups, outage = [], [True]
        with c._lock:
            coord = c._core.coordinator
            poll, on_response = coord.poll, coord.on_response

            def counting_poll(now):
                reqs = poll(now)
                lookups.extend(now for _ in reqs)
                return reqs

            def dead_coordinator(request, body, now):
                if outage[0]:
                    for entry in body.get("coordinators") or [body]:
                        if not entry.get("error_code"):
                            entry.update(node_id=7, port=dead_port)
                return on_response(request, body, now)
            coord.poll, coord.on_response = counting_poll, dead_coordinator
            coord.mark_unknown("test: the coordinator broker went down", c._core._now)
        with caplog.at_level(logging.INFO, logger="kproto.consumer.coordinator"):
            end = time.monotonic() + 5
            while time.monotonic() < end:
                c.poll(0.2)
            outage[0] = False
        during = len(lookups)
        logged = [r.getMessage() for r in caplog.records if r.name == "kproto.consumer.coordinator"]
        # 5 s: ~100+200+400+800 ms, then one a second (and jitter): about 7
        assert 3 <= during <= 15, during
        assert sum("coordinator is node 7" in m for m in logged) == 1, logged
        assert sum("marked unknown" in m for m in logged) <= 2, logged
        # back to the real coordinator within a backoff step, and everything works again
        c.resume([tp])
        produce(bootstrap, topic, 10, 5)
        got = consume_and_commit(c, "auto", 5, [])
        assert [r.offset for r in got] == list(range(10, 15))
        assert wait_committed(c, bootstrap, group, tp, 15) == 15
        assert c._core.coordinator.known and c._core.coordinator.coordinator.node_id != 7
        assert len(lookups) - during <= 3
