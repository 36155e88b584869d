"""The fetcher state machine with scripted Fetch/ListOffsets responses (no network)."""
import uuid

import pytest

from kproto.cluster import TopicPartition
from kproto.consumer.fetcher import Fetcher, RecordTooLargeForFetchError
from kproto.consumer.positions import NoOffsetForPartitionError, OffsetOutOfRangeError, Positions
from kproto.error_codes import TopicAuthorizationFailedError
from kproto.errors import ConfigError, CorruptRecordError
from kproto.records import BatchBuilder, build_control_batch

TP0, TP1, TP2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
LEADERS = {TP0: 1, TP1: 2, TP2: 1}
TOPIC_IDS = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}


def batch(base_offset, n, *, pid=-1, transactional=False, prefix=b"v"):
    b = BatchBuilder("none", 1 << 20, base_offset=base_offset, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                     base_sequence=0 if pid >= 0 else -1, is_transactional=transactional)
    for i in range(n):
        b.append(1000 + base_offset + i, b"k%d" % (base_offset + i), prefix + b"%d" % (base_offset + i))
    return b.build()


def control(offset, pid, commit):
    return build_control_batch(commit, pid, 0, 0, 5000, base_offset=offset)


def drain_cols(f, mode="lists"):
    """The columnar drain as lists: drain_columns(), or drain_buffers()
    turned into Arrow arrays and back (the poll_batch(arrow=True) path)."""
    if mode == "lists":
        return f.drain_columns()
    from kproto.records.arrow import arrow_columns
    return {tp: tuple(a.to_pylist() for a in arrow_columns(cb)) for tp, cb in f.drain_buffers().items()}


def make(auto_offset_reset="earliest", **kw):
    pos = Positions(auto_offset_reset)
    return pos, Fetcher(pos, **kw)


def requests(f, version=12, leaders=LEADERS):
    return f.fetch_requests(leaders.get, lambda node: version, TOPIC_IDS.get)


def response(req, parts, version=12):
    """parts: {tp: dict(records=..., error_code=..., high_watermark=..., aborted=...)}"""
    by_topic = {}
    for tp, p in parts.items():
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "error_code": p.get("error_code", 0),
            "high_watermark": p.get("high_watermark", 100), "last_stable_offset": p.get("lso", -1),
            "log_start_offset": 0, "aborted_transactions": p.get("aborted"),
            "preferred_read_replica": -1, "records": p.get("records")})
    topics = []
    for topic, ps in by_topic.items():
        key = {"topic": topic} if version < 13 else {"topic_id": TOPIC_IDS[topic]}
        topics.append({**key, "partitions": ps})
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": topics}


def test_leaders_by_topic_build_the_same_requests_as_leaders_by_partition():
    """fetch_requests(leaders_of_topic=...) (the core's: one lookup per topic)
    asks the same nodes for the same partitions as leader_of per partition,
    and an unknown leader (-1, or a topic the metadata lacks) still skips the
    partition and asks for a metadata refresh."""
    tps = [TopicPartition("t", p) for p in range(6)] + [TopicPartition("u", 0), TopicPartition("w", 0)]
    by_topic = {"t": {0: 1, 1: 2, 2: 1, 3: -1, 4: 2, 5: 1}, "u": {0: 2}}      # "w" is not in the metadata
    by_partition = {tp: by_topic[tp.topic][tp.partition] for tp in tps
                    if tp.topic in by_topic and by_topic[tp.topic][tp.partition] >= 0}
    found = []
    for kwargs in ({}, {"leaders_of_topic": by_topic.get}):
        pos, f = make()
        pos.assign(tps)
        for tp in tps:
            pos.seek(tp, 7)
        reqs = f.fetch_requests(by_partition.get, lambda node: 12, TOPIC_IDS.get, **kwargs)
        assert f.metadata_refresh_needed
        found.append(sorted((r.node, sorted(r.offsets.items())) for r in reqs))
    assert found[0] == found[1]
    assert found[1] == [(1, [(TopicPartition("t", 0), 7), (TopicPartition("t", 2), 7), (TopicPartition("t", 5), 7)]),
                        (2, [(TopicPartition("t", 1), 7), (TopicPartition("t", 4), 7), (TopicPartition("u", 0), 7)])]


