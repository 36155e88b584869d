"""Configs, quotas and cluster operations of kio.Admin against the real
brokers (the ``broker`` fixture: Apache Kafka 4.4, one KRaft node, and Tansu).

Tansu lacks most of these APIs: the tests marked ``kafka_only`` run on Kafka
only, and ``test_tansu_lacks_the_cluster_apis`` pins what Tansu does instead
(UnsupportedVersionError naming the API, at once; DescribeAcls answering with
no ACLs; CreateAcls and DescribeUserScramCredentials answering a null array
where the protocol has none; every partition listed as a reassignment). describe_topics runs on
both: DescribeTopicPartitions paged on Kafka, Metadata on Tansu, and both
agree with confluent-kafka (librdkafka asks Metadata)."""
import time
import uuid

import confluent_kafka
import confluent_kafka.admin as ck
import pytest

import kio
from kio.admin import (
    AlterConfigOp, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent, ConfigResource,
    ElectionType, FeatureUpdate, NewTopic, TopicPartitionReplica, UpgradeType,
)
from kproto import error_codes
from kproto.admin_acls import AccessControlEntry, AclBinding, ResourcePattern
from kproto.admin_cluster import FeatureMetadata, PartitionReassignment, ReplicaLogDirInfo
from kproto.admin_configs import ConfigResourceListing
from kproto.cluster import TopicPartition as TP
from kproto.errors import DecodeError, UnsupportedVersionError

kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


@pytest.fixture
def admin(bootstrap):
    with kio.Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=20000) as a:
        yield a


def _topic(admin, partitions=1, configs=None):
    """A new topic, once the broker serves it (the controller made it a moment before)."""
    name = f"adm-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, partitions, 1, configs or {})])
    eventually(lambda: admin.describe_topics([name], raise_errors=False).errors(), lambda e: not e)
    return name


def eventually(fn, ok, seconds=10.0):
    """``fn()`` once ``ok`` holds for it (or its last value after ``seconds``):
    a committed change reaches the broker's caches a moment later."""
    end = time.monotonic() + seconds
    while True:
        value = fn()
        if ok(value) or time.monotonic() > end:
            return value
        time.sleep(0.1)


def test_describe_topics_pages_and_agrees_with_confluent_kafka(admin, broker, bootstrap):
    topics = [_topic(admin, 5), _topic(admin, 3)]
    paged = admin.describe_topics(topics, partition_size_limit_per_response=2, raise_errors=False)
    whole = admin.describe_topics(topics)
    assert paged.result() == whole
    if broker.kind == "kafka":
        assert paged.pages == 4          # 8 partitions, 2 a page (a page goes on into the next topic)
    else:
        assert paged.pages == 1          # Tansu has no DescribeTopicPartitions: one Metadata request
    confluent = ck.AdminClient({"bootstrap.servers": bootstrap})
    theirs = confluent.describe_topics(confluent_kafka.TopicCollection(topics))
    for name in topics:
        t = theirs[name].result(20)
        ours = whole[name]
        assert [(p.partition, p.leader, p.replicas, p.isr) for p in ours.partitions] == \
            [(p.id, p.leader.id, tuple(r.id for r in p.replicas), tuple(r.id for r in p.isr))
             for p in t.partitions]
    with pytest.raises(error_codes.UnknownTopicOrPartitionError):
        admin.describe_topics(["no-such-topic-" + uuid.uuid4().hex[:6]])


