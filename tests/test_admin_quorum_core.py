"""The KRaft quorum operations of AdminCore without a network (kproto/admin_quorum.py):
the requests they build, Java's retries (NOT_CONTROLLER for the voter calls,
REQUEST_TIMED_OUT for unregister_broker and unregister_controller), the errors that end them at once,
and the arguments refused before anything is sent. The real broker's answers
are tests/test_admin_quorum_broker.py's."""
import uuid

import pytest

try:
    from test_admin_core import FakeCluster, Sim
except ImportError:  # tests/ as a package
    from tests.test_admin_core import FakeCluster, Sim

from kproto import error_codes
from kproto.admin_quorum import RaftVoterEndpoint, kafka_uuid

DIR = uuid.UUID("0e48163f-580d-bcce-4be5-2385c1520b4e")
DIR_TEXT = "DkgWP1gNvM5L5SOFwVILTg"          # the same id as meta.properties writes it


def _answers(fc, api, *codes):
    """``api`` answers ``codes`` in turn (then 0), with a message naming the code."""
    left = list(codes)

    def handle(req):
        code = left.pop(0) if left else 0
        return {"error_code": code, "error_message": f"scripted {code}" if code else None}
    fc.on_all(api, handle)


def test_kafka_uuid_reads_the_text_form_of_meta_properties():
    assert kafka_uuid(DIR_TEXT, "d") == DIR == kafka_uuid(str(DIR), "d") == kafka_uuid(DIR, "d")
    with pytest.raises(ValueError, match="not a Kafka Uuid"):
        kafka_uuid("not-an-id", "voter_directory_id")
    with pytest.raises(TypeError, match="voter_directory_id"):
        kafka_uuid(7, "voter_directory_id")


def test_add_raft_voter_sends_what_java_sends():
    fc = FakeCluster(nodes=(1, 2))
    _answers(fc, "AddRaftVoter")
    sim = Sim(fc)
    h = sim.core.add_raft_voter(4, DIR_TEXT, [RaftVoterEndpoint("CONTROLLER", "c4", 9093), ("EXTRA", "c4", 9094)],
                                cluster_id="cid", timeout_ms=5000, now=0)
    sim.run(h)
    assert h.result() is None and h.items["voter"].error is None
    [(_, req)] = sim.requests("AddRaftVoter")
    assert req.body["voter_id"] == 4 and req.body["voter_directory_id"] == DIR
    assert req.body["cluster_id"] == "cid" and req.body["timeout_ms"] == 5000
    assert [(ln["name"], ln["host"], ln["port"]) for ln in req.body["listeners"]] == [
        ("CONTROLLER", "c4", 9093), ("EXTRA", "c4", 9094)]
    # Kafka 4.4 sends v1, AckWhenCommitted left at its default (true), as Java's Admin does.
    assert req.version == 1 and req.body["ack_when_committed"] is True


def test_remove_raft_voter_and_unregister_broker_bodies():
    fc = FakeCluster(nodes=(1,))
    _answers(fc, "RemoveRaftVoter")
    _answers(fc, "UnregisterBroker")
    _answers(fc, "UnregisterController")
    sim = Sim(fc)
    remove = sim.core.remove_raft_voter(2, DIR, now=0)
    unregister = sim.core.unregister_broker(3, now=0)
    unregister_controller = sim.core.unregister_controller(4, now=0)
    sim.run(remove, unregister, unregister_controller)
    assert remove.result() is None and unregister.result() is None and unregister_controller.result() is None
    [(_, uc)] = sim.requests("UnregisterController")
    assert uc.body == {"controller_id": 4} and list(unregister_controller.items) == ["controller"]
    [(_, rm)] = sim.requests("RemoveRaftVoter")
    assert rm.body == {"cluster_id": None, "voter_id": 2, "voter_directory_id": DIR}
    [(_, un)] = sim.requests("UnregisterBroker")
    assert un.body == {"broker_id": 3}


@pytest.mark.parametrize("operation, api, retried, final", [
    ("add", "AddRaftVoter", 41, error_codes.DuplicateVoterError),          # NOT_CONTROLLER, then DUPLICATE_VOTER
    ("remove", "RemoveRaftVoter", 41, error_codes.VoterNotFoundError),
    ("unregister", "UnregisterBroker", 7, error_codes.BrokerIdNotRegisteredError),   # REQUEST_TIMED_OUT
    ("unregister controller", "UnregisterController", 7, error_codes.ControllerIdNotRegisteredError),
])
def test_javas_retried_code_is_retried_and_the_next_error_ends_it(operation, api, retried, final):
    fc = FakeCluster(nodes=(1,))
    final_code = {error_codes.DuplicateVoterError: 126, error_codes.VoterNotFoundError: 127,
                  error_codes.BrokerIdNotRegisteredError: 102, error_codes.ControllerIdNotRegisteredError: 136}[final]
    _answers(fc, api, retried, retried, final_code)
    sim = Sim(fc)
    start = {"add": lambda: sim.core.add_raft_voter(2, DIR, [("CONTROLLER", "h", 1)], now=0),
             "remove": lambda: sim.core.remove_raft_voter(2, DIR, now=0),
             "unregister": lambda: sim.core.unregister_broker(2, now=0),
             "unregister controller": lambda: sim.core.unregister_controller(2, now=0)}[operation]
    h = start()
    sim.run(h)
    err = h.items[next(iter(h.items))].error
    assert isinstance(err, final) and f"scripted {final_code}" in str(err)
    assert "2" in str(err)                       # the voter's / broker's id is named
    assert len(sim.requests(api)) == 3


