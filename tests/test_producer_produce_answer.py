"""The Produce answer read in C (kproto/producer/_produce_answer.pyx) against
the generic codec: every version the producer speaks, answers encoded by the
generic encoder (as a broker writes them), and every answer it must leave to
the generic path (errors, leader hints, record errors, a partition missing or
answered twice, an unknown topic id, trailing or missing bytes)."""
import uuid

import pytest

from kproto import messages
from kproto.producer._produce_answer import ACKNOWLEDGED, read_acknowledged

TOPIC_IDS = {"a": uuid.UUID(int=0xA), "b": uuid.UUID(int=0xB)}


class Batch:
    """Stands for a ProducerBatch: the reader only matches and returns it."""

    def __init__(self, topic, partition):
        self.topic, self.partition = topic, partition


def _request(parts=(("a", 0), ("a", 3), ("b", 1))):
    by_tp = {tp: Batch(*tp) for tp in parts}
    return by_tp


def _answer(version, by_tp, *, codes=None, throttle=7, extra=None, drop=None, twice=None, order=None):
    """The payload (no size prefix) a broker writes for ``by_tp``, built by the generic encoder."""
    codes = codes or {}
    topics = {}
    tps = list(order or by_tp)
    if drop is not None:
        tps.remove(drop)
    if twice is not None:
        tps.append(twice)
    for t, p in tps:
        part = {"index": p, "error_code": codes.get((t, p), 0), "base_offset": 100 * p + len(t),
                "log_append_time_ms": 5000 + p, "log_start_offset": 0}
        part.update((extra or {}).get((t, p), {}))
        topics.setdefault(t, []).append(part)
    responses = [{("topic_id" if version >= 13 else "name"): (TOPIC_IDS[t] if version >= 13 else t),
                  "partition_responses": parts} for t, parts in topics.items()]
    frame = messages.encode_response("Produce", version, 42, {"responses": responses, "throttle_time_ms": throttle})
    return frame[4:]


def _by_id(version):
    return {v.bytes: k for k, v in TOPIC_IDS.items()} if version >= 13 else None   # ids by their 16 bytes


@pytest.mark.parametrize("version", range(3, 14))
def test_an_answer_acknowledging_every_batch_is_read_as_the_generic_codec_reads_it(version):
    by_tp = _request()
    payload = _answer(version, by_tp, codes={("a", 3): 46}, order=[("b", 1), ("a", 0), ("a", 3)])
    cid, body = read_acknowledged(by_tp, _by_id(version), version, payload)
    _, generic = messages.decode_response("Produce", version, payload)
    assert cid == 42 and body["throttle_time_ms"] == generic["throttle_time_ms"] == 7
    expected = []
    for t in generic["responses"]:
        name = t["name"] if version < 13 else _by_id(version)[t["topic_id"].bytes]
        for p in t["partition_responses"]:
            assert p["error_code"] in (0, 46)
            expected += [by_tp[(name, p["index"])], p["base_offset"], p.get("log_append_time_ms", -1)]
    assert body[ACKNOWLEDGED] == expected
    # in the answer's order, each batch once, with its own offsets
    assert [b.partition for b in body[ACKNOWLEDGED][::3]] == [1, 0, 3]
    assert body[ACKNOWLEDGED][1::3] == [101, 1, 301]
    assert body[ACKNOWLEDGED][2::3] == ([5001, 5000, 5003] if version >= 2 else [-1, -1, -1])


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_answers_it_leaves_to_the_generic_path(version):
    by_tp = _request()
    by_id = _by_id(version)
    leave = {
        "an error": _answer(version, by_tp, codes={("a", 3): 6}),
        "a partition missing": _answer(version, by_tp, drop=("b", 1)),
        "a partition answered twice": _answer(version, by_tp, drop=("b", 1), twice=("a", 0)),
        "a partition not asked for": _answer(version, {**by_tp, ("b", 9): None}),
        "trailing bytes": _answer(version, by_tp) + b"\0",
        "missing bytes": _answer(version, by_tp)[:-3],
        "nothing": b"",
    }
    if version >= 8:
        leave["record errors"] = _answer(version, by_tp, extra={("a", 0): {"record_errors": [
            {"batch_index": 0, "batch_index_error_message": "bad"}]}})
        leave["an error message"] = _answer(version, by_tp, extra={("a", 0): {"error_message": "hm"}})
    if version >= 10:
        leave["a leader hint"] = _answer(version, by_tp, extra={("a", 0): {
            "current_leader": {"leader_id": 2, "leader_epoch": 5}}})
    for why, payload in leave.items():
        assert read_acknowledged(by_tp, by_id, version, payload) is None, why
    if version >= 13:
        assert read_acknowledged(by_tp, {}, version, _answer(version, by_tp)) is None, "an unknown topic id"
        assert read_acknowledged(by_tp, None, version, _answer(version, by_tp)) is None, "no topic ids"
    # and the generic decoder still reads the well-formed ones
    messages.decode_response("Produce", version, leave["an error"])
