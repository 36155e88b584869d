"""ConsumerCore without a network: a scripted Kafka and simulated time.

:class:`FakeKafka` is one scripted broker (node 1) with a log per partition,
committed offsets and a one-member group; :class:`Sim` plays the driver (one
broker channel per connection id, the coordinator's own connection included)
and advances a fake millisecond clock to the core's next deadline.
"""
import uuid

import pytest

try:
    from scripted_broker import NO_RESPONSE, ScriptedBroker
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE, ScriptedBroker

from kproto.client import Close, Connect
from kproto.consumer import OffsetAndMetadata, PartitionsAssigned, PartitionsRevoked
from kproto.consumer.assignors import encode_assignment
from kproto.consumer.core import ConsumerCore, InvalidGroupIdError, OffsetAndTimestamp
from kproto.consumer.positions import NoOffsetForPartitionError
from kproto.error_codes import TopicAuthorizationFailedError
from kproto.errors import ConfigError
from kproto.records import BatchBuilder

TP = __import__("kproto.cluster", fromlist=["TopicPartition"]).TopicPartition
COORD_CONN = 2**31 - 1 - 1


class FakeKafka:
    def __init__(self, partitions=None):
        self.broker = ScriptedBroker(node_id=1)
        self.partitions = partitions or {"t": 2}
        self.ids = {t: uuid.uuid4() for t in self.partitions}
        self.logs = {(t, p): [] for t, n in self.partitions.items() for p in range(n)}
        self.committed = {}
        self.generation = 0
        self.member = None
        self.assignments = {}
        self.errors = {}                     # api name -> list of error codes for the next answers
        self.silent = set()                  # api names not answered at all
        self.refused = set()                 # topics Metadata answers TOPIC_AUTHORIZATION_FAILED for
        b = self.broker
        for api in ("Metadata", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
                    "OffsetFetch", "OffsetCommit", "ListOffsets", "Fetch"):
            b.on(api, getattr(self, "_" + api))

    def produce(self, topic, partition, n, prefix=b"v"):
        log = self.logs[(topic, partition)]
        for _ in range(n):
            i = len(log)
            log.append((b"k%d" % i, prefix + b"%d" % i, 1000 + i))

    def count(self, api):
        return len(self.broker.requests_of(api))

    def _error(self, api):
        q = self.errors.get(api)
        return q.pop(0) if q else 0

    def _Metadata(self, req):
        names = [t["name"] for t in req.body["topics"]] if req.body["topics"] is not None else list(self.partitions)
        topics = []
        for name in names:
            if name in self.refused:
                topics.append({"name": name, "error_code": 29, "partitions": []})
                continue
            if name not in self.partitions:
                topics.append({"name": name, "error_code": 3, "partitions": []})
                continue
            topics.append({"name": name, "topic_id": self.ids[name], "error_code": 0, "partitions": [
                {"partition_index": p, "leader_id": 1, "error_code": 0, "replica_nodes": [1], "isr_nodes": [1]}
                for p in range(self.partitions[name])]})
        return {"brokers": [{"node_id": 1, "host": "b1", "port": 9092}], "cluster_id": "sim",
                "controller_id": 1, "topics": topics}

    def _FindCoordinator(self, req):
        return {"error_code": 0, "node_id": 1, "host": "b1", "port": 9092,
                "coordinators": [{"key": req.body["key"], "node_id": 1, "host": "b1", "port": 9092,
                                  "error_code": 0}]}

    def _JoinGroup(self, req):
        code = self._error("JoinGroup")
        if code:
            return {"error_code": code, "member_id": "", "members": []}
        self.generation += 1
        self.member = req.body["member_id"] or "m-1"
        proto = req.body["protocols"][0]
        return {"error_code": 0, "generation_id": self.generation, "protocol_type": "consumer",
                "protocol_name": proto["name"], "leader": self.member, "member_id": self.member,
                "members": [{"member_id": self.member, "metadata": proto["metadata"]}]}

    def _SyncGroup(self, req):
        for a in req.body["assignments"]:
            self.assignments[a["member_id"]] = a["assignment"]
        return {"error_code": 0, "protocol_type": "consumer", "protocol_name": req.body["protocol_name"],
                "assignment": self.assignments.get(req.body["member_id"], encode_assignment([]))}

    def _Heartbeat(self, req):
        if "Heartbeat" in self.silent:
            return NO_RESPONSE
        return {"error_code": self._error("Heartbeat")}

    def _LeaveGroup(self, req):
        return {"error_code": 0, "members": []}

    def _OffsetFetch(self, req):
        groups = req.body.get("groups") or [{"group_id": req.body.get("group_id"), "topics": req.body["topics"]}]
        gid = groups[0]["group_id"]
        out = []
        for t in groups[0]["topics"]:
            out.append({"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": self.committed.get((t["name"], p), -1),
                 "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
                for p in t["partition_indexes"]]})
        return {"error_code": 0, "topics": out,
                "groups": [{"group_id": gid, "topics": out, "error_code": 0}]}

    def _OffsetCommit(self, req):
        code = self._error("OffsetCommit")
        out = []
        for t in req.body["topics"]:
            ps = []
            for p in t["partitions"]:
                if not code:
                    self.committed[(t["name"], p["partition_index"])] = p["committed_offset"]
                ps.append({"partition_index": p["partition_index"], "error_code": code})
            out.append({"name": t["name"], "partitions": ps})
        return {"topics": out}

    def _ListOffsets(self, req):
        out = []
        for t in req.body["topics"]:
            ps = []
            for p in t["partitions"]:
                log = self.logs[(t["name"], p["partition_index"])]
                ts = p["timestamp"]
                if ts == -2:
                    off, rts = 0, -1
                elif ts == -1:
                    off, rts = len(log), -1
                else:
                    hits = [i for i, rec in enumerate(log) if rec[2] >= ts]
                    off, rts = (hits[0], log[hits[0]][2]) if hits else (-1, -1)
                ps.append({"partition_index": p["partition_index"], "error_code": 0, "timestamp": rts,
                           "offset": off, "leader_epoch": 0})
            out.append({"name": t["name"], "partitions": ps})
        return {"topics": out}

    def _Fetch(self, req):
        names = {v: k for k, v in self.ids.items()}
        out = []
        for t in req.body["topics"]:
            name = t["topic"] if req.version < 13 else names[t["topic_id"]]
            ps = []
            for p in t["partitions"]:
                log = self.logs[(name, p["partition"])]
                start = p["fetch_offset"]
                records = None
                if start < len(log):
                    b = BatchBuilder("none", 1 << 20, base_offset=start)
                    for k, v, ts in log[start:]:
                        b.append(ts, k, v)
                    records = b.build()
                ps.append({"partition_index": p["partition"], "error_code": 0, "high_watermark": len(log),
                           "last_stable_offset": len(log), "log_start_offset": 0,
                           "aborted_transactions": None, "preferred_read_replica": -1, "records": records})
            key = {"topic": name} if req.version < 13 else {"topic_id": t["topic_id"]}
            out.append({**key, "partitions": ps})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out}