@kafka_only
def test_legacy_alter_configs_replaces_a_topics_settings(admin):
    name = _topic(admin, configs={"retention.ms": 3600000, "cleanup.policy": "compact"})
    res = ConfigResource.topic(name)
    assert admin.alter_configs({res: {"retention.ms": 7200000}}) == {res: None}
    entries = eventually(lambda: admin.describe_configs([res])[res], lambda e: e["retention.ms"].value == "7200000")
    assert entries["retention.ms"].value == "7200000" and not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default  # replaced
    with pytest.raises(error_codes.InvalidConfigError):
        admin.alter_configs({res: {"retention.ms": "soon"}})
    with pytest.raises(error_codes.UnknownTopicOrPartitionError):
        admin.alter_configs({ConfigResource.topic("no-such-" + name): {"retention.ms": 1}})
    broker = ConfigResource.broker(admin.describe_cluster().nodes[0].id)
    assert admin.alter_configs({broker: {"log.cleaner.threads": 1}}, validate_only=True) == {broker: None}
    # Kafka's legacy AlterConfigs knows no BROKER_LOGGER resources (incremental_alter_configs does)
    with pytest.raises(error_codes.InvalidRequestError, match="type 8"):
        admin.alter_configs({ConfigResource.broker_logger(broker.name): {"kafka.server": "INFO"}})


@kafka_only
def test_incremental_alter_configs_covers_every_resource_type(admin):
    node = admin.describe_cluster().nodes[0].id
    topic = ConfigResource.topic(_topic(admin))
    broker = ConfigResource.broker(node)
    logger = ConfigResource.broker_logger(node)
    group = ConfigResource.group(f"g-{uuid.uuid4().hex[:8]}")
    metrics = ConfigResource.client_metrics(f"m-{uuid.uuid4().hex[:8]}")
    cluster_default = ConfigResource(ConfigResource.BROKER, "")
    changes = {topic: {"retention.ms": 60000}, broker: {"log.cleaner.backoff.ms": 20000},
               logger: {"kafka.server.ReplicaManager": "DEBUG"}, group: {"consumer.session.timeout.ms": 50000},
               metrics: {"metrics": "org.apache.kafka.producer.", "interval.ms": 60000},
               cluster_default: {"log.cleaner.delete.retention.ms": 86400001}}
    assert admin.incremental_alter_configs(changes) == {r: None for r in changes}
    for r, kv in changes.items():
        seen = eventually(lambda: admin.describe_configs([r])[r],
                          lambda e: all(k in e and e[k].value == str(v) for k, v in kv.items()))
        assert {k: seen[k].value for k in kv} == {k: str(v) for k, v in kv.items()}, r
    listed = eventually(lambda: admin.list_client_metrics_resources(),
                        lambda v: ConfigResourceListing(16, metrics.name) in v)
    assert ConfigResourceListing(ConfigResource.CLIENT_METRICS, metrics.name) in listed
    assert all(r.type == ConfigResource.CLIENT_METRICS for r in listed)
    every = admin.list_config_resources()
    assert {ConfigResourceListing(2, topic.name), ConfigResourceListing(32, group.name),
            ConfigResourceListing(16, metrics.name)} <= set(every)
    assert ConfigResourceListing(2, topic.name) in admin.list_config_resources([ConfigResource.TOPIC])
    # back to the defaults (None deletes a setting)
    admin.incremental_alter_configs({r: {k: None for k in kv} for r, kv in changes.items()
                                     if r not in (logger, metrics)})
    admin.incremental_alter_configs({logger: {"kafka.server.ReplicaManager": "INFO"}})
    with pytest.raises(error_codes.InvalidConfigError):
        admin.incremental_alter_configs({topic: {"retention.ms": "soon"}})
    with pytest.raises(error_codes.InvalidRequestError, match="interval.ms"):
        admin.incremental_alter_configs({metrics: {"interval.ms": -5}})


