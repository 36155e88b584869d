"""``include_authorized_operations`` (Java's ``Describe*Options.includeAuthorizedOperations``):
describe_cluster, describe_topics, describe_consumer_groups and
describe_classic_groups return the AclOperations the caller may do, decoded
from the answer's bit field by :func:`kproto.admin_acls.authorized_operations`.
(describe_share_groups and describe_streams_groups are checked where those
groups are made: tests/test_share_consumer.py, tests/test_admin_streams_broker.py.)

Against Kafka 4.4 with StandardAuthorizer (``secured_kafka``): a user granted
DESCRIBE on a topic and READ on a group sees exactly what Kafka's authorizer
grants (READ implies DESCRIBE there), nothing on the cluster; the super user
sees every operation the resource type has. Against the plain brokers
(``broker``): Kafka without an authorizer answers every operation of the
resource type, as for a super user; Tansu answers "not asked" for topics
and the cluster (so None) and all 32 bits for a group (every operation
kio knows), pinned below.
"""
import asyncio
import time
import uuid

import kio
import kio.aio
from kio.admin import (
    AccessControlEntry, AclBinding, AclBindingFilter, AccessControlEntryFilter, AclOperation, ResourcePattern,
    UserScramCredentialUpsertion,
)
from kproto.admin_acls import AUTHORIZED_OPERATIONS_OMITTED, authorized_operations
from kproto.cluster import TopicPartition

Op = AclOperation

#: The operations Kafka's authorizer checks for each resource type (Kafka's
#: ``AclEntry.supportedOperations``): what a super user, or anyone on a
#: broker without an authorizer, is told it may do.
TOPIC_OPERATIONS = frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                              Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
GROUP_OPERATIONS = frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
CLUSTER_OPERATIONS = frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE})


def _bits(*operations):
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


# -- the bit field ------------------------------------------------------------------------------
def test_bit_field_decoded_as_javas_valid_acl_operations():
    assert authorized_operations(_bits(Op.READ, Op.DESCRIBE)) == {Op.READ, Op.DESCRIBE}
    assert authorized_operations(_bits(*TOPIC_OPERATIONS)) == TOPIC_OPERATIONS
    assert authorized_operations(0) == frozenset()
    # UNKNOWN, ANY and ALL are no grantable operation, a code past TWO_PHASE_COMMIT none this client knows
    assert authorized_operations(_bits(Op.UNKNOWN, Op.ANY, Op.ALL, Op.WRITE) | 1 << 30) == {Op.WRITE}
    assert authorized_operations(AUTHORIZED_OPERATIONS_OMITTED) is None
    assert authorized_operations(None) is None
    assert isinstance(authorized_operations(_bits(Op.READ)), frozenset)


# -- Kafka with an authorizer ------------------------------------------------------------------
def _eventually(fn, ok, seconds=15.0):
    """``fn()`` once ``ok`` of it holds (ACLs reach the broker's authorizer a
    moment after the controller took them)."""
    end = time.monotonic() + seconds
    while True:
        value = fn()
        if ok(value) or time.monotonic() > end:
            return value
        time.sleep(0.2)


def _user_config(secured_kafka, user, password):
    cfg = secured_kafka.client_config(None, listener="SASL_PLAINTEXT")
    cfg.update(sasl_mechanism="SCRAM-SHA-512", sasl_username=user, sasl_password=password)
    return cfg


def _described(admin, topic, topic_id, group, include=True):
    """What each describe says the caller may do: topic by name
    (DescribeTopicPartitions) and by id (Metadata), the group as consumer
    and as classic group, the cluster."""
    return {
        "topic": admin.describe_topics([topic], include_authorized_operations=include)[topic].authorized_operations,
        "topic by id": admin.describe_topics([topic_id], include_authorized_operations=include)[topic_id]
        .authorized_operations,
        "consumer group": admin.describe_consumer_groups([group], include_authorized_operations=include)[group]
        .authorized_operations,
        "classic group": admin.describe_classic_groups([group], include_authorized_operations=include)[group]
        .authorized_operations,
        "cluster": admin.describe_cluster(include_authorized_operations=include).authorized_operations,
    }