class Sim:
    """The driver: channels per connection id, a fake clock."""

    def __init__(self, kafka, core):
        self.kafka, self.core = kafka, core
        self.now = 0
        self.channels = {}
        self.events = []
        self.refuse = set()              # node ids whose connects fail

    def step(self):
        core = self.core
        for a in core.poll(self.now):
            if isinstance(a, Connect):
                if a.node in self.refuse:
                    core.disconnected(a.node, self.now, ConnectionRefusedError(111, "refused"))
                    continue
                self.channels[a.node] = self.kafka.broker.channel()
                core.connected(a.node, self.now)
            elif isinstance(a, Close):
                self.channels.pop(a.node, None)
        moved = False
        for node in core.nodes_with_output():
            data = bytes(core.output(node))
            core.sent(node, len(data), self.now)
            reply = self.channels[node].receive(data)
            moved = True
            if reply:
                core.received(node, reply, self.now)
        self.events += core.events()
        return moved

    def run(self, until, max_ms=60000):
        end = self.now + max_ms
        while not until():
            if self.step():
                # the scripted broker answers fetches at once (no fetch.max.wait.ms):
                # let time pass anyway, or an empty-fetch loop would never end
                self.now += 1
            else:
                d = self.core.next_deadline(self.now)
                self.now = max(self.now + 1, min(d if d is not None else self.now + 100, self.now + 100))
            if self.now > end:
                raise AssertionError("condition not reached in simulated time")

    def records(self, n, max_ms=60000):
        got = []
        def enough():
            self.core.poll_called(self.now)          # as a driver's poll() does
            got.extend(self.core.drain())
            return len(got) >= n
        self.run(enough, max_ms)
        return got


