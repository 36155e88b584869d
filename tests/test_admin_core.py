"""AdminCore without a network: scripted brokers and simulated time.

:class:`Sim` plays the driver: Connect actions become channels of
:class:`ScriptedBroker` objects (by host), bytes move both ways, and the fake
millisecond clock jumps to the core's next deadline. :class:`FakeCluster`
answers Metadata like Kafka (brokers, controller, topics with leaders) so
tests only script the API under test.
"""
import pytest

try:
    from scripted_broker import NO_RESPONSE, ScriptedBroker
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE, ScriptedBroker

from kproto import error_codes
from kproto.admin import (
    AdminCore, AdminTimeoutError, ClusterDescription, ConfigResource, ConsumerLag, DeletedRecords,
    ListOffsetsResultInfo, NewPartitions, NewTopic, Node, OffsetSpec, TopicPartition,
)
from kproto.client import Close, Connect
from kproto.consumer import OffsetAndMetadata
from kproto.consumer.assignors import encode_assignment, encode_subscription
from kproto.errors import ConfigError, KafkaError, UnsupportedVersionError

TP = TopicPartition


class FakeCluster:
    """Scripted brokers b1..bN (node ids 1..N, host "bN", port 9092)."""

    def __init__(self, nodes=(1,), controller=1, topics=None, leaders=None, broker_kwargs=None):
        self.brokers = {n: ScriptedBroker(node_id=n, **(broker_kwargs or {}).get(n, {})) for n in nodes}
        self.controller = controller
        self.topics = dict(topics or {})          # name -> partition count
        self.leaders = dict(leaders or {})        # (topic, p) -> node (default: lowest node)
        self.internal = set()
        self.topic_codes = {}                     # name -> error code in Metadata
        self.metadata_requests = []
        for n, b in self.brokers.items():
            b.on("Metadata", lambda req, n=n: self._metadata(n, req))

    def on_all(self, api, handler):
        for b in self.brokers.values():
            b.on(api, handler)

    def leader(self, topic, p):
        return self.leaders.get((topic, p), min(self.brokers))

    def _metadata(self, node, req):
        self.metadata_requests.append((node, req))
        names = [t["name"] for t in req.body["topics"]] if req.body["topics"] is not None else sorted(self.topics)
        topics = []
        for name in names:
            code = self.topic_codes.get(name, 0 if name in self.topics else 3)
            if code:
                topics.append({"name": name, "error_code": code, "partitions": []})
                continue
            topics.append({"name": name, "error_code": 0, "is_internal": name in self.internal,
                           "topic_id": _uuid(name), "partitions": [
                               {"partition_index": p, "leader_id": self.leader(name, p), "error_code": 0,
                                "leader_epoch": 3, "replica_nodes": sorted(self.brokers),
                                "isr_nodes": [self.leader(name, p)], "offline_replicas": []}
                               for p in range(self.topics[name])]})
        return {"brokers": [{"node_id": n, "host": f"b{n}", "port": 9092, "rack": None} for n in self.brokers],
                "cluster_id": "fake", "controller_id": self.controller, "topics": topics}


def _uuid(name):
    import uuid
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class Sim:
    def __init__(self, cluster, **config):
        self.cluster = cluster
        conf = {"bootstrap.servers": "b1:9092", "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000,
                "request.timeout.ms": 5000, "default.api.timeout.ms": 20000}
        conf.update(config)
        self.core = AdminCore(conf)
        self.now = 0
        self.channels = {}
        self.unreachable = set()       # hosts whose connects fail
        self.sent_to = []              # (api name, broker node) of every request, in order
        self.connects = []

    def _broker(self, host):
        return self.cluster.brokers[int(host[1:])]

    def step(self):
        moved = False
        for a in self.core.poll(self.now):
            if isinstance(a, Connect):
                self.connects.append((a.node, a.host, self.now))
                if a.host in self.unreachable:
                    self.core.disconnected(a.node, self.now, OSError("refused"))
                else:
                    self.channels[a.node] = (self._broker(a.host), self._broker(a.host).channel())
                    self.core.connected(a.node, self.now)
                moved = True
            elif isinstance(a, Close):
                self.channels.pop(a.node, None)
        for node in self.core.nodes_with_output():
            data = bytes(self.core.output(node))
            self.core.sent(node, len(data), self.now)
            broker, ch = self.channels[node]
            before = len(broker.requests)
            reply = ch.receive(data)
            for r in broker.requests[before:]:
                self.sent_to.append((r.api.name, broker.node_id, self.now))
            if reply:
                self.core.received(node, reply, self.now)
            moved = True
        return moved

    def run(self, *handles, limit_ms=120000):
        """Drive until every handle is done; returns the handle results' items."""
        end = self.now + limit_ms
        while True:
            while self.step():
                pass
            if all(h.done for h in handles):
                return handles[0] if len(handles) == 1 else handles
            d = self.core.next_deadline(self.now)
            assert d is not None, "the core has no deadline but work is pending"
            self.now = max(self.now + 1, d)
            assert self.now <= end, f"not done after {limit_ms} ms: {handles}"

    def requests(self, api):
        return [(n, r) for n, b in self.cluster.brokers.items() for r in b.requests if r.api.name == api]

    def times(self, api):
        return [t for (a, n, t) in self.sent_to if a == api]


# --- config ----------------------------------------------------------------------------

def test_config_defaults_and_errors():
    core = AdminCore({"bootstrap.servers": "h:1"})
    assert core.config.default_api_timeout_ms == 60000
    assert core.config.request_timeout_ms == 30000
    with pytest.raises(ConfigError, match="did you mean 'default.api.timeout.ms'"):
        AdminCore({"bootstrap.servers": "h:1", "default.api.timeout": 5})
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        AdminCore({})


# --- topics ------------------------------------------------------------------------------

def test_create_topics_request_shape_and_per_topic_errors():
    fc = FakeCluster(nodes=(1, 2), controller=2)

    def answer(req):
        return {"topics": [
            {"name": t["name"], "error_code": 36 if t["name"] == "old" else 0,
             "error_message": "exists" if t["name"] == "old" else None,
             "topic_id": _uuid(t["name"]), "num_partitions": t["num_partitions"],
             "replication_factor": t["replication_factor"]} for t in req.body["topics"]]}
    fc.brokers[2].on("CreateTopics", answer)
    sim = Sim(fc)
    h = sim.core.create_topics([NewTopic("new", 3, 1, {"retention.ms": 1000}), "old"],
                               validate_only=True, now=0)
    sim.run(h)
    [(node, req)] = sim.requests("CreateTopics")
    assert node == 2                                   # the controller
    assert req.body["validate_only"] is True
    topics = {t["name"]: t for t in req.body["topics"]}
    assert topics["new"]["num_partitions"] == 3 and topics["new"]["replication_factor"] == 1
    assert topics["new"]["configs"] == [{"name": "retention.ms", "value": "1000"}]
    assert topics["old"]["num_partitions"] == -1       # broker defaults
    assert h.items["new"].result() == _uuid("new")
    err = h.items["old"].error
    assert isinstance(err, error_codes.TopicAlreadyExistsError) and "exists" in str(err)
    with pytest.raises(error_codes.TopicAlreadyExistsError):
        h.result()
    assert h.errors() == {"old": err}
    assert sim.core.events() == [h]