@pytest.mark.parametrize("api, code, error", [
    ("AddRaftVoter", 7, error_codes.BrokerRequestTimedOutError),  # Java retries it for unregister only
    ("AddRaftVoter", 35, error_codes.BrokerUnsupportedVersionError),   # a static quorum (kraft.version 0)
    ("UnregisterBroker", 41, error_codes.NotControllerError),
])
def test_other_errors_are_not_retried(api, code, error):
    fc = FakeCluster(nodes=(1,))
    _answers(fc, api, code)
    sim = Sim(fc)
    h = (sim.core.add_raft_voter(2, DIR, [("CONTROLLER", "h", 1)], now=0) if api == "AddRaftVoter"
         else sim.core.unregister_broker(2, now=0))
    sim.run(h)
    assert isinstance(h.items[next(iter(h.items))].error, error)
    assert len(sim.requests(api)) == 1


@pytest.mark.parametrize("endpoints, exc, text", [
    ([], ValueError, "at least one endpoint"),
    ([("controller", "h", 1)], ValueError, "UPPERCASE"),
    ([("", "h", 1)], ValueError, "listener name is empty"),
    ([("CONTROLLER", " h", 1)], ValueError, "whitespace"),
    ([("CONTROLLER", "h", 70000)], ValueError, "0..65535"),
    ([("CONTROLLER", "h")], TypeError, "listener name, host, port"),
    ([("CONTROLLER", "h", 1), ("CONTROLLER", "g", 2)], ValueError, "one endpoint per listener name"),
])
def test_add_raft_voter_refuses_bad_endpoints(endpoints, exc, text):
    sim = Sim(FakeCluster(nodes=(1,)))
    with pytest.raises(exc, match=text):
        sim.core.add_raft_voter(2, DIR, endpoints, now=0)


def test_bad_ids_are_refused_before_sending():
    sim = Sim(FakeCluster(nodes=(1,)))
    with pytest.raises(ValueError, match="voter_id must be >= 0"):
        sim.core.remove_raft_voter(-1, DIR, now=0)
    with pytest.raises(TypeError, match="broker_id must be an int"):
        sim.core.unregister_broker("3", now=0)
    with pytest.raises(ValueError, match="unregister_controller: controller_id must be >= 0"):
        sim.core.unregister_controller(-2, now=0)
    with pytest.raises(ValueError, match="voter_directory_id 'xyz' is not a Kafka Uuid"):
        sim.core.add_raft_voter(2, "xyz", [("CONTROLLER", "h", 1)], now=0)
    assert not sim.core.pending


# --- bootstrap.controllers (KIP-919) -------------------------------------------------------------

def _controllers(fc, active):
    """Every node answers DescribeCluster as a KRaft controller does for the
    controller endpoint type: the controllers, and the active one."""
    def describe(req):
        assert req.body["endpoint_type"] == 2, "the admin must ask for the controllers"
        return {"cluster_id": "cid", "controller_id": active, "endpoint_type": 2,
                "brokers": [{"broker_id": n, "host": f"b{n}", "port": 9092} for n in sorted(fc.brokers)]}
    fc.on_all("DescribeCluster", describe)


def test_bootstrap_controllers_sends_to_the_active_controller():
    """bootstrap.controllers: the metadata is DescribeCluster (controller
    endpoints; controllers have no Metadata), and the voter calls, the quorum
    and cluster descriptions go to the active controller, as Java's
    LeastLoadedBrokerOrActiveKController does."""
    from kproto.errors import ConfigError

    fc = FakeCluster(nodes=(1, 2, 3))
    _controllers(fc, active=2)
    _answers(fc, "AddRaftVoter")
    fc.on_all("DescribeQuorum", lambda req: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "leader_id": 2, "leader_epoch": 4, "high_watermark": 9,
         "current_voters": [{"replica_id": 2, "log_end_offset": 9}], "observers": []}]}]})
    sim = Sim(fc, **{"bootstrap.servers": None, "bootstrap.controllers": "b1:9092"})
    assert sim.core.using_bootstrap_controllers
    add = sim.core.add_raft_voter(3, DIR, [("CONTROLLER", "b3", 9093)], now=0)
    quorum = sim.core.describe_metadata_quorum(now=0)
    cluster = sim.core.describe_cluster(now=0)
    sim.run(add, quorum, cluster)
    assert add.result() is None and quorum.result().leader_id == 2
    desc = cluster.result()
    assert desc.controller.id == 2 and [n.id for n in desc.nodes] == [1, 2, 3] and desc.cluster_id == "cid"
    assert {n for n, _ in sim.requests("AddRaftVoter")} == {n for n, _ in sim.requests("DescribeQuorum")} == {2}
    assert not sim.requests("Metadata")
    with pytest.raises(ConfigError, match="not both"):
        Sim(fc, **{"bootstrap.servers": "b1:9092", "bootstrap.controllers": "b1:9092"})


def test_bootstrap_controllers_naming_a_broker_fails_at_once():
    """A broker answers the controllers' DescribeCluster with
    MISMATCHED_ENDPOINT_TYPE: the operations fail with it at once, saying
    what to fix, instead of waiting for metadata until their deadline."""
    fc = FakeCluster(nodes=(1,))
    fc.on_all("DescribeCluster", lambda req: {
        "error_code": 114, "error_message": "The request was sent to an endpoint of type BROKER, but we wanted "
                                            "an endpoint of type CONTROLLER", "brokers": []})
    sim = Sim(fc, **{"bootstrap.servers": None, "bootstrap.controllers": "b1:9092"})
    h = sim.core.unregister_broker(3, now=0)
    sim.run(h, limit_ms=2000)
    err = h.items["broker"].error
    assert isinstance(err, error_codes.MismatchedEndpointTypeError)
    assert "endpoint of type BROKER" in str(err) and "must name KRaft controllers" in str(err)
    assert not sim.requests("UnregisterBroker")