def test_describe_topics_by_id(admin, broker, bootstrap):
    import asyncio

    import trio

    import kio.aio
    import kio.trio
    a, b = _topic(admin, 3), _topic(admin, 1)
    by_name = admin.describe_topics([a, b])
    ids = {n: d.topic_id for n, d in by_name.items()}
    assert all(isinstance(i, uuid.UUID) for i in ids.values())
    stranger = uuid.uuid4()
    h = admin.describe_topics([ids[a], ids[b], stranger], raise_errors=False)
    assert h.values() == {ids[a]: by_name[a], ids[b]: by_name[b]}
    err = h.errors()[stranger]
    # Kafka: UNKNOWN_TOPIC_ID; Tansu answers UNKNOWN_TOPIC_OR_PARTITION for an unknown id.
    unknown = error_codes.UnknownTopicIdError if broker.kind == "kafka" else error_codes.UnknownTopicOrPartitionError
    assert isinstance(err, unknown) and str(stranger) in str(err)
    # Names and ids in one call, each item keyed as it was given.
    assert admin.describe_topics([a, ids[b]]) == {a: by_name[a], ids[b]: by_name[b]}

    async def described(admin_class):
        async with admin_class(bootstrap_servers=bootstrap) as aa:
            return await aa.describe_topics([ids[a]])

    assert asyncio.run(described(kio.aio.Admin)) == {ids[a]: by_name[a]}
    assert trio.run(described, kio.trio.Admin) == {ids[a]: by_name[a]}


def test_incremental_alter_configs_appends_to_and_subtracts_from_a_list_setting(admin, broker):
    topic = ConfigResource.topic(_topic(admin, configs={"cleanup.policy": "delete"}))

    def policy():
        entry = admin.describe_configs([topic])[topic].get("cleanup.policy")
        return None if entry is None else entry.value

    def alter(op):
        return admin.incremental_alter_configs({topic: {"cleanup.policy": op}})

    assert alter(AlterConfigOp.append("compact")) == {topic: None}
    assert eventually(policy, lambda v: v == "delete,compact") == "delete,compact"
    alter(AlterConfigOp.subtract("delete"))
    assert eventually(policy, lambda v: v == "compact") == "compact"
    alter(AlterConfigOp.set(["compact", "delete"]))
    assert eventually(policy, lambda v: v == "compact,delete") == "compact,delete"
    alter(AlterConfigOp.delete())
    if broker.kind == "tansu":
        # Tansu drops the setting from DescribeConfigs altogether, and
        # appends values the list already holds a second time.
        assert eventually(policy, lambda v: v is None) is None
        alter(AlterConfigOp.set("delete,compact"))
        alter(AlterConfigOp.append(["compact", "delete"]))
        assert eventually(policy, lambda v: v == "delete,compact,compact,delete") == "delete,compact,compact,delete"
        return
    assert eventually(policy, lambda v: v == "delete") == "delete"       # Kafka's default
    # A value already in the list is not added twice.
    alter(AlterConfigOp.set("delete,compact"))
    alter(AlterConfigOp.append(["compact", "delete"]))
    assert eventually(policy, lambda v: v != "delete,compact", seconds=1) == "delete,compact"
    # APPEND to a setting that is not a list: Kafka refuses it.
    with pytest.raises(error_codes.InvalidConfigError, match="retention.ms"):
        admin.incremental_alter_configs({topic: {"retention.ms": AlterConfigOp.append("1000")}})


@kafka_only
def test_client_quotas(admin):
    user = f"u-{uuid.uuid4().hex[:8]}"
    alice = ClientQuotaEntity.of({"user": user})
    alice_app = ClientQuotaEntity.of({"user": user, "client-id": "app"})
    assert admin.alter_client_quotas([
        ClientQuotaAlteration(alice, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}),
        ClientQuotaAlteration(alice_app, {"request_percentage": 50}),
    ]) == {alice: None, alice_app: None}
    only_user = ClientQuotaFilter.contains_only([ClientQuotaFilterComponent.of_entity("user", user)])
    got = eventually(lambda: admin.describe_client_quotas(only_user), lambda v: alice in v)
    assert got == {alice: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}}
    both = admin.describe_client_quotas(ClientQuotaFilter.contains(
        [ClientQuotaFilterComponent.of_entity("user", user)]))
    assert both == {alice: got[alice], alice_app: {"request_percentage": 50.0}}
    assert alice in admin.describe_client_quotas()
    admin.alter_client_quotas([ClientQuotaAlteration(alice, {"consumer_byte_rate": None})])
    left = eventually(lambda: admin.describe_client_quotas(only_user),
                      lambda v: "consumer_byte_rate" not in v.get(alice, {}))
    assert left[alice] == {"producer_byte_rate": 1048576.0}
    with pytest.raises(error_codes.InvalidRequestError):
        admin.alter_client_quotas([ClientQuotaAlteration(alice, {"no_such_quota": 1})])
    admin.alter_client_quotas([ClientQuotaAlteration(alice, {"producer_byte_rate": None}),
                               ClientQuotaAlteration(alice_app, {"request_percentage": None})])


