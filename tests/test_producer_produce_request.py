"""The Produce request written in C (kproto/producer/_produce_request.pyx)
against the generic codec, the reference (``Sender._body_for_codec``): every
version the producer speaks, transactional id null or not, acks 0, 1 and -1,
one and many topics and partitions, topics by id (v13), compressed,
idempotent and transactional batches; the bytes must be the same. And what
the writer leaves to the codec or refuses."""
import itertools
import types
import uuid

import pytest

from kproto import messages
from kproto.errors import EncodeError
from kproto.producer._append import ProducerBatch
from kproto.producer._produce_request import FIRST_VERSION, LAST_VERSION, produce_request_body
from kproto.producer.sender import Sender
from kproto.records import BatchBuilder, read_batches

TOPIC_IDS = {"a": uuid.UUID(int=0xA1), "bb": uuid.UUID(int=0xB2), "c.dotted-topic_name": uuid.uuid4()}


def _batch(topic, partition, records, *, compression=0, producer=None, transactional=False):
    """A ProducerBatch of ``records`` (key, value) pairs, sequenced when ``producer`` is (id, epoch, seq)."""
    builder = BatchBuilder(compression, 16384)
    for i, (key, value) in enumerate(records):
        builder.append(1_700_000_000_000 + 7 * i, key, value)
    if producer is not None:
        builder.set_producer_state(*producer, is_transactional=transactional)
    return ProducerBatch(topic, partition, builder, 0, 120_000, 100)


def _topics(shape):
    """topic -> batches for the named request shapes."""
    if shape == "one":
        return {"a": [_batch("a", 0, [(b"k", b"v")])]}
    if shape == "many":
        return {
            "a": [_batch("a", p, [(b"key-%d" % p, b"x" * (p * 37 % 300))] * (1 + p % 3)) for p in (5, 0, 17, 3)],
            "bb": [_batch("bb", 0, [(None, b"value without key"), (b"", None)])],
            "c.dotted-topic_name": [_batch("c.dotted-topic_name", p, [(b"k%d" % i, b"v" * i) for i in range(40)],
                                           producer=(4711, 3, 1000 * p)) for p in range(1, 200, 7)],
        }
    if shape == "compressed":
        return {"a": [_batch("a", 2, [(b"same", b"y" * 500)] * 20, compression=1, producer=(9, 0, 5))],
                "bb": [_batch("bb", 1, [(b"k", b"v")], compression=1)]}
    if shape == "transactional":
        return {"bb": [_batch("bb", p, [(b"k", b"v" * p)], producer=(77, 2, p), transactional=True)
                       for p in range(4)]}
    raise ValueError(shape)


def _reference(version, transactional_id, acks, topics):
    """The frame the generic codec encodes from the sender's dicts (the reference path)."""
    sender = types.SimpleNamespace(acks=acks, cfg=types.SimpleNamespace(request_timeout_ms=30_000))
    body = Sender._body_for_codec(sender, transactional_id, topics, TOPIC_IDS if version >= 13 else None)
    return messages.encode_request("Produce", version, 12345, "client-é", body)


def _written(version, transactional_id, acks, topics):
    data = produce_request_body(version, transactional_id, acks, 30_000, topics,
                                TOPIC_IDS if version >= 13 else None)
    return messages.encode_request("Produce", version, 12345, "client-é",
                                   messages.EncodedBody(0, version, data))


