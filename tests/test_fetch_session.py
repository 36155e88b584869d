"""KIP-227 fetch sessions without a network: the per-node state machine
(kproto.consumer.fetch_session) and the Fetcher's requests and answer
handling with it - full then incremental requests listing only what changed,
forgotten partitions, the session errors, epoch wrap-around, failures,
sparse answers, brokers that keep no session, closing - on both answer paths
(the codec's dict and the C FetchAnswer), and the C request writer against
the codec on the session's own requests."""
import uuid

import pytest

from kproto import messages
from kproto.cluster import TopicPartition
from kproto.consumer._fetch import decode_fetch_response
from kproto.consumer.fetch_session import (
    FINAL_EPOCH, MAX_EPOCH, FetchSession, next_epoch,
)
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions
from kproto.records import BatchBuilder

TOPIC_IDS = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}
T = [TopicPartition("t", p) for p in range(4)]
U0 = TopicPartition("u", 0)
SESSION = 77


def batch(base, n):
    b = BatchBuilder("none", 1 << 20, base_offset=base)
    for i in range(n):
        b.append(1000 + base + i, None, b"v%d" % (base + i))
    return b.build()


def make(tps=(*T, U0), **kw):
    pos = Positions("earliest")
    pos.assign(tps)
    for tp in tps:
        pos.seek(tp, 0)
    return pos, Fetcher(pos, **kw)


def fetch(f, version=13, leader=1):
    reqs = f.fetch_requests(lambda tp: leader, lambda node: version, TOPIC_IDS.get)
    assert len(reqs) <= 1
    return reqs[0] if reqs else None


def answer(req, parts, *, session_id=SESSION, error_code=0, path="dict", high_watermark=100):
    """The broker's answer to ``req`` with ``parts`` ({tp: dict}) as the
    codec's dict, or (path "c") as the C FetchAnswer of its bytes; a
    partition without its own ``high_watermark`` gets ``high_watermark``."""
    by_topic = {}
    for tp, p in parts.items():
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "error_code": p.get("error_code", 0),
            "high_watermark": p.get("high_watermark", high_watermark), "last_stable_offset": -1,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": p.get("records")})
    key = (lambda t: {"topic_id": TOPIC_IDS[t]}) if req.version >= 13 else (lambda t: {"topic": t})
    body = {"throttle_time_ms": 0, "error_code": error_code, "session_id": session_id,
            "responses": [{**key(t), "partitions": ps} for t, ps in by_topic.items()]}
    if path == "dict":
        return body
    payload = memoryview(messages.encode_response("Fetch", req.version, 1, body))[4:]
    return decode_fetch_response(req.version, payload)[1]


def listed(req):
    """{(topic name, partition): fetch offset} of the partitions in ``req``'s body."""
    names = {v: k for k, v in TOPIC_IDS.items()}
    out = {}
    for t in req.body["topics"]:
        topic = t["topic"] if "topic" in t else names[t["topic_id"]]
        for p in t["partitions"]:
            out[(topic, p["partition"])] = p["fetch_offset"]
    return out


def forgotten(req):
    names = {v: k for k, v in TOPIC_IDS.items()}
    return {(t["topic"] if "topic" in t else names[t["topic_id"]], p)
            for t in req.body["forgotten_topics_data"] for p in t["partitions"]}


def meta(req):
    return req.body["session_id"], req.body["session_epoch"]


@pytest.mark.parametrize("path", ["dict", "c"])
@pytest.mark.parametrize("version", [7, 12, 13, 18])
def test_full_then_incremental_lists_only_what_changed(version, path):
    pos, f = make()
    req = fetch(f, version)
    assert meta(req) == (0, 0)                                # full, asking for a session
    assert listed(req) == {(tp.topic, tp.partition): 0 for tp in (*T, U0)}
    assert forgotten(req) == set()
    f.on_fetch_response(req, answer(req, {T[0]: {"records": batch(0, 3), "high_watermark": 3},
                                          T[1]: {"high_watermark": 50}}, path=path))
    assert f.sessions[1].state == "open"
    # T[0] has buffered records: not fetched, so out of the session (as Java).
    req = fetch(f, version)
    assert meta(req) == (SESSION, 1)
    assert listed(req) == {} and forgotten(req) == {("t", 0)}
    assert set(req.offsets) == {*T[1:], U0}                   # the answer may name any of them
    assert [r.offset for r in f.drain()] == [0, 1, 2]
    # A sparse answer: only U0 (records); T[1] keeps the high watermark it had.
    f.on_fetch_response(req, answer(req, {U0: {"records": batch(0, 2), "high_watermark": 2}}, path=path))
    assert pos.state(T[1]).high_watermark == 50 and pos.position(T[1]) == 0
    req = fetch(f, version)
    assert meta(req) == (SESSION, 2)
    assert listed(req) == {("t", 0): 3} and forgotten(req) == {("u", 0)}   # T[0] back, at 3
    assert f.sessions[1].incremental_sent == 2 and f.sessions[1].full_sent == 1