@kafka_only
def test_log_dirs(admin):
    topic = _topic(admin, 2)
    node = admin.describe_cluster().nodes[0].id
    dirs = eventually(lambda: admin.describe_log_dirs([node])[node],
                      lambda ds: any({TP(topic, 0), TP(topic, 1)} <= set(d.replica_infos) for d in ds.values()))
    assert len(dirs) == 1
    path, d = next(iter(dirs.items()))
    assert d.error is None and d.total_bytes > 0 and 0 < d.usable_bytes <= d.total_bytes
    assert {TP(topic, 0), TP(topic, 1)} <= set(d.replica_infos)
    assert d.replica_infos[TP(topic, 0)].is_future is False
    replica = TopicPartitionReplica(topic, 0, node)
    where = admin.describe_replica_log_dirs([replica, TopicPartitionReplica(topic, 7, node)])
    assert where == {replica: ReplicaLogDirInfo(path, 0, None, -1),
                     TopicPartitionReplica(topic, 7, node): ReplicaLogDirInfo(None, -1, None, -1)}
    assert admin.alter_replica_log_dirs({replica: path}) == {replica: None}       # already there
    with pytest.raises(error_codes.LogDirNotFoundError):
        admin.alter_replica_log_dirs({replica: "/no/such/log/dir"})


@kafka_only
def test_elect_leaders_when_the_preferred_replica_leads(admin, bootstrap):
    topic = _topic(admin, 2)
    with pytest.raises(error_codes.ElectionNotNeededError):
        admin.elect_leaders(ElectionType.PREFERRED, [TP(topic, 0)])
    handle = admin.elect_leaders(ElectionType.UNCLEAN, [TP(topic, 0), TP(topic, 1)], raise_errors=False)
    assert {tp: type(e) for tp, e in handle.errors().items()} == {
        TP(topic, 0): error_codes.ElectionNotNeededError, TP(topic, 1): error_codes.ElectionNotNeededError}
    with pytest.raises(error_codes.UnknownTopicOrPartitionError):
        admin.elect_leaders(ElectionType.PREFERRED, [TP("no-such-" + topic, 0)])
    every = admin.elect_leaders(ElectionType.PREFERRED)       # all partitions: outcomes, not raised
    assert all(e is None or isinstance(e, error_codes.ElectionNotNeededError) for e in every.values())
    # confluent-kafka sees the same outcome
    confluent = ck.AdminClient({"bootstrap.servers": bootstrap})
    theirs = confluent.elect_leaders(confluent_kafka.ElectionType.PREFERRED,
                                     [confluent_kafka.TopicPartition(topic, 0)]).result(20)
    assert theirs[confluent_kafka.TopicPartition(topic, 0)].code() == error_codes.ElectionNotNeededError.code


@kafka_only
def test_partition_reassignments(admin):
    topic = _topic(admin, 1)
    node = admin.describe_cluster().nodes[0].id
    assert admin.list_partition_reassignments([TP(topic, 0)]) == {}
    assert admin.alter_partition_reassignments({TP(topic, 0): [node]}) == {TP(topic, 0): None}
    assert eventually(lambda: admin.list_partition_reassignments(), lambda v: TP(topic, 0) not in v) \
        .get(TP(topic, 0)) is None                          # a move to where it is finishes at once
    with pytest.raises(error_codes.NoReassignmentInProgressError):
        admin.alter_partition_reassignments({TP(topic, 0): None})
    with pytest.raises(error_codes.InvalidReplicaAssignmentError):
        admin.alter_partition_reassignments({TP(topic, 0): [node + 100]})
    with pytest.raises(error_codes.UnknownTopicOrPartitionError):
        admin.alter_partition_reassignments({TP("no-such-" + topic, 0): [node]})


