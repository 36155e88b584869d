"""KIP-951 in the core, without a network: a Produce or Fetch error that names
the partition's new leader (CurrentLeader, and NodeEndpoints for a node the
client does not know) moves the leader in the metadata cache at once; the
retry goes there without a Metadata round trip."""
import uuid

try:
    from test_consumer_fetcher import requests, response
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_consumer_fetcher import requests, response
    from tests.test_producer_core import FakeKafka, make

from kproto.cluster import ClusterMetadata, TopicPartition
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions

NOT_LEADER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC = 6, 74, 3


def _metadata(leader=1, epoch=3, brokers=(1, 2)):
    return {"brokers": [{"node_id": n, "host": f"b{n}", "port": 9092} for n in brokers],
            "cluster_id": "c", "controller_id": 1, "topics": [
                {"name": "t", "error_code": 0, "topic_id": uuid.UUID(int=7), "partitions": [
                    {"partition_index": 0, "leader_id": leader, "leader_epoch": epoch, "error_code": 0,
                     "replica_nodes": list(brokers), "isr_nodes": list(brokers)}]}]}


def _cluster():
    c = ClusterMetadata([("boot", 9092)])
    c.add_topic("t")
    c.update(_metadata(), now=0)
    return c


# -- the metadata cache -----------------------------------------------------------------------

def test_a_newer_hint_moves_the_leader_without_asking_for_a_refresh():
    c = _cluster()
    assert c.apply_leader_hint("t", 0, {"error_code": NOT_LEADER,
                                         "current_leader": {"leader_id": 2, "leader_epoch": 4}})
    assert c.leader("t", 0) == 2 and c.leader_epochs["t"][0] == 4
    assert not c.need_update and c.leader_hints_applied == 1
    assert c.partitions_by_node() == {2: [TopicPartition("t", 0)]}


def test_a_hint_not_newer_than_the_cache_or_without_a_leader_is_ignored():
    c = _cluster()
    for hint in ({"leader_id": 2, "leader_epoch": 3},       # same epoch as Metadata's
                 {"leader_id": 2, "leader_epoch": 2},       # older
                 {"leader_id": -1, "leader_epoch": -1}):    # the broker does not know either
        assert not c.apply_leader_hint("t", 0, {"error_code": NOT_LEADER, "current_leader": hint})
    # Other errors carry no hint, whatever the fields say.
    assert not c.apply_leader_hint("t", 0, {"error_code": UNKNOWN_TOPIC,
                                             "current_leader": {"leader_id": 2, "leader_epoch": 9}})
    assert c.leader("t", 0) == 1 and c.leader_hints_applied == 0


def test_an_unknown_node_needs_its_endpoint():
    c = _cluster()
    hint = {"error_code": FENCED_LEADER_EPOCH, "current_leader": {"leader_id": 3, "leader_epoch": 5}}
    assert not c.apply_leader_hint("t", 0, hint)              # node 3: no address known
    assert c.apply_leader_hint("t", 0, hint, [{"node_id": 3, "host": "b3", "port": 9093, "rack": None}])
    assert c.leader("t", 0) == 3 and c.node_address(3) == ("b3", 9093)


def test_an_older_metadata_answer_does_not_move_a_hinted_leader_back():
    c = _cluster()
    c.apply_leader_hint("t", 0, {"error_code": NOT_LEADER, "current_leader": {"leader_id": 2, "leader_epoch": 4}})
    c.update(_metadata(leader=1, epoch=3), now=10)             # a broker behind the controller
    assert c.leader("t", 0) == 2
    c.update(_metadata(leader=1, epoch=5), now=20)             # newer: taken
    assert c.leader("t", 0) == 1 and c.leader_epochs["t"][0] == 5


# -- the producer ----------------------------------------------------------------------------------

class HintingKafka(FakeKafka):
    """FakeKafka whose NOT_LEADER_OR_FOLLOWER answers carry KIP-951's hint
    (Produce v10+): the current leader, its epoch, and the endpoints."""

    epoch = 10

    def _append(self, node, tp, data):
        res = super()._append(node, tp, data)
        if res["error_code"] == NOT_LEADER:
            res["current_leader"] = {"leader_id": self.leader(*tp), "leader_epoch": self.epoch}
        return res

    def _produce(self, node, req):
        body = super()._produce(node, req)
        if isinstance(body, dict):
            body["node_endpoints"] = [{"node_id": n, "host": f"b{n}", "port": 9092, "rack": None}
                                      for n in self.brokers]
        return body


def _moved_leader_run(kafka):
    core, kafka, sim = make(kafka)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    before = sum(len(b.requests_of("Metadata")) for b in kafka.brokers.values())
    kafka.leaders[("t", 0)] = 2                                # the leader moved
    h2 = sim.send(b"b")
    sim.run_until(lambda: h2.done)
    assert h.error is None and h2.error is None
    after = sum(len(b.requests_of("Metadata")) for b in kafka.brokers.values())
    nodes = [n for n, _ in kafka.produce_requests]
    assert nodes[:2] == [1, 1] and nodes[-1] == 2
    assert kafka.values() == [b"a", b"b"]
    return core, after - before, sim.now


def test_producer_retries_on_the_hinted_leader_without_a_metadata_request():
    core, refreshes, hinted_ms = _moved_leader_run(HintingKafka(nodes=(1, 2)))
    assert refreshes == 0 and core.cluster.leader_hints_applied == 1
    # The same move without hints (an older broker) costs a Metadata round trip.
    core2, refreshes2, plain_ms = _moved_leader_run(FakeKafka(nodes=(1, 2)))
    assert refreshes2 >= 1 and core2.cluster.leader_hints_applied == 0
    assert hinted_ms < plain_ms                               # and the retry skips the backoff


# -- the consumer's fetcher ------------------------------------------------------------------------

def test_fetcher_hands_the_hint_to_the_cache_and_skips_the_refresh():
    c = ClusterMetadata([("boot", 9092)])
    c.add_topic("t")
    c.update(_metadata(), now=0)
    pos = Positions("earliest")
    f = Fetcher(pos)
    f.leader_hint = lambda tp, answer, endpoints: c.apply_leader_hint(tp.topic, tp.partition, answer, endpoints)
    tp = TopicPartition("t", 0)
    pos.assign([tp])
    pos.seek(tp, 5)
    (req,) = requests(f, leaders={tp: 1})
    body = response(req, {tp: {"error_code": NOT_LEADER}})
    body["responses"][0]["partitions"][0]["current_leader"] = {"leader_id": 3, "leader_epoch": 8}
    body["node_endpoints"] = [{"node_id": 3, "host": "b3", "port": 9092, "rack": None}]
    f.on_fetch_response(req, body)
    assert not f.metadata_refresh_needed and c.leader("t", 0) == 3
    # The next fetch goes to the new leader.
    (req2,) = requests(f, leaders={tp: c.leader("t", 0)})
    assert req2.node == 3
    # Without a hint the fetcher still asks for a refresh.
    f.on_fetch_response(req2, response(req2, {tp: {"error_code": NOT_LEADER}}))
    assert f.metadata_refresh_needed

