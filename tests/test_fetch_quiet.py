"""The quiet fetch path (``Fetcher.quiet_path``): with a fetch session open
and one node leading every assigned partition, a round re-uses the last
walk's plan instead of walking every partition again. Against the walk
(``quiet_path = False``), without a network: the same requests byte for
byte and the same state after every round, through random rounds (answers
with and without records, drains, seeks, resets, pauses, revocations and
additions, leaders lost and found, session errors, failed requests, a
Fetch version changing); and anything the plan depends on - a position
moved by a seek, a new partition, a leader change, buffered data, another
version, a session error - sends the next round through the walk."""
import pytest

from kproto.cluster import TopicPartition
from kproto.consumer._fetch_request import fetch_request_body
from test_fetch_plan import SESSION, Side, Twin, encode_answer
from test_fetch_session import TOPIC_IDS, batch


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 18])
@pytest.mark.parametrize("shape", [("t",), ("t", "u")])
def test_quiet_path_sends_what_the_walk_sends(version, shape):
    partitions = 1 if len(shape) == 2 else 2
    requests = quiet = 0
    for seed in range(6):
        twin = Twin(seed * 100 + version, version, topics=shape, partitions=partitions, nodes=1,
                    incremental=False)
        twin.run(300)                          # every round: same bytes, same state (Twin.fetch, Twin.check)
        assert twin.walk.f.quiet_requests == 0
        requests += twin.requests
        quiet += twin.plan.f.quiet_requests
    assert requests > 300
    if version >= 7:
        assert quiet > 60                      # the quiet path was taken, and left, many times
    else:
        assert quiet == 0                      # no session below v7: always the walk


def fetch(side, version=13, leaders=None, leaders_version=0):
    leaders = leaders or {"t": {0: 1, 1: 1}}
    return side.f.fetch_requests(lambda tp: 1, lambda node: version, TOPIC_IDS.get, leaders.get, leaders_version)


def answered(side, req, records=1):
    parts = {}
    if records:
        parts = {tp: {"records": batch(offset, records), "high_watermark": offset + records}
                 for tp, offset in req.offsets.items()}
    side.f.on_fetch_response(req, encode_answer(req, parts, SESSION, 0, True))


@pytest.mark.parametrize("version", [7, 12, 13, 18])
def test_a_quiet_consumer_takes_the_quiet_path(version):
    """One partition, a record per answer, drained before the next round:
    after the full request and the first incremental one, every request
    comes from the quiet path, listing the partition at its new position."""
    tp = TopicPartition("t", 0)
    side = Side([tp], False)
    for i in range(30):
        req, = fetch(side, version)
        assert req.encoded.data == fetch_request_body(version, req.body)
        assert req.session_epoch == i
        listed = [p["fetch_offset"] for t in req.body["topics"] for p in t["partitions"]]
        assert listed == ([i] if i else [0])
        answered(side, req)
        side.f.drain_columns(10)
    assert side.f.quiet_requests == 29
    assert side.pos.position(tp) == 30


def quiet_side():
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    side = Side(tps, False)
    for _ in range(3):
        req, = fetch(side)
        answered(side, req)
        side.f.drain_columns(10)
    assert side.f.quiet_requests == 2
    return side, tps


def test_a_seek_leaves_the_quiet_path():
    side, tps = quiet_side()
    side.pos.seek(tps[1], 100)
    req, = fetch(side)
    assert side.f.quiet_requests == 2                     # walked
    assert req.offsets[tps[1]] == 100
    answered(side, req, 0)
    fetch(side)
    assert side.f.quiet_requests == 3                     # and back on it


def test_a_new_partition_leaves_the_quiet_path():
    side, tps = quiet_side()
    new = TopicPartition("t", 2)
    side.pos.add([new])
    side.pos.seek(new, 5)
    req, = fetch(side, leaders={"t": {0: 1, 1: 1, 2: 1}})
    assert side.f.quiet_requests == 2
    assert req.offsets[new] == 5 and len(req.offsets) == 3
    # (0 and 1 listed too: the drain moved them since the last request)
    assert [p["partition"] for t in req.body["topics"] for p in t["partitions"]] == [0, 1, 2]


def test_a_paused_partition_leaves_the_quiet_path():
    side, tps = quiet_side()
    side.pos.pause([tps[0]])
    req, = fetch(side)
    assert side.f.quiet_requests == 2
    assert list(req.offsets) == [tps[1]]
    assert req.body["forgotten_topics_data"]              # the paused partition is forgotten


def test_a_leader_change_leaves_the_quiet_path():
    side, tps = quiet_side()
    assert fetch(side, leaders={"t": {0: 1, 1: 2}}, leaders_version=1)      # one request per node
    assert side.f.quiet_requests == 2


def test_buffered_data_leaves_the_quiet_path():
    side, tps = quiet_side()
    req, = fetch(side)
    answered(side, req)                                    # not drained: both partitions buffered
    assert fetch(side) == []
    assert side.f.quiet_requests == 3                      # (the one before the answer)
    side.f.drain_columns(1)                                # one of them drained
    req, = fetch(side)
    assert side.f.quiet_requests == 3 and len(req.offsets) == 1


def test_another_version_or_a_session_error_leaves_the_quiet_path():
    side, tps = quiet_side()
    req, = fetch(side, version=12)
    assert side.f.quiet_requests == 2 and req.version == 12
    side.f.on_fetch_response(req, encode_answer(req, {}, SESSION, 71, True))   # INVALID_FETCH_SESSION_EPOCH
    req, = fetch(side, version=12)
    assert side.f.quiet_requests == 2 and req.session_epoch == 0               # a full request, walked


def test_in_flight_and_not_ready_send_nothing_as_the_walk():
    side, tps = quiet_side()
    req, = fetch(side)
    assert side.f.quiet_requests == 3
    assert fetch(side) == []                               # in flight
    answered(side, req, 0)
    assert side.f.fetch_requests(lambda tp: 1, lambda node: None, TOPIC_IDS.get, {"t": {0: 1, 1: 1}}.get, 0) == []
    req, = fetch(side)
    assert side.f.quiet_requests == 4