def test_answers_for_partitions_not_asked_for_are_ignored():
    pos, f = make()
    pos.assign([TP0, TP1])
    pos.seek(TP0, 0)
    pos.seek(TP1, 0)
    (req,) = f.fetch_requests({TP0: 1, TP1: 1}.get, lambda n: 12)
    other = TopicPartition("t", 9)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 2)}, other: {"records": batch(0, 3)},
                                            TP2: {"records": batch(0, 4)}}))
    assert {tp: cols[0] for tp, cols in f.drain_columns().items()} == {TP0: [0, 1]}


def test_config_errors():
    with pytest.raises(ConfigError, match="isolation.level"):
        Fetcher(Positions(), isolation_level="committed")
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        Positions("earliest-ish")
    with pytest.raises(ConfigError, match="max.poll.records"):
        Fetcher(Positions(), max_poll_records=0)


def test_one_request_per_leader_and_none_while_in_flight():
    pos, f = make()
    pos.assign([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        pos.seek(tp, 5)
    reqs = requests(f)
    assert sorted(r.node for r in reqs) == [1, 2]
    node1 = [r for r in reqs if r.node == 1][0]
    assert node1.offsets == {TP0: 5, TP2: 5}
    parts = {(t["topic"], p["partition"]): p["fetch_offset"]
             for t in node1.body["topics"] for p in t["partitions"]}
    assert parts == {("t", 0): 5, ("u", 0): 5}
    assert requests(f) == []                       # both nodes have a fetch in flight
    f.on_fetch_failure(node1, ConnectionError("cut"))
    assert [r.node for r in requests(f)] == [1]    # node 1 may fetch again
    assert f.metadata_refresh_needed


def test_skips_paused_unpositioned_and_unknown_leaders():
    pos, f = make()
    pos.assign([TP0, TP1, TP2])
    pos.seek(TP0, 0)
    pos.seek(TP1, 0)
    pos.pause([TP1])
    (req,) = f.fetch_requests({TP0: 1}.get, lambda n: 12)
    assert list(req.offsets) == [TP0]              # TP1 paused, TP2 has no position
    pos.seek(TP2, 0)
    pos.resume([TP1])
    f2 = Fetcher(pos)
    reqs = f2.fetch_requests({TP0: 1}.get, lambda n: 12)
    assert f2.metadata_refresh_needed              # TP1 and TP2 have no known leader
    assert [list(r.offsets) for r in reqs] == [[TP0]]


@pytest.mark.parametrize("path", ["records", "lists", "arrow"])
def test_paused_partitions_keep_fetched_records_until_resumed(path):
    """Records fetched before pause() are not handed out while paused, nor
    dropped or fetched twice: they come after resume() (Java keeps them)."""
    pos, f = make()
    pos.assign([TP0, TP2])
    pos.seek(TP0, 0)
    pos.seek(TP2, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 3)}, TP2: {"records": batch(0, 2)}}))
    pos.pause([TP0])                               # the fetch was already answered

    def drain():
        if path == "records":
            out = {}
            for r in f.drain():
                out.setdefault(TopicPartition(r.topic, r.partition), []).append(r.offset)
            return out
        return {tp: list(cols[0]) for tp, cols in drain_cols(f, path).items()}

    assert drain() == {TP2: [0, 1]}
    assert not f.has_buffered()                    # nothing poll() may return now
    assert pos.state(TP0).position == 0
    assert [list(r.offsets) for r in requests(f)] == [[TP2]]   # TP0's data is still buffered
    assert drain() == {}
    pos.resume([TP0])
    assert f.has_buffered()
    assert drain() == {TP0: [0, 1, 2]}
    assert pos.state(TP0).position == 3