@kafka_only
def test_features_and_the_metadata_quorum(admin):
    features = admin.describe_features()
    assert "metadata.version" in features.finalized_features and "metadata.version" in features.supported_features
    assert features.finalized_features_epoch is not None and features.finalized_features_epoch > 0
    group = features.finalized_features["group.version"]
    same = {"group.version": FeatureUpdate(group.max_version_level)}
    assert admin.update_features(same, validate_only=True) == {"group.version": None}
    with pytest.raises(error_codes.InvalidUpdateVersionError):
        admin.update_features({"no.such.feature": FeatureUpdate(1)}, validate_only=True)
    top = features.supported_features["group.version"].max_version
    with pytest.raises(error_codes.InvalidUpdateVersionError):
        admin.update_features({"group.version": FeatureUpdate(top + 1)}, validate_only=True)
    with pytest.raises(ValueError, match="downgrade"):
        admin.update_features({"group.version": FeatureUpdate(0, UpgradeType.UPGRADE)})
    node = admin.describe_cluster().nodes[0].id
    quorum = admin.describe_metadata_quorum()
    assert quorum.leader_id == node and quorum.leader_epoch >= 1 and quorum.high_watermark > 0
    assert [v.replica_id for v in quorum.voters] == [node]
    assert quorum.voters[0].log_end_offset >= quorum.high_watermark
    assert node in quorum.nodes


@pytest.mark.parametrize("broker", ["tansu"], indirect=True)
def test_tansu_lacks_the_cluster_apis(admin):
    """What Tansu 0.x does with these operations (Kafka's behaviour is the
    tests above): most APIs are not advertised - the operation fails at once
    with UnsupportedVersionError naming it and the API; a few are answered
    differently from Kafka, pinned here so a change in Tansu shows up."""
    topic = _topic(admin)
    calls = {
        "AlterConfigs": lambda: admin.alter_configs({ConfigResource.topic(topic): {"retention.ms": 1}}),
        "DescribeClientQuotas": lambda: admin.describe_client_quotas(),
        "ElectLeaders": lambda: admin.elect_leaders(ElectionType.PREFERRED, [TP(topic, 0)]),
        "DescribeQuorum": lambda: admin.describe_metadata_quorum(),
        "DescribeLogDirs": lambda: admin.describe_log_dirs([admin.describe_cluster().nodes[0].id]),
        "UpdateFeatures": lambda: admin.update_features({"group.version": FeatureUpdate(1)}),
        "ListConfigResources": lambda: admin.list_config_resources(),
    }
    for api, call in calls.items():
        start = time.monotonic()
        with pytest.raises(UnsupportedVersionError, match=api):
            call()
        assert time.monotonic() - start < 5
    # No authorizer, yet DescribeAcls answers (Kafka: SecurityDisabledError) with no ACLs.
    assert admin.describe_acls() == []
    # CreateAcls and DescribeUserScramCredentials answer a null array where the
    # protocol allows none: the client refuses the frame.
    with pytest.raises(DecodeError, match="CreateAcls"):
        admin.create_acls([AclBinding(ResourcePattern.of("topic", topic), AccessControlEntry.of("User:x", "READ"))])
    with pytest.raises(DecodeError, match="DescribeUserScramCredentials"):
        admin.describe_user_scram_credentials()
    # Every partition is listed as a reassignment (Kafka: only moves in progress).
    node = admin.describe_cluster().nodes[0].id
    assert admin.list_partition_reassignments()[TP(topic, 0)] == PartitionReassignment((node,), (), ())
    # ApiVersions without features.
    assert admin.describe_features() == FeatureMetadata({}, None, {})
