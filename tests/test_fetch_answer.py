"""The consumer's compiled Fetch answer path (kproto.consumer._fetch) against
its reference twin (the generic codec's dict + Fetcher.on_fetch_response), on
the same bytes: every Fetch version the decoder reads, and the partition cases
that take other branches (errors, aborted transactions, diverging epochs,
preferred read replicas, KIP-951 leader hints, truncated and corrupt batches,
empty and null records, stale and unknown partitions, unknown tagged fields)."""
import uuid

import pytest

from kproto import messages
from kproto.cluster import TopicPartition
from kproto.consumer._fetch import FetchAnswer, decode_fetch_response
from kproto.consumer.fetcher import Fetcher
from kproto.consumer.positions import Positions
from kproto.errors import DecodeError
from kproto.records import BatchBuilder, build_control_batch

VERSIONS = [4, 5, 7, 11, 12, 13, 15, 16, 18]
TOPIC_IDS = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2), "gone": uuid.UUID(int=3)}
TPS = [TopicPartition("t", p) for p in range(12)] + [TopicPartition("u", 0), TopicPartition("u", 1)]
POSITION = 10          # every partition is fetched from offset 10


def _batch(base, n, pid=-1, transactional=False):
    b = BatchBuilder("none", 1 << 20, base_offset=base, producer_id=pid,
                     producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                     is_transactional=transactional)
    for i in range(n):
        b.append(1000 + base + i, b"k%d" % (base + i), b"v%d" % (base + i))
    return b.build()


def _partitions(version):
    """{(topic, partition): the partition's answer}: one of each case."""
    flexible = version >= 12
    txn = (_batch(10, 3, pid=7, transactional=True) + build_control_batch(False, 7, 0, 0, 5000, base_offset=13)
           + _batch(14, 2, pid=8, transactional=True))
    corrupt = bytearray(_batch(10, 2))
    corrupt[-1] ^= 0xFF
    parts = {
        ("t", 0): dict(records=_batch(10, 5), high_watermark=15, last_stable_offset=15, log_start_offset=3),
        ("t", 1): dict(records=None, high_watermark=10),                                # empty: null
        ("t", 2): dict(records=b"", high_watermark=10, log_start_offset=-1),            # empty: no bytes
        ("t", 3): dict(records=txn, high_watermark=16, last_stable_offset=14,
                       aborted_transactions=[{"producer_id": 7, "first_offset": 10}]),
        ("t", 4): dict(error_code=6, records=None),                                     # NOT_LEADER_OR_FOLLOWER
        ("t", 5): dict(error_code=74, records=None),                                    # FENCED_LEADER_EPOCH
        ("t", 6): dict(error_code=1, records=None),                                     # OFFSET_OUT_OF_RANGE
        ("t", 7): dict(error_code=29, records=None),                                    # TOPIC_AUTHORIZATION_FAILED
        ("t", 8): dict(records=_batch(10, 4)[:30], high_watermark=14),                  # truncated at max bytes
        ("t", 9): dict(records=bytes(corrupt), high_watermark=12),
        ("t", 10): dict(records=_batch(4, 10), high_watermark=14, aborted_transactions=[]),   # starts before 10
        ("t", 11): dict(records=_batch(10, 2), high_watermark=12),                     # stale: a seek follows
        ("t", 99): dict(records=_batch(10, 1)),                                         # not asked for
        ("u", 0): dict(records=_batch(10, 1), high_watermark=11, preferred_read_replica=3 if version >= 11 else -1),
        ("u", 1): dict(records=None, high_watermark=20),
        ("gone", 0): dict(records=_batch(10, 1)),                                       # a topic not asked for
    }
    if flexible:
        parts[("t", 4)]["current_leader"] = {"leader_id": 2, "leader_epoch": 9}
        parts[("t", 5)]["current_leader"] = {"leader_id": 3, "leader_epoch": 11}
        parts[("t", 0)]["diverging_epoch"] = {"epoch": 4, "end_offset": 12}
        parts[("u", 1)]["snapshot_id"] = {"end_offset": 30, "epoch": 2}
    return parts