def test_a_user_sees_the_operations_its_acls_grant_the_super_user_all(secured_kafka):
    suffix = uuid.uuid4().hex[:8]
    user, password, topic, group = f"ops-{suffix}", "ops-pw", f"ops-t-{suffix}", f"ops-g-{suffix}"
    principal = f"User:{user}"
    with kio.Admin(**secured_kafka.client_config(None, listener="SASL_PLAINTEXT")) as admin:
        topic_id = admin.create_topics([topic], num_partitions=1, replication_factor=1)[topic]
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, "SCRAM-SHA-512", password)])
        admin.create_acls([AclBinding(ResourcePattern.of("topic", topic), AccessControlEntry.of(principal, "DESCRIBE")),
                           AclBinding(ResourcePattern.of("group", group), AccessControlEntry.of(principal, "READ"))])
        # An offsets-only (simple) classic group: it exists, so it can be described.
        admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 0})
        _eventually(lambda: admin.describe_acls(AclBindingFilter(entry=AccessControlEntryFilter(principal))),
                    lambda v: len(v) == 2)
        everything = _eventually(lambda: _described(admin, topic, topic_id, group),
                                 lambda v: v["topic"] == TOPIC_OPERATIONS)
        assert everything == {"topic": TOPIC_OPERATIONS, "topic by id": TOPIC_OPERATIONS,
                              "consumer group": GROUP_OPERATIONS, "classic group": GROUP_OPERATIONS,
                              "cluster": CLUSTER_OPERATIONS}
        assert set(_described(admin, topic, topic_id, group, include=False).values()) == {None}

    with kio.Admin(**_user_config(secured_kafka, user, password)) as mine:
        seen = _eventually(lambda: _described(mine, topic, topic_id, group),
                           lambda v: v["consumer group"] == {Op.READ, Op.DESCRIBE})
        # Kafka's authorizer: READ (like WRITE, DELETE and ALTER) implies DESCRIBE.
        assert seen == {"topic": {Op.DESCRIBE}, "topic by id": {Op.DESCRIBE},
                        "consumer group": {Op.READ, Op.DESCRIBE}, "classic group": {Op.READ, Op.DESCRIBE},
                        "cluster": frozenset()}
        assert set(_described(mine, topic, topic_id, group, include=False).values()) == {None}


def test_the_async_admin_asks_for_them_too(secured_kafka):
    cfg = secured_kafka.client_config(None, listener="SASL_PLAINTEXT")

    async def main():
        async with kio.aio.Admin(**cfg) as admin:
            asked = await admin.describe_cluster(include_authorized_operations=True)
            not_asked = await admin.describe_cluster()
        return asked.authorized_operations, not_asked.authorized_operations

    assert asyncio.run(main()) == (CLUSTER_OPERATIONS, None)


# -- the plain brokers -------------------------------------------------------------------------
def test_plain_brokers_answer(broker_kind, bootstrap, make_topic):
    topic = make_topic(1)
    group = f"ops-plain-{uuid.uuid4().hex[:8]}"
    with kio.Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 0})
        topic_ops = admin.describe_topics([topic], include_authorized_operations=True)[topic].authorized_operations
        group_ops = _eventually(
            lambda: admin.describe_consumer_groups([group], include_authorized_operations=True)[group],
            lambda d: d.state == "Empty").authorized_operations
        cluster_ops = admin.describe_cluster(include_authorized_operations=True).authorized_operations
        assert admin.describe_topics([topic])[topic].authorized_operations is None
        assert admin.describe_consumer_groups([group])[group].authorized_operations is None
        assert admin.describe_cluster().authorized_operations is None
    if broker_kind == "kafka":
        # No authorizer: Kafka answers every operation of the resource type.
        assert (topic_ops, group_ops, cluster_ops) == (TOPIC_OPERATIONS, GROUP_OPERATIONS, CLUSTER_OPERATIONS)
    else:
        # Tansu has no authorizer either, but answers "not asked" (Integer.MIN_VALUE) for
        # topics and the cluster, and every bit set (-1) for a group.
        every_operation = frozenset(op for op in Op if op not in (Op.UNKNOWN, Op.ANY, Op.ALL))
        assert (topic_ops, group_ops, cluster_ops) == (None, every_operation, None)