@pytest.mark.parametrize("version", [7, 12, 13])
def test_removed_partitions_are_forgotten_and_added_ones_listed(version):
    pos, f = make()
    req = fetch(f, version)
    f.on_fetch_response(req, answer(req, {}))
    pos.assign([T[0], T[1], TopicPartition("u", 1)])         # U0, T[2], T[3] revoked; u-1 added
    pos.seek(TopicPartition("u", 1), 5)
    req = fetch(f, version)
    assert meta(req) == (SESSION, 1)
    assert listed(req) == {("u", 1): 5}
    assert forgotten(req) == {("t", 2), ("t", 3), ("u", 0)}
    if version >= 13:                                       # forgotten by the id they were sent with
        assert {t["topic_id"] for t in req.body["forgotten_topics_data"]} == set(TOPIC_IDS.values())
    # A seek and a leader epoch change are changes too.
    f.on_fetch_response(req, answer(req, {}))
    pos.seek(T[0], 9)
    pos.seek(T[1], 0, leader_epoch=4)
    req = fetch(f, version)
    assert listed(req) == {("t", 0): 9, ("t", 1): 0} and forgotten(req) == set()
    assert {p["partition"]: p["current_leader_epoch"] for t in req.body["topics"]
            for p in t["partitions"]} == {0: -1, 1: 4}


@pytest.mark.parametrize("path", ["dict", "c"])
@pytest.mark.parametrize("code,next_id", [(70, 0), (71, SESSION), (106, SESSION)])
def test_a_session_error_makes_the_next_request_full(code, next_id, path):
    """FETCH_SESSION_ID_NOT_FOUND asks for a new session (id 0);
    INVALID_FETCH_SESSION_EPOCH and FETCH_SESSION_TOPIC_ID_ERROR close the
    session for a new one (its id, epoch 0), as Java's handleResponse; the
    application sees no error, and 106 asks for fresh metadata."""
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}, path=path))
    req = fetch(f)
    assert meta(req) == (SESSION, 1)
    f.metadata_refresh_needed = False
    f.on_fetch_response(req, answer(req, {}, session_id=0, error_code=code, path=path))
    assert f.drain() == []                                    # nothing raised
    assert f.metadata_refresh_needed == (code == 106)
    req = fetch(f)
    assert meta(req) == (next_id, 0)
    assert len(listed(req)) == 5 and forgotten(req) == set()
    f.on_fetch_response(req, answer(req, {}, session_id=SESSION + 1, path=path))
    assert meta(fetch(f)) == (SESSION + 1, 1)


def test_another_top_level_error_still_reaches_the_application_and_restarts_the_session():
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}))
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}, error_code=-1))    # UNKNOWN_SERVER_ERROR
    with pytest.raises(Exception, match="UNKNOWN_SERVER_ERROR|unknown"):
        f.drain()
    assert meta(fetch(f)) == (SESSION, 0)


def test_epochs_count_up_and_wrap_to_one():
    assert [next_epoch(e) for e in (0, 1, 41, MAX_EPOCH - 1, MAX_EPOCH)] == [1, 2, 42, MAX_EPOCH, 1]
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    s = FetchSession(1)
    assert s.state == "new" and s.is_full
    assert s.on_response(0, 0, SESSION) and (s.session_id, s.epoch, s.state) == (SESSION, 1, "open")
    s.epoch = MAX_EPOCH
    assert s.on_response(MAX_EPOCH, 0, SESSION) and s.epoch == 1
    assert not s.on_response(1, 71, 0) and (s.session_id, s.epoch, s.state) == (SESSION, 0, "reopening")
    # An answer to a request of an older session epoch changes nothing.
    assert s.on_response(5, 0, 99) and (s.session_id, s.epoch) == (SESSION, 0)


def test_a_failed_request_drops_the_nodes_session():
    """Disconnect or timeout: the next request to that node is full and
    replaces the session (Java's handleError); other nodes keep theirs."""
    pos, f = make()
    leaders = {tp: 1 if tp.partition % 2 else 2 for tp in (*T, U0)}
    reqs = f.fetch_requests(leaders.get, lambda n: 13, TOPIC_IDS.get)
    for r in reqs:
        f.on_fetch_response(r, answer(r, {}, session_id=SESSION + r.node))
    by_node = {r.node: r for r in f.fetch_requests(leaders.get, lambda n: 13, TOPIC_IDS.get)}
    assert {n: meta(r) for n, r in by_node.items()} == {1: (SESSION + 1, 1), 2: (SESSION + 2, 1)}
    f.on_fetch_failure(by_node[1], ConnectionError("cut"))
    f.on_fetch_response(by_node[2], answer(by_node[2], {}, session_id=SESSION + 2))
    by_node = {r.node: r for r in f.fetch_requests(leaders.get, lambda n: 13, TOPIC_IDS.get)}
    assert meta(by_node[1]) == (SESSION + 1, 0) and len(listed(by_node[1])) == 2
    assert meta(by_node[2]) == (SESSION + 2, 2) and listed(by_node[2]) == {}