def test_v13_uses_topic_ids_and_needs_them():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 3)
    (req,) = requests(f, version=13)
    assert req.body["topics"][0]["topic_id"] == TOPIC_IDS["t"]
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(3, 2)}}, version=13))
    assert [r.offset for r in f.drain()] == [3, 4]
    pos2, f2 = make()
    pos2.assign([TP0])
    pos2.seek(TP0, 0)
    assert f2.fetch_requests(LEADERS.get, lambda n: 13, lambda t: None) == []
    assert f2.metadata_refresh_needed


def test_drain_respects_max_records_and_moves_positions():
    pos, f = make(max_poll_records=4)
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 3) + batch(3, 3), "high_watermark": 6}}))
    assert requests(f) == []                       # data buffered for TP0: no new fetch for it
    first = f.drain()
    assert [r.offset for r in first] == [0, 1, 2, 3]
    assert (first[0].topic, first[0].partition, first[0].key, first[0].value) == ("t", 0, b"k0", b"v0")
    assert pos.position(TP0) == 4
    assert [r.offset for r in f.drain()] == [4, 5]
    assert pos.position(TP0) == 6 and pos.lag(TP0) == 0
    (req2,) = requests(f)
    assert req2.offsets == {TP0: 6}


def test_records_before_the_position_are_skipped():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 7)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(5, 5)}}))
    assert [r.offset for r in f.drain()] == [7, 8, 9]


@pytest.mark.parametrize("seek_to", [0, 50])
def test_stale_response_after_seek_is_dropped(seek_to):
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 10)
    (req,) = requests(f)
    pos.seek(TP0, seek_to)                  # backwards or forwards while the fetch is in flight
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(10, 3)}}))
    assert f.drain() == []
    assert pos.position(TP0) == seek_to
    assert requests(f)[0].offsets == {TP0: seek_to}


def test_revoked_partition_data_is_dropped():
    pos, f = make()
    pos.assign([TP0, TP2])
    pos.seek(TP0, 0)
    pos.seek(TP2, 0)
    (req,) = [r for r in requests(f) if r.node == 1]
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 2)},
                                            TP2: {"records": batch(0, 2)}}))
    pos.remove([TP0])
    assert {(r.topic, r.partition) for r in f.drain()} == {("u", 0)}


def test_offset_out_of_range_resets_with_list_offsets():
    pos, f = make("latest")
    pos.assign([TP0])
    pos.seek(TP0, 999)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 1}}))
    assert pos.position(TP0) is None
    assert requests(f) == []                       # no position while the reset is pending
    (lo,) = f.reset_requests(LEADERS.get, lambda n: 7)
    assert lo.node == 1
    assert lo.body["topics"][0]["partitions"][0]["timestamp"] == -1     # latest
    assert f.reset_requests(LEADERS.get, lambda n: 7) == []            # one in flight
    f.on_list_offsets_response(lo, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 42, "leader_epoch": 3}]}]})
    assert pos.position(TP0) == 42
    assert requests(f)[0].offsets == {TP0: 42}


def test_offset_out_of_range_with_none_raises_on_drain():
    pos, f = make("none")
    pos.assign([TP0])
    pos.seek(TP0, 10)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 1}}))
    with pytest.raises(OffsetOutOfRangeError, match="t-0"):
        f.drain()
    with pytest.raises(NoOffsetForPartitionError):
        pos.request_reset(TP0)


def test_out_of_range_with_none_is_raised_once_per_offset_and_not_after_a_seek():
    """The partition stays fetchable, so more fetches at the same position
    answer OFFSET_OUT_OF_RANGE before the application reacts: one error,
    naming the partition and offset (Java's offsetOutOfRangePartitions).
    An answer for the old position that lands after a seek is not raised
    (Java drops it when it collects the fetch) - before, the Spark source
    saw the old offset's error after it had moved on."""
    pos, f = make("none")
    pos.assign([TP0])
    pos.seek(TP0, 10)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 1}}))
    (again,) = requests(f)
    assert again.offsets == {TP0: 10}
    f.on_fetch_response(again, response(again, {TP0: {"error_code": 1}}))
    with pytest.raises(OffsetOutOfRangeError, match="offset 10 is out of range for t-0") as e:
        f.drain()
    assert e.value.partitions == {TP0: 10}
    assert f.drain() == []                           # once, not once per answer
    (third,) = requests(f)
    f.on_fetch_response(third, response(third, {TP0: {"error_code": 1}}))
    pos.seek(TP0, 60)                                # the application moves on before it drains
    assert f.drain() == []


