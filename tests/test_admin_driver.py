"""kio.Admin, the blocking admin driver, against the real broker."""
import threading
import time
import uuid

import pytest

from kio import Admin, Consumer, Producer, TopicPartition as TP
from kio.admin import AdminClosedError, ConfigResource, NewTopic
from kproto.admin import AdminHandle, AdminTimeoutError
from kproto.error_codes import TopicAlreadyExistsError, UnknownTopicOrPartitionError


def name(prefix="adm"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topics_lifecycle_and_per_item_errors(bootstrap):
    a_topic, b_topic = name(), name()
    with Admin(bootstrap_servers=bootstrap) as admin:
        ids = admin.create_topics([a_topic, NewTopic(b_topic, 3, 1, {"retention.ms": "3600000"})],
                                  num_partitions=2)
        assert set(ids) == {a_topic, b_topic}
        # Kafka answers CreateTopics once the controller has the topics; the
        # broker's metadata can lag a moment (Java's Admin sees the same).
        end = time.monotonic() + 15
        while not {a_topic, b_topic} <= set(admin.list_topics()):
            assert time.monotonic() < end, f"{a_topic}, {b_topic} not listed 15 s after their creation"
            time.sleep(0.1)
        desc = admin.describe_topics([a_topic, b_topic])
        assert [len(desc[t].partitions) for t in (a_topic, b_topic)] == [2, 3]
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([a_topic])
        h = admin.create_topics([a_topic, name()], raise_errors=False)
        assert isinstance(h, AdminHandle) and list(h.errors()) == [a_topic] and len(h.values()) == 1
        configs = admin.describe_configs([ConfigResource(ConfigResource.TOPIC, b_topic)])
        entries = configs[ConfigResource(ConfigResource.TOPIC, b_topic)]
        assert entries["retention.ms"].value == "3600000"
        admin.delete_topics([a_topic])
        # Kafka's answer means the controller committed the deletion; a broker's
        # metadata can show the topic a moment longer (Java's Admin sees the same).
        end = time.monotonic() + 15
        while True:
            try:
                admin.describe_topics([a_topic])
            except UnknownTopicOrPartitionError:
                break
            assert time.monotonic() < end, f"{a_topic} still described 15 s after its deletion"
            time.sleep(0.1)
        assert admin.describe_cluster().nodes


def test_offsets_groups_and_lag(bootstrap):
    topic, group = name(), name("grp")
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
        with Producer(bootstrap_servers=bootstrap) as p:
            for i in range(6):
                p.send(topic, b"v%d" % i, partition=i % 2).result(10)     # one batch per record
        ends = admin.list_offsets({TP(topic, 0): "latest", TP(topic, 1): "earliest"})
        assert (ends[TP(topic, 0)].offset, ends[TP(topic, 1)].offset) == (3, 0)
        with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as c:
            c.assign([TP(topic, 0), TP(topic, 1)])
            c.commit({TP(topic, 0): 1, TP(topic, 1): 3})
        committed = admin.list_consumer_group_offsets(group)
        assert {tp: om.offset for tp, om in committed.items()} == {TP(topic, 0): 1, TP(topic, 1): 3}
        lag = admin.consumer_group_lag(group)
        assert {tp: (x.committed, x.end_offset, x.lag) for tp, x in lag.items()} == {
            TP(topic, 0): (1, 3, 2), TP(topic, 1): (3, 3, 0)}
        assert group in {g.group_id for g in admin.list_consumer_groups()}
        assert admin.describe_consumer_groups([group])[group].group_id == group
        admin.delete_consumer_groups([group])
        assert group not in {g.group_id for g in admin.list_consumer_groups()}


def test_calls_from_several_threads_are_serialised(bootstrap):
    topics = [name() for _ in range(6)]
    errors = []
    with Admin(bootstrap_servers=bootstrap) as admin:
        def create(t):
            try:
                admin.create_topics([t], num_partitions=1)
                # Kafka answers CreateTopics once the controller has the topic; the
                # broker's metadata can lag a moment (Java's Admin sees the same).
                end = time.monotonic() + 15
                while True:
                    try:
                        assert t in admin.describe_topics([t])
                        break
                    except UnknownTopicOrPartitionError:
                        if time.monotonic() > end:
                            raise
                        time.sleep(0.1)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=create, args=(t,)) for t in topics]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == [] and set(topics) <= set(admin.list_topics())


def test_unreachable_broker_times_out_with_a_clear_error_and_close_is_final():
    admin = Admin(bootstrap_servers="127.0.0.1:1")
    start = time.monotonic()
    with pytest.raises(AdminTimeoutError, match=r"list_topics timed out after 1500 ms.*127\.0\.0\.1:1"):
        admin.list_topics(timeout=1.5)
    assert time.monotonic() - start < 5
    admin.close()
    admin.close()
    with pytest.raises(AdminClosedError):
        admin.list_topics()
