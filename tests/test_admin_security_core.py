"""The security, config and cluster admin operations' logic without a network:
Java's ACL filter semantics, SCRAM salting (checked by running kproto's SCRAM
client against a server-side check made from the credential the admin
would send), and describe_topics paging through DescribeTopicPartitions
(a scripted broker that pages as Kafka does)."""
import base64
import hashlib
import hmac

import pytest

try:
    from test_admin_core import FakeCluster, Sim, _uuid
except ImportError:  # tests/ as a package
    from tests.test_admin_core import FakeCluster, Sim, _uuid

from kproto import error_codes
from kproto.admin_acls import (
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    PatternType, ResourcePattern, ResourcePatternFilter, ResourceType,
)
from kproto.admin_scram import ScramMechanism, random_salt, salted_password
from kproto.sasl import ScramMechanism as ScramClient

T, LIT, PRE = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED


def _pattern_cases():
    """(filter, pattern, expected) as Java's ResourcePatternFilterTest has them."""
    f = ResourcePatternFilter
    p = ResourcePattern
    return [
        (f(T, None, PatternType.ANY), p(T, "x", LIT), True),
        (f(ResourceType.GROUP, None, PatternType.ANY), p(T, "x", LIT), False),
        (f(ResourceType.ANY, "x", PatternType.ANY), p(T, "x", PRE), True),     # ANY: the exact name, any type
        (f(T, "xy", PatternType.ANY), p(T, "x", PRE), False),                  # ANY does not apply prefixes
        (f(T, "x", LIT), p(T, "x", PRE), False),
        (f(T, "x", PRE), p(T, "x", PRE), True),
        (f(T, "xy", PRE), p(T, "x", PRE), False),
        (f(T, "orders", PatternType.MATCH), p(T, "orders", LIT), True),
        (f(T, "orders", PatternType.MATCH), p(T, "*", LIT), True),            # the wildcard applies
        (f(T, "orders", PatternType.MATCH), p(T, "ord", PRE), True),          # so does a prefix of it
        (f(T, "orders", PatternType.MATCH), p(T, "orders-2", PRE), False),
        (f(T, "orders", PatternType.MATCH), p(T, "other", LIT), False),
        (f(T, "*", PatternType.MATCH), p(T, "orders", LIT), False),           # a "*" filter is a name
        (f(T, None, PatternType.MATCH), p(T, "anything", PRE), True),
    ]


@pytest.mark.parametrize("flt,pattern,expected", _pattern_cases())
def test_resource_pattern_filter_is_javas(flt, pattern, expected):
    assert flt.matches(pattern) is expected


def test_entry_and_binding_filters():
    e = AccessControlEntry.of("User:alice", "read")
    assert e == AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    assert AccessControlEntryFilter().matches(e)
    assert not AccessControlEntryFilter(principal="User:bob").matches(e)
    assert not AccessControlEntryFilter(host="10.0.0.1").matches(e)
    assert not AccessControlEntryFilter(operation=AclOperation.WRITE).matches(e)
    assert AccessControlEntryFilter(operation=AclOperation.READ, permission_type=AclPermissionType.ALLOW).matches(e)
    b = AclBinding(ResourcePattern.of("topic", "orders", "prefixed"), e)
    assert b.to_filter().matches(b) and AclBindingFilter.ANY.matches(b)
    assert not AclBindingFilter(ResourcePatternFilter(T, "orders", LIT)).matches(b)
    with pytest.raises(ValueError, match="not a ResourceType"):
        ResourcePattern.of("table", "x")


def test_create_acls_refuses_filter_values():
    sim = Sim(FakeCluster())
    e = AccessControlEntry.of("User:alice", "read")
    for bad in (AclBinding(ResourcePattern(T, "x", PatternType.MATCH), e),
                AclBinding(ResourcePattern(ResourceType.ANY, "x", LIT), e),
                AclBinding(ResourcePattern(T, "x", LIT), e._replace(operation=AclOperation.ANY))):
        with pytest.raises(ValueError, match="must be concrete"):
            sim.core.create_acls([bad], now=0)
    with pytest.raises(ValueError, match="UNKNOWN"):
        sim.core.describe_acls(AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)), now=0)