def test_a_refused_partitions_error_is_not_raised_once_it_is_unassigned():
    """TOPIC_AUTHORIZATION_FAILED for t-0 answered twice (the partition
    stays fetchable): raised once; if the application assigns something
    else before it drains, nothing is raised (Java drops the answer of a
    partition no longer assigned when it collects it)."""
    pos, f = make("earliest")
    pos.assign([TP0])
    pos.seek(TP0, 0)
    for _ in range(2):
        (req,) = requests(f)
        f.on_fetch_response(req, response(req, {TP0: {"error_code": 29}}))
    with pytest.raises(TopicAuthorizationFailedError, match="t-0"):
        f.drain()
    assert f.drain() == []
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 29}}))
    pos.remove([TP0])
    assert f.drain() == []


def test_seek_to_beginning_uses_earliest():
    pos, f = make("latest")
    pos.assign([TP0])
    pos.request_reset(TP0, "earliest")
    (lo,) = f.reset_requests(LEADERS.get, lambda n: 1)
    assert lo.body["topics"][0]["partitions"][0]["timestamp"] == -2
    f.on_list_offsets_response(lo, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "offset": 0}]}]})
    assert pos.position(TP0) == 0


def test_leadership_errors_ask_for_metadata():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 6}}))   # NOT_LEADER_OR_FOLLOWER
    assert f.metadata_refresh_needed
    assert f.drain() == []
    assert requests(f)[0].offsets == {TP0: 0}


def test_fenced_leader_epoch_fetches_again_without_the_stale_epoch():
    # After a Kafka broker restart the partition's leader epoch grew; the
    # epoch of the committed offset we started from is older for good.
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 20, leader_epoch=0)
    (req,) = requests(f)
    assert req.body["topics"][0]["partitions"][0]["current_leader_epoch"] == 0
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 74}}))   # FENCED_LEADER_EPOCH
    assert f.metadata_refresh_needed and f.drain() == []
    (req,) = requests(f)
    part = req.body["topics"][0]["partitions"][0]
    assert (part["fetch_offset"], part["current_leader_epoch"]) == (20, -1)


def test_authorization_error_surfaces():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"error_code": 29}}))
    with pytest.raises(TopicAuthorizationFailedError):
        f.drain()


def test_corrupt_batch_is_an_error_not_data():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    raw = bytearray(batch(0, 3))
    raw[-1] ^= 0xFF
    f.on_fetch_response(req, response(req, {TP0: {"records": bytes(raw)}}))
    with pytest.raises(CorruptRecordError):
        f.drain()


def test_partial_batch_only_means_record_too_large():
    pos, f = make(max_partition_fetch_bytes=64)
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 10)[:64]}}))
    with pytest.raises(RecordTooLargeForFetchError, match="max.partition.fetch.bytes=64"):
        f.drain()


def _txn_log():
    """pid 7 commits offsets 0-2, pid 8 aborts 3-4, pid 7 commits 6-7 after pid 8's
    abort marker at 5, then pid 8 aborts again at 9 (marker 10)."""
    return (batch(0, 3, pid=7, transactional=True, prefix=b"c")
            + batch(3, 2, pid=8, transactional=True, prefix=b"a")
            + control(5, 8, commit=False)
            + batch(6, 2, pid=7, transactional=True, prefix=b"c")
            + control(8, 7, commit=True)
            + batch(9, 1, pid=8, transactional=True, prefix=b"a")
            + control(10, 8, commit=False)
            + batch(11, 1, prefix=b"n"))