def test_create_topics_not_controller_reroutes_after_backoff():
    fc = FakeCluster(nodes=(1, 2), controller=1)

    def moved(req):
        fc.controller = 2                              # the next Metadata names node 2
        return {"topics": [{"name": t["name"], "error_code": 41} for t in req.body["topics"]]}
    fc.brokers[1].on("CreateTopics", moved)
    fc.brokers[2].on("CreateTopics", lambda req: {"topics": [
        {"name": t["name"], "error_code": 0} for t in req.body["topics"]]})
    sim = Sim(fc)
    h = sim.core.create_topics(["a", "b"], now=0)
    sim.run(h)
    assert h.result() == {"a": None, "b": None}      # no topic ids in these answers
    nodes = [n for n, _ in sim.requests("CreateTopics")]
    assert nodes == [1, 2]
    t1, t2 = sim.times("CreateTopics")
    assert t2 - t1 >= 100                              # retry.backoff.ms
    assert sim.core.retries == 1


def test_create_topics_times_out_naming_the_operation_and_last_error():
    fc = FakeCluster(nodes=(1,), controller=1)
    fc.brokers[1].on("CreateTopics", lambda req: {"topics": [
        {"name": t["name"], "error_code": 41} for t in req.body["topics"]]})
    sim = Sim(fc, **{"default.api.timeout.ms": 3000})
    h = sim.core.create_topics(["a"], now=0)
    sim.run(h)
    err = h.items["a"].error
    assert isinstance(err, AdminTimeoutError) and isinstance(err, TimeoutError)
    assert "create_topics timed out after 3000 ms" in str(err) and "NOT_CONTROLLER" in str(err)
    times = sim.times("CreateTopics")
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[:4] == [100, 200, 400, 800]            # exponential backoff ...
    assert all(g == 1000 for g in gaps[4:])            # ... capped at retry.backoff.max.ms
    assert 3000 <= sim.now <= 3000 + 1000


def test_delete_topics_per_topic_errors():
    fc = FakeCluster()
    fc.brokers[1].on("DeleteTopics", lambda req: {"responses": [
        {"name": t["name"], "error_code": 0 if t["name"] == "x" else 3} for t in req.body["topics"]]})
    sim = Sim(fc)
    h = sim.core.delete_topics(["x", "ghost"], now=0)
    sim.run(h)
    [(_, req)] = sim.requests("DeleteTopics")
    assert [t["name"] for t in req.body["topics"]] == ["x", "ghost"]
    assert h.items["x"].result() is None
    assert isinstance(h.items["ghost"].error, error_codes.UnknownTopicOrPartitionError)


def test_create_partitions_shape_and_unsupported_api():
    fc = FakeCluster()
    fc.brokers[1].on("CreatePartitions", lambda req: {"results": [
        {"name": t["name"], "error_code": 37 if t["count"] < 2 else 0, "error_message": "too few"}
        for t in req.body["topics"]]})
    sim = Sim(fc)
    h = sim.core.create_partitions({"t": NewPartitions(4, [[1], [1]]), "u": 1}, validate_only=True, now=0)
    sim.run(h)
    [(_, req)] = sim.requests("CreatePartitions")
    assert req.body["validate_only"] is True
    body = {t["name"]: t for t in req.body["topics"]}
    assert body["t"]["count"] == 4 and body["t"]["assignments"] == [{"broker_ids": [1]}, {"broker_ids": [1]}]
    assert h.items["t"].result() is None
    assert isinstance(h.items["u"].error, error_codes.InvalidPartitionsError)

    # A broker without CreatePartitions in its ApiVersions (Tansu): a clear error naming the API.
    names = ["ApiVersions", "Metadata"]
    fc2 = FakeCluster(broker_kwargs={1: {"api_versions": {n: (0, 9) for n in names}, "only_listed": True}})
    sim2 = Sim(fc2)
    h2 = sim2.core.create_partitions({"t": 3}, now=0)
    sim2.run(h2)
    err = h2.items["t"].error
    assert isinstance(err, UnsupportedVersionError) and "CreatePartitions" in str(err)
    assert "create_partitions" in str(err)
    assert sim2.requests("CreatePartitions") == []


def test_list_topics_hides_internal_topics_unless_asked():
    fc = FakeCluster(topics={"a": 1, "__consumer_offsets": 2})
    fc.internal.add("__consumer_offsets")
    sim = Sim(fc)
    h1 = sim.core.list_topics(now=0)
    h2 = sim.core.list_topics(list_internal=True, now=0)
    sim.run(h1, h2)
    assert list(h1.result()) == ["a"]
    assert h1.result()["a"].topic_id == _uuid("a") and not h1.result()["a"].internal
    assert set(h2.result()) == {"a", "__consumer_offsets"}
    assert any(r.body["topics"] is None for _, r in fc.metadata_requests)


def test_describe_topics_partitions_and_errors():
    fc = FakeCluster(nodes=(1, 2), topics={"t": 2, "fresh": 1}, leaders={("t", 1): 2})
    fc.topic_codes["fresh"] = 5                        # LEADER_NOT_AVAILABLE while being created
    for b in fc.brokers.values():                      # a broker without KIP-966: Metadata
        del b.versions["DescribeTopicPartitions"]
    sim = Sim(fc)
    h = sim.core.describe_topics(["t", "ghost", "fresh"], now=0)
    while sim.step():
        pass
    fc.topic_codes.pop("fresh")
    sim.run(h)
    t = h.items["t"].result()
    assert t.name == "t" and t.topic_id == _uuid("t") and not t.internal
    assert [p.partition for p in t.partitions] == [0, 1]
    assert t.partitions[1].leader == 2 and t.partitions[1].replicas == (1, 2) and t.partitions[1].isr == (2,)
    assert t.partitions[0].leader_epoch == 3
    assert isinstance(h.items["ghost"].error, error_codes.UnknownTopicOrPartitionError)
    assert h.items["fresh"].result().partitions[0].leader == 1


# --- cluster and configs ---------------------------------------------------------------------

