"""Coordinator discovery and group membership against scripted brokers.

The harness (:class:`GroupNet`) is a tiny sans-IO driver: real
:class:`kproto.connection.Connection` objects talking to
:class:`ScriptedBroker` s, so every request goes through version negotiation
and the codec; time is a number the test advances.
"""
import pytest

from kproto import error_codes as E
from kproto.connection import Connection, RequestCompleted, RequestFailed
from kproto.consumer import (
    ANY, TopicPartition as TP, CoordinatorFound, CoordinatorLookupFailed,
    CoordinatorLost, CoordinatorState, GroupCoordinator, GroupMembership, MemberState,
    PartitionsAssigned, PartitionsLost, PartitionsRevoked, GroupFatalError,
)
from kproto.consumer.assignors import (
    decode_assignment, decode_subscription, encode_assignment, encode_subscription,
)
from kproto.consumer.membership import MetadataNeeded
from kproto.errors import ConnectionClosedError, RequestTimedOutError, UnsupportedVersionError

try:
    from scripted_broker import NO_RESPONSE, ScriptedBroker, pump
except ImportError:  # tests/ as a package
    from tests.scripted_broker import NO_RESPONSE, ScriptedBroker, pump

GROUP = "g1"


class _NoJitter:
    """An rng for the backoff whose jitter factor is exactly 1 (U(0.8, 1.2) at 0.5)."""

    def random(self):
        return 0.5


NO_JITTER = _NoJitter()


def find_coordinator_answer(node_id=1, error=0, key=GROUP):
    """Both response shapes in one dict: the codec writes the fields of the
    version the client asked for (top-level for v0-3, `coordinators` for v4+)."""
    host = f"broker{node_id}"
    return {"error_code": error, "node_id": node_id if not error else -1, "host": host if not error else "",
            "port": 9092 + node_id, "coordinators": [{"key": key, "node_id": node_id if not error else -1,
                                                       "host": host if not error else "",
                                                       "port": 9092 + node_id, "error_code": error}]}


class _ScriptedConnection(Connection):
    """A Connection that also holds its scripted broker's channel (``broker``):
    compiled, Connection is an extension type whose instances take no
    attribute of a test's own; a Python subclass's do."""


