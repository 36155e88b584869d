"""Topics by id (KIP-848's OffsetCommit/OffsetFetch v10, KIP-1319's
TxnOffsetCommit v6): sent where the broker takes them and the metadata knows
every id, by name (the version before) otherwise (kproto/topic_ids.py, applied
by the network client for every core)."""
import time
import uuid

import pytest

import kproto.client
from kio import Consumer, OffsetAndMetadata, Producer, TopicPartition
from kio.admin import Admin
from kproto.topic_ids import BY_TOPIC_ID, name_topics, with_topic_ids

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def commit_body():
    return {"group_id": "g", "topics": [{"name": "a", "partitions": [{"partition_index": 0}]},
                                        {"name": "b", "partitions": []}]}


def test_ids_known_go_by_id_and_the_answer_gets_its_names_back():
    version, body, names = with_topic_ids("OffsetCommit", 10, commit_body(), {"a": A, "b": B})
    assert version == 10 and [t["topic_id"] for t in body["topics"]] == [A, B]
    answer = {"topics": [{"name": None, "topic_id": B, "partitions": []},
                         {"topic_id": A, "partitions": []}]}
    name_topics("OffsetCommit", answer, names)
    assert [t["name"] for t in answer["topics"]] == ["b", "a"]


def test_an_unknown_id_sends_the_last_version_that_names_topics():
    assert with_topic_ids("OffsetCommit", 10, commit_body(), {"a": A})[::2] == (9, None)
    assert with_topic_ids("TxnOffsetCommit", 6, {"topics": [{"name": "x"}]}, {})[::2] == (5, None)
    # below the by-id version nothing changes
    assert with_topic_ids("OffsetCommit", 9, commit_body(), {"a": A, "b": B})[::2] == (9, None)


def test_an_offset_fetch_for_all_topics_stays_by_name():
    body = {"groups": [{"group_id": "g", "topics": None}], "require_stable": True}
    assert with_topic_ids("OffsetFetch", 10, body, {"a": A})[::2] == (9, None)
    body = {"groups": [{"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0]}]}]}
    version, body, names = with_topic_ids("OffsetFetch", 10, body, {"a": A})
    assert version == 10 and body["groups"][0]["topics"][0]["topic_id"] == A and names == {A: "a"}
    answer = {"groups": [{"group_id": "g", "topics": [{"topic_id": A, "partitions": []}]}]}
    name_topics("OffsetFetch", answer, names)
    assert answer["groups"][0]["topics"][0]["name"] == "a"
    assert BY_TOPIC_ID == {"OffsetCommit": 10, "OffsetFetch": 10, "TxnOffsetCommit": 6}


@pytest.fixture
def sent_versions(monkeypatch):
    """(api, version) of every by-id-capable request the network clients send."""
    seen = []
    real = with_topic_ids

    def spy(api, version, body, topic_ids):
        out = real(api, version, body, topic_ids)
        seen.append((api, out[0]))
        return out
    monkeypatch.setattr(kproto.client, "with_topic_ids", spy)
    return seen


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
def test_commits_and_transactional_offsets_go_by_topic_id_on_kafka(broker, bootstrap, make_topic, sent_versions):
    topic = make_topic(2)
    group = "tid-" + uuid.uuid4().hex[:8]
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(10):
            p.send(topic, b"%d" % i, partition=i % 2)
    c = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                 enable_auto_commit=False)
    try:
        c.subscribe([topic])
        got, end = [], time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            got += c.poll(0.5)
        assert len(got) == 10
        c.commit()
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert {tp: om.offset for tp, om in c.committed(tps).items()} == {tps[0]: 5, tps[1]: 5}
    finally:
        c.close()
    assert ("OffsetCommit", 10) in sent_versions and ("OffsetFetch", 10) in sent_versions
    # a transactional producer that wrote to the topic knows its id: TxnOffsetCommit v6
    tgroup = group + "-txn"
    with Producer(bootstrap_servers=bootstrap, transactional_id="tid-" + group) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"x", partition=0)
        p.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(3)}, tgroup)
        p.commit_transaction()
    assert ("TxnOffsetCommit", 6) in sent_versions
    # The commit's markers reach the group's offsets a moment after EndTxn answers.
    end = time.monotonic() + 15
    with Admin(bootstrap_servers=bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets(tgroup)
        while TopicPartition(topic, 0) not in offsets and time.monotonic() < end:
            time.sleep(0.2)
            offsets = admin.list_consumer_group_offsets(tgroup)
    assert offsets[TopicPartition(topic, 0)].offset == 3


def test_the_same_round_trip_where_the_broker_decides_the_version(broker, bootstrap, make_topic):
    """Whatever version each broker negotiates (Tansu's own range), commit and
    committed agree."""
    topic = make_topic(1)
    group = "tid2-" + uuid.uuid4().hex[:8]
    tp = TopicPartition(topic, 0)
    c = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(7, "meta")})
        assert c.committed([tp])[tp].offset == 7
    finally:
        c.close()
