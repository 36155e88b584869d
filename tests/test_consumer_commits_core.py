"""Offset commits and committed-offset fetches against scripted brokers, and the
KAFKA-13840 regressions: in assign mode (async and auto commits) and in
subscribe mode, the coordinator goes away (connection cut, NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, failing lookups) and commits resume by themselves."""
import logging

import pytest

from kproto import error_codes as E
from kproto.consumer import (
    CommitFailed, CommitTimeoutError, GroupCoordinator, GroupMembership,
    MemberState, OffsetAndMetadata as OM, OffsetCommitter, OffsetsFetched, PartitionsRevoked,
    TopicPartition as TP,
)
from kproto.consumer.commits import CommitFailedError

try:
    from test_consumer_group_core import GROUP, FakeGroup, GroupNet, find_coordinator_answer
    from scripted_broker import NO_RESPONSE
except ImportError:  # tests/ as a package
    from tests.test_consumer_group_core import GROUP, FakeGroup, GroupNet, find_coordinator_answer
    from tests.scripted_broker import NO_RESPONSE


class OffsetStore:
    """The coordinator side of OffsetCommit / OffsetFetch on every broker: only
    the current coordinator node accepts; the others say NOT_COORDINATOR.
    ``errors`` are group-wide error codes answered (once each) first."""

    def __init__(self, net, node=1):
        self.node = node
        self.committed = {}
        self.errors = []
        self.fetch_errors = []
        self.commits = []       # (node, body) accepted
        for n, b in net.brokers.items():
            b.on("FindCoordinator", lambda req: find_coordinator_answer(self.node))
            b.on("OffsetCommit", lambda req, n=n: self.commit(n, req))
            b.on("OffsetFetch", lambda req, n=n: self.fetch(n, req))

    def commit(self, n, req):
        code = self.errors.pop(0) if self.errors else (0 if n == self.node else 16)
        topics = []
        for t in req.body["topics"]:
            parts = []
            for p in t["partitions"]:
                if code == 0:
                    self.committed[TP(t["name"], p["partition_index"])] = (
                        p["committed_offset"], p["committed_metadata"], p["committed_leader_epoch"])
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        if code == 0:
            self.commits.append((n, req.body))
        return {"topics": topics}

    def fetch(self, n, req):
        code = self.fetch_errors.pop(0) if self.fetch_errors else (0 if n == self.node else 16)
        if req.version >= 8:
            g = req.body["groups"][0]
            topics = g["topics"]
        else:
            topics = req.body["topics"]
        out = []
        for t in topics:
            parts = []
            for p in t["partition_indexes"]:
                off, meta, epoch = self.committed.get(TP(t["name"], p), (-1, "", -1))
                parts.append({"partition_index": p, "committed_offset": off, "metadata": meta,
                              "committed_leader_epoch": epoch, "error_code": 0})
            out.append({"name": t["name"], "partitions": parts})
        return {"error_code": code, "topics": out,
                "groups": [{"group_id": GROUP, "error_code": code, "topics": out}]}


def assign_mode(api_versions=None, **kw):
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
    positions = {}
    c = OffsetCommitter(coord, positions=lambda: dict(positions), **kw)
    net = GroupNet(coord, [c], api_versions=api_versions)
    store = OffsetStore(net)
    return coord, c, net, store, positions


class Results:
    def __init__(self):
        self.items = []

    def __call__(self, offsets, error):
        self.items.append((offsets, error))

    def errors(self):
        return [e for _o, e in self.items]


# == basics ====================================================================================

def test_assign_mode_commit_uses_simple_group_fields_metadata_and_leader_epoch():
    coord, c, net, store, _ = assign_mode()
    h = c.commit_sync({TP("t", 0): OM(42, "meta", 7), ("t", 1): 5}, net.now)
    net.run()
    assert h.done and h.error is None and h.result() == {TP("t", 0): OM(42, "meta", 7), TP("t", 1): OM(5)}
    (req,) = net.requests("OffsetCommit")
    assert req.body["generation_id_or_member_epoch"] == -1 and req.body["member_id"] == ""
    assert req.body["group_instance_id"] is None
    p0 = req.body["topics"][0]["partitions"][0]
    assert (p0["committed_offset"], p0["committed_metadata"], p0["committed_leader_epoch"]) == (42, "meta", 7)
    assert store.committed[TP("t", 0)] == (42, "meta", 7)


