"""KIP-899 / KIP-1102 in the core, without a network: when the brokers a
client learnt are all unreachable, its metadata stays stale for
``metadata.recovery.rebootstrap.trigger.ms``, or a broker answers Metadata
with REBOOTSTRAP_REQUIRED, the client starts again from bootstrap.servers
(``metadata.recovery.strategy=rebootstrap``, the default) - and with
``none`` it keeps waiting for the brokers it knows."""
import pytest

try:
    from scripted_broker import NO_RESPONSE
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE
    from tests.test_producer_core import FakeKafka, make

from kproto.errors import ConfigError
from kproto.producer import ProducerCore

REBOOTSTRAP_REQUIRED = 129


class MovingKafka(FakeKafka):
    """Two clusters behind one bootstrap address: at first it leads to node 1
    (the only broker Metadata names), after ``move()`` to node 2 (then the
    only one named, and the leader)."""

    def __init__(self):
        super().__init__(nodes=(1, 2))
        self.current = 1
        self.metadata_error = {}                  # node -> top-level Metadata error code

    def move(self):
        self.current = 2
        self.leaders[("t", 0)] = 2

    def _metadata(self, req):
        body = super()._metadata(req)
        body["brokers"] = [b for b in body["brokers"] if b["node_id"] == self.current]
        return body


def _sim(**cfg):
    kafka = MovingKafka()
    core, kafka, sim = make(kafka, **cfg)
    # The bootstrap address ("boot") leads wherever the cluster is now.
    sim._broker_for = lambda host: kafka.brokers[int(host[1:]) if host[:1] == "b" and host[1:].isdigit()
                                                 else kafka.current]
    for n, b in kafka.brokers.items():
        b.on("Metadata", lambda req, n=n: (
            {"brokers": [], "topics": [], "error_code": kafka.metadata_error[n]}
            if n in kafka.metadata_error else kafka._metadata(req)))
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    assert h.error is None and core.cluster.brokers == {1: ("b1", 9092)}
    return core, kafka, sim


def _node_one_dies(core, kafka, sim):
    sim.refuse.add(1)
    kafka.move()
    core.disconnected(1, sim.now, ConnectionResetError("gone"))
    sim.channels.pop(1, None)


def test_all_known_brokers_unreachable_rebootstraps_to_the_live_cluster():
    core, kafka, sim = _sim()
    _node_one_dies(core, kafka, sim)
    h = sim.send(b"b")
    sim.run_until(lambda: h.done, max_ms=20000)
    assert h.error is None
    assert core.cluster.rebootstraps >= 1 and set(core.cluster.brokers) == {2}
    assert kafka.values() == [b"a", b"b"]
    # b"b" went to node 2, the new cluster's leader.
    assert kafka.produce_requests[-1][0] == 2


def test_strategy_none_keeps_waiting_for_the_known_brokers():
    core, kafka, sim = _sim(**{"metadata.recovery.strategy": "none"})
    _node_one_dies(core, kafka, sim)
    h = sim.core.send("t", b"b", now=sim.now)
    sim.run_until(lambda: sim.now > 20000, max_ms=30000)
    assert not h.done and core.cluster.rebootstraps == 0
    assert all(n == 1 for n, _ in kafka.produce_requests)


def test_stale_metadata_rebootstraps_after_the_trigger():
    # Node 1 still accepts connections but answers nothing: no connect
    # fails, so only metadata.recovery.rebootstrap.trigger.ms gets it out.
    core, kafka, sim = _sim(**{"metadata.recovery.rebootstrap.trigger.ms": 3000, "request.timeout.ms": 1000,
                               "metadata.max.age.ms": 500})
    kafka.brokers[1].on("Metadata", lambda req: NO_RESPONSE)
    kafka.brokers[1].on("Produce", lambda req: NO_RESPONSE)
    kafka.move()
    start = sim.now
    sim.run_until(lambda: core.cluster.rebootstraps >= 1, max_ms=20000)
    assert sim.now - start >= 3000
    h = sim.send(b"b")
    sim.run_until(lambda: h.done, max_ms=20000)
    assert h.error is None and set(core.cluster.brokers) == {2}