def make(kafka=None, **conf):
    kafka = kafka or FakeKafka()
    conf.setdefault("bootstrap.servers", "b1:9092")
    core = ConsumerCore(conf)
    return kafka, core, Sim(kafka, core)


def test_config_names_and_checks():
    core = ConsumerCore(bootstrap_servers="h:1", group_id="g", max_poll_records=7,
                        partition_assignment_strategy="org.apache.kafka.clients.consumer.RangeAssignor")
    assert core.config.max_poll_records == 7 and core.config.partition_assignment_strategy == ("range",)
    with pytest.raises(ConfigError, match="did you mean 'max.poll.records'"):
        ConsumerCore(bootstrap_servers="h:1", max_poll_record=1)
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        ConsumerCore(bootstrap_servers="h:1", group_id="g", heartbeat_interval_ms=50000)
    with pytest.raises(ConfigError, match="needs group.id"):
        ConsumerCore(bootstrap_servers="h:1", enable_auto_commit=True)
    assert ConsumerCore(bootstrap_servers="h:1").config.enable_auto_commit is False   # no group
    with pytest.raises(InvalidGroupIdError):
        ConsumerCore(bootstrap_servers="h:1").subscribe(["t"], 0)


def test_assign_mode_fetch_flow_with_prefetch_and_fetch_v13_topic_ids():
    kafka, core, sim = make(auto_offset_reset="earliest", max_poll_records=3)
    kafka.produce("t", 0, 5)
    kafka.produce("t", 1, 2)
    core.assign([TP("t", 0), TP("t", 1)], 0)
    got = sim.records(7)
    assert sorted((r.partition, r.offset, r.value) for r in got) == \
        [(0, i, b"v%d" % i) for i in range(5)] + [(1, i, b"v%d" % i) for i in range(2)]
    assert all(r.topic == "t" for r in got)
    fetches = kafka.broker.requests_of("Fetch")
    assert fetches[0].version >= 13 and fetches[0].body["topics"][0]["topic_id"] == kafka.ids["t"]
    assert core.position(TP("t", 0)) == 5 and core.lag(TP("t", 0)) == 0
    # prefetch: a drained partition is fetched again without waiting for the application
    n = kafka.count("Fetch")
    kafka.produce("t", 0, 2)
    more = sim.records(2)
    assert [r.offset for r in more] == [5, 6] and kafka.count("Fetch") > n
    # no group: resets come from ListOffsets, never OffsetFetch
    assert kafka.count("OffsetFetch") == 0 and kafka.count("ListOffsets") >= 1


