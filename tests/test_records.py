"""Record batches: v2 builder/reader round trips, byte-level interop with
aiokafka and kafka-python (their builders and readers, both directions), CRC
checks, partial and corrupt input, control batches, producer state, and the
legacy v0/v1 message sets."""
import os
import random
import struct
import zlib

import pytest

from kproto import compression as C
from kproto.errors import CorruptRecordError, DecodeError, EncodeError, UnsupportedCodecError
from kproto.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    LegacyBatch,
    LegacyBatchBuilder,
    Record,
    RecordBatch,
    build_control_batch,
    estimate_size_in_bytes,
    parse_batches,
    read_batches,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS = 1_700_000_000_000

SAMPLE = [
    (TS, b"key", b"value", [("h1", b"v1"), ("h2", None)]),
    (TS + 5, None, b"null key", []),
    (TS + 2, b"tombstone", None, []),
    (TS - 1000, b"", b"", [("", b"")]),
    (TS + 10, None, None, [("ünïcødé ✓ 🚀", b"\x00\xff"), ("h", b"")]),
    (TS + 7, b"k" * 300, os.urandom(5000), [("big", os.urandom(200))]),
]


def build(records, codec="none", **kw):
    b = BatchBuilder(codec, 1 << 24, **kw)
    for ts, k, v, h in records:
        assert b.append(ts, k, v, h) > 0
    return b.build()


def as_tuples(batch):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]


def expected(records, base_offset=0):
    return [(base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records)]


# -- round trips -------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_all_codecs(codec):
    raw = build(SAMPLE, codec, base_offset=42)
    (batch,) = read_batches(raw)
    assert isinstance(batch, RecordBatch)
    assert batch.compression == C.codec_id(codec)
    assert batch.magic == 2
    assert batch.base_offset == 42
    assert batch.last_offset == 42 + len(SAMPLE) - 1
    assert batch.next_offset == 42 + len(SAMPLE)
    assert batch.record_count == len(batch) == len(SAMPLE)
    assert batch.base_timestamp == TS
    assert batch.max_timestamp == TS + 10
    assert batch.timestamp_type == 0
    assert batch.producer_id == -1 and batch.producer_epoch == -1
    assert batch.base_sequence == -1
    assert batch.partition_leader_epoch == -1
    assert not batch.is_transactional and not batch.is_control
    assert batch.control_type is None
    assert batch.size_in_bytes == len(raw) == batch.batch_length + 12
    assert bytes(batch.buffer) == raw
    assert batch.validate_crc()
    assert as_tuples(batch) == expected(SAMPLE, 42)
    offsets, timestamps, keys, values = batch.columns()
    assert offsets == list(range(42, 42 + len(SAMPLE)))
    assert timestamps == [r[0] for r in SAMPLE]
    assert keys == [r[1] for r in SAMPLE]
    assert values == [r[2] for r in SAMPLE]
    for r in batch:
        assert isinstance(r, Record) and r.timestamp_type == 0


def test_buffer_types_for_keys_values_and_input():
    b = BatchBuilder(0, 1 << 20)
    b.append(1, bytearray(b"ba"), memoryview(b"xmvx")[1:3], [("k", bytearray(b"hv"))])
    b.append(2, memoryview(b"m"), b"v", (("k", memoryview(b"mv")),))
    raw = b.build()
    for buf in (raw, bytearray(raw), memoryview(raw), memoryview(b"junk" + raw)[4:]):
        (batch,) = read_batches(buf)
        assert as_tuples(batch) == [(0, 1, b"ba", b"mv", [("k", b"hv")]),
                                    (1, 2, b"m", b"v", [("k", b"mv")])]
    # non-contiguous input is copied, not rejected
    spread = bytearray(len(raw) * 2)
    spread[::2] = raw
    (batch,) = read_batches(memoryview(spread)[::2])
    assert len(as_tuples(batch)) == 2


def test_bad_argument_types():
    b = BatchBuilder(0, 1000)
    with pytest.raises(EncodeError):
        b.append(1, "str key", b"v")
    with pytest.raises(EncodeError):
        b.append(1, None, 123)
    with pytest.raises(EncodeError):
        b.append(1, None, b"v", [("k",)])
    with pytest.raises(EncodeError):
        b.append(1, None, b"v", [(None, b"x")])
    with pytest.raises(EncodeError):
        b.append(1, None, b"v", [("k", "str value")])
    with pytest.raises(TypeError):
        b.append(1, None, b"v", 5)
    with pytest.raises(EncodeError):
        b.append(1, None, memoryview(b"abcdef")[::2])
    assert b.record_count == 0                 # failed appends leave nothing behind
    assert b.append(1, None, b"ok")
    with pytest.raises(ValueError):
        BatchBuilder(0, 1000, magic=1)
    with pytest.raises(UnsupportedCodecError):
        BatchBuilder("brotli", 1000)
    with pytest.raises(ValueError):
        BatchBuilder(0, 1000, producer_epoch=40000)