def test_rebootstrap_required_error_sends_the_client_back_to_bootstrap():
    core, kafka, sim = _sim(**{"metadata.max.age.ms": 500})
    kafka.metadata_error[1] = REBOOTSTRAP_REQUIRED
    kafka.move()
    sim.run_until(lambda: core.cluster.rebootstraps >= 1, max_ms=5000)
    sim.run_until(lambda: set(core.cluster.brokers) == {2}, max_ms=5000)


def test_recovery_settings_are_checked():
    with pytest.raises(ConfigError, match="metadata.recovery.strategy"):
        ProducerCore({"bootstrap.servers": "b:1", "metadata.recovery.strategy": "sometimes"})
    with pytest.raises(ConfigError, match="metadata.recovery.rebootstrap.trigger.ms"):
        ProducerCore({"bootstrap.servers": "b:1", "metadata.recovery.rebootstrap.trigger.ms": -1})
    cfg = ProducerCore({"bootstrap.servers": "b:1"}).cluster
    assert (cfg.recovery_strategy, cfg.rebootstrap_trigger_ms) == ("rebootstrap", 300000)


# -- KIP-1242: ApiVersions v5 names the cluster and node the client expects ---------------

def _another_cluster_behind_node_one(kafka, core, sim):
    """Address b1 (node 1, also where "boot" leads) now serves cluster "other":
    like a Kafka 4.4 broker, it refuses ApiVersions v5 naming another
    cluster or node with REBOOTSTRAP_REQUIRED, and its Metadata names it."""
    b1 = kafka.brokers[1]

    def api_versions(req):
        sent = req.body.get("cluster_id"), req.body.get("node_id", -1)
        stale = sent[0] is not None and sent != ("other", 1)
        return b1._api_versions_body(REBOOTSTRAP_REQUIRED if stale else 0)

    def metadata(req):
        body = kafka._metadata(req)
        body["cluster_id"] = "other"
        return body

    b1.on("ApiVersions", api_versions)
    b1.on("Metadata", metadata)
    core.disconnected(1, sim.now, ConnectionResetError("broker restarted"))
    sim.channels.pop(1, None)


def _api_versions_sent(broker):
    return [(r.version, r.body.get("cluster_id"), r.body.get("node_id", -1))
            for r in broker.requests_of("ApiVersions")]


def test_a_broker_of_another_cluster_refuses_the_connection_and_the_client_rebootstraps():
    core, kafka, sim = _sim()
    assert core.cluster.cluster_id == "sim"
    # The bootstrap connection knew no cluster; node 1's names the one metadata named.
    assert _api_versions_sent(kafka.brokers[1])[:2] == [(5, None, -1), (5, "sim", 1)]
    _another_cluster_behind_node_one(kafka, core, sim)
    h = sim.send(b"b")
    sim.run_until(lambda: h.done, max_ms=20000)
    assert h.error is None
    assert core.cluster.rebootstraps == 1 and core.cluster.cluster_id == "other"
    sent = _api_versions_sent(kafka.brokers[1])
    refused = sent.index((5, "sim", 1))
    assert (5, None, -1) in sent[refused + 1:] and sent[-1] == (5, "other", 1)


def test_with_strategy_none_the_refusal_reaches_the_application():
    core, kafka, sim = _sim(**{"metadata.recovery.strategy": "none"})
    _another_cluster_behind_node_one(kafka, core, sim)
    sim.core.send("t", b"b", now=sim.now)
    sim.run_until(lambda: sim.now > 3000, max_ms=5000)
    errors = core.client.take_errors()
    assert core.cluster.rebootstraps == 0
    assert errors and all(getattr(e, "code", None) == REBOOTSTRAP_REQUIRED for e in errors)


def test_brokers_without_apiversions_v5_are_never_sent_a_cluster_id():
    # Tansu takes ApiVersions up to v4 and drops a connection whose v5
    # request names a cluster: only v5 requests with null go to such brokers.
    kafka = MovingKafka()
    for b in kafka.brokers.values():
        b.versions["ApiVersions"] = (0, 4)
    core, kafka, sim = make(kafka)
    h = sim.send(b"a")
    sim.run_until(lambda: h.done)
    sent = _api_versions_sent(kafka.brokers[1])
    assert h.error is None and core.cluster.cluster_id == "sim" and len(sent) >= 4
    assert {s for s in sent if s[0] == 5} == {(5, None, -1)} and {s[0] for s in sent} == {4, 5}