def test_empty_commit_succeeds_at_once_without_requests():
    coord, c, net, store, _ = assign_mode()
    h = c.commit_sync({}, 0)
    assert h.done and h.error is None
    net.run()
    assert net.requests("OffsetCommit") == [] and net.requests("FindCoordinator") == []


def test_fetch_committed_v8_and_v7_shapes():
    for versions in (None, {"OffsetFetch": (0, 7)}):
        coord, c, net, store, _ = assign_mode(api_versions=versions)
        c.commit_sync({TP("t", 0): OM(10, "m", 3)}, net.now)
        net.run()
        h = c.fetch_committed([TP("t", 0), TP("t", 1)], net.now)
        net.run()
        assert h.result() == {TP("t", 0): OM(10, "m", 3), TP("t", 1): None}
        (req,) = net.requests("OffsetFetch")
        assert req.body["require_stable"] is (req.version >= 7)
        assert (req.version >= 8) == (versions is None)
        assert net.take_events(OffsetsFetched)[0].offsets == h.result()


def test_fetch_committed_retries_unstable_offsets_and_coordinator_errors():
    coord, c, net, store, _ = assign_mode()
    store.committed[TP("t", 0)] = (3, "", -1)
    store.fetch_errors += [16, 14]                 # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS
    orig = store.fetch
    unstable = {"left": 1}

    def fetch(n, req):
        if unstable["left"] and not store.fetch_errors:
            unstable["left"] -= 1
            body = orig(n, req)
            for g in [body] + body["groups"]:
                for t in g["topics"]:
                    for p in t["partitions"]:
                        p["error_code"] = 88      # UNSTABLE_OFFSET_COMMIT
            return body
        return orig(n, req)

    net.brokers[1].on("OffsetFetch", lambda req: fetch(1, req))
    h = c.fetch_committed([TP("t", 0)], net.now)
    net.run(1000)
    assert h.result() == {TP("t", 0): OM(3, "", -1)}
    assert len(net.requests("OffsetFetch")) == 4 and len(net.requests("FindCoordinator")) == 2


def test_sync_commit_retries_across_coordinator_moves_until_success():
    coord, c, net, store, _ = assign_mode()
    c.commit_sync({TP("t", 0): OM(1)}, net.now)
    net.run()
    store.node = 2                                  # coordinator moved: node 1 says NOT_COORDINATOR
    h = c.commit_sync({TP("t", 0): OM(2)}, net.now)
    net.run(1000)
    assert h.done and h.error is None
    assert [n for n, _ in store.commits] == [1, 2]
    assert coord.coordinator.node_id == 2


def test_sync_commit_times_out_with_a_clear_timeout_error_default_60s():
    coord, c, net, store, _ = assign_mode()
    store.node = 9                                  # nobody is the coordinator ...
    for b in net.brokers.values():                  # ... and lookups keep failing
        b.on("FindCoordinator", lambda req: find_coordinator_answer(error=15))
    h = c.commit_sync({TP("t", 0): OM(1)}, 0)
    net.run(59999)
    assert not h.done
    net.run(1)
    assert h.done and isinstance(h.error, CommitTimeoutError) and isinstance(h.error, TimeoutError)
    assert "timeout expired before successfully committing offsets" in str(h.error)
    with pytest.raises(CommitTimeoutError):
        h.result()


def test_sync_commit_non_retriable_error_fails_at_once():
    coord, c, net, store, _ = assign_mode()
    store.errors.append(12)                         # OFFSET_METADATA_TOO_LARGE
    h = c.commit_sync({TP("t", 0): OM(1, "x" * 10)}, 0)
    net.run()
    assert isinstance(h.error, E.OffsetMetadataTooLargeError)
    assert len(net.requests("OffsetCommit")) == 1


def test_default_async_callback_logs_failures(caplog):
    coord, c, net, store, _ = assign_mode()
    store.errors.append(12)
    with caplog.at_level(logging.ERROR, logger="kproto.consumer.commits"):
        h = c.commit_async({TP("t", 0): OM(1)}, 0)
        net.run()
    assert isinstance(h.error, E.OffsetMetadataTooLargeError)
    assert "Offset commit with offsets" in caplog.text and "OFFSET_METADATA_TOO_LARGE" in caplog.text
    (failed,) = net.take_events(CommitFailed)
    assert not failed.sync


def test_async_commits_keep_their_order():
    coord, c, net, store, _ = assign_mode()
    got = Results()
    for off in (1, 2, 3):
        c.commit_async({TP("t", 0): OM(off)}, net.now, got)
    net.run()
    assert [o[TP("t", 0)].offset for o, e in got.items] == [1, 2, 3] and got.errors() == [None] * 3
    assert store.committed[TP("t", 0)][0] == 3