# --- SCRAM ---------------------------------------------------------------------------------------

def _server_verifies(mechanism, user, password_salted, salt, iterations, client_password):
    """Run kproto's SCRAM client (password ``client_password``) against a server
    holding the credential made from ``password_salted``: RFC 5802's StoredKey
    check of the client proof, and the client's check of the server signature."""
    h = mechanism.hash_name
    stored_key = hashlib.new(h, hmac.new(password_salted, b"Client Key", h).digest()).digest()
    server_key = hmac.new(password_salted, b"Server Key", h).digest()
    client = ScramClient(user, client_password, h)
    first_bare = client.initial_response().decode()[3:]
    nonce = first_bare.split("r=", 1)[1] + "server-part"
    server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
    final = client.evaluate_challenge(server_first.encode()).decode()
    without_proof, proof = final.rsplit(",p=", 1)
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, h).digest()
    client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
    if hashlib.new(h, client_key).digest() != stored_key:
        return False
    client.evaluate_challenge(f"v={base64.b64encode(hmac.new(server_key, auth, h).digest()).decode()}".encode())
    return True


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_salted_password_authenticates_a_scram_client(mechanism):
    salt = random_salt()
    salted = salted_password(mechanism, "s3cret", salt, 4096)
    assert len(salted) == hashlib.new(mechanism.hash_name).digest_size
    assert _server_verifies(mechanism, "carol", salted, salt, 4096, "s3cret")
    assert not _server_verifies(mechanism, "carol", salted, salt, 4096, "wrong")


def test_salts_are_javas_shape_and_fresh():
    salts = {random_salt() for _ in range(50)}
    assert len(salts) == 50
    assert all(s.isalnum() and s == s.lower() and 20 <= len(s) <= 26 for s in salts)   # 130 bits, base 36
    assert ScramMechanism.of("SCRAM-SHA-512") is ScramMechanism.SCRAM_SHA_512
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        ScramMechanism.of("SCRAM-MD5")


# --- describe_topics through DescribeTopicPartitions ----------------------------------------------

def _paging_broker(fc):
    """DescribeTopicPartitions as Kafka answers it: topics by name, at most
    ``response_partition_limit`` partitions, ``next_cursor`` where it stopped."""
    def handle(req):
        body = req.body
        limit, cursor = body["response_partition_limit"], body.get("cursor")
        names = sorted(t["name"] for t in body["topics"])
        if cursor:
            names = [n for n in names if n >= cursor["topic_name"]]
        out, left, nxt = [], limit, None
        for n in names:
            if n not in fc.topics:
                out.append({"name": n, "error_code": 3, "topic_id": _uuid("none"), "partitions": []})
                continue
            first = cursor["partition_index"] if cursor and n == cursor["topic_name"] else 0
            parts = list(range(first, fc.topics[n]))
            if left <= 0:
                nxt = {"topic_name": n, "partition_index": first}
                break
            take, rest = parts[:left], parts[left:]
            left -= len(take)
            out.append({"name": n, "error_code": 0, "topic_id": _uuid(n), "is_internal": False, "partitions": [
                {"partition_index": p, "error_code": 0, "leader_id": fc.leader(n, p), "leader_epoch": 3,
                 "replica_nodes": sorted(fc.brokers), "isr_nodes": [fc.leader(n, p)], "offline_replicas": []}
                for p in take]})
            if rest:
                nxt = {"topic_name": n, "partition_index": rest[0]}
                break
        return {"topics": out, "next_cursor": nxt}
    fc.on_all("DescribeTopicPartitions", handle)