def test_codec_given_by_id_or_name():
    for cid, name in C.CODEC_NAMES.items():
        assert BatchBuilder(cid, 100).compression == cid
        assert BatchBuilder(name, 100).compression == cid
    assert BatchBuilder(None, 100).compression == 0


def test_large_and_many_records():
    big = os.urandom(3 * 1024 * 1024)
    for codec in CODECS:
        (batch,) = read_batches(build([(1, b"k", big, [])], codec))
        assert next(iter(batch)).value == big
    b = BatchBuilder("lz4", 1 << 30)
    n = 20000
    assert b.append_many(TS, None, [b"%d" % i for i in range(n)]) == n
    (batch,) = read_batches(b.build())
    offsets, timestamps, keys, values = batch.columns()
    assert offsets == list(range(n))
    assert values == [b"%d" % i for i in range(n)]
    assert keys == [None] * n and timestamps == [TS] * n


def test_timestamps_deltas_and_extremes():
    recs = [(5, None, b"a", []), (-1, None, b"b", []), (2**63 - 1, None, b"c", []),
            (-2**63, None, b"d", []), (0, None, b"e", [])]
    (batch,) = read_batches(build(recs))
    assert [r.timestamp for r in batch] == [r[0] for r in recs]
    assert batch.columns()[1] == [r[0] for r in recs]
    assert batch.base_timestamp == 5
    assert batch.max_timestamp == 2**63 - 1


def test_log_append_time_uses_max_timestamp():
    raw = build([(100, None, b"a", []), (300, None, b"b", []), (200, None, b"c", [])],
                timestamp_type=1)
    (batch,) = read_batches(raw)
    assert batch.timestamp_type == 1
    assert batch.attributes & 0x08
    assert [(r.timestamp, r.timestamp_type) for r in batch] == [(300, 1)] * 3
    assert batch.columns()[1] == [300] * 3


# -- builder mechanics -------------------------------------------------------------

def test_batch_size_limit_and_first_record_always_fits():
    b = BatchBuilder(0, 200)
    big = b.append(TS, None, b"x" * 1000)
    assert big > 1000 and b.record_count == 1
    assert b.append(TS, None, b"y") == 0                 # full
    assert b.record_count == 1

    b = BatchBuilder(0, 1000)
    sizes = []
    while True:
        n = b.append(TS, b"key", b"v" * 50)
        if not n:
            break
        sizes.append(n)
    assert b.size_in_bytes() <= 1000
    assert b.size_in_bytes() == RECORD_BATCH_OVERHEAD + sum(sizes)
    assert len(b.build()) == b.size_in_bytes()
    assert b.size_in_bytes() + sizes[0] > 1000


def test_estimate_is_an_upper_bound():
    headers = [("trace-id", b"x" * 16), ("ü", None)]
    for k, v in [(None, None), (b"", b""), (b"k" * 10, b"v" * 100), (None, b"v" * 70000)]:
        est = estimate_size_in_bytes(k, v, headers)
        assert est == BatchBuilder.estimate_size_in_bytes(
            None if k is None else len(k), None if v is None else len(v), headers)
        actual = len(build([(TS, k, v, headers)]))
        assert actual <= est <= actual + 20


def test_set_producer_state_and_rebuild():
    for codec in CODECS:
        b = BatchBuilder(codec, 1 << 20)
        for ts, k, v, h in SAMPLE:
            b.append(ts, k, v, h)
        first = b.build()
        (batch,) = read_batches(first)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
        b.set_producer_state(1234, 5, 77, is_transactional=True)
        second = b.build()
        (batch,) = read_batches(second)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 77)
        assert batch.is_transactional
        assert batch.last_sequence == 77 + len(SAMPLE) - 1
        assert as_tuples(batch) == expected(SAMPLE)
        # only the header changed: the (compressed) records are reused
        assert first[RECORD_BATCH_OVERHEAD:] == second[RECORD_BATCH_OVERHEAD:]
        assert b.size_in_bytes() == len(second)