def test_committed_offsets_initialise_positions_then_auto_offset_reset():
    kafka = FakeKafka()
    kafka.produce("t", 0, 10)
    kafka.produce("t", 1, 10)
    kafka.committed[("t", 0)] = 7                 # partition 1: nothing committed -> latest
    kafka, core, sim = make(kafka, group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    core.assign([TP("t", 0), TP("t", 1)], 0)
    got = sim.records(3)
    assert [(r.partition, r.offset) for r in got] == [(0, 7), (0, 8), (0, 9)]
    assert core.position(TP("t", 1)) == 10
    assert kafka.count("OffsetFetch") == 1


def test_auto_offset_reset_none_raises_once_until_seek():
    kafka, core, sim = make(group_id="g", auto_offset_reset="none", enable_auto_commit=False)
    kafka.produce("t", 0, 3)
    core.assign([TP("t", 0)], 0)
    with pytest.raises(NoOffsetForPartitionError):
        sim.run(lambda: core.drain() and False, max_ms=5000)
    core.seek(TP("t", 0), 1)
    assert [r.offset for r in sim.records(2)] == [1, 2]


def test_auto_offset_reset_none_says_nothing_when_a_seek_follows_the_assign():
    """assign() then seek() with auto.offset.reset=none: the network side may
    look for positions in between and find none; the seek gives one before
    the first poll, so that poll raises nothing (as Java's, which looks for
    positions only in poll) and returns the records from the seek."""
    kafka, core, sim = make(auto_offset_reset="none")
    kafka.produce("t", 0, 5)
    core.assign([TP("t", 0)], 0)
    sim.run(lambda: TP("t", 0) in core._no_offset, max_ms=5000)   # the network side looked: no position
    core.seek(TP("t", 0), 2)
    assert [r.offset for r in sim.records(3)] == [2, 3, 4]


def test_offsets_for_times_beginning_end_and_seek():
    kafka, core, sim = make(auto_offset_reset="earliest")
    kafka.produce("t", 0, 10)
    h = core.list_offsets({TP("t", 0): 1004, TP("t", 1): 5000}, 0)
    sim.run(lambda: h.done)
    assert h.result() == {TP("t", 0): OffsetAndTimestamp(4, 1004), TP("t", 1): None}
    b, e = core.beginning_offsets([TP("t", 0)], sim.now), core.end_offsets([TP("t", 0)], sim.now)
    sim.run(lambda: b.done and e.done)
    assert b.result()[TP("t", 0)].offset == 0 and e.result()[TP("t", 0)].offset == 10
    core.assign([TP("t", 0)], sim.now)
    assert [r.offset for r in sim.records(10)] == list(range(10))
    core.seek(TP("t", 0), 4)
    assert [r.offset for r in sim.records(6)] == list(range(4, 10))
    core.seek_to_beginning()
    assert sim.records(10)[0].offset == 0


def test_seek_drops_buffered_records():
    kafka, core, sim = make(auto_offset_reset="earliest", max_poll_records=2)
    kafka.produce("t", 0, 6)
    core.assign([TP("t", 0)], 0)
    assert [r.offset for r in sim.records(2)] == [0, 1]      # 4 more are buffered
    core.seek(TP("t", 0), 0)
    assert [r.offset for r in core.drain()] == []            # the buffered data is gone
    assert [r.offset for r in sim.records(2)] == [0, 1]


def test_subscribe_flow_through_to_records_commit_and_close():
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest", enable_auto_commit=True,
                            auto_commit_interval_ms=1000, session_timeout_ms=10000,
                            heartbeat_interval_ms=1000)
    kafka.produce("t", 0, 4)
    kafka.produce("t", 1, 4)
    core.subscribe(["t"], 0)
    got = sim.records(8)
    assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(4)]
    assigned = [e for e in sim.events if isinstance(e, PartitionsAssigned)]
    assert assigned and set(assigned[0].partitions) == {TP("t", 0), TP("t", 1)}
    # the group traffic goes over the coordinator's own connection
    assert COORD_CONN in sim.channels
    assert [r.channel for r in kafka.broker.requests_of("JoinGroup")][0] is sim.channels[COORD_CONN]
    # heartbeats continue while the application does not poll (within max.poll.interval.ms)
    hb = kafka.count("Heartbeat")
    start = sim.now
    sim.run(lambda: sim.now - start > 5000)
    assert kafka.count("Heartbeat") >= hb + 4
    # auto-commit from poll_called once the interval passed
    core.poll_called(sim.now)
    sim.run(lambda: kafka.committed.get(("t", 0)) == 4 and kafka.committed.get(("t", 1)) == 4)
    h = core.commit_sync({TP("t", 0): 2}, sim.now)
    sim.run(lambda: h.done)
    assert h.error is None and kafka.committed[("t", 0)] == 2
    core.begin_close(sim.now)
    sim.run(lambda: core.close_done)
    assert kafka.count("LeaveGroup") == 1
    assert any(isinstance(e, PartitionsRevoked) for e in sim.events)
    assert kafka.committed[("t", 0)] == 4          # close committed the consumed positions