def test_describe_topics_pages_through_describe_topic_partitions():
    fc = FakeCluster(nodes=(1, 2), topics={"a": 3, "b": 5, "c": 1}, leaders={("b", 4): 2})
    _paging_broker(fc)
    sim = Sim(fc)
    h = sim.core.describe_topics(["c", "b", "a", "ghost"], partition_size_limit_per_response=2, now=0)
    sim.run(h)
    assert h.pages == len(sim.requests("DescribeTopicPartitions")) == 5    # 9 partitions, 2 a page
    assert not sim.requests("Metadata") or all(r.body["topics"] == [] or r.body["topics"] is None
                                               for _, r in sim.requests("Metadata"))
    for name, count in fc.topics.items():
        d = h.items[name].result()
        assert [p.partition for p in d.partitions] == list(range(count))
        assert d.topic_id == _uuid(name)
    assert h.items["b"].result().partitions[4].leader == 2
    assert isinstance(h.items["ghost"].error, error_codes.UnknownTopicOrPartitionError)
    # The pages after the first carry the cursor and only the topics not done yet.
    later = [r.body for _, r in sim.requests("DescribeTopicPartitions")][1:]
    assert all(b["cursor"] is not None for b in later)
    assert [t["name"] for t in later[-1]["topics"]] == ["c", "ghost"]    # by name, after the cursor


# --- config routing ----------------------------------------------------------------------------------

def test_config_requests_go_to_the_broker_they_describe():
    """A broker's (or broker logger's) settings go to that broker; the cluster
    default (empty name) and other resources to any broker, in one request."""
    from kproto.admin import ConfigResource
    from kproto.errors import ConfigError
    fc = FakeCluster(nodes=(1, 2))

    def alter(req):
        return {"responses": [{"error_code": 0, "resource_type": r["resource_type"],
                               "resource_name": r["resource_name"]} for r in req.body["resources"]]}
    fc.on_all("AlterConfigs", alter)
    sim = Sim(fc)
    default, b2, logger2, topic = (ConfigResource(4, ""), ConfigResource.broker(2), ConfigResource.broker_logger(2),
                                   ConfigResource.topic("t"))
    h = sim.core.alter_configs({default: {"a": 1}, b2: {"b": True}, logger2: {}, topic: {"c": None},
                                ConfigResource(4, "x"): {}}, now=0)
    sim.run(h)
    assert h.values() == {default: None, b2: None, logger2: None, topic: None}
    assert isinstance(h.items[ConfigResource(4, "x")].error, ConfigError)
    sent = {(n, tuple(sorted((r["resource_type"], r["resource_name"]) for r in req.body["resources"])))
            for n, req in sim.requests("AlterConfigs")}
    anywhere = [s for s in sent if s[1] == ((2, "t"), (4, ""))]
    assert len(anywhere) == 1 and {(2, ((4, "2"),)), (2, ((8, "2"),))} <= sent and len(sent) == 3
    body = next(req.body for n, req in sim.requests("AlterConfigs") if n == 2 and
                req.body["resources"][0]["resource_name"] == "2" and req.body["resources"][0]["resource_type"] == 4)
    assert body["resources"][0]["configs"] == [{"name": "b", "value": "true"}]


def test_describe_topics_starts_over_when_a_page_is_lost():
    """The broker of a page stops answering (a request timeout): the topics
    not done yet are asked again from the first page, none twice in the result."""
    try:
        from scripted_broker import NO_RESPONSE
    except ImportError:  # tests/ as a package
        from tests.scripted_broker import NO_RESPONSE
    fc = FakeCluster(nodes=(1,), topics={"a": 3, "b": 3})
    _paging_broker(fc)
    pager = fc.brokers[1].handlers["DescribeTopicPartitions"]
    lost = []

    def once_silent(req):
        if req.body.get("cursor") and not lost:
            lost.append(req.body["cursor"])
            return NO_RESPONSE
        return pager(req)
    fc.on_all("DescribeTopicPartitions", once_silent)
    sim = Sim(fc)
    h = sim.core.describe_topics(["a", "b"], partition_size_limit_per_response=2, now=0)
    sim.run(h)
    assert lost == [{"topic_name": "a", "partition_index": 2}]
    assert {n: [p.partition for p in d.partitions] for n, d in h.result().items()} == {"a": [0, 1, 2], "b": [0, 1, 2]}
    assert [r.body["cursor"] for _, r in sim.requests("DescribeTopicPartitions")][2] is None   # from the start