class GroupNet:
    """A sans-IO driver for the consumer group machines over scripted brokers.

    ``machines`` are polled in order every step; requests for ANY go to node 0,
    for COORDINATOR to the coordinator's node (own connection id, as Java);
    responses and failures go back to ``req.owner``. On CoordinatorLost the
    coordinator connection is closed, failing what is in flight on it (Java's
    markCoordinatorUnknown does the same)."""

    def __init__(self, coordinator, machines=(), brokers=None, api_versions=None, request_timeout_ms=30000):
        self.coordinator = coordinator
        self.machines = [coordinator, *machines]
        self.brokers = brokers or {n: ScriptedBroker(api_versions=api_versions, node_id=n) for n in (0, 1, 2)}
        self.request_timeout_ms = request_timeout_ms
        self.conns = {}
        self.inflight = {}            # InFlightRequest -> OutgoingRequest
        self.sent = []                # (node_id, api_name, body) in order
        self.events = []              # every machine event, in order
        self.now = 0
        for n, b in self.brokers.items():
            b.on("FindCoordinator", lambda req: find_coordinator_answer(1))

    # -- plumbing ------------------------------------------------------------------
    def _conn(self, conn_id, node_id):
        c = self.conns.get(conn_id)
        if c is None or not c.is_connected:
            c = _ScriptedConnection(conn_id, f"broker{node_id}", 9092 + node_id,
                                    request_timeout_ms=self.request_timeout_ms)
            c.broker = self.brokers[node_id].channel()
            c.start_connect(self.now)
            c.connection_made(self.now)
            self._dispatch(pump(c, c.broker, self.now))
            self.conns[conn_id] = c
        return c

    def _send(self, req):
        if req.destination == ANY:
            node, conn_id = 0, 0
        else:
            info = self.coordinator.coordinator
            if info is None:
                req.owner.on_failure(req, ConnectionClosedError("no coordinator"), self.now)
                return
            node, conn_id = info.node_id, info.connection_id
        conn = self._conn(conn_id, node)
        if conn.versions.pick(req.api_name) < req.min_version:
            req.owner.on_failure(req, UnsupportedVersionError(
                f"{req.api_name} needs v{req.min_version}+"), self.now)
            return
        self.sent.append((node, req.api_name, req.body))
        ifr = conn.send(req.api_name, req.body, self.now, timeout_ms=req.timeout_ms)
        self.inflight[ifr] = req

    def _dispatch(self, events):
        for ev in events:
            if isinstance(ev, (RequestCompleted, RequestFailed)):
                req = self.inflight.pop(ev.request, None)
                if req is None:
                    continue
                if isinstance(ev, RequestCompleted):
                    req.owner.on_response(req, ev.body, self.now)
                    coord = self.coordinator
                    if req.destination != ANY and coord.known and req.coordinator_epoch == coord.epoch:
                        coord.confirmed(self.now)      # as ConsumerCore._group_done does
                else:
                    req.owner.on_failure(req, ev.error, self.now)

    def _drain_events(self):
        for m in self.machines:
            for ev in m.events():
                self.events.append(ev)
                if isinstance(ev, CoordinatorLost):
                    c = self.conns.get(ev.coordinator.connection_id)
                    if c is not None and c.is_connected:
                        self._dispatch(c.close("coordinator lost", self.now))

    def step(self):
        for m in self.machines:
            for req in m.poll(self.now):
                self._send(req)
            self._drain_events()
        for c in list(self.conns.values()):
            if c.is_connected:
                self._dispatch(pump(c, c.broker, self.now))
                self._dispatch(c.check_timeouts(self.now))
        self._drain_events()

    def run(self, ms=0, steps=8):
        """Advance the clock to now+ms in deadline-sized hops, stepping as we go."""
        end = self.now + ms
        for _ in range(steps):
            self.step()
        while self.now < end:
            ds = [d for d in (m.next_deadline(self.now) for m in self.machines) if d is not None]
            ds += [c.next_deadline(self.now) for c in self.conns.values() if c.is_connected]
            ds = [d for d in ds if d is not None and d > self.now]
            self.now = min([end] + ds)
            for _ in range(steps):
                self.step()

    def cut(self, conn_id):
        """The connection drops (broker crash, network)."""
        c = self.conns[conn_id]
        self._dispatch(c.connection_lost(self.now, ConnectionResetError("cut by test")))

    def take_events(self, kind=None):
        out = [e for e in self.events if kind is None or isinstance(e, kind)]
        self.events = [e for e in self.events if not (kind is None or isinstance(e, kind))]
        return out

    def sent_apis(self):
        return [api for _n, api, _b in self.sent]

    def requests(self, api, node=None):
        return [r for n, b in self.brokers.items() if node is None or n == node for r in b.requests_of(api)]


# == coordinator discovery =================================================================

def test_find_coordinator_v4_batched_keys():
    coord = GroupCoordinator(GROUP)
    net = GroupNet(coord)
    coord.want()
    net.run()
    assert coord.state is CoordinatorState.KNOWN and coord.coordinator.node_id == 1
    (req,) = net.requests("FindCoordinator")
    assert req.version >= 4 and req.body["coordinator_keys"] == [GROUP]
    assert isinstance(net.take_events(CoordinatorFound)[0], CoordinatorFound)
    assert coord.connection_id == 2**31 - 2


def test_find_coordinator_v3_single_key_shape():
    coord = GroupCoordinator(GROUP)
    net = GroupNet(coord, api_versions={"FindCoordinator": (0, 3)})
    coord.want()
    net.run()
    (req,) = net.requests("FindCoordinator")
    assert req.version == 3 and req.body["key"] == GROUP and req.body["key_type"] == 0
    assert coord.known and coord.coordinator.host == "broker1"


def test_lookup_not_wanted_sends_nothing():
    coord = GroupCoordinator(GROUP)
    net = GroupNet(coord)
    net.run(1000)
    assert net.requests("FindCoordinator") == [] and coord.next_deadline(0) is None


@pytest.mark.parametrize("versions", [None, {"FindCoordinator": (0, 3)}])
def test_lookup_error_response_backs_off_then_retries(versions):
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100, rng=NO_JITTER)
    net = GroupNet(coord, api_versions=versions)
    net.brokers[0].script("FindCoordinator", find_coordinator_answer(error=15),
                          find_coordinator_answer(error=15))
    coord.want()
    net.run()
    assert coord.state is CoordinatorState.UNKNOWN and not coord.lookup_in_flight
    assert len(net.requests("FindCoordinator")) == 1
    assert coord.next_deadline(net.now) == 100            # backoff, not a busy loop
    net.run(99)
    assert len(net.requests("FindCoordinator")) == 1
    net.run(1)
    assert len(net.requests("FindCoordinator")) == 2      # 2nd failure: backoff doubles
    net.run(199)
    assert not coord.known
    net.run(1)
    assert coord.known and len(net.requests("FindCoordinator")) == 3
    fails = net.take_events(CoordinatorLookupFailed)
    assert len(fails) == 2 and all(not f.fatal and f.error.code == 15 for f in fails)