@pytest.mark.parametrize("columnar", [False, "lists", "arrow"])
def test_read_committed_skips_aborted_and_control(columnar):
    pos, f = make(isolation_level="read_committed")
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    assert req.body["isolation_level"] == 1
    aborted = [{"producer_id": 8, "first_offset": 3}, {"producer_id": 8, "first_offset": 9}]
    f.on_fetch_response(req, response(req, {TP0: {"records": _txn_log(), "aborted": aborted}}))
    if columnar:
        values = drain_cols(f, columnar)[TP0][3]
    else:
        values = [r.value for r in f.drain()]
    assert values == [b"c0", b"c1", b"c2", b"c6", b"c7", b"n11"]
    assert pos.position(TP0) == 12


def test_read_uncommitted_sees_aborted_data_but_never_control():
    pos, f = make()
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": _txn_log()}}))
    assert [r.offset for r in f.drain(100)] == [0, 1, 2, 3, 4, 6, 7, 9, 11]


@pytest.mark.parametrize("mode", ["lists", "arrow"])
def test_drain_columns_matches_drain_with_limits(mode):
    def run(columnar, limit):
        pos, f = make(max_poll_records=limit)
        pos.assign([TP0, TP2])
        pos.seek(TP0, 2)
        pos.seek(TP2, 0)
        (req,) = [r for r in requests(f) if r.node == 1]
        f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 7) + batch(7, 5)},
                                                TP2: {"records": batch(0, 4)}}))
        got = []
        for _ in range(20):
            if columnar:
                for tp, (offs, _ts, keys, vals) in drain_cols(f, mode).items():
                    got += [(tp, o, k, v) for o, k, v in zip(offs, keys, vals)]
            else:
                got += [((r.topic, r.partition), r.offset, r.key, r.value) for r in f.drain()]
        return got, pos.position(TP0), pos.position(TP2)
    for limit in (1, 3, 5, 100):
        assert run(True, limit) == run(False, limit)
        assert len(run(True, limit)[0]) == 10 + 4


@pytest.mark.parametrize("mode", ["lists", "arrow"])
def test_mixing_drain_and_drain_columns_loses_nothing(mode):
    pos, f = make(max_poll_records=3)
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": batch(0, 5) + batch(5, 5)}}))
    offsets = [r.offset for r in f.drain()]             # stops inside the first batch
    for i in range(8):
        if i % 2:
            offsets += [r.offset for r in f.drain(2)]     # and back to records mid-batch
        cols = drain_cols(f, mode)
        if TP0 in cols:
            offsets += cols[TP0][0]
    assert offsets == list(range(10))
    assert pos.position(TP0) == 10


@pytest.mark.parametrize("records, limit, end", [
    (batch(0, 4), 4, 4),                                # the limit ends on the fetch's last record
    (batch(0, 2) + batch(2, 2), 2, 4),                  # ... on a batch's last, one more to read
    (batch(0, 4, pid=7, transactional=True) + control(4, 7, commit=True), 4, 5),   # a marker after it
])
def test_the_drain_that_hands_out_the_last_record_lets_the_partition_fetch_again(records, limit, end):
    # Issue 27: a drain that stopped at max.poll.records on the buffered
    # fetch's last record left it buffered (its record iterator not yet seen
    # to end), so no Fetch went out until the next poll() found it empty -
    # and nothing then asked the driver for a round: bench_latency's consumer
    # waited for the network thread's next timer, 15-30 s.
    pos, f = make(max_poll_records=limit)
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": records}}))
    drained = []
    while True:
        got = f.drain()
        assert got, "a drain returned nothing while the fetch was still buffered"
        drained += [r.offset for r in got]
        if not f.has_buffered():
            break
    assert drained == [0, 1, 2, 3]
    (again,) = requests(f)                                 # the next Fetch, at once
    assert again.offsets == {TP0: end} and pos.position(TP0) == end