def test_last_sequence_wraps():
    b = BatchBuilder(0, 1000, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    b.append_many(1, None, [b"a", b"b", b"c"])
    (batch,) = read_batches(b.build())
    assert batch.last_sequence == 0


def test_append_after_build_continues_the_batch():
    b = BatchBuilder("gzip", 1 << 20)
    b.append(1, None, b"a")
    one = read_batches(b.build())[0]
    b.append(2, None, b"b")
    two = read_batches(b.build())[0]
    assert one.record_count == 1 and two.record_count == 2
    assert [r.value for r in two] == [b"a", b"b"]


def test_empty_batch():
    raw = BatchBuilder(0, 100, base_offset=10).build()
    (batch,) = read_batches(raw)
    assert batch.record_count == 0
    assert list(batch) == [] and batch.columns() == ([], [], [], [])
    assert batch.last_offset_delta == -1 and batch.next_offset == 10


def test_append_many():
    b = BatchBuilder(0, 1 << 20)
    assert b.append_many([1, 2, 3], [b"a", None, b"c"], [b"x", b"y", None]) == 3
    assert b.append_many(9, None, [b"p", b"q"]) == 2
    assert b.append_many(7, None, [b"h"], headers=[[("k", b"v")]]) == 1
    assert b.append_many(7, None, [b"s0", b"s1", b"s2"], start=1) == 2
    assert b.append_many(7, None, [b"s0"], start=1) == 0
    (batch,) = read_batches(b.build())
    assert as_tuples(batch) == [
        (0, 1, b"a", b"x", []), (1, 2, None, b"y", []), (2, 3, b"c", None, []),
        (3, 9, None, b"p", []), (4, 9, None, b"q", []), (5, 7, None, b"h", [("k", b"v")]),
        (6, 7, None, b"s1", []), (7, 7, None, b"s2", [])]
    with pytest.raises(ValueError):
        b.append_many([1], None, [b"a", b"b"])
    with pytest.raises(ValueError):
        b.append_many(1, [b"k"], [b"a", b"b"])
    with pytest.raises(ValueError):
        b.append_many(1, None, [b"a"], start=2)


def test_append_many_stops_when_full_and_matches_append():
    values = [os.urandom(random.randrange(0, 300)) for _ in range(500)]
    keys = [None if i % 3 else b"k%d" % i for i in range(500)]
    one_by_one, bulk = [], []
    b = BatchBuilder(0, 4096)
    for k, v in zip(keys, values):
        if not b.append(TS, k, v):
            one_by_one.append(b.build())
            b = BatchBuilder(0, 4096)
            b.append(TS, k, v)
    one_by_one.append(b.build())
    i = 0
    while i < len(values):
        b = BatchBuilder(0, 4096)
        n = b.append_many(TS, keys, values, start=i)
        assert n > 0
        i += n
        bulk.append(b.build())
    assert bulk == one_by_one


# -- control batches ---------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False])
def test_control_batch(commit):
    raw = build_control_batch(commit, producer_id=99, producer_epoch=3, coordinator_epoch=17,
                              timestamp_ms=TS, base_offset=500)
    (batch,) = read_batches(raw)
    assert batch.is_control and batch.is_transactional
    assert batch.control_type == (CONTROL_COMMIT if commit else CONTROL_ABORT)
    assert batch.coordinator_epoch == 17
    assert (batch.producer_id, batch.producer_epoch) == (99, 3)
    assert batch.base_offset == batch.last_offset == 500
    (rec,) = list(batch)
    assert rec.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert rec.value == struct.pack(">hi", 0, 17)
    # aiokafka agrees
    from aiokafka.record.default_records import DefaultRecordBatch
    theirs = DefaultRecordBatch(bytearray(raw))
    assert theirs.is_control_batch and theirs.is_transactional and theirs.validate_crc()


def test_data_batch_of_control_flag_with_short_key():
    raw = build([(1, b"\x00", b"", [])], is_control=True)
    (batch,) = read_batches(raw)
    with pytest.raises(DecodeError):
        batch.control_type


# -- interop with aiokafka and kafka-python ----------------------------------------

def _their_builders():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as A
    from kafka.record.default_records import DefaultRecordBatchBuilder as K
    return [("aiokafka", A), ("kafka-python", K)]


def _their_readers():
    from aiokafka.record.default_records import DefaultRecordBatch as A
    from kafka.record.default_records import DefaultRecordBatch as K
    return [("aiokafka", A), ("kafka-python", K)]


def _available(lib, codec):
    if lib == "kafka-python":
        from kafka import codec as kc
        return {"none": True, "gzip": kc.has_gzip(), "snappy": kc.has_snappy(),
                "lz4": kc.has_lz4(), "zstd": kc.has_zstd()}[codec]
    return True


@pytest.mark.parametrize("codec", CODECS)
def test_they_read_ours(codec):
    raw = build(SAMPLE, codec, producer_id=7, producer_epoch=1, base_sequence=3)
    for lib, Reader in _their_readers():
        if not _available(lib, codec):
            continue
        batch = Reader(bytearray(raw))
        assert batch.validate_crc(), lib
        assert batch.compression_type == C.codec_id(codec)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 3)
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        assert got == expected(SAMPLE), lib


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_theirs(codec):
    for lib, Builder in _their_builders():
        if not _available(lib, codec):
            continue
        b = Builder(2, C.codec_id(codec), 0, 11, 2, 40, 1 << 24)
        for i, (ts, k, v, h) in enumerate(SAMPLE):
            b.append(i, ts, k, v, h)
        raw = bytes(b.build())
        (batch,) = read_batches(raw)
        assert batch.validate_crc(), lib
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (11, 2, 40)
        assert as_tuples(batch) == expected(SAMPLE), lib