def test_revocation_holds_the_join_until_the_listener_ran():
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                            session_timeout_ms=10000, heartbeat_interval_ms=1000)
    core.subscribe(["t"], 0)
    sim.run(lambda: any(isinstance(e, PartitionsAssigned) for e in sim.events))
    kafka.errors["Heartbeat"] = [27]                # REBALANCE_IN_PROGRESS
    joins = kafka.count("JoinGroup")
    events = []
    # drive by hand, without acknowledging the revocation
    for _ in range(200):
        for a in core.poll(sim.now):
            if isinstance(a, Connect):
                sim.channels[a.node] = kafka.broker.channel()
                core.connected(a.node, sim.now)
        for node in core.nodes_with_output():
            data = bytes(core.output(node))
            core.sent(node, len(data), sim.now)
            reply = sim.channels[node].receive(data)
            if reply:
                core.received(node, reply, sim.now)
        events.extend(core.events(ack=False))
        sim.now += 50
    assert any(isinstance(e, PartitionsRevoked) for e in events)
    assert kafka.count("JoinGroup") == joins         # held: the listener has not run
    # the listener can still commit with the current generation
    h = core.commit_sync({TP("t", 0): 0}, sim.now)
    sim.run(lambda: h.done)
    assert h.error is None
    core.rebalance_listener_done(sim.now)
    sim.run(lambda: kafka.count("JoinGroup") > joins)


def test_coordinator_loss_in_the_composed_core_rediscovers_and_recovers():
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                            session_timeout_ms=10000, heartbeat_interval_ms=1000)
    kafka.produce("t", 0, 3)
    core.subscribe(["t"], 0)
    sim.records(3)
    assert kafka.count("FindCoordinator") == 1
    kafka.errors["Heartbeat"] = [16]               # NOT_COORDINATOR
    sim.run(lambda: kafka.count("FindCoordinator") == 2)
    # an async commit answered NOT_COORDINATOR fails to its callback (not retried)
    kafka.errors["OffsetCommit"] = [16]
    results = []
    core.commit_async({TP("t", 0): 1}, sim.now, callback=lambda o, e: results.append(e))
    sim.run(lambda: results)
    assert results[0] is not None and results[0].retriable
    # the next commit looks the coordinator up again (KAFKA-13840) and succeeds
    h = core.commit_sync({TP("t", 0): 3}, sim.now)
    sim.run(lambda: h.done)
    assert h.error is None and kafka.committed[("t", 0)] == 3
    assert kafka.count("FindCoordinator") == 3
    kafka.produce("t", 0, 2)
    assert [r.offset for r in sim.records(2)] == [3, 4]


def test_a_coordinator_that_refuses_connections_is_looked_up_again():
    """Java's coordinatorUnknown(): a failed connect to the coordinator
    forgets it, so a moved coordinator is found instead of waited for."""
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    kafka.produce("t", 0, 2)
    core.assign([TP("t", 0)], 0)
    sim.records(2)
    h = core.commit_sync({TP("t", 0): 1}, sim.now)
    sim.run(lambda: h.done)
    assert kafka.count("FindCoordinator") == 1
    core.disconnected(COORD_CONN, sim.now, ConnectionResetError(104, "reset"))
    sim.refuse.add(COORD_CONN)
    h = core.commit_sync({TP("t", 0): 2}, sim.now)
    # looked up again within the reconnect backoff, not after request.timeout.ms
    sim.run(lambda: kafka.count("FindCoordinator") >= 2, max_ms=2000)
    assert not h.done                                 # still trying, not failed
    sim.refuse.clear()
    sim.run(lambda: h.done)
    assert h.error is None and kafka.committed[("t", 0)] == 2