def test_lookup_connection_failure_resets_in_flight_state():
    coord = GroupCoordinator(GROUP, retry_backoff_ms=50, rng=NO_JITTER)
    net = GroupNet(coord)
    net.brokers[0].script("FindCoordinator", NO_RESPONSE)
    coord.want()
    net.run()
    assert coord.lookup_in_flight and coord.state is CoordinatorState.LOOKING_UP
    net.cut(0)
    assert not coord.lookup_in_flight and coord.state is CoordinatorState.UNKNOWN
    net.run(50)
    assert coord.known


def test_lookup_request_timeout_resets_in_flight_state():
    coord = GroupCoordinator(GROUP, retry_backoff_ms=50, rng=NO_JITTER)
    net = GroupNet(coord, request_timeout_ms=1000)
    net.brokers[0].script("FindCoordinator", NO_RESPONSE)
    coord.want()
    net.run(1000)                                  # the connection times the request out
    (fail,) = net.take_events(CoordinatorLookupFailed)
    assert isinstance(fail.error, RequestTimedOutError) and not fail.fatal
    net.run(50)
    assert coord.known


def test_lookup_that_the_driver_never_answers_expires_by_itself():
    coord = GroupCoordinator(GROUP, request_timeout_ms=500, retry_backoff_ms=10, rng=NO_JITTER)
    coord.want()
    (req,) = coord.poll(0)
    assert coord.poll(100) == []                   # in flight: no duplicate
    assert coord.next_deadline(100) == 500
    assert coord.poll(500) == []                   # expired: reset, backoff starts
    assert not coord.lookup_in_flight
    (req2,) = coord.poll(510)
    coord.on_response(req, find_coordinator_answer(1), 511)   # the stale answer is ignored
    assert not coord.known
    coord.on_response(req2, find_coordinator_answer(2), 512)
    assert coord.known and coord.coordinator.node_id == 2


def test_fatal_lookup_error_is_reported_and_not_retried_until_wanted_again():
    coord = GroupCoordinator(GROUP)
    net = GroupNet(coord)
    net.brokers[0].script("FindCoordinator", find_coordinator_answer(error=30))
    coord.want()
    net.run(5000)
    (fail,) = net.take_events(CoordinatorLookupFailed)
    assert fail.fatal and isinstance(fail.error, E.GroupAuthorizationFailedError)
    assert len(net.requests("FindCoordinator")) == 1
    coord.want()
    net.run(1000)
    assert coord.known


def test_mark_unknown_ignores_reports_about_an_older_coordinator():
    coord = GroupCoordinator(GROUP)
    net = GroupNet(coord)
    coord.want()
    net.run()
    old_epoch = coord.epoch
    assert coord.mark_unknown("NOT_COORDINATOR", net.now, old_epoch)
    net.run(150)             # (lost before it answered anything: looked up after the backoff)
    assert coord.known and coord.epoch == old_epoch + 1
    assert not coord.mark_unknown("late failure from the old one", net.now, old_epoch)
    assert coord.known
    (lost,) = net.take_events(CoordinatorLost)
    assert lost.reason == "NOT_COORDINATOR"


# == membership ===============================================================================

def member_sub(body, name):
    proto = next(p for p in body["protocols"] if p["name"] == name)
    return decode_subscription(proto["metadata"])