def test_known_bytes_identical_to_aiokafka():
    """Uncompressed, our bytes are exactly aiokafka's (kafka-python differs only
    in writing partitionLeaderEpoch 0 where Java writes -1)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as A
    from kafka.record.default_records import DefaultRecordBatchBuilder as K
    recs = [r for r in SAMPLE if len(r[2] or b"") < 1000]
    a, k = A(2, 0, 0, -1, -1, -1, 1 << 20), K(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, (ts, key, v, h) in enumerate(recs):
        a.append(i, ts, key, v, h)
        k.append(i, ts, key, v, h)
    ours = build(recs)
    assert bytes(a.build()) == ours
    kb = bytearray(k.build())
    assert kb[12:16] == b"\x00\x00\x00\x00"
    kb[12:16] = b"\xff\xff\xff\xff"
    assert bytes(kb) == ours


def test_known_bytes_by_hand():
    """One record, spelled out field by field from the protocol guide."""
    raw = build([(1000, b"k", b"v", [("h", b"x")])], base_offset=5)
    records = bytes([
        24,               # record length 12 (zigzag varint): attributes..headers
        0x00,             # attributes
        0x00,             # timestamp delta 0
        0x00,             # offset delta 0
        0x02, ord("k"),   # key length 1 (zigzag), key
        0x02, ord("v"),   # value length 1, value
        0x02,             # 1 header
        0x02, ord("h"),   # header key length 1, key
        0x02, ord("x"),   # header value length 1, value
    ])
    # attributes, lastOffsetDelta, base/max timestamp, producer id/epoch,
    # base sequence, record count
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, -1, -1, -1, 1) + records
    head = struct.pack(">qiib", 5, 49 + len(records), -1, 2)
    crc = __import__("crc32c").crc32c(after_crc)
    assert raw == head + struct.pack(">I", crc) + after_crc


# -- reading: fetch buffers, partial batches, CRC, corruption ------------------------

def _fetch_buffer():
    parts = [build(SAMPLE[:2], "none", base_offset=0),
             build(SAMPLE, "lz4", base_offset=2),
             build_control_batch(True, 1, 0, 0, TS, base_offset=8),
             build(SAMPLE[3:], "gzip", base_offset=9)]
    return parts, b"".join(parts)


def test_multiple_batches_and_partial_tail():
    parts, buf = _fetch_buffer()
    batches, consumed = parse_batches(buf)
    assert [b.base_offset for b in batches] == [0, 2, 8, 9]
    assert consumed == len(buf)
    ends = [sum(len(p) for p in parts[:i + 1]) for i in range(len(parts))]
    for cut in range(len(buf) + 1):
        batches, consumed = parse_batches(buf[:cut])
        complete = sum(1 for e in ends if e <= cut)
        assert len(batches) == complete
        assert consumed == (ends[complete - 1] if complete else 0)
        for b in batches:
            b.columns()


def test_batches_outlive_the_source_buffer():
    _, buf = _fetch_buffer()
    ba = bytearray(buf)
    batches = read_batches(memoryview(ba))
    with pytest.raises(BufferError):
        ba.extend(b"x")          # held: resizing under the batches is refused
    del ba
    assert sum(len(b.columns()[0]) for b in batches) == 2 + len(SAMPLE) + 1 + 3


@pytest.mark.parametrize("value_size", [10, 4000, 5000, 70_000])
def test_crc_checked_below_and_above_the_copy_threshold(value_size):
    """Batches up to 4 KiB are checksummed over a copy, larger ones over a
    slice of the fetch data: both find a flipped bit anywhere, in a batch
    that does not start the fetch data, and agree with the crc32c package."""
    import crc32c

    raw = build([(1000, b"k", os.urandom(value_size), [])])
    fetch = raw + raw                               # the second batch not at the data's start
    assert [b.crc for b in read_batches(fetch)] == [crc32c.crc32c(raw[21:])] * 2
    for pos in (21, len(raw) // 2, len(raw) - 1):
        bad = bytearray(fetch)
        bad[len(raw) + pos] ^= 0x80
        with pytest.raises(CorruptRecordError, match="CRC"):
            read_batches(bytes(bad))
        first, second = read_batches(bytes(bad), check_crc=False)
        assert first.validate_crc() and not second.validate_crc()


def test_crc_corruption_detected():
    raw = bytearray(build(SAMPLE))
    for pos in (21, 30, 60, 61, len(raw) // 2, len(raw) - 1):
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordError, match="CRC"):
            read_batches(bytes(bad))
        (batch,) = read_batches(bytes(bad), check_crc=False)
        assert not batch.validate_crc()
    # the partition leader epoch is outside the CRC (brokers rewrite it)
    ok = bytearray(raw)
    ok[12:16] = struct.pack(">i", 77)
    (batch,) = read_batches(bytes(ok))
    assert batch.partition_leader_epoch == 77


def test_invalid_length_and_magic():
    raw = bytearray(build(SAMPLE[:1]))
    for length in (-1, -2**31, 0, 13):
        bad = bytearray(raw)
        bad[8:12] = struct.pack(">i", length)
        with pytest.raises(DecodeError):
            read_batches(bytes(bad))
    bad = bytearray(raw)
    bad[8:12] = struct.pack(">i", 40)            # legacy-sized but magic 2
    with pytest.raises(DecodeError):
        read_batches(bytes(bad))
    for magic in (3, 127, 255):
        bad = bytearray(raw)
        bad[16] = magic
        with pytest.raises(DecodeError, match="magic"):
            read_batches(bytes(bad))
    # a huge length is just an incomplete batch
    bad = bytearray(raw)
    bad[8:12] = struct.pack(">i", 2**31 - 1)
    assert parse_batches(bytes(bad)) == ([], 0)


def _with_records_count(raw, count):
    b = bytearray(raw)
    b[57:61] = struct.pack(">i", count)
    return bytes(b)


def test_record_count_checked_against_bytes():
    raw = build(SAMPLE[:2])
    for count in (2**31 - 1, 10**6, 3, 1):
        (batch,) = read_batches(_with_records_count(raw, count), check_crc=False)
        with pytest.raises(DecodeError):
            batch.columns()
        with pytest.raises(DecodeError):
            list(batch)
    with pytest.raises(DecodeError, match="negative record count"):
        read_batches(_with_records_count(raw, -1), check_crc=False)


def test_compression_bomb_in_a_batch():
    b = BatchBuilder("gzip", 1 << 30)
    b.append(1, None, bytes(8 * 1024 * 1024))
    raw = b.build()
    assert len(raw) < 100_000
    (batch,) = read_batches(raw, max_decompressed_size=1024 * 1024)
    with pytest.raises(DecodeError, match="max_decompressed_size"):
        batch.columns()
    (batch,) = read_batches(raw)
    assert len(batch.columns()[3][0]) == 8 * 1024 * 1024


def test_unknown_codec_id():
    raw = bytearray(build(SAMPLE[:1]))
    raw[22] |= 0x07                              # codec 7
    (batch,) = read_batches(bytes(raw), check_crc=False)
    with pytest.raises(DecodeError, match="codec"):
        list(batch)


def test_every_single_byte_mutation_only_raises_decode_error():
    rnd = random.Random(1)
    for codec in ("none", "gzip", "lz4"):
        raw = build(SAMPLE[:5], codec)
        for pos in range(len(raw)):
            for _ in range(2):
                bad = bytearray(raw)
                bad[pos] = rnd.randrange(256)
                _exercise(bytes(bad))


def _exercise(buf, check_crc=False):
    try:
        for batch in read_batches(buf, check_crc=check_crc, max_decompressed_size=1 << 20):
            repr(batch)
            batch.columns()
            for r in batch.records():
                r.headers
            batch.control_type
    except DecodeError:
        pass


def test_truncated_record_region():
    raw = build(SAMPLE)
    for cut in range(RECORD_BATCH_OVERHEAD, len(raw)):
        bad = bytearray(raw[:cut])
        bad[8:12] = struct.pack(">i", cut - 12)
        (batch,) = read_batches(bytes(bad), check_crc=False)
        with pytest.raises(DecodeError):
            batch.columns()


def test_records_iterator_detects_trailing_garbage():
    raw = build(SAMPLE[:2]) + b"\x00\x00"
    bad = bytearray(raw)
    bad[8:12] = struct.pack(">i", len(raw) - 12)
    (batch,) = read_batches(bytes(bad), check_crc=False)
    it = batch.records()
    next(it)
    next(it)
    with pytest.raises(DecodeError, match="left over"):
        next(it)
    with pytest.raises(DecodeError):
        batch.columns()


def test_invalid_utf8_header_key():
    raw = build([(1, None, b"v", [("abc", b"x")])])
    bad = bytearray(raw)
    i = bad.index(b"abc")
    bad[i] = 0xFF
    (batch,) = read_batches(bytes(bad), check_crc=False)
    with pytest.raises(DecodeError, match="UTF-8"):
        list(batch)


def test_record_objects():
    r = Record(5, 10, 0, b"k", b"v", [("a", b"b")])
    assert r == Record(5, 10, 0, b"k", b"v", [("a", b"b")])
    assert r != Record(6, 10, 0, b"k", b"v", [("a", b"b")])
    assert "offset=5" in repr(r)
    assert Record(1, 2, 0, None, None).headers == []
    with pytest.raises(TypeError):
        RecordBatch()


# -- legacy v0/v1 message sets -----------------------------------------------------------

LEGACY = [(TS, b"k1", b"v1"), (TS + 1, None, b"v2"), (TS + 3, b"k3", None), (TS + 2, b"", b"")]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_legacy_round_trip(magic, codec):
    b = LegacyBatchBuilder(magic, codec, 1 << 20, base_offset=100)
    for ts, k, v in LEGACY:
        assert b.append(ts, k, v)
    raw = b.build()
    batches = read_batches(raw)
    assert all(isinstance(x, LegacyBatch) for x in batches)
    recs = [r for x in batches for r in x]
    assert [r.offset for r in recs] == [100, 101, 102, 103]
    assert [(r.key, r.value) for r in recs] == [(k, v) for _, k, v in LEGACY]
    if magic == 1:
        assert [r.timestamp for r in recs] == [ts for ts, _, _ in LEGACY]
        assert {r.timestamp_type for r in recs} == {0}
    else:
        assert {(r.timestamp, r.timestamp_type) for r in recs} == {(-1, -1)}
    cols = [x.columns() for x in batches]
    assert sum((c[0] for c in cols), []) == [100, 101, 102, 103]
    for x in batches:
        assert x.magic == magic and x.validate_crc()
        assert x.producer_id == -1 and not x.is_control and x.control_type is None
    assert batches[-1].last_offset == 103
    if codec != "none":
        (x,) = batches
        assert x.compression == C.codec_id(codec)
        assert x.base_offset == 100 and x.record_count == 4 and x.next_offset == 104
        if codec == "lz4" and magic == 0:
            # v0 keeps the pre-KAFKA-3160 header checksum
            inner = bytes(x._wrapper.value)
            with pytest.raises(DecodeError):
                C.lz4_decompress(inner)


def test_legacy_offsets_relative_in_v1_absolute_in_v0():
    for magic in (0, 1):
        b = LegacyBatchBuilder(magic, "gzip", 1 << 20, base_offset=1000)
        for ts, k, v in LEGACY:
            b.append(ts, k, v)
        raw = b.build()
        inner = zlib.decompress(raw[12 + 4 + 2 + (8 if magic else 0) + 4 + 4:], 31)
        first_inner_offset = struct.unpack(">q", inner[:8])[0]
        assert first_inner_offset == (0 if magic == 1 else 1000)
        assert struct.unpack(">q", raw[:8])[0] == 1003        # wrapper: last offset
        assert [r.offset for r in read_batches(raw)[0]] == [1000, 1001, 1002, 1003]


def test_legacy_log_append_time_wrapper():
    b = LegacyBatchBuilder(1, "gzip", 1 << 20, timestamp_type=1, log_append_time=555)
    for ts, k, v in LEGACY:
        b.append(ts, k, v)
    (x,) = read_batches(b.build())
    assert x.timestamp_type == 1
    assert {(r.timestamp, r.timestamp_type) for r in x} == {(555, 1)}


def _kafka_python_legacy(magic, codec):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (ts, k, v) in enumerate(LEGACY):
        b.append(i, ts if magic else None, k, v)
    return bytes(b.build())


def _aiokafka_legacy(magic, codec):
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (ts, k, v) in enumerate(LEGACY):
        b.append(i, ts if magic else None, k, v)
    return bytes(b.build())


# v0 lz4 is left out: neither peer library writes it here (aiokafka refuses,
# kafka-python needs xxhash); our own v0 lz4 is covered by test_legacy_round_trip.
@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in (0, 1, 2, 3)
                                         if (m, c) != (0, 3)])
def test_legacy_we_read_theirs(magic, codec):
    from kafka import codec as kc
    makers = [_aiokafka_legacy]
    if codec != 2 or kc.has_snappy():
        makers.append(_kafka_python_legacy)
    for make in makers:
        raw = make(magic, codec)
        if codec and magic == 1:
            # producers write wrapper offset 0; the broker sets it to the last
            # inner offset (inner offsets stay relative)
            raw = struct.pack(">q", len(LEGACY) - 1) + raw[8:]
        recs = [r for x in read_batches(raw) for r in x]
        assert [(r.offset, r.key, r.value) for r in recs] == \
            [(i, k, v) for i, (_, k, v) in enumerate(LEGACY)], make.__name__
        if magic == 1:
            assert [r.timestamp for r in recs] == [ts for ts, _, _ in LEGACY]


# v0 lz4 is left out: aiokafka's reader does not accept the KAFKA-3160 header
# checksum that magic 0 requires (covered by test_legacy_round_trip).
@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1)
                                         for c in ("none", "gzip", "snappy", "lz4")
                                         if (m, c) != (0, "lz4")])
def test_legacy_they_read_ours(magic, codec):
    from aiokafka.record.legacy_records import LegacyRecordBatch
    b = LegacyBatchBuilder(magic, codec, 1 << 20)
    for ts, k, v in LEGACY:
        b.append(ts, k, v)
    raw = b.build()
    got = []
    pos = 0
    while pos < len(raw):
        size = struct.unpack_from(">i", raw, pos + 8)[0] + 12
        batch = LegacyRecordBatch(bytearray(raw[pos:pos + size]), magic)
        assert batch.validate_crc()
        got += [(r.offset, r.key, r.value) for r in batch]
        pos += size
    assert got == [(i, k, v) for i, (_, k, v) in enumerate(LEGACY)]


def test_mixed_legacy_and_v2_fetch():
    v0 = LegacyBatchBuilder(0, "none", base_offset=0)
    v0.append(0, b"a", b"0")
    v1 = LegacyBatchBuilder(1, "snappy", base_offset=1)
    v1.append(5, b"b", b"1")
    v1.append(6, b"c", b"2")
    v2 = build([(7, b"d", b"3", [])], "zstd", base_offset=3)
    buf = v0.build() + v1.build() + v2 + v2[:20]
    batches, consumed = parse_batches(buf)
    assert [type(b).__name__ for b in batches] == ["LegacyBatch", "LegacyBatch", "RecordBatch"]
    assert [r.value for b in batches for r in b] == [b"0", b"1", b"2", b"3"]
    assert [r.offset for b in batches for r in b] == [0, 1, 2, 3]
    assert consumed == len(buf) - 20


def test_legacy_corruption():
    b = LegacyBatchBuilder(1, "gzip")
    for ts, k, v in LEGACY:
        b.append(ts, k, v)
    raw = bytearray(b.build())
    bad = bytearray(raw)
    bad[-3] ^= 1
    with pytest.raises(CorruptRecordError):
        read_batches(bytes(bad))
    (x,) = read_batches(bytes(bad), check_crc=False)
    assert not x.validate_crc()
    with pytest.raises(DecodeError):
        list(x)
    for pos in range(len(raw)):
        bad = bytearray(raw)
        bad[pos] ^= 0x40
        _exercise(bytes(bad))
        _exercise(bytes(bad), check_crc=True)


def test_legacy_nested_compression_and_empty_wrapper():
    from kproto.records import legacy as L
    inner = LegacyBatchBuilder(1, "gzip")
    inner.append(1, None, b"x")
    nested = C.gzip_compress(inner.build())
    raw = L._entry(0, L._message(1, C.GZIP, 1, None, nested))
    with pytest.raises(DecodeError, match="nested"):
        list(read_batches(raw)[0])
    raw = L._entry(0, L._message(1, C.GZIP, 1, None, C.gzip_compress(b"")))
    with pytest.raises(DecodeError, match="no messages"):
        list(read_batches(raw)[0])
    raw = L._entry(0, L._message(1, C.GZIP, 1, None, None))
    with pytest.raises(DecodeError, match="null"):
        read_batches(raw)
    with pytest.raises(UnsupportedCodecError):
        LegacyBatchBuilder(1, "zstd")


def test_legacy_builder_size_limit():
    b = LegacyBatchBuilder(1, "none", 100)
    assert b.append(1, None, b"x" * 500)
    assert b.append(1, None, b"y") == 0
    assert b.record_count == 1


def test_compression_ratio_estimate():
    value = b"compressible " * 8
    plain = BatchBuilder("lz4", 4096)
    while plain.append(TS, None, value):
        pass
    plain.build()
    ratio = plain.compression_ratio
    assert 0 < ratio < 0.5
    assert len(plain.build()) < 4096 * 0.5         # a full batch is mostly empty wire
    tuned = BatchBuilder("lz4", 4096, compression_ratio_estimate=ratio * 1.05)
    assert tuned.compression_ratio_estimate == pytest.approx(ratio * 1.05)
    while tuned.append(TS, None, value):
        pass
    assert tuned.record_count > 1.5 * plain.record_count
    assert len(tuned.build()) <= 4096
    # without compression the estimate is ignored (always exact)
    b = BatchBuilder(0, 1000, compression_ratio_estimate=0.1)
    assert b.compression_ratio_estimate == 1.0 and b.compression_ratio == 1.0
    with pytest.raises(ValueError):
        BatchBuilder("gzip", 1000, compression_ratio_estimate=0)
    b = BatchBuilder("gzip", 1000)
    b.set_compression_ratio_estimate(0.5)
    assert b.compression_ratio_estimate == 0.5


def _recompress(raw, codec_id, payload):
    """Replace the records of an uncompressed batch by `payload` (already
    compressed with codec_id), fixing length, attributes and CRC."""
    import crc32c
    head = bytearray(raw[:RECORD_BATCH_OVERHEAD])
    attrs = struct.unpack_from(">h", head, 21)[0]
    struct.pack_into(">h", head, 21, (attrs & ~0x07) | codec_id)
    struct.pack_into(">i", head, 8, RECORD_BATCH_OVERHEAD - 12 + len(payload))
    body = bytes(head[21:]) + payload
    struct.pack_into(">I", head, 17, crc32c.crc32c(body))
    return bytes(head) + payload


@pytest.mark.parametrize("kwargs", [
    dict(content_checksum=True, block_checksum=True, store_size=True),
    dict(block_linked=True),                       # not what Kafka writes: slow path
    dict(block_size=0, store_size=False),
    dict(block_size=7, block_linked=False),        # 4 MiB blocks
    dict(compression_level=12, block_linked=False),
])
def test_lz4_frames_from_other_writers(kwargs):
    import lz4.frame
    recs = SAMPLE + [(TS, None, os.urandom(70000), []), (TS, None, b"z" * 200000, [])]
    raw = build(recs)
    records = raw[RECORD_BATCH_OVERHEAD:]
    payload = lz4.frame.compress(records, **kwargs)
    # and two concatenated frames
    half = len(records) // 2
    two = lz4.frame.compress(records[:half], **kwargs) + lz4.frame.compress(records[half:], **kwargs)
    for p in (payload, two):
        (batch,) = read_batches(_recompress(raw, 3, p))
        assert as_tuples(batch) == expected(recs)
        for cut in (len(p) - 1, len(p) - 5, len(p) // 2, 12, 7, 3):
            (batch,) = read_batches(_recompress(raw, 3, p[:cut]))
            with pytest.raises(DecodeError):
                batch.columns()


def test_lz4_bomb_in_a_batch_fast_path():
    b = BatchBuilder("lz4", 1 << 30)
    b.append(1, None, bytes(6 * 1024 * 1024))
    (batch,) = read_batches(b.build(), max_decompressed_size=1 << 20)
    with pytest.raises(DecodeError, match="max_decompressed_size"):
        batch.columns()


def test_batches_in_a_garbage_cycle_are_collected_without_buffer_errors():
    # Read batches keep the fetch buffer alive through a Py_buffer. When they
    # end up in a reference cycle, the garbage collector must free them
    # cleanly; it once reported "memoryview has 1 exported buffer".
    import gc
    import sys
    b = BatchBuilder(0, 1 << 16)
    for i in range(3):
        b.append(i, b"k", b"v%d" % i)
    raised = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: raised.append(u.exc_value)
    try:
        whole = bytearray(b"xx" + bytes(b.build()) + b"yy")
        for data in (bytearray(b.build()), memoryview(bytes(b.build())), memoryview(whole)[2:-2]):
            batches = read_batches(data)
            records = list(batches[0].records())
            cycle = [batches, records, data]
            cycle.append(cycle)
            del batches, records, data, cycle
            gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert raised == []