def test_coordinator_loss_in_assign_mode_with_async_commits():
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    kafka.produce("t", 0, 3)
    core.assign([TP("t", 0)], 0)
    sim.records(3)
    for i in range(3):
        kafka.errors["OffsetCommit"] = [15]         # COORDINATOR_NOT_AVAILABLE
        res = []
        core.commit_async(None, sim.now, callback=lambda o, e: res.append(e))
        sim.run(lambda: res)
        assert res[0] is not None
    res = []
    core.commit_async(None, sim.now, callback=lambda o, e: res.append(e))
    sim.run(lambda: res)
    assert res == [None] and kafka.committed[("t", 0)] == 3
    assert kafka.count("FindCoordinator") == 4      # looked up again after every loss


def test_pattern_subscription_and_pause_resume():
    kafka = FakeKafka({"t-a": 1, "t-b": 1, "other": 1})
    for t in ("t-a", "t-b", "other"):
        kafka.produce(t, 0, 2)
    kafka, core, sim = make(kafka, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    core.subscribe_pattern(r"t-.*", 0)
    got = sim.records(4)
    assert sorted((r.topic, r.offset) for r in got) == [("t-a", 0), ("t-a", 1), ("t-b", 0), ("t-b", 1)]
    assert kafka.broker.requests_of("Metadata")[-1].body["topics"] is None
    core.pause([TP("t-a", 0)])
    kafka.produce("t-a", 0, 1)
    kafka.produce("t-b", 0, 1)
    assert [(r.topic, r.offset) for r in sim.records(1)] == [("t-b", 2)]
    sim.run(lambda: sim.now > 3000)
    assert core.drain() == []
    core.resume([TP("t-a", 0)])
    assert [(r.topic, r.offset) for r in sim.records(1)] == [("t-a", 2)]


def test_deserializers_apply_to_records_and_columns():
    kafka, core, sim = make(auto_offset_reset="earliest", key_deserializer=lambda b: b.decode(),
                            value_deserializer=lambda b: b.upper())
    kafka.produce("t", 0, 2)
    core.assign([TP("t", 0)], 0)
    got = sim.records(2)
    assert [(r.key, r.value, r.topic) for r in got] == [("k0", b"V0", "t"), ("k1", b"V1", "t")]
    core.seek(TP("t", 0), 0)
    cols = {}
    sim.run(lambda: cols.update(core.drain_columns()) or cols)
    assert cols[TP("t", 0)] == ([0, 1], [1000, 1001], ["k0", "k1"], [b"V0", b"V1"])


def test_committed_and_commit_need_group():
    kafka, core, sim = make()
    with pytest.raises(InvalidGroupIdError):
        core.commit_sync({TP("t", 0): 1}, 0)
    kafka, core, sim = make(group_id="g", enable_auto_commit=False)
    kafka.committed[("t", 1)] = 5
    h = core.committed([TP("t", 0), TP("t", 1)], 0)
    sim.run(lambda: h.done)
    assert h.result() == {TP("t", 0): None, TP("t", 1): OffsetAndMetadata(5, "", -1)}


# --- issue 15: topic names and auto-creation -----------------------------------------------

@pytest.mark.parametrize("bad", ["bad name?", "x" * 250, ".", "..", ""])
def test_subscribe_and_assign_refuse_illegal_topic_names(bad):
    from kproto.error_codes import InvalidTopicError
    _, core, _ = make(group_id="g")
    with pytest.raises(InvalidTopicError):
        core.subscribe(["ok", bad], 0)
    with pytest.raises(InvalidTopicError):
        core.assign([TP("ok", 0), TP(bad, 0)], 0)
    assert core.mode is None and not core.cluster.topics      # nothing half-done
    core.subscribe(["x" * 249, "a.b_c-D9"], 0)                # the longest legal name


def _metadata_requests_allow_creation(kafka):
    return {r.body["allow_auto_topic_creation"] for r in kafka.broker.requests_of("Metadata")}


def test_assign_never_creates_topics_subscribe_follows_allow_auto_create_topics():
    # Java: allow.auto.create.topics (default true) lets the Metadata
    # requests of a subscription create its topics; assign() never does.
    kafka, core, sim = make(FakeKafka({"t": 1}))
    core.assign([TP("t", 0)], 0)
    sim.run(lambda: kafka.count("Metadata") >= 1)
    assert _metadata_requests_allow_creation(kafka) == {False}

    kafka, core, sim = make(FakeKafka({"t": 1}), group_id="g")
    core.subscribe(["t"], 0)
    sim.run(lambda: kafka.count("Metadata") >= 1)
    assert _metadata_requests_allow_creation(kafka) == {True}
    core.unsubscribe(sim.now)
    core.assign([TP("t", 0)], sim.now)
    before = kafka.count("Metadata")
    core.cluster.request_update()
    sim.run(lambda: kafka.count("Metadata") > before)
    assert kafka.broker.requests_of("Metadata")[-1].body["allow_auto_topic_creation"] is False

    kafka, core, sim = make(FakeKafka({"t": 1}), group_id="g", allow_auto_create_topics=False)
    core.subscribe(["t"], 0)
    sim.run(lambda: kafka.count("Metadata") >= 1)
    assert _metadata_requests_allow_creation(kafka) == {False}


# -- topics the broker refuses (no DESCRIBE ACL) --------------------------------------------------------

def test_an_assigned_topic_the_broker_refuses_is_raised_by_drain_position_and_lookups():
    kafka, core, sim = make(auto_offset_reset="earliest")
    kafka.refused.add("t")
    core.assign([TP("t", 0)], 0)
    with pytest.raises(TopicAuthorizationFailedError) as e:
        sim.run(lambda: core.drain() and False, max_ms=5000)
    assert e.value.unauthorized_topics == {"t"} and "[t]" in str(e.value) and not e.value.retriable
    assert not core.has_records()                               # told once per metadata answer
    with pytest.raises(TopicAuthorizationFailedError):
        core.position(TP("t", 0))                               # Java's position() throws it too
    h = core.beginning_offsets([TP("t", 0)], sim.now)
    sim.run(lambda: h.done, max_ms=5000)                        # at the next answer, not at the timeout
    with pytest.raises(TopicAuthorizationFailedError):
        h.result()
    kafka.refused.clear()                                       # an ACL came: the records flow
    kafka.produce("t", 0, 2)
    core.assign([TP("t", 0)], sim.now)
    assert [r.offset for r in sim.records(2)] == [0, 1]


def test_a_subscribed_topic_the_broker_refuses_is_raised_naming_it_alone():
    kafka = FakeKafka({"t": 1, "u": 1})
    kafka.refused.add("u")
    kafka, core, sim = make(kafka, group_id="g", auto_offset_reset="earliest")
    core.subscribe(["t", "u"], 0)
    with pytest.raises(TopicAuthorizationFailedError) as e:
        sim.run(lambda: core.drain() and False, max_ms=5000)
    assert e.value.unauthorized_topics == {"u"}


def test_the_coordinator_connection_names_its_broker_in_apiversions():
    # KIP-1242: the coordinator's connection id (2**31-1-node, as Java's) is
    # not a broker id; ApiVersions v5 names the broker it leads to.
    kafka, core, sim = make(group_id="g", auto_offset_reset="earliest")
    kafka.produce("t", 0, 1)
    core.subscribe(["t"], 0)
    sim.records(1)
    by_channel = {id(r.channel): (r.body["cluster_id"], r.body["node_id"])
                  for r in kafka.broker.requests_of("ApiVersions")}
    assert by_channel[id(sim.channels[COORD_CONN])] == ("sim", 1)
    assert by_channel[id(sim.channels[1])] == ("sim", 1)