def test_describe_cluster_uses_describe_cluster_or_metadata():
    fc = FakeCluster(nodes=(1, 2), controller=2)
    fc.brokers[1].on("DescribeCluster", lambda req: {
        "cluster_id": "fake", "controller_id": 2, "brokers": [
            {"broker_id": 1, "host": "b1", "port": 9092}, {"broker_id": 2, "host": "b2", "port": 9092}]})
    sim = Sim(fc)
    h = sim.core.describe_cluster(now=0)
    sim.run(h)
    d = h.result()
    assert d == ClusterDescription("fake", Node(2, "b2", 9092), (Node(1, "b1", 9092), Node(2, "b2", 9092)))
    assert len(sim.requests("DescribeCluster")) == 1

    names = ["ApiVersions", "Metadata"]
    fc2 = FakeCluster(nodes=(1, 2), controller=2,
                      broker_kwargs={n: {"api_versions": {x: (0, 9) for x in names}, "only_listed": True}
                                     for n in (1, 2)})
    sim2 = Sim(fc2)
    h2 = sim2.core.describe_cluster(now=0)
    sim2.run(h2)
    assert h2.result().controller == Node(2, "b2", 9092) and h2.result().cluster_id == "fake"


def test_describe_configs_routes_broker_resources_to_that_broker():
    fc = FakeCluster(nodes=(1, 2), topics={"t": 1})

    def answer(req):
        out = []
        for r in req.body["resources"]:
            if r["resource_name"] == "nope":
                out.append({"resource_type": 2, "resource_name": "nope", "error_code": 3,
                            "error_message": "no such topic", "configs": []})
            else:
                out.append({"resource_type": r["resource_type"], "resource_name": r["resource_name"],
                            "error_code": 0, "configs": [
                                {"name": "retention.ms", "value": "1000", "read_only": False,
                                 "config_source": 1, "is_sensitive": False,
                                 "synonyms": [{"name": "log.retention.ms", "value": "5", "source": 4}]}]})
        return {"results": out}
    for b in fc.brokers.values():
        b.on("DescribeConfigs", answer)
    sim = Sim(fc)
    h = sim.core.describe_configs([ConfigResource.topic("t"), ConfigResource.broker(2),
                                   ConfigResource(2, "nope")], include_synonyms=True, now=0)
    sim.run(h)
    routed = {r.body["resources"][0]["resource_type"] if len(r.body["resources"]) == 1 else "topics": n
              for n, r in sim.requests("DescribeConfigs")}
    assert routed[4] == 2                              # the broker resource went to broker 2
    assert len(sim.requests("DescribeConfigs")) == 2
    e = h.items[ConfigResource(2, "t")].result()["retention.ms"]
    assert e.value == "1000" and e.source == 1 and not e.is_default
    assert e.synonyms == (("log.retention.ms", "5", 4),)
    assert "retention.ms" in h.items[ConfigResource(4, "2")].result()
    assert isinstance(h.items[ConfigResource(2, "nope")].error, error_codes.UnknownTopicOrPartitionError)


# --- groups --------------------------------------------------------------------------------

def _find_coordinator(node, code=0):
    def answer(req):
        key = req.body["coordinator_keys"][0] if req.body.get("coordinator_keys") else req.body["key"]
        return {"error_code": code, "node_id": node, "host": f"b{node}", "port": 9092,
                "coordinators": [{"key": key, "node_id": node, "host": f"b{node}", "port": 9092,
                                  "error_code": code}]}
    return answer


def test_list_consumer_groups_asks_every_broker():
    fc = FakeCluster(nodes=(1, 2, 3))
    fc.brokers[1].on("ListGroups", lambda req: {"groups": [
        {"group_id": "g1", "protocol_type": "consumer", "group_state": "Stable"},
        {"group_id": "connect", "protocol_type": "connect", "group_state": "Stable"}]})
    fc.brokers[2].on("ListGroups", lambda req: {"groups": [
        {"group_id": "simple", "protocol_type": "", "group_state": "Empty"}]})
    fc.brokers[3].on("ListGroups", lambda req: {"groups": []})
    sim = Sim(fc)
    h = sim.core.list_consumer_groups(now=0)
    sim.run(h)
    assert sorted(n for n, _ in sim.requests("ListGroups")) == [1, 2, 3]
    groups = {g.group_id: g for g in h.result()}
    assert set(groups) == {"g1", "simple"}             # non-consumer protocols are left out
    assert groups["g1"].state == "Stable" and not groups["g1"].is_simple and groups["g1"].coordinator == 1
    assert groups["simple"].is_simple


def test_list_consumer_groups_fails_on_a_broker_error():
    fc = FakeCluster(nodes=(1, 2))
    fc.brokers[1].on("ListGroups", lambda req: {"groups": []})
    fc.brokers[2].on("ListGroups", lambda req: {"error_code": 31, "groups": []})
    sim = Sim(fc)
    h = sim.core.list_consumer_groups(now=0)
    sim.run(h)
    assert isinstance(h.error, error_codes.ClusterAuthorizationFailedError)


def test_describe_consumer_groups_decodes_members_and_follows_coordinator_moves():
    fc = FakeCluster(nodes=(1, 2, 3))
    lookups = []

    def find(req):
        lookups.append(req)
        return _find_coordinator(2 if len(lookups) == 1 else 3)(req)
    fc.on_all("FindCoordinator", find)
    fc.brokers[2].on("DescribeGroups", lambda req: {"groups": [
        {"group_id": g, "error_code": 16} for g in req.body["groups"]]})   # NOT_COORDINATOR
    member = {"member_id": "m-1", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "member_metadata": encode_subscription(["t"]),
              "member_assignment": encode_assignment([TP("t", 0), TP("t", 1)])}
    fc.brokers[3].on("DescribeGroups", lambda req: {"groups": [
        {"group_id": g, "error_code": 0, "group_state": "Stable", "protocol_type": "consumer",
         "protocol_data": "range", "members": [member]} for g in req.body["groups"]]})
    sim = Sim(fc)
    h = sim.core.describe_consumer_groups(["g"], now=0)
    sim.run(h)
    assert [n for n, _ in sim.requests("DescribeGroups")] == [2, 3]
    assert len(lookups) == 2
    assert lookups[0].body["coordinator_keys"] == ["g"] and lookups[0].body["key_type"] == 0
    d = h.items["g"].result()
    assert d.state == "Stable" and d.assignor == "range" and d.coordinator == Node(3, "b3", 9092)
    (m,) = d.members
    assert m.member_id == "m-1" and m.client_id == "c"
    assert m.assignment.partitions == (TP("t", 0), TP("t", 1))
    assert m.subscription.topics == ("t",)


