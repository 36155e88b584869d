"""ACLs and SCRAM credentials against Apache Kafka 4.4 with an authorizer
(the ``secured_kafka`` fixture: StandardAuthorizer, super user ``admin``,
``alice`` a user without ACLs on the cluster). Tansu has no authorizer and
none of these APIs, so these run on Kafka only.

What the admin returns is checked against Kafka's filtering (the MATCH and
ANY filters return exactly what the filter's own ``matches`` selects from
every binding), against confluent-kafka's AdminClient on the same cluster,
and end to end: a user made with ``alter_user_scram_credentials`` and given
WRITE with ``create_acls`` produces."""
import asyncio
import time
import uuid

import confluent_kafka.admin as ck
import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio.admin import (
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    PatternType, ResourcePattern, ResourcePatternFilter, ResourceType, ScramMechanism, UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.admin import ConfigResource, ElectionType
from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.admin_scram import ScramCredentialInfo
from kproto.errors import AuthenticationError


def eventually(fn, ok, seconds=10.0):
    """``fn()`` once ``ok`` of it holds: the controller has committed a change
    when the admin call returns, the broker's view follows a moment later."""
    end = time.monotonic() + seconds
    while True:
        try:
            value = fn()
            if ok(value) or time.monotonic() > end:
                return value
        except error_codes.ResourceNotFoundError:
            if time.monotonic() > end:
                raise
        time.sleep(0.1)


def _admin(secured_kafka, user=None):
    return kio.Admin(**secured_kafka.client_config(user, "SCRAM-SHA-512", "SASL_PLAINTEXT"))


def _confluent_admin(secured_kafka):
    from kio.testing.secured_kafka import ADMIN_PASSWORD, ADMIN_USER
    return ck.AdminClient({"bootstrap.servers": secured_kafka.bootstrap_servers,
                           "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanism": "PLAIN", "sasl.username": ADMIN_USER, "sasl.password": ADMIN_PASSWORD})


def _bindings(principal, topic):
    allow_read = AccessControlEntry.of(principal, "READ")
    return [
        AclBinding(ResourcePattern.of("topic", topic), allow_read),
        AclBinding(ResourcePattern.of("topic", topic[:6], "prefixed"), AccessControlEntry.of(principal, "WRITE")),
        AclBinding(ResourcePattern.of("topic", "*"), AccessControlEntry.of(principal, "DESCRIBE", "DENY")),
        AclBinding(ResourcePattern.of("topic", topic + "-other"), allow_read),
        AclBinding(ResourcePattern.of("group", topic), allow_read),
    ]


def test_acls_create_describe_with_javas_filters_and_delete(secured_kafka):
    principal = f"User:p-{uuid.uuid4().hex[:8]}"
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    mine = AclBindingFilter(entry=AccessControlEntryFilter(principal=principal))
    with _admin(secured_kafka) as admin:
        bindings = _bindings(principal, topic)
        assert admin.create_acls(bindings) == {b: None for b in bindings}
        everything = eventually(lambda: admin.describe_acls(mine), lambda v: len(v) == len(bindings))
        assert everything == sorted(bindings)
        filters = [
            AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), mine.entry),
            AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.ANY), mine.entry),
            AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, topic[:6], PatternType.PREFIXED), mine.entry),
            AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
                             AccessControlEntryFilter(principal, None, AclOperation.READ, AclPermissionType.ALLOW)),
        ]
        for f in filters:
            assert admin.describe_acls(f) == [b for b in everything if f.matches(b)], f
        # MATCH on the topic: its literal binding, the prefix that covers it and the wildcard.
        matched = admin.describe_acls(filters[0])
        assert {b.pattern.name for b in matched} == {topic, topic[:6], "*"}
        deleted = admin.delete_acls([filters[1], filters[2]])
        assert deleted[filters[1]] == [bindings[0]] and deleted[filters[2]] == [bindings[1]]
        assert eventually(lambda: admin.describe_acls(mine), lambda v: len(v) == 3) == sorted(bindings[2:])
        assert admin.delete_acls([mine])[mine] == sorted(bindings[2:])
        assert eventually(lambda: admin.describe_acls(mine), lambda v: not v) == []


def test_describe_acls_is_what_confluent_kafka_sees(secured_kafka):
    principal = f"User:c-{uuid.uuid4().hex[:8]}"
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    with _admin(secured_kafka) as admin:
        admin.create_acls(_bindings(principal, topic))
        flt = AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH),
                               AccessControlEntryFilter(principal=principal))
        ours = eventually(lambda: admin.describe_acls(flt), lambda v: len(v) == 3)
        theirs_filter = ck.AclBindingFilter(ck.ResourceType.TOPIC, topic, ck.ResourcePatternType.MATCH, principal,
                                            None, ck.AclOperation.ANY, ck.AclPermissionType.ANY)
        confluent = _confluent_admin(secured_kafka)        # kept: its futures fail once it is collected
        theirs = confluent.describe_acls(theirs_filter).result(20)
        as_ours = sorted(AclBinding(ResourcePattern(ResourceType(b.restype.value), b.name,
                                                    PatternType(b.resource_pattern_type.value)),
                                    AccessControlEntry(b.principal, b.host, AclOperation(b.operation.value),
                                                       AclPermissionType(b.permission_type.value)))
                         for b in theirs)
        assert ours == as_ours and len(ours) == 3
        admin.delete_acls([AclBindingFilter(entry=AccessControlEntryFilter(principal=principal))])