# == KAFKA-13840: the coordinator goes away, commits resume by themselves =======================

def _take_coordinator_away(how, net, coord, store):
    if how == "connection cut":
        net.cut(coord.connection_id)
    elif how == "NOT_COORDINATOR":
        store.errors.append(16)
    elif how == "COORDINATOR_NOT_AVAILABLE":
        store.errors.append(15)
    elif how == "moved to another broker":
        store.node = 2


HOW = ["connection cut", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "moved to another broker"]


@pytest.mark.parametrize("how", HOW)
def test_kafka_13840_assign_mode_async_commits_resume(how):
    coord, c, net, store, _ = assign_mode()
    got = Results()
    c.commit_async({TP("t", 0): OM(1)}, net.now, got)
    net.run()
    assert got.errors() == [None]
    if how == "connection cut":
        # the cut happens while the next commit is on the wire
        net.brokers[1].script("OffsetCommit", NO_RESPONSE)
        c.commit_async({TP("t", 0): OM(2)}, net.now, got)
        net.run()
    _take_coordinator_away(how, net, coord, store)
    if how != "connection cut":
        c.commit_async({TP("t", 0): OM(2)}, net.now, got)
        net.run()
    # the failed commit reports a retriable error to its callback ...
    assert got.errors()[1] is not None and got.errors()[1].retriable
    # ... and the following commits find the coordinator again and succeed
    for off in (3, 4, 5):
        c.commit_async({TP("t", 0): OM(off)}, net.now, got)
        net.run(200)
    assert got.errors()[-3:] == [None, None, None]
    assert store.committed[TP("t", 0)][0] == 5
    assert len(net.requests("FindCoordinator")) == 2


def test_kafka_13840_assign_mode_async_commits_resume_after_failing_lookups():
    coord, c, net, store, _ = assign_mode()
    got = Results()
    c.commit_async({TP("t", 0): OM(1)}, net.now, got)
    net.run()
    store.errors.append(16)
    answers = [find_coordinator_answer(error=15)] * 3
    net.brokers[0].script("FindCoordinator", *answers)
    for off in range(2, 9):
        c.commit_async({TP("t", 0): OM(off)}, net.now, got)
        net.run(150)
    errs = got.errors()
    assert errs[0] is None
    assert isinstance(errs[1], E.NotCoordinatorError)             # the commit itself
    lookup_failures = [e for e in errs[2:] if e is not None]
    # commits waiting while a lookup failed get that (retriable) error ...
    assert lookup_failures and all(isinstance(e, E.CoordinatorNotAvailableError) for e in lookup_failures)
    # ... and once a lookup succeeds (3 failures, backoff 100/200/400 ms) commits go through again
    assert errs[-1] is None and store.committed[TP("t", 0)][0] == 8
    assert len(net.requests("FindCoordinator")) == 1 + 3 + 1


@pytest.mark.parametrize("how", HOW)
def test_kafka_13840_assign_mode_auto_commits_resume(how):
    coord, c, net, store, positions = assign_mode(auto_commit_interval_ms=1000)
    positions[TP("t", 0)] = OM(0)
    c.poll_called(net.now)                           # starts the interval
    offset = 0

    def app_polls_for(ms):
        nonlocal offset
        end = net.now + ms
        while net.now < end:
            offset += 10
            positions[TP("t", 0)] = OM(offset)       # the application consumed more
            c.poll_called(net.now)
            net.run(100)

    app_polls_for(2500)
    assert store.committed[TP("t", 0)][0] > 0
    if how == "connection cut":
        net.brokers[1].script("OffsetCommit", NO_RESPONSE)
        app_polls_for(1000)
    _take_coordinator_away(how, net, coord, store)
    app_polls_for(1000)
    failed = net.take_events(CommitFailed)
    assert failed and all(f.error.retriable for f in failed)
    before = len(store.commits)
    app_polls_for(3000)
    # auto-commits resumed on their own (one per interval) and the committed offset is recent
    assert len(store.commits) - before >= 2
    assert store.committed[TP("t", 0)][0] >= offset - 110
    assert len(net.requests("FindCoordinator")) == 2


