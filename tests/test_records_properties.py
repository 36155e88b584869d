"""Property tests of record batches.

Why: hand-picked cases cannot cover the combinations of null/empty/large keys
and values, headers, timestamps and codecs, nor the ways a fetch response can
be damaged. Random record lists must round trip through every codec (and be
read identically by aiokafka), append_many must equal append, and random or
mutated bytes fed to read_batches (v2 and legacy) must raise DecodeError and
nothing else. Sized to finish in well under a minute on two cores;
KPROTO_PROPERTY_SCALE=10 runs ten times more examples.
"""
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.errors import DecodeError
from kproto.records import BatchBuilder, LegacyBatchBuilder, build_control_batch, read_batches

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_SCALE = max(1, int(os.environ.get("KPROTO_PROPERTY_SCALE", "1")))
SETTINGS = settings(max_examples=60 * _SCALE, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
FUZZ = settings(max_examples=600 * _SCALE, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

blob = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=200, max_size=3000))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    blob,
    blob,
    st.lists(header, max_size=3),
)
records = st.lists(record, min_size=1, max_size=25)


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(recs=records, base_offset=st.integers(0, 2**40),
       pid=st.integers(-1, 2**40), seq=st.integers(-1, 2**31 - 1))
def test_round_trip(codec, recs, base_offset, pid, seq):
    b = BatchBuilder(codec, 1 << 30, base_offset=base_offset)
    for ts, k, v, h in recs:
        assert b.append(ts, k, v, h)
    b.set_producer_state(pid, 0 if pid >= 0 else -1, seq)
    raw = b.build()
    (batch,) = read_batches(raw)
    want = [(base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(recs)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == want
    assert batch.columns() == ([w[0] for w in want], [w[1] for w in want],
                               [w[2] for w in want], [w[3] for w in want])
    assert batch.max_timestamp == max(r[0] for r in recs)
    assert batch.producer_id == pid and batch.base_sequence == seq
    # aiokafka reads the same records from our bytes
    from aiokafka.record.default_records import DefaultRecordBatch
    theirs = DefaultRecordBatch(bytearray(raw))
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == want


@SETTINGS
@given(recs=records, batch_size=st.integers(0, 5000))
def test_append_many_equals_append(recs, batch_size):
    ts = [r[0] for r in recs]
    keys = [r[1] for r in recs]
    values = [r[2] for r in recs]
    headers = [r[3] for r in recs]
    a = BatchBuilder(0, batch_size)
    n_single = 0
    for t, k, v, h in recs:
        if not a.append(t, k, v, h):
            break
        n_single += 1
    m = BatchBuilder(0, batch_size)
    assert m.append_many(ts, keys, values, headers) == n_single
    assert a.build() == m.build()


def _valid_buffers():
    bufs = []
    for codec in CODECS:
        b = BatchBuilder(codec, 1 << 20, base_offset=3)
        b.append(1, b"key", b"value" * 5, [("h", b"v"), ("n", None)])
        b.append(2, None, None)
        b.append(3, b"", os.urandom(30), [])
        bufs.append(b.build())
    bufs.append(build_control_batch(False, 7, 1, 3, 100))
    for magic in (0, 1):
        for codec in ("none", "gzip", "snappy", "lz4"):
            lb = LegacyBatchBuilder(magic, codec)
            lb.append(10, b"k", b"legacy value")
            lb.append(11, None, b"second")
            bufs.append(lb.build())
    return bufs


VALID = _valid_buffers()


def _exercise(buf, check_crc):
    try:
        batches, consumed = __import__("kproto.records", fromlist=["x"]).parse_batches(
            buf, check_crc=check_crc, max_decompressed_size=1 << 20)
        assert 0 <= consumed <= len(buf)
        for batch in batches:
            repr(batch)
            (batch.base_offset, batch.last_offset, batch.record_count, batch.compression,
             batch.timestamp_type, batch.is_control, batch.validate_crc())
            batch.columns()
            for r in batch.records():
                r.headers
            batch.control_type
    except DecodeError:
        pass


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_only_decode_error(data):
    _exercise(data, True)
    _exercise(data, False)


@FUZZ
@given(data=st.binary(min_size=17, max_size=200), magic=st.sampled_from([0, 1, 2]),
       length=st.integers(-5, 400))
def test_random_bytes_with_plausible_header(data, magic, length):
    buf = bytearray(data)
    buf[8:12] = struct.pack(">i", length)
    buf[16] = magic
    _exercise(bytes(buf), False)


def _mutate(raw, ops):
    b = bytearray(raw)
    for kind, pos, val in ops:
        if not b:
            break
        pos %= len(b)
        if kind == 0:
            b[pos] ^= 1 << (val % 8)
        elif kind == 1:
            b[pos] = val
        elif kind == 2:
            del b[pos:pos + 1 + val % 8]
        elif kind == 3:
            b[pos:pos] = bytes([val]) * (1 + val % 5)
        else:
            del b[pos:]
    return bytes(b)


mutation = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.integers(0, 255)),
                    min_size=1, max_size=4)


@FUZZ
@given(idx=st.integers(0, len(VALID) - 1), ops=mutation, fix_length=st.booleans())
def test_mutated_batches_only_decode_error(idx, ops, fix_length):
    bad = _mutate(VALID[idx], ops)
    if fix_length and len(bad) >= 12:
        # keep the framing consistent so the damage reaches the records
        bad = bad[:8] + struct.pack(">i", len(bad) - 12) + bad[12:]
    _exercise(bad, False)
    _exercise(bad, True)


@SETTINGS
@given(idx=st.integers(0, len(VALID) - 1), cut=st.integers(0, 10**6))
def test_truncation_is_partial_not_error(idx, cut):
    buf = VALID[idx] + VALID[(idx + 1) % len(VALID)]
    cut %= len(buf) + 1
    from kproto.records import parse_batches
    ends, pos = [], 0
    while pos < len(buf):            # entry boundaries (legacy sets have several)
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        ends.append(pos)
    complete = [e for e in ends if e <= cut]
    batches, consumed = parse_batches(buf[:cut])
    assert len(batches) == len(complete)
    assert consumed == (complete[-1] if complete else 0)
