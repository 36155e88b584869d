"""KRaft quorum administration against real Apache Kafka 4.4 (issue 24):
add_raft_voter / remove_raft_voter on a dynamic quorum (KIP-853) and
unregister_broker, through kio.Admin, kio.aio.Admin and kio.trio.Admin.

One cluster for the module (kio.testing.kafka_quorum.DynamicQuorumCluster):
node 1 broker+controller formatted ``--standalone``, node 2 a controller
formatted ``--no-initial-controllers`` (an observer until added), node 3 a
broker only. The admin bootstraps from node 1's broker listener, as Java's
Admin with ``bootstrap.servers``: the broker forwards to the controller.

The ``broker`` fixture's Kafka has a static quorum (``controller.quorum.voters``,
kraft.version 0): voter changes are refused there; Tansu does not have
these APIs at all."""
import asyncio
import time

import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio.admin import RaftVoterEndpoint
from kio.blocking import BlockingClient
from kproto import error_codes
from kproto.admin_quorum import kafka_uuid
from kproto.errors import UnsupportedVersionError
from test_admin_authorized_operations import CLUSTER_OPERATIONS

try:
    from conftest import broker_kinds
except ImportError:  # tests/ as a package
    from tests.conftest import broker_kinds


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    if "kafka" not in broker_kinds():
        pytest.skip("the dynamic quorum is Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.kafka_quorum import DynamicQuorumCluster

    cluster = DynamicQuorumCluster(log_dir=str(tmp_path_factory.mktemp("kafka-quorum")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def admin(quorum):
    with kio.Admin(bootstrap_servers=quorum.bootstrap_servers, default_api_timeout_ms=30000) as a:
        yield a


def _voters(quorum_info):
    return sorted(v.replica_id for v in quorum_info.voters)


def _observers(quorum_info):
    return sorted(o.replica_id for o in quorum_info.observers)


def _controller_2(quorum):
    n = quorum.nodes[2]
    return n.directory_id(), [RaftVoterEndpoint("CONTROLLER", n.host, n.controller_port)]


def test_add_and_remove_a_voter(quorum, admin):
    directory, endpoints = _controller_2(quorum)
    before = admin.describe_metadata_quorum()
    assert _voters(before) == [1] and 2 in _observers(before)

    admin.add_raft_voter(2, directory, endpoints)
    added = admin.describe_metadata_quorum()
    assert _voters(added) == [1, 2] and 2 not in _observers(added)
    voter = next(v for v in added.voters if v.replica_id == 2)
    assert voter.replica_directory_id == kafka_uuid(directory, "directory")
    assert ("CONTROLLER", quorum.nodes[2].host, quorum.nodes[2].controller_port) in added.nodes[2]
    with pytest.raises(error_codes.DuplicateVoterError, match="already part of the set of voters"):
        admin.add_raft_voter(2, directory, endpoints)

    admin.remove_raft_voter(2, directory)
    after = admin.describe_metadata_quorum()
    assert _voters(after) == [1] and after.high_watermark > added.high_watermark


def test_voter_errors(quorum, admin):
    directory, endpoints = _controller_2(quorum)
    first_dir = next(v.replica_directory_id for v in admin.describe_metadata_quorum().voters)
    with pytest.raises(error_codes.VoterNotFoundError, match="Cannot remove voter"):
        admin.remove_raft_voter(7, directory)                 # no such voter
    with pytest.raises(error_codes.VoterNotFoundError, match="Cannot remove voter"):
        admin.remove_raft_voter(1, directory)                 # voter 1, another directory
    with pytest.raises(error_codes.InvalidRequestError, match="didn't include a valid voter"):
        admin.add_raft_voter(2, "AAAAAAAAAAAAAAAAAAAAAA", endpoints)    # the zero Uuid
    with pytest.raises(error_codes.InconsistentClusterIdError, match="doesn't match the cluster id"):
        admin.add_raft_voter(2, directory, endpoints, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(error_codes.InconsistentClusterIdError):
        admin.remove_raft_voter(1, first_dir, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")
    assert _voters(admin.describe_metadata_quorum()) == [1]


def test_async_drivers_add_and_remove_a_voter(quorum):
    directory, endpoints = _controller_2(quorum)

    async def cycle(admin_class):
        async with admin_class(bootstrap_servers=quorum.bootstrap_servers, default_api_timeout_ms=30000) as a:
            await a.add_raft_voter(2, directory, endpoints, cluster_id=quorum.cluster_id)
            voters = _voters(await a.describe_metadata_quorum())
            await a.remove_raft_voter(2, directory, cluster_id=quorum.cluster_id)
            return voters, _voters(await a.describe_metadata_quorum())

    assert asyncio.run(cycle(kio.aio.Admin)) == ([1, 2], [1])
    assert trio.run(cycle, kio.trio.Admin) == ([1, 2], [1])


def test_bootstrap_controllers(quorum):
    """KIP-919: an admin bootstrapped from the controllers (Java's
    ``bootstrap.controllers``) learns them with DescribeCluster, sends the
    quorum calls to the active controller, and describes the controllers as
    the cluster; what only brokers serve fails naming the API. Naming a
    broker there fails at once with MismatchedEndpointTypeError."""
    directory, endpoints = _controller_2(quorum)
    with kio.Admin(bootstrap_controllers=quorum.first.controller_address, default_api_timeout_ms=30000) as admin:
        cluster = admin.describe_cluster()
        assert cluster.controller.id == 1 and cluster.cluster_id == quorum.cluster_id
        assert (1, quorum.first.controller_port) in {(n.id, n.port) for n in cluster.nodes}
        assert 3 not in {n.id for n in cluster.nodes}                  # brokers are not listed
        assert admin.describe_metadata_quorum().leader_id == 1
        admin.add_raft_voter(2, directory, endpoints)
        assert _voters(admin.describe_metadata_quorum()) == [1, 2]
        admin.remove_raft_voter(2, directory)
        assert _voters(admin.describe_metadata_quorum()) == [1]
        with pytest.raises(error_codes.BrokerIdNotRegisteredError):
            admin.unregister_broker(99)
        with pytest.raises(UnsupportedVersionError, match="Metadata"):
            admin.list_topics()
    with kio.Admin(bootstrap_controllers=quorum.bootstrap_servers, default_api_timeout_ms=20000) as admin:
        start = time.monotonic()
        with pytest.raises(error_codes.MismatchedEndpointTypeError, match="must name KRaft controllers"):
            admin.describe_metadata_quorum()
        assert time.monotonic() - start < 5


def _registered(quorum):
    """{broker id: fenced} as the cluster lists them (DescribeCluster v2 with
    include_fenced_brokers: a stopped broker is fenced, still registered)."""
    with BlockingClient(quorum.bootstrap_servers) as c:
        answer = c.request("DescribeCluster", {"include_fenced_brokers": True})
    return {b["broker_id"]: b["is_fenced"] for b in answer["brokers"]}


def test_unregister_broker(quorum, admin):
    with pytest.raises(error_codes.BrokerIdNotRegisteredError, match="Broker ID 99 is not currently registered"):
        admin.unregister_broker(99)
    assert {n.id for n in admin.describe_cluster().nodes} == {1, 3}

    quorum.nodes[3]._stop_process(60.0)        # gone for good: controlled shutdown, then fenced
    end = time.monotonic() + 20
    while _registered(quorum) != {1: False, 3: True} and time.monotonic() < end:
        time.sleep(0.2)
    assert _registered(quorum) == {1: False, 3: True}

    admin.unregister_broker(3)
    assert _registered(quorum) == {1: False}
    assert [n.id for n in admin.describe_cluster().nodes] == [1]
    with pytest.raises(error_codes.BrokerIdNotRegisteredError, match="Broker ID 3 is not currently registered"):
        admin.unregister_broker(3)


def test_a_static_quorum_or_tansu_refuses_voter_changes(broker, bootstrap):
    """Kafka with ``controller.quorum.voters`` (kraft.version 0) refuses voter
    changes with UNSUPPORTED_VERSION, as Java's Admin reports it; Tansu does
    not advertise the APIs: kio fails at once, naming the API."""
    with kio.Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=20000) as admin:
        endpoints = [("CONTROLLER", "127.0.0.1", 1)]
        if broker.kind == "kafka":
            with pytest.raises(error_codes.BrokerUnsupportedVersionError, match="kraft.version"):
                admin.add_raft_voter(2, "DkgWP1gNvM5L5SOFwVILTg", endpoints)
            with pytest.raises(error_codes.BrokerUnsupportedVersionError, match="kraft.version"):
                admin.remove_raft_voter(1, "DkgWP1gNvM5L5SOFwVILTg")
            with pytest.raises(error_codes.BrokerIdNotRegisteredError):
                admin.unregister_broker(99)
            return
        for api, call in (("AddRaftVoter", lambda: admin.add_raft_voter(2, "DkgWP1gNvM5L5SOFwVILTg", endpoints)),
                          ("RemoveRaftVoter", lambda: admin.remove_raft_voter(1, "DkgWP1gNvM5L5SOFwVILTg")),
                          ("UnregisterBroker", lambda: admin.unregister_broker(99))):
            start = time.monotonic()
            with pytest.raises(UnsupportedVersionError, match=api):
                call()
            assert time.monotonic() - start < 5


def test_unregister_controller_of_an_unknown_id_fails_with_kafkas_error(quorum, admin):
    """Java 4.4's ``unregisterController``: an id no controller registered is
    CONTROLLER_ID_NOT_REGISTERED, through a broker (which forwards it) and
    through the controllers (``bootstrap.controllers``)."""
    with pytest.raises(error_codes.ControllerIdNotRegisteredError, match="99"):
        admin.unregister_controller(99)
    with kio.Admin(bootstrap_controllers=quorum.first.controller_address, default_api_timeout_ms=30000) as direct:
        with pytest.raises(error_codes.ControllerIdNotRegisteredError, match="99"):
            direct.unregister_controller(99)
        # The controllers answer DescribeCluster's authorized operations too (no authorizer: all of them).
        assert direct.describe_cluster(include_authorized_operations=True).authorized_operations == \
            CLUSTER_OPERATIONS


def _controllers(quorum):
    """The controller ids the controllers list (DescribeCluster at a controller)."""
    with kio.Admin(bootstrap_controllers=quorum.first.controller_address, default_api_timeout_ms=30000) as a:
        return sorted(n.id for n in a.describe_cluster().nodes)


def test_unregister_controller_removes_a_stopped_observers_registration(quorum, admin):
    """Last in the module: it stops controller 2 for good. Node 2 is an
    observer (never added, or removed again by the tests above); once it is
    stopped its registration stays until unregister_controller removes it."""
    assert 2 not in _voters(admin.describe_metadata_quorum())
    end = time.monotonic() + 20
    while _controllers(quorum) != [1, 2] and time.monotonic() < end:
        time.sleep(0.2)
    assert _controllers(quorum) == [1, 2]
    quorum.nodes[2]._stop_process(60.0)
    assert _controllers(quorum) == [1, 2]           # stopped, still registered

    admin.unregister_controller(2)
    assert _controllers(quorum) == [1]
    with pytest.raises(error_codes.ControllerIdNotRegisteredError):
        admin.unregister_controller(2)