def test_coordinator_load_in_progress_retries_same_coordinator_and_fatal_errors_fail():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("FindCoordinator", _find_coordinator(2))
    fc.brokers[2].script("DescribeGroups", {"groups": [{"group_id": "g", "error_code": 14}]})
    fc.brokers[2].on("DescribeGroups", lambda req: {"groups": [
        {"group_id": g, "error_code": 30 if g == "locked" else 0, "group_state": "Empty",
         "protocol_type": "consumer", "members": []} for g in req.body["groups"]]})
    sim = Sim(fc)
    h = sim.core.describe_consumer_groups(["g"], now=0)
    sim.run(h)
    assert len(sim.requests("FindCoordinator")) == 1     # loading: same coordinator, no new lookup
    t = sim.times("DescribeGroups")
    assert len(t) == 2 and t[1] - t[0] >= 100
    assert h.items["g"].result().state == "Empty"
    h2 = sim.core.describe_consumer_groups(["locked"], now=sim.now)
    sim.run(h2)
    assert isinstance(h2.items["locked"].error, error_codes.GroupAuthorizationFailedError)


def test_find_coordinator_errors_are_retried_then_time_out():
    fc = FakeCluster()
    fc.on_all("FindCoordinator", _find_coordinator(-1, code=15))
    sim = Sim(fc, **{"default.api.timeout.ms": 2000})
    h = sim.core.delete_consumer_groups(["g"], now=0)
    sim.run(h)
    err = h.items["g"].error
    assert isinstance(err, AdminTimeoutError) and "delete_consumer_groups" in str(err)
    assert "COORDINATOR_NOT_AVAILABLE" in str(err)
    assert len(sim.requests("FindCoordinator")) >= 3


def test_delete_consumer_groups_per_group_results():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("FindCoordinator", _find_coordinator(2))
    fc.brokers[2].on("DeleteGroups", lambda req: {"results": [
        {"group_id": g, "error_code": 68 if g == "busy" else 0} for g in req.body["groups_names"]]})
    sim = Sim(fc)
    h = sim.core.delete_consumer_groups(["idle", "busy"], now=0)
    sim.run(h)
    assert h.items["idle"].result() is None
    assert isinstance(h.items["busy"].error, error_codes.NonEmptyGroupError)
    assert sorted(r.body["groups_names"][0] for _, r in sim.requests("DeleteGroups")) == ["busy", "idle"]


def _offset_fetch_v8(committed, code=0):
    def answer(req):
        g = req.body["groups"][0]["group_id"]
        by = {}
        for (t, p), o in committed.items():
            by.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                         "committed_leader_epoch": 1, "metadata": "m", "error_code": 0})
        return {"groups": [{"group_id": g, "error_code": code,
                            "topics": [{"name": t, "partitions": ps} for t, ps in by.items()]}]}
    return answer


def test_list_consumer_group_offsets_v8_and_v7_shapes():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("FindCoordinator", _find_coordinator(2))
    fc.brokers[2].on("OffsetFetch", _offset_fetch_v8({("t", 0): 5, ("t", 1): -1}))
    sim = Sim(fc)
    h = sim.core.list_consumer_group_offsets("g", [TP("t", 0), TP("t", 1)], now=0)
    sim.run(h)
    [(_, req)] = sim.requests("OffsetFetch")
    assert req.version >= 8
    assert [(t["name"], t["partition_indexes"]) for t in req.body["groups"][0]["topics"]] == [("t", [0, 1])]
    assert h.result() == {TP("t", 0): OffsetAndMetadata(5, "m", 1)}   # -1: no commit, left out

    fc2 = FakeCluster(broker_kwargs={1: {"api_versions": {"OffsetFetch": (0, 7)}}})
    fc2.on_all("FindCoordinator", _find_coordinator(1))
    fc2.brokers[1].on("OffsetFetch", lambda req: {"error_code": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 2, "committed_offset": 9, "metadata": "",
                                      "error_code": 0}]}]})
    sim2 = Sim(fc2)
    h2 = sim2.core.list_consumer_group_offsets("g", now=0)
    sim2.run(h2)
    [(_, req2)] = sim2.requests("OffsetFetch")
    assert req2.version == 7 and req2.body["group_id"] == "g" and req2.body["topics"] is None
    assert h2.result() == {TP("t", 2): OffsetAndMetadata(9, "", -1)}


def test_offset_fetch_not_coordinator_looks_up_again():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("FindCoordinator", _find_coordinator(2))
    fc.brokers[2].script("OffsetFetch", _offset_fetch_v8({}, code=16))
    fc.brokers[2].on("OffsetFetch", _offset_fetch_v8({("t", 0): 1}))
    sim = Sim(fc)
    h = sim.core.list_consumer_group_offsets("g", now=0)
    sim.run(h)
    assert len(sim.requests("FindCoordinator")) == 2
    assert h.result() == {TP("t", 0): OffsetAndMetadata(1, "m", 1)}


def _coordinators(where, codes=None):
    """FindCoordinator answering for every key: its node from ``where``
    {group: node}, an error from ``codes`` {group: code} (then popped)."""
    codes = dict(codes or {})

    def answer(req):
        keys = req.body.get("coordinator_keys") or [req.body["key"]]
        entries = [{"key": k, "node_id": where[k], "host": f"b{where[k]}", "port": 9092,
                    "error_code": codes.pop(k, 0)} for k in keys]
        first = {k: v for k, v in entries[0].items() if k != "key"}
        return dict(first, coordinators=entries) if req.version >= 4 else first
    return answer


def _offsets_by_group(committed, codes=None):
    """OffsetFetch v8+ answering every group of the request: ``committed``
    {group: {(topic, p): offset}}; ``codes`` {group: group-level error}, each
    answered once."""
    codes = dict(codes or {})

    def answer(req):
        return {"groups": [{"group_id": g["group_id"], "error_code": codes.pop(g["group_id"], 0), "topics": [
            {"name": t, "partitions": [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": 1,
                                        "metadata": "m", "error_code": 0}]}
            for (t, p), o in sorted(committed[g["group_id"]].items())]} for g in req.body["groups"]]}
    return answer


def test_list_consumer_group_offsets_of_many_groups_asks_each_coordinator_once():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("FindCoordinator", _coordinators({"a": 1, "b": 2, "c": 1, "gone": 2}))
    committed = {"a": {("t", 0): 3}, "b": {("t", 1): 4}, "c": {}, "gone": {}}
    fc.on_all("OffsetFetch", _offsets_by_group(committed, {"gone": 69}))       # GROUP_ID_NOT_FOUND
    sim = Sim(fc)
    h = sim.core.list_consumer_group_offsets({"a": [TP("t", 0)], "b": None, "c": None, "gone": None}, now=0)
    sim.run(h)
    [(_, lookup)] = sim.requests("FindCoordinator")
    assert lookup.version >= 4 and lookup.body["coordinator_keys"] == ["a", "b", "c", "gone"]
    sent = {n: [(g["group_id"], g["topics"] and [(t["name"], t["partition_indexes"]) for t in g["topics"]])
                for g in r.body["groups"]] for n, r in sim.requests("OffsetFetch")}
    assert sent == {1: [("a", [("t", [0])]), ("c", None)],
                    2: [("b", None), ("gone", None)]}
    assert h.values() == {"a": {TP("t", 0): OffsetAndMetadata(3, "m", 1)},
                          "b": {TP("t", 1): OffsetAndMetadata(4, "m", 1)}, "c": {}}
    assert isinstance(h.errors()["gone"], error_codes.GroupIdNotFoundError)
    assert "'gone'" in str(h.errors()["gone"])