@pytest.mark.parametrize("drain", ["drain_columns", "_drain_columns_py", "drain_buffers"])
@pytest.mark.parametrize("records, limit, end", [
    (batch(0, 4), 4, 4),
    (batch(0, 2) + batch(2, 2), 2, 4),
    (batch(0, 4, pid=7, transactional=True) + control(4, 7, commit=True), 4, 5),   # a marker after it
])
def test_the_columnar_drain_that_hands_out_the_last_record_lets_the_partition_fetch_again(drain, records, limit, end):
    # As above for poll_batch()'s drains (the C walk, its Python twin, the
    # Arrow buffers): a transaction's commit marker after the last record the
    # limit took kept the fetch buffered, and the next poll_batch() drained
    # nothing - asking for no round, so no Fetch until the driver's timer.
    pos, f = make(max_poll_records=limit)
    pos.assign([TP0])
    pos.seek(TP0, 0)
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": records}}))
    taken = 0
    while f.has_buffered():
        got = getattr(f, drain)()
        n = sum(len(v) if drain == "drain_buffers" else len(v[0]) for v in got.values())
        assert n, "a drain returned nothing while the fetch was still buffered"
        taken += n
    assert taken == 4
    (again,) = requests(f)                                 # the next Fetch, at once
    assert again.offsets == {TP0: end} and pos.position(TP0) == end


def compacted(base_offset, n, removed):
    """A batch of ``n`` records whose ``removed`` last records compaction
    took out: its last offset stays where it was (Kafka keeps a batch's
    offset range), so the records end before it."""
    import struct
    import crc32c
    raw = bytearray(batch(base_offset, n))
    struct.pack_into(">i", raw, 23, n - 1 + removed)              # lastOffsetDelta
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize("drain", ["drain", "drain_columns", "drain_buffers"])
def test_an_empty_drain_that_drops_a_used_up_fetch_asks_the_driver_for_a_round(drain):
    # A compacted batch whose last records are gone, the limit ending on its
    # last record: the fetch stays buffered (the drain cannot tell the batch
    # holds no more), and the next drain hands out nothing but drops it.
    # Only a drain that hands out records makes the driver run a round, so
    # the core says so (fetch_freed): without it the partition's next Fetch
    # waited for the driver's next timer.
    from kproto.consumer.core import ConsumerCore
    core = ConsumerCore(bootstrap_servers="h:1", max_poll_records=4)
    core.assign([TP0], 0)
    core.seek(TP0, 0)
    f = core.fetcher
    (req,) = requests(f)
    f.on_fetch_response(req, response(req, {TP0: {"records": compacted(0, 4, removed=2)}}))
    first = getattr(core, drain)()
    assert first and not core.fetch_freed
    if drain == "drain":
        assert f.has_buffered()                 # the record iterator has not seen the batch end
        second = core.drain()
        assert not second and not f.has_buffered()
        assert core.fetch_freed, "an empty drain dropped a fetch without asking for a round"
    else:
        assert not f.has_buffered()             # the columnar walk knows the batch ended
    (again,) = requests(f)
    assert again.offsets == {TP0: 6}


_REQUEST_BYTES = """
import sys, uuid
from kproto.cluster import TopicPartition
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions
pos = Positions("earliest")
pos.assign([TopicPartition(t, p) for p in (7, 0, 5, 2, 9, 1) for t in ("t", "u")])
for i, tp in enumerate(pos.assigned()):
    pos.seek(tp, 10 * i)
req, = Fetcher(pos).fetch_requests(lambda tp: 1, lambda node: 12, {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}.get)
print(bytes(req.encoded.data).hex())
"""


def test_the_assignment_keeps_the_given_order_and_requests_do_not_depend_on_the_hash_seed():
    """A Fetch request's bytes follow the assignment's order, which is the
    order the partitions were given in: before, ``assign`` went through a
    set, so the order (and a request's bytes) changed with the process's
    hash seed - one CI run in six failed a test comparing partition order."""
    import os
    import subprocess
    import sys
    pos = Positions("earliest")
    given = [TopicPartition("t", p) for p in (5, 0, 3, 1, 4, 2)] + [TP2, TopicPartition("t", 5)]
    pos.assign(given)
    assert pos.assigned() == given[:-1]                  # the duplicate dropped, the order kept
    pos.assign([TP2, TopicPartition("t", 3)])
    assert pos.assigned() == [TP2, TopicPartition("t", 3)]
    outputs = set()
    for seed in ("0", "1", "5", "7"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", _REQUEST_BYTES], env=env, capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1, "the Fetch request's bytes changed with PYTHONHASHSEED"