@pytest.mark.parametrize("version", range(FIRST_VERSION, LAST_VERSION + 1))
@pytest.mark.parametrize("shape", ["one", "many", "compressed", "transactional"])
def test_the_c_writer_gives_the_bytes_of_the_generic_codec(version, shape):
    for transactional_id, acks in itertools.product([None, "txn-ü-1"], [0, 1, -1]):
        topics = _topics(shape)
        written = _written(version, transactional_id, acks, topics)
        assert written == _reference(version, transactional_id, acks, topics), (transactional_id, acks)
        # and a broker reads it back: the request's fields and every batch as built
        header, body = messages.decode_request(written[4:])
        assert (header["api_key"], header["api_version"], header["correlation_id"]) == (0, version, 12345)
        assert (body["transactional_id"], body["acks"], body["timeout_ms"]) == (transactional_id, acks, 30_000)
        names = {v: k for k, v in TOPIC_IDS.items()}
        got = [(t["name"] if version < 13 else names[t["topic_id"]], [
            (p["index"], bytes(p["records"])) for p in t["partition_data"]]) for t in body["topic_data"]]
        assert got == [(t, [(b.partition, b.builder.build()) for b in batches]) for t, batches in topics.items()]


def test_a_batch_written_again_after_new_producer_state_carries_it():
    """A retried batch is written again with a new epoch and sequence (as build() gives it), its CRC valid."""
    b = _batch("a", 0, [(b"k", b"v")] * 3, producer=(1, 0, 10))
    first = _written(12, None, -1, {"a": [b]})
    b.builder.set_producer_state(1, 1, 0)
    second = _written(12, None, -1, {"a": [b]})
    assert second == _reference(12, None, -1, {"a": [b]}) and second != first
    _, body = messages.decode_request(second[4:])
    (batch,) = read_batches(body["topic_data"][0]["partition_data"][0]["records"])
    batch.validate_crc()
    assert (batch.producer_epoch, batch.base_sequence, batch.record_count) == (1, 0, 3)


@pytest.mark.parametrize("version", [0, 2, LAST_VERSION + 1])
def test_a_version_it_does_not_write_is_left_to_the_codec(version):
    assert produce_request_body(version, None, 1, 1000, _topics("one"), None) is None


def test_topic_ids_must_come_with_version_13_and_only_with_it():
    with pytest.raises(ValueError, match=r"Produce v13 names topics by id, but topic ids were not given"):
        produce_request_body(13, None, 1, 1000, _topics("one"), None)
    with pytest.raises(ValueError, match=r"Produce v12 names topics by name, but topic ids were given"):
        produce_request_body(12, None, 1, 1000, _topics("one"), TOPIC_IDS)


def test_a_topic_whose_id_is_unknown_is_refused():
    with pytest.raises(KeyError):
        produce_request_body(13, None, 1, 1000, {"unknown": [_batch("unknown", 0, [(b"k", b"v")])]}, TOPIC_IDS)


def test_an_encoded_body_of_another_api_or_version_is_refused():
    data = produce_request_body(9, None, 1, 1000, _topics("one"), None)
    with pytest.raises(EncodeError, match=r"Produce v10 request: the body was encoded for api key 0 v9"):
        messages.encode_request("Produce", 10, 1, "c", messages.EncodedBody(0, 9, data))
    with pytest.raises(EncodeError, match=r"Fetch v9 request: the body was encoded for api key 0 v9"):
        messages.encode_request("Fetch", 9, 1, "c", messages.EncodedBody(0, 9, data))


def test_the_built_batch_is_the_same_through_build_and_the_writer():
    """build() now writes through the same C function the request writer uses: the
    batch bytes are those a reader validates, compressed or not."""
    for compression in (0, 1):
        b = _batch("a", 0, [(b"k%d" % i, b"v" * i) for i in range(50)], compression=compression, producer=(3, 4, 5))
        built = b.builder.build()
        (batch,) = read_batches(built)
        batch.validate_crc()
        assert [r.key for r in batch.records()] == [b"k%d" % i for i in range(50)]
        assert built == b.builder.build()