def test_many_groups_a_moved_coordinator_looks_up_that_group_only():
    fc = FakeCluster(nodes=(1, 2))
    where = {"a": 1, "b": 1}
    fc.on_all("FindCoordinator", _coordinators(where))
    fc.on_all("OffsetFetch", _offsets_by_group({"a": {("t", 0): 1}, "b": {("t", 0): 2}}, {"b": 16}))
    sim = Sim(fc)
    h = sim.core.list_consumer_group_offsets({"a": None, "b": None}, now=0)
    sim.run(h)
    lookups = [r.body["coordinator_keys"] for _, r in sim.requests("FindCoordinator")]
    assert lookups == [["a", "b"], ["b"]]
    assert h.result() == {"a": {TP("t", 0): OffsetAndMetadata(1, "m", 1)},
                          "b": {TP("t", 0): OffsetAndMetadata(2, "m", 1)}}


def test_many_groups_at_brokers_before_batching_go_one_per_request():
    # FindCoordinator before v4 and OffsetFetch before v8 take one group each.
    fc = FakeCluster(broker_kwargs={1: {"api_versions": {"FindCoordinator": (0, 3), "OffsetFetch": (0, 7)}}})
    fc.on_all("FindCoordinator", _coordinators({"a": 1, "b": 1}))
    fc.brokers[1].on("OffsetFetch", lambda req: {"error_code": 0, "topics": [
        {"name": req.body["group_id"], "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                       "metadata": "", "error_code": 0}]}]})
    sim = Sim(fc)
    h = sim.core.list_consumer_group_offsets({"a": None, "b": None}, now=0)
    sim.run(h)
    assert sorted(r.body["key"] for _, r in sim.requests("FindCoordinator")) == ["a", "b"]
    assert sorted(r.body["group_id"] for _, r in sim.requests("OffsetFetch")) == ["a", "b"]
    assert h.result() == {g: {TP(g, 0): OffsetAndMetadata(7, "", -1)} for g in ("a", "b")}


def test_list_consumer_group_offsets_refuses_bad_groups():
    core = AdminCore({"bootstrap.servers": "h:1"})
    with pytest.raises(ValueError, match="give each group's partitions in it"):
        core.list_consumer_group_offsets({"a": None}, [TP("t", 0)], now=0)
    with pytest.raises(ValueError, match="'' is not a group id"):
        core.list_consumer_group_offsets({"": None}, now=0)
    with pytest.raises(TypeError, match="not int"):
        core.list_consumer_group_offsets(5, now=0)


# --- describe_classic_groups (KIP-1043) ----------------------------------------------------------

def test_describe_classic_groups_batches_per_coordinator_and_refuses_other_groups():
    from kproto.admin_groups import ClassicGroupDescription
    from kproto.consumer.assignors import encode_assignment
    fc = FakeCluster(nodes=(1, 2))
    where = {"classic": 1, "simple": 1, "modern": 2, "old-missing": 2}
    fc.on_all("FindCoordinator", _coordinators(where))

    def describe(req):
        out = []
        for g in req.body["groups"]:
            if g == "modern":
                out.append({"group_id": g, "error_code": 69, "error_message": f"Group {g} is not a classic group."})
            elif g == "old-missing":         # a broker before v6 describes a missing group as Dead
                out.append({"group_id": g, "error_code": 0, "group_state": "Dead", "protocol_type": "",
                            "protocol_data": "", "members": []})
            elif g == "simple":
                out.append({"group_id": g, "error_code": 0, "group_state": "Empty", "protocol_type": "",
                            "protocol_data": "", "members": []})
            else:
                out.append({"group_id": g, "error_code": 0, "group_state": "Stable", "protocol_type": "consumer",
                            "protocol_data": "range", "members": [
                                {"member_id": "m1", "group_instance_id": None, "client_id": "c", "client_host": "/h",
                                 "member_metadata": b"", "member_assignment": encode_assignment([TP("t", 0), TP("t", 1)])}]})
        return {"groups": out}
    fc.on_all("DescribeGroups", describe)
    sim = Sim(fc)
    h = sim.core.describe_classic_groups(list(where), now=0)
    sim.run(h)
    assert sorted((n, r.body["groups"]) for n, r in sim.requests("DescribeGroups")) == [
        (1, ["classic", "simple"]), (2, ["modern", "old-missing"])]
    d = h.values()["classic"]
    assert isinstance(d, ClassicGroupDescription) and (d.protocol, d.protocol_data, d.state) == (
        "consumer", "range", "Stable")
    assert [(m.member_id, m.assignment.partitions) for m in d.members] == [("m1", (TP("t", 0), TP("t", 1)))]
    assert d.coordinator.id == 1 and not d.is_simple_consumer_group
    assert h.values()["simple"].is_simple_consumer_group and h.values()["simple"].state == "Empty"
    errors = h.errors()
    assert set(errors) == {"modern", "old-missing"}
    assert all(isinstance(e, error_codes.GroupIdNotFoundError) for e in errors.values())
    assert "not a classic group" in str(errors["modern"]) and "'old-missing' does not exist" in str(
        errors["old-missing"])


def test_describe_topics_by_id_asks_metadata_naming_the_ids():
    fc = FakeCluster(topics={"a": 2, "b": 1})

    def metadata(req):
        known = {_uuid(n): n for n in fc.topics}
        if req.body["topics"] and req.body["topics"][0].get("name") is None:
            asked = [t["topic_id"] for t in req.body["topics"]]
            body = fc._metadata(1, type(req)(req.api, req.version, req.correlation_id, req.client_id, {
                "topics": [{"name": known[i]} for i in asked if i in known]}, req.channel))
            body["topics"] += [{"name": None, "topic_id": i, "error_code": 100, "partitions": []}
                               for i in asked if i not in known]
            return body
        return fc._metadata(1, req)
    fc.brokers[1].on("Metadata", metadata)
    sim = Sim(fc)
    stranger = _uuid("nobody")
    h = sim.core.describe_topics([_uuid("a"), stranger], now=0)
    sim.run(h)
    by_id = [r for _, r in sim.requests("Metadata") if r.body["topics"] and r.body["topics"][0]["name"] is None]
    assert [[t["topic_id"] for t in r.body["topics"]] for r in by_id] == [[_uuid("a"), stranger]]
    assert by_id[0].version >= 12
    values = h.values()
    assert set(values) == {_uuid("a")}
    assert values[_uuid("a")].name == "a" and len(values[_uuid("a")].partitions) == 2
    err = h.errors()[stranger]
    assert isinstance(err, error_codes.UnknownTopicIdError) and str(stranger) in str(err)


def test_describe_topics_by_id_needs_metadata_v12_and_refuses_other_keys():
    fc = FakeCluster(topics={"a": 1}, broker_kwargs={1: {"api_versions": {"Metadata": (0, 11)}}})
    sim = Sim(fc)
    h = sim.core.describe_topics([_uuid("a")], now=0)
    sim.run(h)
    with pytest.raises(UnsupportedVersionError, match="by id needs Metadata v12"):
        h.result()
    with pytest.raises(ValueError, match="5 is neither a topic name .* nor a topic id"):
        sim.core.describe_topics(["a", 5], now=0)


# --- partition leaders -------------------------------------------------------------------

def _list_offsets_answer(ends, node, leaders):
    def answer(req):
        out = []
        for t in req.body["topics"]:
            ps = []
            for p in t["partitions"]:
                tp = (t["name"], p["partition_index"])
                if leaders(*tp) != node:
                    ps.append({"partition_index": tp[1], "error_code": 6})
                    continue
                ts = p["timestamp"]
                off = {-2: 0, -1: ends[tp]}.get(ts, min(ends[tp], ts // 1000))
                ps.append({"partition_index": tp[1], "error_code": 0, "offset": off,
                           "timestamp": -1, "leader_epoch": 3})
            out.append({"name": t["name"], "partitions": ps})
        return {"topics": out}
    return answer


def test_list_offsets_to_leaders_with_specs():
    fc = FakeCluster(nodes=(1, 2), topics={"t": 2}, leaders={("t", 1): 2})
    ends = {("t", 0): 10, ("t", 1): 20}
    for n, b in fc.brokers.items():
        b.on("ListOffsets", _list_offsets_answer(ends, n, fc.leader))
    sim = Sim(fc)
    h = sim.core.list_offsets({TP("t", 0): OffsetSpec.EARLIEST, TP("t", 1): "latest",
                               ("t", 5): OffsetSpec.LATEST, ("ghost", 0): 0}, now=0)
    sim.run(h)
    by_node = {n: r for n, r in sim.requests("ListOffsets")}
    assert set(by_node) == {1, 2}                      # one request per leader
    assert by_node[1].body["topics"][0]["partitions"][0]["timestamp"] == -2
    assert by_node[2].body["topics"][0]["partitions"][0]["timestamp"] == -1
    assert h.items[TP("t", 0)].result() == ListOffsetsResultInfo(0, -1, 3)
    assert h.items[TP("t", 1)].result().offset == 20
    assert isinstance(h.items[TP("t", 5)].error, error_codes.UnknownTopicOrPartitionError)
    assert isinstance(h.items[TP("ghost", 0)].error, error_codes.UnknownTopicOrPartitionError)
    with pytest.raises(ValueError):
        sim.core.list_offsets({TP("t", 0): "newest"}, now=0)


def test_delete_records_not_leader_rediscovers_leader():
    fc = FakeCluster(nodes=(1, 2), topics={"t": 2})
    seen = []

    def answer(node):
        def f(req):
            out = []
            for t in req.body["topics"]:
                ps = []
                for p in t["partitions"]:
                    seen.append((node, p["partition_index"], p["offset"]))
                    if fc.leader(t["name"], p["partition_index"]) != node:
                        ps.append({"partition_index": p["partition_index"], "error_code": 6,
                                   "low_watermark": -1})
                        fc.leaders[(t["name"], p["partition_index"])] = node   # no-op marker
                    else:
                        ps.append({"partition_index": p["partition_index"], "error_code": 0,
                                   "low_watermark": p["offset"]})
                out.append({"name": t["name"], "partitions": ps})
            return {"topics": out}
        return f
    fc.brokers[1].on("DeleteRecords", answer(1))
    fc.brokers[2].on("DeleteRecords", answer(2))
    # Partition 1 moves to node 2 after the first Metadata answer.
    orig = fc._metadata

    def metadata(node, req, calls=[0]):
        calls[0] += 1
        if calls[0] >= 3:
            fc.leaders[("t", 1)] = 2
        return orig(node, req)
    for n, b in fc.brokers.items():
        b.on("Metadata", lambda req, n=n: metadata(n, req))
    fc.leaders[("t", 1)] = 1
    sim = Sim(fc)
    h = sim.core.delete_records({TP("t", 0): 4, TP("t", 1): 7}, now=0)
    # Make node 1 refuse partition 1 on the first DeleteRecords (the leader moved).
    fc.brokers[1].script("DeleteRecords", lambda req: {"topics": [{"name": "t", "partitions": [
        {"partition_index": p["partition_index"], "error_code": 6 if p["partition_index"] == 1 else 0,
         "low_watermark": p["offset"]} for p in req.body["topics"][0]["partitions"]]}]})
    sim.run(h)
    assert h.result() == {TP("t", 0): DeletedRecords(4), TP("t", 1): DeletedRecords(7)}
    reqs = sim.requests("DeleteRecords")
    assert [n for n, _ in reqs] == [1, 2]
    assert reqs[1][1].body["topics"][0]["partitions"] == [{"partition_index": 1, "offset": 7}]
    t = sim.times("DeleteRecords")
    assert t[1] - t[0] >= 100


def test_consumer_group_lag():
    fc = FakeCluster(nodes=(1, 2), topics={"t": 2}, leaders={("t", 1): 2})
    fc.on_all("FindCoordinator", _find_coordinator(1))
    fc.brokers[1].on("OffsetFetch", _offset_fetch_v8({("t", 0): 4, ("t", 1): 20}))
    ends = {("t", 0): 10, ("t", 1): 20}
    for n, b in fc.brokers.items():
        b.on("ListOffsets", _list_offsets_answer(ends, n, fc.leader))
    sim = Sim(fc)
    h = sim.core.consumer_group_lag("g", now=0)
    sim.run(h)
    assert h.result() == {TP("t", 0): ConsumerLag(4, 10, 6), TP("t", 1): ConsumerLag(20, 20, 0)}
    assert all(r.body["topics"][0]["partitions"][0]["timestamp"] == -1 for _, r in sim.requests("ListOffsets"))
    assert sim.core.events() == [h]                    # the inner steps are not reported


# --- connection loss, request timeouts, close -----------------------------------------------

def test_request_timeout_is_retried_on_a_new_connection():
    fc = FakeCluster()
    fc.brokers[1].script("DeleteTopics", NO_RESPONSE)
    fc.brokers[1].on("DeleteTopics", lambda req: {"responses": [
        {"name": t["name"], "error_code": 0} for t in req.body["topics"]]})
    sim = Sim(fc, **{"request.timeout.ms": 1000})
    h = sim.core.delete_topics(["x"], now=0)
    sim.run(h)
    assert h.items["x"].result() is None
    t = sim.times("DeleteTopics")
    assert len(t) == 2 and t[1] - t[0] >= 1000
    assert len(sim.connects) >= 2                      # the timed-out connection was replaced


def test_unreachable_broker_times_out_with_the_operation_name():
    fc = FakeCluster()
    sim = Sim(fc, **{"default.api.timeout.ms": 1500})
    sim.unreachable.add("b1")
    h = sim.core.list_topics(now=0)
    sim.run(h)
    assert isinstance(h.error, AdminTimeoutError) and "list_topics" in str(h.error)
    with pytest.raises(AdminTimeoutError):
        h.result()


def test_connection_loss_mid_request_is_retried():
    fc = FakeCluster(nodes=(1, 2), controller=2)
    calls = []

    def answer(req):
        calls.append(req)
        return NO_RESPONSE
    fc.brokers[2].script("CreateTopics", answer)
    fc.brokers[2].on("CreateTopics", lambda req: {"topics": [{"name": "a", "error_code": 0}]})
    sim = Sim(fc)
    h = sim.core.create_topics(["a"], now=0)
    while not calls:
        sim.step()
        sim.now += 1
    node = next(n for n, (b, _) in sim.channels.items() if b.node_id == 2)
    sim.channels.pop(node)
    sim.core.disconnected(node, sim.now, OSError("reset"))
    sim.run(h)
    assert h.items["a"].result() is None
    assert len(sim.requests("CreateTopics")) == 2


def test_close_fails_unfinished_operations():
    fc = FakeCluster()
    sim = Sim(fc)
    sim.unreachable.add("b1")
    h = sim.core.describe_topics(["t"], now=0)
    sim.step()
    sim.core.close(sim.now)
    assert h.done and isinstance(h.items["t"].error, KafkaError) and "closed" in str(h.items["t"].error)
    with pytest.raises(KafkaError):
        sim.core.list_topics(now=0)


def test_empty_operations_are_done_at_once():
    core = AdminCore({"bootstrap.servers": "h:1"})
    h = core.delete_topics([], now=0)
    assert h.done and h.result() == {}
    with pytest.raises(ValueError, match="twice"):
        core.create_topics(["a", "a"], now=0)


def test_close_fails_requests_in_flight_without_retrying_them():
    fc = FakeCluster()
    fc.brokers[1].on("DeleteTopics", lambda req: NO_RESPONSE)
    sim = Sim(fc)
    h = sim.core.delete_topics(["x"], now=0)
    while not sim.requests("DeleteTopics"):
        sim.step()
        sim.now += 1
    actions = sim.core.close(sim.now)
    assert any(isinstance(a, Close) for a in actions)
    assert h.done and "closed" in str(h.items["x"].error)
    assert not sim.core.pending and sim.core.events() == [h]


def test_coordinator_connection_loss_looks_the_coordinator_up_again():
    fc = FakeCluster(nodes=(1, 2, 3))
    lookups = []

    def find(req):
        lookups.append(req)
        return _find_coordinator(2 if len(lookups) == 1 else 3)(req)
    fc.on_all("FindCoordinator", find)
    fc.brokers[2].on("DeleteGroups", lambda req: NO_RESPONSE)          # then the connection dies
    fc.brokers[3].on("DeleteGroups", lambda req: {"results": [{"group_id": "g", "error_code": 0}]})
    sim = Sim(fc)
    h = sim.core.delete_consumer_groups(["g"], now=0)
    while not sim.requests("DeleteGroups"):
        sim.step()
        sim.now += 1
    node = next(n for n, (b, _) in sim.channels.items() if b.node_id == 2)
    sim.channels.pop(node)
    sim.core.disconnected(node, sim.now, ConnectionResetError("reset"))
    sim.run(h)
    assert h.items["g"].result() is None
    assert [n for n, _ in sim.requests("DeleteGroups")] == [2, 3]
    assert len(lookups) == 2


def test_list_offsets_request_shape_and_handle_states():
    fc = FakeCluster(topics={"t": 1})
    fc.brokers[1].on("ListOffsets", _list_offsets_answer({("t", 0): 50}, 1, fc.leader))
    sim = Sim(fc)
    h = sim.core.list_offsets({("t", 0): OffsetSpec.for_timestamp(7000)}, isolation_level=1, now=0)
    with pytest.raises(KafkaError, match="not done yet"):
        h.result()
    assert not h.items[TP("t", 0)].done
    sim.run(h)
    [(_, req)] = sim.requests("ListOffsets")
    assert req.body["isolation_level"] == 1 and req.body["replica_id"] == -1
    assert req.body["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": 7000}]}]
    assert h.result() == {TP("t", 0): ListOffsetsResultInfo(7, -1, 3)}
    assert h.values() == h.result() and h.errors() == {}


# --- issue 15: wrong or slow answers --------------------------------------------------------

class DroppingSim(Sim):
    """A Sim whose brokers can close the connection on a request, as a broker
    does with a request it cannot serve: a handler calls ``sim.drop(req)``
    (and answers NO_RESPONSE); the connection closes once the request is read."""

    def __init__(self, cluster, **config):
        super().__init__(cluster, **config)
        self._closing = []

    def drop(self, req):
        self._closing.append(req.channel)
        return NO_RESPONSE

    def step(self):
        moved = super().step()
        for node, (_, ch) in list(self.channels.items()):
            if ch in self._closing:
                self._closing.remove(ch)
                self.channels.pop(node)
                self.core.disconnected(node, self.now, ConnectionResetError("closed by the broker"))
                moved = True
        return moved


def test_delete_records_a_broker_cannot_serve_fails_fast_naming_the_request():
    fc = FakeCluster(topics={"t": 2})
    sim = DroppingSim(fc)
    fc.brokers[1].on("DeleteRecords", sim.drop)
    h = sim.core.delete_records({TP("t", 0): 3}, now=0)
    sim.run(h)
    err = h.items[TP("t", 0)].error
    msg = str(err)
    assert not isinstance(err, AdminTimeoutError)
    assert "DeleteRecords" in msg and "t-0" in msg and "closed the connection" in msg, msg
    assert "Metadata" not in msg
    # Retried once (one drop may be bad luck), then given up: well before the timeout.
    assert len(sim.requests("DeleteRecords")) == 2
    assert sim.now < 5000


def test_one_dropped_connection_is_retried():
    fc = FakeCluster(topics={"t": 1})
    sim = DroppingSim(fc)
    fc.brokers[1].script("DeleteRecords", sim.drop)
    fc.brokers[1].on("DeleteRecords", lambda req: {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "low_watermark": 3}]}]})
    h = sim.core.delete_records({TP("t", 0): 3}, now=0)
    sim.run(h)
    assert h.result() == {TP("t", 0): DeletedRecords(3)}