class FakeGroup:
    """A minimal single-member group coordinator script: JoinGroup answers with
    MEMBER_ID_REQUIRED first for unknown dynamic members (KIP-394), then makes
    the member leader of a new generation; ``others`` are extra members (their
    subscriptions) shown to the leader. SyncGroup hands the leader's own
    assignment back."""

    def __init__(self, broker, others=None, first_member_id_required=True):
        self.generation = 0
        self.others = others or {}
        self.first = first_member_id_required
        self.assignments = {}
        self.errors = {"JoinGroup": [], "SyncGroup": [], "Heartbeat": [], "OffsetCommit": []}
        broker.on("JoinGroup", self.join)
        broker.on("SyncGroup", self.sync)
        broker.on("Heartbeat", self.heartbeat)
        broker.on("LeaveGroup", lambda req: {"error_code": 0, "members": []})

    def join(self, req):
        if self.errors["JoinGroup"]:
            return {"error_code": self.errors["JoinGroup"].pop(0), "member_id": req.body["member_id"]}
        b = req.body
        if self.first and not b["member_id"] and not b["group_instance_id"]:
            self.first = False
            return {"error_code": 79, "member_id": "member-A", "generation_id": -1}
        member_id = b["member_id"] or "member-A"
        self.generation += 1
        proto = b["protocols"][0]
        members = [{"member_id": member_id, "group_instance_id": b["group_instance_id"],
                    "metadata": proto["metadata"]}]
        for mid, meta in self.others.items():
            members.append({"member_id": mid, "group_instance_id": None, "metadata": meta})
        return {"error_code": 0, "generation_id": self.generation, "protocol_type": "consumer",
                "protocol_name": proto["name"], "leader": member_id, "member_id": member_id,
                "members": members}

    def sync(self, req):
        if self.errors["SyncGroup"]:
            return {"error_code": self.errors["SyncGroup"].pop(0)}
        b = req.body
        self.assignments = {a["member_id"]: decode_assignment(a["assignment"]) for a in b["assignments"]}
        mine = next((a["assignment"] for a in b["assignments"] if a["member_id"] == b["member_id"]), b"")
        return {"error_code": 0, "protocol_type": "consumer", "protocol_name": b["protocol_name"],
                "assignment": mine}

    def heartbeat(self, req):
        if self.errors["Heartbeat"]:
            return {"error_code": self.errors["Heartbeat"].pop(0)}
        return {"error_code": 0}


def make_member(strategy=("range",), instance=None, prepare_join=None, **kw):
    coord = GroupCoordinator(GROUP, retry_backoff_ms=100)
    m = GroupMembership(coord, assignment_strategy=strategy, group_instance_id=instance,
                        session_timeout_ms=kw.pop("session_timeout_ms", 10000),
                        heartbeat_interval_ms=kw.pop("heartbeat_interval_ms", 1000),
                        max_poll_interval_ms=kw.pop("max_poll_interval_ms", 60000),
                        prepare_join=prepare_join, **kw)
    net = GroupNet(coord, [m])
    group = FakeGroup(net.brokers[1])
    return coord, m, net, group


def joined(strategy=("range",), topics=("t",), partitions=None, **kw):
    coord, m, net, group = make_member(strategy, **kw)
    m.update_metadata(partitions or {"t": 4}, 0)
    m.subscribe(topics, 0)
    m.poll_called(0)
    net.run()
    assert m.state is MemberState.STABLE, m.state
    return coord, m, net, group


def test_join_with_member_id_required_then_leader_assigns_and_syncs():
    coord, m, net, group = make_member(("range", "roundrobin"))
    m.update_metadata({"t": 3, "other": 1}, 0)
    m.subscribe(["t"], 0)
    m.poll_called(0)
    net.run()
    joins = net.requests("JoinGroup")
    assert [j.body["member_id"] for j in joins] == ["", "member-A"]      # KIP-394 rejoin
    j = joins[-1].body
    assert j["protocol_type"] == "consumer" and [p["name"] for p in j["protocols"]] == ["range", "roundrobin"]
    assert j["rebalance_timeout_ms"] == 60000 and j["session_timeout_ms"] == 10000
    assert member_sub(j, "range").topics == ("t",)
    (sync,) = net.requests("SyncGroup")
    assert sync.body["generation_id"] == 1 and sync.body["member_id"] == "member-A"
    assert m.state is MemberState.STABLE and m.is_leader and m.generation_id == 1
    assert m.assignment == {TP("t", 0), TP("t", 1), TP("t", 2)}
    (ev,) = net.take_events(PartitionsAssigned)
    assert ev.partitions == (TP("t", 0), TP("t", 1), TP("t", 2)) and ev.generation_id == 1
    # The JoinGroup may take the whole rebalance timeout on the broker: longer request timeout.
    assert m.commit_generation() == (1, "member-A", None)


def test_heartbeats_at_the_interval_and_session_is_kept():
    coord, m, net, group = joined()
    start = len(net.requests("Heartbeat"))
    for _ in range(5):
        m.poll_called(net.now)
        net.run(1000)
    hbs = net.requests("Heartbeat")[start:]
    assert len(hbs) == 5
    assert hbs[0].body == {"group_id": GROUP, "generation_id": 1, "member_id": "member-A",
                           "group_instance_id": None}
    assert m.state is MemberState.STABLE and coord.known