def test_the_batches_of_a_request_are_gathered_in_c_as_the_python_reference_gathers_them():
    """gather_batches (C) against Sender.gather_in_python on two identical
    cores: sequences, the request's topics and partitions, the in-flight map
    and expiry floor, muted partitions (one request in flight per
    connection), and the sticky partitioner moved by first attempts only."""
    try:
        from test_producer_core import FakeKafka, make
    except ImportError:  # pragma: no cover
        from tests.test_producer_core import FakeKafka, make
    outcomes = []
    for in_c in (True, False):
        core, kafka, sim = make(FakeKafka(partitions={"t": 5, "u": 3}), max_in_flight_requests_per_connection=1)
        sim.send(b"warm", partition=0)
        sim.send(b"warm", topic="u", partition=0)
        sim.run_until(lambda: not core.pending)
        for i in range(60):                         # queued, no round: one request's worth
            sim.send(b"v%d" % i, topic="t" if i % 3 else "u", key=b"k%d" % (i % 9) if i % 2 == 0 else None)
        sender = core.sender
        batches = [b for dq in core.accumulator.queues.values() for b in dq]
        assert len(batches) > 6
        for b in batches[1::3]:
            b.attempts = 1                           # sent before: no sticky bookkeeping
        sticky_before = dict(core.partitioner._sticky)
        topics, by_tp = {}, {}
        (sender.gather if in_c else sender.gather_in_python)(batches, topics, by_tp, sim.now)
        outcomes.append({
            "topics": {t: [(b.partition, b.base_sequence, b.producer_id, b.epoch) for b in bs]
                       for t, bs in topics.items()},
            "by_tp": {tp: (b.topic, b.partition) for tp, b in by_tp.items()},
            "in_flight": sorted((b.topic, b.partition, b.base_sequence) for b in sender.in_flight.values()),
            "marked": [b.in_flight for b in batches],
            "muted": sorted(sender._muted),
            "floor": sender._in_flight_floor,
            "sticky": (sticky_before, dict(core.partitioner._sticky)),
        })
    assert outcomes[0] == outcomes[1]
    out = outcomes[0]
    assert out["muted"] == sorted(out["by_tp"]) and all(out["marked"]) and out["floor"] is not None
    assert out["sticky"][0] != out["sticky"][1], "no sticky partition moved: nothing was compared"


@pytest.mark.parametrize("shape", ["one", "many", "compressed", "transactional"])
def test_topic_ids_as_the_sender_gives_them_write_the_bytes_of_the_generic_codec(shape):
    # The sender hands the writer each id as its 16 bytes (_by_topic_id), the
    # reference path the uuid.UUID: the same request, and the answer's reader
    # gets the inverse lookup of the same bytes.
    from kproto.producer.sender import _by_topic_id
    topics = _topics(shape)
    cache: dict = {}
    for _ in range(2):                 # made, then taken from the cache
        by_id, raw_ids = _by_topic_id(topics, TOPIC_IDS, cache)
        assert raw_ids == {t: TOPIC_IDS[t].bytes for t in topics}
        assert by_id == {TOPIC_IDS[t].bytes: t for t in topics}
        data = produce_request_body(13, "txn", -1, 30_000, topics, raw_ids)
        written = messages.encode_request("Produce", 13, 12345, "client-é", messages.EncodedBody(0, 13, data))
        assert written == _reference(13, "txn", -1, topics)


def test_a_topic_made_again_gets_its_new_id_and_an_unknown_id_sends_by_name():
    from kproto.producer.sender import _by_topic_id
    cache: dict = {}
    topics = {"a": [], "bb": []}
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    assert _by_topic_id({"a": []}, {"a": old}, cache) == ({old.bytes: "a"}, {"a": old.bytes})
    assert _by_topic_id({"a": []}, {"a": new}, cache) == ({new.bytes: "a"}, {"a": new.bytes})
    assert _by_topic_id(topics, {"a": new, "bb": old}, cache) == ({new.bytes: "a", old.bytes: "bb"},
                                                                 {"a": new.bytes, "bb": old.bytes})
    assert _by_topic_id(topics, {"a": new}, cache) == (None, None)
    assert _by_topic_id({"c": []}, {"a": new}, cache) == (None, None)