def test_a_timeout_after_a_drop_names_the_request_that_was_dropped():
    fc = FakeCluster(topics={"t": 1})
    # The only broker stays away: with the default metadata.recovery.strategy
    # the client would rebootstrap (KIP-899) and time out retrying DeleteRecords
    # on node 1 instead; this test is about the leaders lookup after a drop.
    sim = DroppingSim(fc, **{"default.api.timeout.ms": 3000, "metadata.recovery.strategy": "none"})

    def drop_and_go_away(req):
        sim.unreachable.add("b1")          # the broker then stays away
        return sim.drop(req)
    fc.brokers[1].on("DeleteRecords", drop_and_go_away)
    h = sim.core.delete_records({TP("t", 0): 3}, now=0)
    sim.run(h)
    msg = str(h.items[TP("t", 0)].error)
    assert "delete_records timed out" in msg and "leaders for DeleteRecords" in msg, msg
    assert "last error: DeleteRecords to node 1: connection to node 1" in msg, msg


def test_list_consumer_groups_asks_describe_groups_for_states_the_listing_lacks():
    fc = FakeCluster(nodes=(1, 2))
    # Node 1 answers ListGroups with the state "Unknown" (as Tansu does);
    # node 2 knows its states.
    fc.brokers[1].on("ListGroups", lambda req: {"groups": [
        {"group_id": "a", "protocol_type": "consumer", "group_state": "Unknown"},
        {"group_id": "b", "protocol_type": "consumer", "group_state": "Unknown"},
        {"group_id": "gone", "protocol_type": "consumer", "group_state": "Unknown"}]})
    fc.brokers[1].on("DescribeGroups", lambda req: {"groups": [
        {"group_id": g, "error_code": 16 if g == "gone" else 0,
         "group_state": {"a": "Stable", "b": "Empty"}.get(g, ""), "protocol_type": "consumer",
         "members": []} for g in req.body["groups"]]})
    fc.brokers[2].on("ListGroups", lambda req: {"groups": [
        {"group_id": "c", "protocol_type": "consumer", "group_state": "PreparingRebalance"}]})
    sim = Sim(fc)
    h = sim.core.list_consumer_groups(now=0)
    sim.run(h)
    states = {g.group_id: g.state for g in h.result()}
    assert states == {"a": "Stable", "b": "Empty", "gone": "Unknown", "c": "PreparingRebalance"}
    [(node, req)] = sim.requests("DescribeGroups")      # one request, to the listing broker
    assert node == 1 and sorted(req.body["groups"]) == ["a", "b", "gone"]
    assert sim.core.events() == [h]                     # the inner step is not reported
    # A states filter the broker could not apply is applied to the real states.
    h = sim.core.list_consumer_groups(states=["Stable"], now=sim.now)
    sim.run(h)
    assert [g.group_id for g in h.result()] == ["a"]


