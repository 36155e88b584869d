"""The KIP-848 consumer group and KIP-932 share group APIs on the wire,
against Apache Kafka 4.4 (Tansu serves neither).

These exercise the schema tables and the codec with the real broker: a member
joins with ConsumerGroupHeartbeat, acknowledges the assignment the broker
computed, is described by ConsumerGroupDescribe and leaves; a share group
member joins with ShareGroupHeartbeat and is described by ShareGroupDescribe.
(The client's consumer-protocol and share-consumer state machines come on top
of these.)
"""
import time
import uuid

import pytest

from kio.blocking import BlockingClient

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def _topic_id(client, topic):
    (t,) = [t for t in client.metadata([topic])["topics"] if t["name"] == topic]
    return t["topic_id"]


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the
# group coordinator (its __consumer_offsets / __share_group_state partition) is
# created and loaded on first use; ask again, as a client does.
_COORDINATOR_NOT_READY = (14, 15, 16)


def _heartbeat_until(client, api, body, done, timeout=30):
    """Heartbeat as a member does (each one carrying the epoch the last answer
    gave) until ``done(answer)``; returns that answer."""
    end = time.monotonic() + timeout
    while True:
        r = client.request(api, body)
        if r["error_code"] in _COORDINATOR_NOT_READY and time.monotonic() < end:
            client.request("FindCoordinator", {"key_type": 0, "coordinator_keys": [body["group_id"]]})
            time.sleep(0.2)
            continue
        assert r["error_code"] == 0, r
        if done(r) or time.monotonic() > end:
            return r
        body = dict(body, member_epoch=r["member_epoch"])
        time.sleep(min(r["heartbeat_interval_ms"], 200) / 1000)


def _assigned(r):
    return r["assignment"] is not None and r["assignment"]["topic_partitions"]


def test_consumer_group_heartbeat_join_assignment_describe_and_leave(bootstrap, make_topic):
    topic = make_topic(3)
    group, member = "cg-" + uuid.uuid4().hex[:8], str(uuid.uuid4())
    with BlockingClient(bootstrap) as client:
        topic_id = _topic_id(client, topic)
        join = {"group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                "server_assignor": "uniform", "topic_partitions": []}
        r = _heartbeat_until(client, "ConsumerGroupHeartbeat", join, _assigned)
        assert r["member_id"] == member and r["member_epoch"] >= 1 and r["heartbeat_interval_ms"] > 0
        (tp,) = r["assignment"]["topic_partitions"]
        assert tp["topic_id"] == topic_id and sorted(tp["partitions"]) == [0, 1, 2]
        epoch = r["member_epoch"]
        # the next heartbeat says what we own now: the reconciliation is done
        ack = dict(join, member_epoch=epoch, topic_partitions=[
            {"topic_id": topic_id, "partitions": sorted(tp["partitions"])}])
        r = client.request("ConsumerGroupHeartbeat", ack)
        assert r["error_code"] == 0 and r["member_epoch"] == epoch

        d = client.request("ConsumerGroupDescribe", {"group_ids": [group],
                                                     "include_authorized_operations": False})
        (g,) = d["groups"]
        assert g["error_code"] == 0 and g["group_state"] == "Stable" and g["assignor_name"] == "uniform"
        (m,) = g["members"]
        assert m["member_id"] == member and m["subscribed_topic_names"] == [topic]
        (owned,) = m["assignment"]["topic_partitions"]
        assert (owned["topic_name"], sorted(owned["partitions"])) == (topic, [0, 1, 2])

        # a stale epoch is fenced, as KIP-848 says
        stale = client.request("ConsumerGroupHeartbeat", dict(ack, member_epoch=epoch + 5))
        assert stale["error_code"] == 110                       # FENCED_MEMBER_EPOCH
        leave = client.request("ConsumerGroupHeartbeat", dict(join, member_epoch=-1))
        assert leave["error_code"] == 0 and leave["member_epoch"] == -1
        d = client.request("ConsumerGroupDescribe", {"group_ids": [group],
                                                     "include_authorized_operations": False})
        assert d["groups"][0]["members"] == [] and d["groups"][0]["group_state"] == "Empty"


def test_share_group_heartbeat_join_and_describe(bootstrap, make_topic):
    topic = make_topic(2)
    group, member = "sg-" + uuid.uuid4().hex[:8], str(uuid.uuid4())
    with BlockingClient(bootstrap) as client:
        topic_id = _topic_id(client, topic)
        join = {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": [topic]}
        r = _heartbeat_until(client, "ShareGroupHeartbeat", join, _assigned)
        assert r["member_id"] == member and r["member_epoch"] >= 1
        (tp,) = r["assignment"]["topic_partitions"]
        assert tp["topic_id"] == topic_id and sorted(tp["partitions"]) == [0, 1]
        d = client.request("ShareGroupDescribe", {"group_ids": [group],
                                                  "include_authorized_operations": False})
        (g,) = d["groups"]
        assert g["error_code"] == 0 and g["group_state"] == "Stable"
        assert [m["member_id"] for m in g["members"]] == [member]
        leave = client.request("ShareGroupHeartbeat", dict(join, member_epoch=-1))
        assert leave["error_code"] == 0 and leave["member_epoch"] == -1


def test_admin_describes_a_consumer_protocol_group(bootstrap, make_topic):
    # DescribeGroups answers GROUP_ID_NOT_FOUND ("not a classic group") for a
    # KIP-848 group; the admin client asks ConsumerGroupDescribe instead, as Java's does.
    from kio.admin import Admin
    from kproto.error_codes import GroupIdNotFoundError
    topic = make_topic(2)
    group, member = "cg-adm-" + uuid.uuid4().hex[:8], str(uuid.uuid4())
    with BlockingClient(bootstrap) as client:
        join = {"group_id": group, "member_id": member, "member_epoch": 0, "instance_id": "inst-1",
                "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                "server_assignor": None, "topic_partitions": []}
        r = _heartbeat_until(client, "ConsumerGroupHeartbeat", join, _assigned)
        with Admin(bootstrap_servers=bootstrap) as admin:
            desc = admin.describe_consumer_groups([group])[group]
            assert (desc.state, desc.protocol_type, desc.is_simple) == ("Stable", "consumer", False)
            assert desc.assignor == "uniform"                    # the broker's default assignor
            (m,) = desc.members
            assert (m.member_id, m.group_instance_id) == (member, "inst-1")
            assert [tp.partition for tp in m.assignment.partitions] == [0, 1]
            assert {tp.topic for tp in m.assignment.partitions} == {topic}
            assert m.subscription.topics == (topic,)
            assert desc.coordinator is not None
            # a group that exists under neither protocol is still an error naming it
            missing = admin.describe_consumer_groups(["no-such-" + group], raise_errors=False)
            assert isinstance(missing.items["no-such-" + group].error, GroupIdNotFoundError)
        client.request("ConsumerGroupHeartbeat", dict(join, member_epoch=-1))      # leave