def test_leader_with_other_members_runs_the_chosen_assignor():
    coord, m, net, group = make_member(("roundrobin",))
    group.others = {"member-B": encode_subscription(["t", "u"])}
    m.update_metadata({"t": 2, "u": 2}, 0)
    m.subscribe(["t"], 0)
    m.poll_called(0)
    net.run()
    assert group.assignments["member-A"].partitions == (TP("t", 0),)
    assert group.assignments["member-B"].partitions == (TP("t", 1), TP("u", 0), TP("u", 1))
    assert m.assignment == {TP("t", 0)}


def test_leader_waits_for_metadata_of_other_members_topics():
    coord, m, net, group = make_member(("range",))
    group.others = {"member-B": encode_subscription(["x"])}
    m.update_metadata({"t": 2}, 0)
    m.subscribe(["t"], 0)
    m.poll_called(0)
    net.run()
    assert m.state is MemberState.AWAITING_METADATA
    (need,) = net.take_events(MetadataNeeded)
    assert need.topics == ("x",) and "x" in m.metadata_topics()
    assert net.requests("SyncGroup") == []
    m.update_metadata({"t": 2, "x": 3}, net.now)
    net.run()
    assert group.assignments["member-B"].partitions == (TP("x", 0), TP("x", 1), TP("x", 2))
    assert m.state is MemberState.STABLE


def test_rebalance_in_progress_eager_revokes_everything_before_rejoining():
    coord, m, net, group = joined(("range",))
    net.take_events()
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    net.run(1000)
    evs = net.take_events()
    revoked = [e for e in evs if isinstance(e, PartitionsRevoked)]
    assigned = [e for e in evs if isinstance(e, PartitionsAssigned)]
    assert revoked[0].partitions == (TP("t", 0), TP("t", 1), TP("t", 2), TP("t", 3))
    assert evs.index(revoked[0]) < evs.index(assigned[0])
    assert assigned[0].partitions == revoked[0].partitions and assigned[0].generation_id == 2
    last_join = net.requests("JoinGroup")[-1].body
    assert last_join["member_id"] == "member-A"        # generation kept: a normal rejoin
    assert member_sub(last_join, "range").owned_partitions == ()   # eager: nothing owned anymore


def test_revocation_is_emitted_one_poll_before_the_join_request():
    coord, m, net, group = joined(("range",))
    net.take_events()
    m.subscribe(["t", "u"], net.now)       # subscription change -> rejoin
    out = m.poll(net.now)
    assert out == [] and [type(e) for e in m.events()] == [PartitionsRevoked]
    out = m.poll(net.now)
    assert [r.api_name for r in out] == ["JoinGroup"]


def test_cooperative_only_revokes_what_is_lost():
    coord, m, net, group = joined(("cooperative-sticky",), topics=("t", "u"), partitions={"t": 2, "u": 2})
    net.take_events()
    assert m.assignment == {TP("t", 0), TP("t", 1), TP("u", 0), TP("u", 1)}
    m.subscribe(["t"], net.now)           # u dropped: only u revoked before rejoining
    m.poll_called(net.now)
    net.run()
    evs = net.take_events()
    revoked = [e for e in evs if isinstance(e, PartitionsRevoked)]
    assert [r.partitions for r in revoked] == [(TP("u", 0), TP("u", 1))]
    assert [e.partitions for e in evs if isinstance(e, PartitionsAssigned)] == [()]   # nothing new
    join = net.requests("JoinGroup")[-1].body
    s = member_sub(join, "cooperative-sticky")
    assert s.owned_partitions == (TP("t", 0), TP("t", 1)) and s.generation_id == 1
    assert m.assignment == {TP("t", 0), TP("t", 1)} and m.generation_id == 2


def test_cooperative_heartbeat_rebalance_keeps_partitions_and_revokes_moved_ones_after_sync():
    coord, m, net, group = joined(("cooperative-sticky",), partitions={"t": 4})
    net.take_events()
    # A second member appears: the leader (us) must give up 2 partitions - first
    # revoked (held back by the assignor), then the follow-up rebalance.
    group.others = {"member-B": encode_subscription(["t"], owned_partitions=(), generation_id=-1)}
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    net.run(1000, steps=3)
    evs = net.take_events()
    revoked = [e.partitions for e in evs if isinstance(e, PartitionsRevoked)]
    assert len(revoked) == 1 and len(revoked[0]) == 2      # revoked after SyncGroup only
    assert len(m.assignment) == 2
    assert group.assignments["member-B"].partitions == ()   # held back this round
    # the follow-up rebalance: B (now) gets the two partitions we gave up
    group.others = {"member-B": encode_subscription(["t"], owned_partitions=(), generation_id=2)}
    net.run(10)
    assert set(group.assignments["member-B"].partitions) == set(revoked[0])
    assert m.state is MemberState.STABLE and len(m.assignment) == 2