def test_list_consumer_groups_keeps_the_listing_when_describe_groups_fails():
    fc = FakeCluster()
    fc.brokers[1].on("ListGroups", lambda req: {"groups": [
        {"group_id": "a", "protocol_type": "consumer", "group_state": "Unknown"}]})
    fc.brokers[1].on("DescribeGroups", lambda req: {"groups": [
        {"group_id": "a", "error_code": 29, "members": []}]})
    sim = Sim(fc)
    h = sim.core.list_consumer_groups(now=0)
    sim.run(h)
    assert [(g.group_id, g.state) for g in h.result()] == [("a", "Unknown")]


@pytest.mark.parametrize("bad", ["bad name?", "a" * 250, ".", "..", "", "tab\there", "ünï"])
def test_create_topics_refuses_illegal_names_without_asking_the_broker(bad):
    fc = FakeCluster()
    fc.brokers[1].on("CreateTopics", lambda req: {"topics": [
        {"name": t["name"], "error_code": 0} for t in req.body["topics"]]})
    sim = Sim(fc)
    h = sim.core.create_topics([bad, "fine.name_1-x"], now=0)
    sim.run(h)
    err = h.items[bad].error
    assert isinstance(err, error_codes.InvalidTopicError)
    assert h.items["fine.name_1-x"].error is None        # the legal one is created (as Java)
    [(_, req)] = sim.requests("CreateTopics")
    assert [t["name"] for t in req.body["topics"]] == ["fine.name_1-x"]