def test_acls_need_cluster_alter_and_describe(secured_kafka):
    binding = AclBinding(ResourcePattern.of("topic", "x"), AccessControlEntry.of("User:alice", "READ"))
    with _admin(secured_kafka, "alice") as alice:
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.create_acls([binding])
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.describe_acls()
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.delete_acls([binding.to_filter()])
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.describe_user_scram_credentials()
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.alter_user_scram_credentials([UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "x")])
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.describe_client_quotas()
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.describe_log_dirs([alice.describe_cluster().nodes[0].id])
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.elect_leaders(ElectionType.PREFERRED, [TopicPartition("x", 0)])
        with pytest.raises(error_codes.ClusterAuthorizationFailedError):
            alice.list_partition_reassignments()
        with pytest.raises(error_codes.TopicAuthorizationFailedError):
            alice.alter_configs({ConfigResource.topic("x"): {"retention.ms": 1000}})


def test_acl_operations_in_the_async_admins(secured_kafka):
    principal = f"User:a-{uuid.uuid4().hex[:8]}"
    binding = AclBinding(ResourcePattern.of("topic", "async-t"), AccessControlEntry.of(principal, "READ"))
    mine = AclBindingFilter(entry=AccessControlEntryFilter(principal=principal))
    cfg = secured_kafka.client_config(None, listener="SASL_PLAINTEXT")

    async def run(module):
        async with module.Admin(**cfg) as admin:
            created = await admin.create_acls([binding])
            seen = await admin.describe_acls(mine)
            deleted = await admin.delete_acls([mine])
        return created, seen, deleted

    expected = ({binding: None}, [binding], {mine: [binding]})
    assert asyncio.run(run(kio.aio)) == expected
    assert trio.run(run, kio.trio) == expected


# --- SCRAM -----------------------------------------------------------------------------------------

def _produces_as(secured_kafka, user, password, topic, mechanism="SCRAM-SHA-512"):
    cfg = {"bootstrap_servers": secured_kafka.bootstrap_servers, "security_protocol": "SASL_PLAINTEXT",
           "sasl_mechanism": mechanism, "sasl_username": user, "sasl_password": password, "max_block_ms": 8000}
    with kio.Producer(**cfg) as p:
        return p.send(topic, b"from a new user", partition=0).result(20)


def test_scram_user_made_by_the_admin_can_produce(secured_kafka):
    user = f"bob-{uuid.uuid4().hex[:8]}"
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    with _admin(secured_kafka) as admin:
        admin.create_topics([kio.admin.NewTopic(topic, 1, 1)])
        # (Kafka takes one alteration per user in a request: DuplicateResourceError else.)
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, "SCRAM-SHA-512", "bob-pw", 8192)]) == {user: None}
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_256, "bob-pw-256")]) == {user: None}
        described = eventually(lambda: admin.describe_user_scram_credentials([user])[user],
                               lambda d: len(d.credential_infos) == 2)
        assert described.credential_infos == (ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192))
        assert admin.describe_user_scram_credentials()[user] == described
        confluent = _confluent_admin(secured_kafka)
        theirs = confluent.describe_user_scram_credentials([user])[user].result(20)
        assert sorted((i.mechanism.value, i.iterations) for i in theirs.scram_credential_infos) == \
            [(int(i.mechanism), i.iterations) for i in described.credential_infos]
        admin.create_acls([AclBinding(ResourcePattern.of("topic", topic),
                                      AccessControlEntry.of(f"User:{user}", op)) for op in ("WRITE", "DESCRIBE")])
        # The ACLs reach the broker's authorizer a moment after the controller took them.
        eventually(lambda: admin.describe_acls(AclBindingFilter(entry=AccessControlEntryFilter(f"User:{user}"))),
                   lambda v: len(v) == 2)
        assert _produces_as(secured_kafka, user, "bob-pw", topic).offset == 0
        assert _produces_as(secured_kafka, user, "bob-pw-256", topic, "SCRAM-SHA-256").offset == 1
        with pytest.raises(AuthenticationError):
            _produces_as(secured_kafka, user, "not-the-password", topic)
        assert admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")]) == \
            {user: None}
        eventually(lambda: admin.describe_user_scram_credentials([user])[user],
                   lambda d: len(d.credential_infos) == 1)
        with pytest.raises(AuthenticationError):
            _produces_as(secured_kafka, user, "bob-pw", topic)
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-256")])
        with pytest.raises(error_codes.ResourceNotFoundError):
            eventually(lambda: admin.describe_user_scram_credentials([user]), lambda d: False, seconds=3)


def test_scram_errors(secured_kafka):
    user = f"eve-{uuid.uuid4().hex[:8]}"
    with _admin(secured_kafka) as admin:
        with pytest.raises(error_codes.UnacceptableCredentialError):
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, "SCRAM-SHA-256", "pw", 1000)])
        with pytest.raises(error_codes.DuplicateResourceError):
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, "SCRAM-SHA-256", "pw"),
                                                UserScramCredentialUpsertion(user, "SCRAM-SHA-512", "pw")])
        with pytest.raises(error_codes.ResourceNotFoundError):
            admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])
        with pytest.raises(ValueError, match="not a SCRAM mechanism"):
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, "MD5", "pw")])