def test_cooperative_rejoin_waits_until_the_revocation_was_handed_out():
    # The SyncGroup answer revokes partitions; the driver may poll the machine
    # again before it takes the events (the consumer core does, in one step).
    # The JoinGroup that follows must wait: it tells the group the partitions
    # are free, and the listener (and its commit) has not run yet.
    coord, m, net, group = joined(("cooperative-sticky",), partitions={"t": 4})
    net.take_events()
    joins = len(net.requests("JoinGroup"))
    m.events = lambda: []                              # not taken by the driver yet
    group.others = {"member-B": encode_subscription(["t"], owned_partitions=(), generation_id=-1)}
    group.errors["Heartbeat"].append(27)
    m.poll_called(net.now)
    net.run(1000, steps=6)
    assert len(net.requests("JoinGroup")) == joins + 1      # the rebalance's, not the follow-up
    del m.events                                       # the driver takes them now
    (revoked,) = [e for e in m.events() if isinstance(e, PartitionsRevoked)]
    assert len(revoked.partitions) == 2
    net.run(10)
    assert len(net.requests("JoinGroup")) == joins + 2


@pytest.mark.parametrize("code", [22, 25])
def test_illegal_generation_or_unknown_member_resets_and_partitions_are_lost(code):
    coord, m, net, group = joined(("range",))
    net.take_events()
    group.errors["Heartbeat"].append(code)
    group.first = True                      # the new dynamic member must get an id again
    m.poll_called(net.now)
    net.run(1000)
    evs = net.take_events()
    lost = [e for e in evs if isinstance(e, PartitionsLost)]
    assert lost and lost[0].partitions == (TP("t", 0), TP("t", 1), TP("t", 2), TP("t", 3))
    assert not [e for e in evs if isinstance(e, PartitionsRevoked)]     # lost, not revoked
    joins = net.requests("JoinGroup")
    assert joins[-2].body["member_id"] == ""                   # member id was reset
    assert m.state is MemberState.STABLE and m.generation_id == 2


def test_fenced_instance_id_is_fatal():
    coord, m, net, group = joined(("range",), instance="inst-1")
    assert net.requests("JoinGroup")[0].body["group_instance_id"] == "inst-1"
    assert len(net.requests("JoinGroup")) == 1            # static: no MEMBER_ID_REQUIRED round
    group.errors["Heartbeat"].append(82)
    m.poll_called(net.now)
    net.run(2000)
    (fatal,) = net.take_events(GroupFatalError)
    assert isinstance(fatal.error, E.FencedInstanceIdError)
    assert m.state is MemberState.FATAL and m.poll(net.now) == []


@pytest.mark.parametrize("code,error", [(23, E.InconsistentGroupProtocolError),
                                        (26, E.InvalidSessionTimeoutError),
                                        (30, E.GroupAuthorizationFailedError),
                                        (81, E.GroupMaxSizeReachedError)])
def test_non_retriable_join_errors_are_fatal(code, error):
    coord, m, net, group = make_member()
    group.errors["JoinGroup"].append(code)
    m.subscribe(["t"], 0)
    net.run()
    (fatal,) = net.take_events(GroupFatalError)
    assert isinstance(fatal.error, error) and m.state is MemberState.FATAL


def test_join_coordinator_error_rediscovers_then_joins():
    coord, m, net, group = make_member()
    group.errors["JoinGroup"].append(16)              # NOT_COORDINATOR
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run(500)
    assert len(net.requests("FindCoordinator")) == 2
    assert m.state is MemberState.STABLE and coord.known


def test_coordinator_connection_lost_during_join_and_heartbeat_recovers():
    coord, m, net, group = joined()
    conn_id = coord.connection_id
    net.cut(conn_id)                                       # nothing in flight: no change yet
    m.poll_called(net.now)
    net.run(1000)                                          # heartbeat reconnects and works
    assert m.state is MemberState.STABLE
    net.brokers[1].script("Heartbeat", NO_RESPONSE)
    m.poll_called(net.now)
    net.run(1000)
    net.cut(conn_id)                                       # heartbeat in flight fails
    assert not coord.known
    m.poll_called(net.now)
    net.run(1000)
    assert coord.known and m.state is MemberState.STABLE
    assert len(net.requests("FindCoordinator")) == 2