@pytest.mark.parametrize("how", HOW)
def test_kafka_13840_subscribe_mode_commits_resume(how):
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
    positions = {}
    m = GroupMembership(coord, assignment_strategy=["range"], session_timeout_ms=10000,
                        heartbeat_interval_ms=1000)
    c = OffsetCommitter(coord, membership=m, positions=lambda: dict(positions), auto_commit_interval_ms=1000)
    m.prepare_join = c.commit_before_rebalance
    net = GroupNet(coord, [m, c])
    store = OffsetStore(net)
    FakeGroup(net.brokers[1])
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run()
    assert m.state is MemberState.STABLE
    got = Results()
    c.commit_async({TP("t", 0): OM(1)}, net.now, got)
    net.run()
    (_n, body), = store.commits
    assert body["generation_id_or_member_epoch"] == 1 and body["member_id"] == "member-A"
    if how == "moved to another broker":
        FakeGroup(net.brokers[2])
    if how == "connection cut":
        net.brokers[1].script("OffsetCommit", NO_RESPONSE)
        c.commit_async({TP("t", 0): OM(2)}, net.now, got)
        net.run()
    _take_coordinator_away(how, net, coord, store)
    if how != "connection cut":
        c.commit_async({TP("t", 0): OM(2)}, net.now, got)
        net.run()
    assert got.errors()[1] is not None and got.errors()[1].retriable
    for off in (3, 4):
        m.poll_called(net.now)
        c.commit_async({TP("t", 0): OM(off)}, net.now, got)
        net.run(500)
    assert got.errors()[-2:] == [None, None] and store.committed[TP("t", 0)][0] == 4
    h = c.commit_sync({TP("t", 0): OM(9)}, net.now)
    net.run(200)
    assert h.error is None and store.committed[TP("t", 0)][0] == 9
    assert m.state is MemberState.STABLE


# == group-mode rules =============================================================================

def subscribed(**kw):
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
    positions = {}
    m = GroupMembership(coord, assignment_strategy=["range"], session_timeout_ms=10000,
                        heartbeat_interval_ms=1000)
    c = OffsetCommitter(coord, membership=m, positions=lambda: dict(positions), **kw)
    m.prepare_join = c.commit_before_rebalance
    net = GroupNet(coord, [m, c])
    store = OffsetStore(net)
    group = FakeGroup(net.brokers[1])
    m.update_metadata({"t": 2}, 0)
    m.subscribe(["t"], 0)
    m.poll_called(0)
    net.run()
    assert m.state is MemberState.STABLE
    return coord, m, c, net, store, group, positions


def test_auto_commit_before_eager_revocation_and_join():
    coord, m, c, net, store, group, positions = subscribed()
    positions.update({TP("t", 0): OM(11), TP("t", 1): OM(22)})
    net.take_events()
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    net.run(1000)
    apis = net.sent_apis()
    i_commit = apis.index("OffsetCommit")
    assert "JoinGroup" in apis[i_commit:] and "Heartbeat" in apis[:i_commit]
    # the commit carried the OLD generation (before the rebalance) and preceded revocation
    (_n, body), = store.commits
    assert body["generation_id_or_member_epoch"] == 1
    assert store.committed[TP("t", 1)][0] == 22
    assert net.take_events(PartitionsRevoked)
    assert m.generation_id == 2


def test_pre_rebalance_commit_retries_retriable_errors():
    coord, m, c, net, store, group, positions = subscribed()
    positions.update({TP("t", 0): OM(5)})
    store.errors += [14, 14]                     # COORDINATOR_LOAD_IN_PROGRESS twice
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    net.run(2000)
    assert store.committed[TP("t", 0)][0] == 5
    assert m.state is MemberState.STABLE and m.generation_id == 2


def test_commit_on_close_then_leave():
    coord, m, c, net, store, group, positions = subscribed()
    positions.update({TP("t", 0): OM(7)})
    h = c.close(net.now)
    net.run()
    assert h.done and h.error is None and store.committed[TP("t", 0)][0] == 7
    m.close(net.now)
    net.run()
    assert m.closed and net.sent_apis()[-1] == "LeaveGroup"
    assert OffsetCommitter(coord, enable_auto_commit=False).close(net.now) is None


def test_commit_illegal_generation_fails_with_commit_failed_and_resets_membership():
    coord, m, c, net, store, group, positions = subscribed(enable_auto_commit=False)
    store.errors.append(22)
    h = c.commit_sync({TP("t", 0): OM(1)}, net.now)
    net.run()
    assert isinstance(h.error, CommitFailedError) and not h.error.retriable
    net.run(500)
    assert m.generation_id == 2 and m.state is MemberState.STABLE   # rejoined