def test_create_topics_with_only_illegal_names_is_done_at_once():
    core = AdminCore({"bootstrap.servers": "h:1"})
    h = core.create_topics(["x" * 250], now=0)
    assert h.done and "249" in str(h.error)
    assert core.events() == [h] and not core.pending


# --- incremental_alter_configs: Java's AlterConfigOp ------------------------------------------

def test_incremental_alter_configs_sends_each_alter_config_op():
    from kproto.admin_configs import AlterConfigOp
    cluster = FakeCluster()
    cluster.on_all("IncrementalAlterConfigs", lambda req: {"responses": [
        {"resource_type": r["resource_type"], "resource_name": r["resource_name"], "error_code": 0}
        for r in req.body["resources"]]})
    sim = Sim(cluster)
    topic = ConfigResource.topic("t")
    h = sim.core.incremental_alter_configs({topic: {
        "cleanup.policy": AlterConfigOp.append(["compact", "delete"]), "x.list": AlterConfigOp.subtract("a"),
        "retention.ms": 60000, "flag": True, "segment.ms": None, "y.list": ["a", "b"],
        "z": AlterConfigOp.delete()}}, now=0)
    sim.run(h)
    assert h.result() == {topic: None}
    [(_, req)] = sim.requests("IncrementalAlterConfigs")
    sent = {c["name"]: (c["config_operation"], c["value"]) for c in req.body["resources"][0]["configs"]}
    assert sent == {"cleanup.policy": (2, "compact,delete"), "x.list": (3, "a"), "retention.ms": (0, "60000"),
                    "flag": (0, "true"), "segment.ms": (1, None), "y.list": (0, "a,b"), "z": (1, None)}


@pytest.mark.parametrize("change,message", [
    ({"a": object()}, "'a' = <object .* is not a value"),
    ({1: "x"}, "setting names are strings, not 1"),
    ({"a": ("AlterConfigOp", 9)}, "9 is not an AlterConfigOp.OpType"),
    ({"a": ("AlterConfigOp", 1, "x")}, "'a': DELETE takes no value"),
    ({"a": ("AlterConfigOp", 2)}, "'a': APPEND needs a value"),
])
def test_incremental_alter_configs_refuses_what_is_no_change(change, message):
    from kproto.admin_configs import AlterConfigOp
    change = {k: AlterConfigOp(*v[1:]) if isinstance(v, tuple) else v for k, v in change.items()}
    core = AdminCore({"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match=message):
        core.incremental_alter_configs({ConfigResource.topic("t"): change}, now=0)