def _body(version, parts, error_code=0):
    topics = {}
    for (topic, partition), p in parts.items():
        topics.setdefault(topic, []).append(dict(p, partition_index=partition))
    responses = [({"topic": t} if version < 13 else {"topic_id": TOPIC_IDS[t]}) | {"partitions": ps}
                 for t, ps in topics.items()]
    body = {"throttle_time_ms": 5, "error_code": error_code, "session_id": 0, "responses": responses}
    if version >= 16:
        body["node_endpoints"] = [{"node_id": 2, "host": "b2", "port": 9092, "rack": None},
                                  {"node_id": 3, "host": "b3", "port": 9093, "rack": "r1"}]
    return body


def _payload(version, body, cid=42):
    return memoryview(messages.encode_response("Fetch", version, cid, body))[4:]


def _plain(value):
    """memoryviews as bytes, for comparing decoded values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return bytes(value) if isinstance(value, memoryview) else value


@pytest.mark.parametrize("version", VERSIONS)
def test_the_answer_decodes_as_the_codec_does(version):
    payload = _payload(version, _body(version, _partitions(version)))
    cid, answer = decode_fetch_response(version, payload)
    ref_cid, ref = messages.decode_response("Fetch", version, payload)
    assert isinstance(answer, FetchAnswer) and (cid, answer.version) == (ref_cid, version) == (42, version)
    assert len(answer) == sum(len(t["partitions"]) for t in ref["responses"]) == 16
    assert (answer.throttle_time_ms, answer.error_code) == (5, 0)
    assert _plain(answer.as_dict()) == _plain(ref)


@pytest.mark.parametrize("version", [11, 12, 16, 18])
def test_unknown_tagged_fields_are_skipped_as_the_codec_does(version):
    """A newer broker's tagged fields (a tag this version does not define,
    at the top, topic and partition level) are skipped by both."""
    from kproto._wire import Writer
    body = _body(version, {("t", 0): dict(records=_batch(10, 1), high_watermark=11)})
    payload = bytes(_payload(version, body))
    if version < 12:
        pytest.raises(DecodeError, decode_fetch_response, version, payload + b"\x00")
        pytest.raises(DecodeError, messages.decode_response, "Fetch", version, payload + b"\x00")
        return
    # Without node_endpoints, the partition's, the topic's and the body's
    # tagged sections are the last three bytes, each empty (a zero count).
    body.pop("node_endpoints", None)
    payload = bytes(_payload(version, body))
    assert payload[-3:] == b"\x00\x00\x00"
    w = Writer()
    w.write_uvarint(1); w.write_uvarint(7); w.write_uvarint(2); w.write_raw(b"\x01\x02")
    extra = w.getvalue()
    patched = payload[:-3] + extra + extra + extra
    _, answer = decode_fetch_response(version, patched)
    _, ref = messages.decode_response("Fetch", version, patched)
    assert _plain(answer.as_dict()) == _plain(ref)


@pytest.mark.parametrize("version", [5, 12, 16])
def test_malformed_answers_are_refused_by_both(version):
    """Every truncation and a trailing byte: DecodeError from both decoders."""
    payload = bytes(_payload(version, _body(version, _partitions(version))))
    for cut in list(range(0, 60)) + list(range(60, len(payload), 7)):
        with pytest.raises(DecodeError):
            messages.decode_response("Fetch", version, payload[:cut])
        with pytest.raises(DecodeError):
            decode_fetch_response(version, payload[:cut])
    for bad in (payload + b"\x00",):
        pytest.raises(DecodeError, messages.decode_response, "Fetch", version, bad)
        pytest.raises(DecodeError, decode_fetch_response, version, bad)
    with pytest.raises(DecodeError, match="v3"):
        decode_fetch_response(3, payload)


def _fetcher(isolation, auto_offset_reset):
    pos = Positions(auto_offset_reset)
    f = Fetcher(pos, isolation_level=isolation)
    pos.assign(TPS)
    for tp in TPS:
        pos.seek(tp, POSITION)
    hints = []

    def hint(tp, answer, endpoints):
        hints.append((tp, _plain(answer), _plain(endpoints)))
        return tp.partition == 4            # the hint for t-4 is taken, t-5's is not
    f.leader_hint = hint
    return pos, f, hints


def _state(pos, f, hints):
    states = {tp: (st.position, st.leader_epoch, st.high_watermark, st.last_stable_offset,
                   st.log_start_offset, st.reset_to) for tp, st in pos.states.items()}
    buffered = [(b.tp, [(x.base_offset, x.next_offset) for x in b.batches], b.aborted) for b in f._buffered]
    errors = [(type(e), str(e), getattr(e, "_fetched_at", None)) for e in f._errors]
    return states, buffered, errors, f.metadata_refresh_needed, hints, sorted(pos.awaiting_reset())


def _drained(f):
    out = []
    while True:
        try:
            got = f.drain_columns()
        except Exception as exc:                  # noqa: BLE001 - the pending errors, in order
            out.append((type(exc), str(exc)))
            continue
        if not got:
            return out
        out.append(got)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("auto_offset_reset", ["earliest", "none"])
@pytest.mark.parametrize("version", VERSIONS)
def test_both_paths_leave_the_fetcher_in_the_same_state(version, isolation, auto_offset_reset):
    payload = _payload(version, _body(version, _partitions(version)))
    outcomes = []
    for compiled in (False, True):
        pos, f, hints = _fetcher(isolation, auto_offset_reset)
        req, = f.fetch_requests(lambda tp: 1, lambda node: version, TOPIC_IDS.get)
        pos.seek(TopicPartition("t", 11), 0)        # its answer is stale now
        if compiled:
            body = decode_fetch_response(version, payload)[1]
        else:
            body = messages.decode_response("Fetch", version, payload)[1]
        f.on_fetch_response(req, body)
        outcomes.append((_state(pos, f, hints), _drained(f), _state(pos, f, hints)))
    ref, fast = outcomes
    assert fast == ref
    states, buffered, errors, refresh, hints, resets = ref[0]
    # the cases did take their branches
    assert [b[0].partition for b in buffered] == [0, 3, 10, 0]
    assert states[TopicPartition("t", 0)][2:5] == (15, 15, 3 if version >= 5 else None)
    assert refresh                                  # t-5 (the hint not taken)
    assert [h[0].partition for h in hints] == [4, 5, 6, 7]       # every error partition
    if version >= 12:
        assert hints[0][1]["current_leader"] == {"leader_id": 2, "leader_epoch": 9}
    assert states[TopicPartition("t", 5)][1] == -1
    kinds = {e[2][0].partition for e in errors}
    assert kinds == ({7, 8, 9} if auto_offset_reset == "earliest" else {6, 7, 8, 9})
    assert resets == ([(TopicPartition("t", 6), "earliest")] if auto_offset_reset == "earliest" else [])
    assert any(isinstance(d, dict) and TopicPartition("t", 3) in d for d in ref[1])


@pytest.mark.parametrize("version", [7, 12, 13])
def test_a_top_level_error_fails_the_answer_on_both_paths(version):
    payload = _payload(version, _body(version, _partitions(version), error_code=58))
    outcomes = []
    for compiled in (False, True):
        pos, f, hints = _fetcher("read_uncommitted", "earliest")
        req, = f.fetch_requests(lambda tp: 1, lambda node: version, TOPIC_IDS.get)
        decode = decode_fetch_response if compiled else (lambda v, p: messages.decode_response("Fetch", v, p))
        f.on_fetch_response(req, decode(version, payload)[1])
        outcomes.append(_state(pos, f, hints))
    assert outcomes[0] == outcomes[1]
    states, buffered, errors = outcomes[0][:3]
    assert not buffered and len(errors) == 1 and errors[0][2] is None


# -- the columnar drain: kproto.consumer._fetch.drain_columns vs Fetcher._drain_columns_py

def _legacy(base, n):
    from kproto.records.legacy import LegacyBatchBuilder
    b = LegacyBatchBuilder(magic=1, base_offset=base)
    for i in range(n):
        b.append(2000 + i, b"lk%d" % i, b"lv%d" % i)
    return b.build()


def _drain_logs():
    """{partition of "t": its log from offset 10}: transactions (committed,
    aborted, control markers), batches before the position, a legacy
    message set, an empty-looking compacted gap."""
    txn = (_batch(10, 3, pid=7, transactional=True) + _batch(13, 2, pid=8, transactional=True)
           + build_control_batch(False, 8, 0, 0, 5000, base_offset=15)
           + _batch(16, 2, pid=7, transactional=True) + build_control_batch(True, 7, 0, 0, 5000, base_offset=18)
           + _batch(19, 4))
    return {0: _batch(10, 7) + _batch(17, 5), 1: txn, 2: _batch(4, 9), 3: _legacy(10, 6),
            4: _batch(10, 1), 5: _batch(12, 3), 6: _batch(10, 2) + _batch(30, 2)}


def _filled_fetcher(isolation):
    pos = Positions("earliest")
    f = Fetcher(pos, isolation_level=isolation)
    tps = [TopicPartition("t", p) for p in range(7)]
    pos.assign(tps)
    for tp in tps:
        pos.seek(tp, POSITION)
    req, = f.fetch_requests(lambda tp: 1, lambda node: 12, TOPIC_IDS.get)
    logs = _drain_logs()
    aborted = [{"producer_id": 8, "first_offset": 13}]
    body = _body(12, {("t", p): dict(records=r, high_watermark=40, last_stable_offset=40,
                                     aborted_transactions=aborted if p == 1 else None)
                      for p, r in logs.items()})
    body.pop("node_endpoints", None)
    f.on_fetch_response(req, decode_fetch_response(12, _payload(12, body))[1])
    return pos, f


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("limits", [[500], [1] * 40, [3, 1, 7, 2, 500], [4, "drain", 5, "drain", 500]])
def test_the_compiled_columnar_drain_walks_as_its_reference(isolation, limits):
    """Limits that stop inside batches, record-by-record drains between
    (a batch half taken by drain() is resumed), a partition paused and one
    revoked half-way: the same columns, positions and leftovers."""
    outcomes = []
    for compiled in (False, True):
        pos, f = _filled_fetcher(isolation)
        drain = f.drain_columns if compiled else f._drain_columns_py
        got = []
        for i, limit in enumerate(limits * 3):
            if i == 2:
                pos.pause([TopicPartition("t", 5)])
                pos.remove([TopicPartition("t", 6)])
            if i == 5:
                pos.resume([TopicPartition("t", 5)])
            if limit == "drain":
                got.append([(r.topic, r.partition, r.offset, r.key, r.value) for r in f.drain(2)])
            else:
                got.append(drain(limit))
        positions = {tp: st.position for tp, st in pos.states.items()}
        outcomes.append((got, positions, [(b.tp, b.next_batch) for b in f._buffered]))
    assert outcomes[0] == outcomes[1]
    got, positions, left = outcomes[0]
    offsets = sorted((tp.partition, o) for d in got if isinstance(d, dict) for tp, c in d.items() for o in c[0])
    assert (3, 15) in offsets and (2, 12) in offsets and (2, 9) not in offsets and (5, 12) in offsets
    assert ((1, 13) in offsets) == (isolation == "read_uncommitted")
    assert positions[TopicPartition("t", 0)] == 22 and not left