def test_commit_during_rebalance_fails_with_rebalance_in_progress():
    coord, m, c, net, store, group, positions = subscribed(enable_auto_commit=False)
    group.errors["Heartbeat"].append(27)
    net.brokers[1].script("JoinGroup", NO_RESPONSE)
    m.poll_called(net.now)
    net.run(1000)
    assert m.state is MemberState.JOINING
    h = c.commit_sync({TP("t", 0): OM(1)}, net.now)
    net.run()
    assert isinstance(h.error, E.RebalanceInProgressError)


def test_auto_commit_interval_is_a_minimum_driven_by_poll():
    coord, c, net, store, positions = assign_mode(auto_commit_interval_ms=5000)
    positions[TP("t", 0)] = OM(1)
    assert c.poll_called(0) is None                       # starts the interval
    net.run(20000)                                         # the app does not poll: no commit
    assert net.requests("OffsetCommit") == []
    h = c.poll_called(net.now)
    net.run()
    assert h is not None and h.done and h.error is None
    assert c.poll_called(net.now + 4999) is None
    assert c.poll_called(net.now + 5000) is not None


def test_static_member_commit_carries_group_instance_id():
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
    m = GroupMembership(coord, assignment_strategy=["range"], group_instance_id="inst-7",
                        session_timeout_ms=10000, heartbeat_interval_ms=1000)
    c = OffsetCommitter(coord, membership=m, enable_auto_commit=False)
    net = GroupNet(coord, [m, c])
    OffsetStore(net)
    FakeGroup(net.brokers[1])
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run()
    h = c.commit_sync({TP("t", 0): OM(3)}, net.now)
    net.run()
    assert h.error is None
    (req,) = net.requests("OffsetCommit")
    assert req.version >= 7 and req.body["group_instance_id"] == "inst-7"
    assert req.body["member_id"] == m.member_id and req.body["generation_id_or_member_epoch"] == 1


def test_pre_rebalance_hook_does_not_commit_lost_partitions():
    coord, m, c, net, store, group, positions = subscribed()
    positions.update({TP("t", 0): OM(5)})
    group.errors["Heartbeat"].append(25)           # UNKNOWN_MEMBER_ID: partitions lost
    group.first = True
    m.poll_called(net.now)
    net.run(1000)
    assert store.commits == [] and m.state is MemberState.STABLE


def test_commit_from_the_revocation_listener_uses_the_old_generation_before_rejoining():
    # Java runs onPartitionsRevoked inside onJoinPrepare, so commitSync there works;
    # here the listener runs between polls and the JoinGroup waits for its commit.
    coord, m, c, net, store, group, positions = subscribed(enable_auto_commit=False)
    handles = []
    net.take_events()
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    for _ in range(400):
        net.now += 5
        net.step()
        for ev in net.take_events(PartitionsRevoked):          # the "listener"
            handles.append(c.commit_sync({tp: OM(100 + tp.partition) for tp in ev.partitions}, net.now))
        if m.generation_id == 2 and m.state is MemberState.STABLE:
            break
    (h,) = handles
    assert h.done and h.error is None
    (_n, body), = store.commits
    assert body["generation_id_or_member_epoch"] == 1
    apis = net.sent_apis()
    last_join = max(i for i, a in enumerate(apis) if a == "JoinGroup")
    assert apis.index("OffsetCommit") < last_join
    assert m.state is MemberState.STABLE and m.generation_id == 2


def test_commit_authorization_errors_are_not_retried():
    coord, c, net, store, _ = assign_mode()
    net.brokers[1].script("OffsetCommit", {"topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "error_code": 29}]},
        {"name": "b", "partitions": [{"partition_index": 0, "error_code": 0}]}]})
    h = c.commit_sync({TP("a", 0): OM(1), TP("b", 0): OM(1)}, 0)
    net.run()
    assert isinstance(h.error, E.TopicAuthorizationFailedError) and "['a']" in str(h.error)
    store.errors.append(30)
    h = c.commit_sync({TP("a", 0): OM(1)}, net.now)
    net.run()
    assert isinstance(h.error, E.GroupAuthorizationFailedError)
    assert len(net.requests("OffsetCommit")) == 2


def test_sync_commit_fails_at_once_when_the_lookup_is_refused_for_good():
    coord, c, net, store, _ = assign_mode()
    for b in net.brokers.values():
        b.on("FindCoordinator", lambda req: find_coordinator_answer(error=30))
    h = c.commit_sync({TP("t", 0): OM(1)}, 0)
    net.run()
    assert isinstance(h.error, E.GroupAuthorizationFailedError) and net.now < 1000