def test_session_timeout_without_heartbeat_answers_marks_coordinator_unknown():
    coord, m, net, group = joined(session_timeout_ms=3000, heartbeat_interval_ms=1000)
    net.brokers[1].on("Heartbeat", lambda req: NO_RESPONSE)
    net.request_timeout_ms = 10 ** 9
    for c in net.conns.values():
        c.request_timeout_ms = 10 ** 9
    for _ in range(4):
        m.poll_called(net.now)
        net.run(1000)
    lost = net.take_events(CoordinatorLost)
    assert lost and "session timed out" in lost[0].reason


def test_poll_timeout_leaves_group_and_rejoins_on_next_poll():
    coord, m, net, group = joined(max_poll_interval_ms=5000)
    net.take_events()
    net.run(5001)
    assert net.sent_apis()[-1] == "LeaveGroup"
    (leave,) = net.requests("LeaveGroup")
    assert leave.version >= 3 and leave.body["members"][0]["member_id"] == "member-A"
    (lost,) = net.take_events(PartitionsLost)
    assert len(lost.partitions) == 4
    assert m.state is MemberState.UNJOINED
    net.run(10000)
    assert m.state is MemberState.UNJOINED                 # stays out until the app polls
    group.first = True
    m.poll_called(net.now)
    net.run()
    assert m.state is MemberState.STABLE and len(m.assignment) == 4


def test_static_member_poll_timeout_sends_no_leave_group():
    coord, m, net, group = joined(max_poll_interval_ms=5000, instance="inst-1")
    net.run(5001)
    assert net.requests("LeaveGroup") == [] and m.state is MemberState.UNJOINED


def test_close_dynamic_member_revokes_then_leaves():
    coord, m, net, group = joined()
    net.take_events()
    m.close(net.now)
    net.run()
    assert m.closed
    (rev,) = net.take_events(PartitionsRevoked)
    assert len(rev.partitions) == 4
    (leave,) = net.requests("LeaveGroup")
    assert leave.version == 5 and leave.body["members"] == [
        {"member_id": "member-A", "group_instance_id": None, "reason": "the consumer is being closed"}]


def test_close_leave_group_v0_uses_the_top_level_member_id():
    coord = GroupCoordinator(GROUP)
    m = GroupMembership(coord, assignment_strategy=["range"], heartbeat_interval_ms=1000,
                        session_timeout_ms=10000)
    net = GroupNet(coord, [m], api_versions={"LeaveGroup": (0, 2)})
    FakeGroup(net.brokers[1])
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run()
    m.close(net.now)
    net.run()
    (leave,) = net.requests("LeaveGroup")
    assert leave.version == 2 and leave.body["member_id"] == "member-A" and m.closed


def test_close_static_member_does_not_leave():
    coord, m, net, group = joined(instance="inst-1")
    m.close(net.now)
    net.run()
    assert m.closed and net.requests("LeaveGroup") == []


def test_sync_group_errors():
    coord, m, net, group = make_member()
    m.update_metadata({"t": 1}, 0)
    group.errors["SyncGroup"] += [27, 25]      # REBALANCE_IN_PROGRESS, then UNKNOWN_MEMBER_ID
    m.subscribe(["t"], 0)
    net.run(steps=20)
    joins = [j.body["member_id"] for j in net.requests("JoinGroup")]
    # "" -> MEMBER_ID_REQUIRED -> member-A -> sync 27 -> member-A -> sync 25 -> "" (reset) ...
    assert joins[:4] == ["", "member-A", "member-A", ""]
    assert m.state is MemberState.STABLE


def test_prepare_hook_is_awaited_before_revocation_and_join():
    calls = []
    done = {"v": False}

    def hook(now, round_):
        calls.append(round_)
        return done["v"]

    coord, m, net, group = make_member(prepare_join=hook)
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run(300)
    assert m.state is MemberState.PREPARING and net.requests("JoinGroup") == []
    assert set(calls) == {1}
    done["v"] = True
    net.run(100)
    assert m.state is MemberState.STABLE


def test_subscription_change_rejoins_and_pattern_hook():
    coord, m, net, group = make_member()
    m.update_metadata({"orders-1": 1, "orders-2": 1, "other": 1, "__consumer_offsets": 1}, 0)
    m.subscribe_pattern(r"orders-.*|__.*", 0)
    m.update_metadata({"orders-1": 1, "orders-2": 1, "other": 1, "__consumer_offsets": 1}, 0,
                      internal_topics=("__consumer_offsets",))
    assert m.subscription == {"orders-1", "orders-2"}
    m.poll_called(0)
    net.run()
    assert m.state is MemberState.STABLE and len(m.assignment) == 2
    m.update_metadata({"orders-1": 1, "orders-2": 1, "orders-3": 2, "other": 1}, net.now)
    net.run()
    assert m.subscription == {"orders-1", "orders-2", "orders-3"} and len(m.assignment) == 4
    assert m.generation_id == 2