def test_a_broker_that_keeps_no_session_gets_full_requests():
    """Session id 0 in the answer to a full request: no session (a broker
    without them, or a full cache): every request is full and asks again."""
    pos, f = make()
    for _ in range(3):
        req = fetch(f)
        assert meta(req) == (0, 0) and len(listed(req)) == 5
        f.on_fetch_response(req, answer(req, {}, session_id=0))


def test_the_broker_closing_the_session_makes_the_next_request_full():
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}))
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}, session_id=0))   # incremental answered without a session
    assert meta(fetch(f)) == (0, 0)


@pytest.mark.parametrize("kw,version", [({"use_sessions": False}, 13), ({}, 6), ({}, 4)])
def test_without_sessions_every_request_is_full(kw, version):
    pos, f = make()
    for name, value in kw.items():
        setattr(f, name, value)
    for _ in range(2):
        req = fetch(f, version)
        assert meta(req) == (0, -1) and len(listed(req)) == 5 and req.session_epoch is None
        f.on_fetch_response(req, answer(req, {}, session_id=SESSION if version >= 7 else 0))
    assert f.sessions == {}


def test_a_recreated_topic_restarts_the_session():
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}))
    ids = dict(TOPIC_IDS, u=uuid.UUID(int=99))
    (req,) = f.fetch_requests(lambda tp: 1, lambda n: 13, ids.get)
    assert meta(req) == (SESSION, 0)                          # full, closing the old session
    assert {t["topic_id"] for t in req.body["topics"]} == set(ids.values())
    assert sum(len(t["partitions"]) for t in req.body["topics"]) == 5


def test_close_ends_open_sessions_with_the_final_epoch():
    pos, f = make()
    reqs = f.fetch_requests({tp: 1 if tp.topic == "t" else 2 for tp in (*T, U0)}.get,
                            lambda n: 13, TOPIC_IDS.get)
    for r in reqs:
        f.on_fetch_response(r, answer(r, {}, session_id=SESSION if r.node == 1 else 0))
    (close,) = f.close_session_requests(lambda n: 13)         # node 2 kept no session
    assert (close.node, meta(close), close.body["topics"]) == (1, (SESSION, FINAL_EPOCH), [])
    assert f.sessions == {}


@pytest.mark.parametrize("version", [7, 11, 12, 13, 18])
def test_the_session_requests_written_in_c_are_the_codecs_bytes(version):
    """The C writer against the codec on the incremental requests with
    forgotten topics the session itself makes."""
    runs = []
    for in_c in (True, False):
        pos, f = make(tuple(TopicPartition(t, p) for t in TOPIC_IDS for p in range(30)))
        f.write_in_c = in_c
        frames = []
        req = fetch(f, version)
        for step in range(3):
            frames.append(messages.encode_request("Fetch", version, 5, "c", req.wire_body))
            if in_c:
                assert req.encoded is not None
            f.on_fetch_response(req, answer(req, {TopicPartition("t", step): {"records": batch(0, 1)}}))
            f.drain()
            pos.remove([TopicPartition("u", step)])
            req = fetch(f, version)
        assert forgotten(req)
        runs.append(frames)
    assert runs[0] == runs[1]


def test_a_request_built_but_not_sent_makes_the_next_one_full():
    """The core builds a request and then finds its node gone: the session
    counted the request's partitions as the broker's, so the next request
    lists them all again (else the broker would never be asked for them)."""
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}))
    pos.seek(T[0], 5)
    req = fetch(f)
    assert listed(req) == {("t", 0): 5}
    f.on_fetch_unsent(req)
    req = fetch(f)
    assert meta(req) == (SESSION, 0) and len(listed(req)) == 5


def test_a_topic_without_id_leaves_the_session():
    """Fetch v13+ names topics by id only: a topic whose id the metadata
    lost is not fetched - it is forgotten by the session (by the id it was
    sent with) and metadata is asked for."""
    pos, f = make()
    req = fetch(f)
    f.on_fetch_response(req, answer(req, {}))
    f.metadata_refresh_needed = False
    (req,) = f.fetch_requests(lambda tp: 1, lambda n: 13, {"t": TOPIC_IDS["t"]}.get)
    assert meta(req) == (SESSION, 1) and listed(req) == {}
    assert req.body["forgotten_topics_data"] == [{"topic_id": TOPIC_IDS["u"], "partitions": [0]}]
    assert f.metadata_refresh_needed and set(req.offsets) == set(T)