def test_leader_rejoins_when_partition_count_changes():
    coord, m, net, group = joined(partitions={"t": 2})
    m.update_metadata({"t": 3}, net.now)
    net.run()
    assert m.generation_id == 2 and len(m.assignment) == 3


def test_no_busy_loop_while_the_coordinator_is_unknown():
    coord, m, net, group = joined()
    for b in net.brokers.values():
        b.on("FindCoordinator", lambda req: find_coordinator_answer(error=15))
    coord.mark_unknown("test", net.now)
    steps = 0
    end = net.now + 3000
    while net.now < end:
        steps += 1
        net.step()
        ds = [d for d in (x.next_deadline(net.now) for x in net.machines) if d is not None]
        assert min(ds) > net.now, (m.state, ds)
        net.now = min(ds)
    assert steps < 20                    # backoff-paced lookups, not a spin
    assert m.state is MemberState.STABLE and not coord.known


def test_static_membership_needs_join_group_v5_and_fails_clearly_without_it():
    coord = GroupCoordinator(GROUP)
    m = GroupMembership(coord, assignment_strategy=["range"], group_instance_id="inst-1",
                        heartbeat_interval_ms=1000, session_timeout_ms=10000)
    net = GroupNet(coord, [m], api_versions={"JoinGroup": (0, 4)})
    FakeGroup(net.brokers[1])
    m.subscribe(["t"], 0)
    net.run()
    (fatal,) = net.take_events(GroupFatalError)
    assert isinstance(fatal.error, UnsupportedVersionError)
    assert net.requests("JoinGroup") == [] and m.state is MemberState.FATAL


def test_protocol_mismatches_in_join_and_sync_responses_are_fatal():
    coord, m, net, group = make_member()
    orig = group.join
    net.brokers[1].on("JoinGroup", lambda req: {**orig(req), "protocol_type": "connect"}
                      if req.body["member_id"] else orig(req))
    m.subscribe(["t"], 0)
    net.run()
    (fatal,) = net.take_events(GroupFatalError)
    assert isinstance(fatal.error, E.InconsistentGroupProtocolError) and "connect" in str(fatal.error)

    coord, m, net, group = make_member()
    orig_sync = group.sync
    net.brokers[1].on("SyncGroup", lambda req: {**orig_sync(req), "protocol_name": "roundrobin"})
    m.update_metadata({"t": 1}, 0)
    m.subscribe(["t"], 0)
    net.run()
    (fatal,) = net.take_events(GroupFatalError)
    assert isinstance(fatal.error, E.InconsistentGroupProtocolError)


def test_stale_heartbeat_error_about_an_old_generation_is_ignored():
    coord, m, net, group = joined()
    net.brokers[1].script("Heartbeat", NO_RESPONSE)
    m.poll_called(net.now)
    net.run(1000)
    (hb_req,) = [r for r in [m._hb_req] if r is not None]
    m.generation_id += 1                     # a rebalance completed meanwhile
    m.on_response(hb_req, {"error_code": 22}, net.now)
    assert m.state is MemberState.STABLE and m.member_id == "member-A"


def test_generation_reset_while_syncing_ignores_the_late_sync_answer():
    coord, m, net, group = make_member(heartbeat_interval_ms=5000, session_timeout_ms=20000)
    m.update_metadata({"t": 1}, 0)
    net.brokers[1].script("SyncGroup", NO_RESPONSE)
    m.subscribe(["t"], 0)
    net.run()
    assert m.state is MemberState.SYNCING and m.generation_id == 1
    sync_req = m._sync_req
    # an OffsetCommit of this generation answered UNKNOWN_MEMBER_ID: the round is dead
    m.on_commit_error(E.UnknownMemberIdError(), 1, net.now)
    assert m.state is MemberState.PREPARING and m.generation_id == -1 and m.member_id == ""
    m.on_response(sync_req, {"error_code": 0, "assignment": encode_assignment([TP("t", 0)])}, net.now)
    assert m.assignment == frozenset() and m.state is MemberState.PREPARING   # late answer ignored
    net.cut(coord.connection_id)           # the swallowed SyncGroup blocks that connection
    group.first = True
    net.run(1000)
    assert m.state is MemberState.STABLE and m.generation_id == 2 and m.assignment == {TP("t", 0)}
