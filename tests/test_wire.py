"""Wire primitives: known encodings, round trips, and bad input -> DecodeError only."""
import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kproto._wire import Reader, Writer
from kproto.errors import DecodeError, EncodeError

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1, ">b"),
    "int16": (-2**15, 2**15 - 1, ">h"),
    "int32": (-2**31, 2**31 - 1, ">i"),
    "int64": (-2**63, 2**63 - 1, ">q"),
    "uint16": (0, 2**16 - 1, ">H"),
    "uint32": (0, 2**32 - 1, ">I"),
}


def _enc(method, value):
    w = Writer()
    getattr(w, "write_" + method)(value)
    return w.getvalue()


@pytest.mark.parametrize("kind", sorted(INT_RANGES))
def test_fixed_ints_match_struct(kind):
    lo, hi, fmt = INT_RANGES[kind]
    for v in (lo, hi, 0, 1, -1 if lo < 0 else 2):
        assert _enc(kind, v) == struct.pack(fmt, v)
        assert getattr(Reader(struct.pack(fmt, v)), "read_" + kind)() == v


@pytest.mark.parametrize("kind", sorted(INT_RANGES))
def test_fixed_ints_out_of_range_is_an_error(kind):
    lo, hi, _ = INT_RANGES[kind]
    with pytest.raises(OverflowError):
        _enc(kind, hi + 1)
    with pytest.raises(OverflowError):
        _enc(kind, lo - 1)


# Known vectors from the Kafka protocol guide / ByteUtils tests.
@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"),
    (64, b"\x80\x01"), (-65, b"\x81\x01"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-2**31, b"\xff\xff\xff\xff\x0f"),
])
def test_varint_known_vectors(value, encoded):
    assert _enc("varint", value) == encoded
    assert Reader(encoded).read_varint() == value


def test_varlong_extremes():
    for v in (2**63 - 1, -2**63, 0, -1):
        data = _enc("varlong", v)
        assert len(data) <= 10
        assert Reader(data).read_varlong() == v


def test_unsigned_varint_and_compact_forms():
    assert _enc("uvarint", 300) == b"\xac\x02"
    assert _enc("compact_string", "ab") == b"\x03ab"
    assert _enc("compact_nullable_string", None) == b"\x00"
    assert _enc("compact_nullable_bytes", b"") == b"\x01"
    assert _enc("nullable_string", None) == b"\xff\xff"
    assert _enc("nullable_bytes", None) == b"\xff\xff\xff\xff"
    w = Writer()
    w.write_compact_array_len(-1)
    w.write_compact_array_len(2)
    w.write_array_len(-1)
    assert w.getvalue() == b"\x00\x03\xff\xff\xff\xff"


def test_null_where_not_allowed_is_an_encode_error():
    for method in ("string", "compact_string", "bytes", "compact_bytes"):
        with pytest.raises(EncodeError):
            _enc(method, None)
    with pytest.raises(EncodeError):
        _enc("uuid", "not-a-uuid")
    with pytest.raises(EncodeError):
        _enc("string", "x" * 40000)


def test_uuid_float_bool():
    u = uuid.uuid4()
    assert Reader(_enc("uuid", u)).read_uuid() == u
    assert Reader(_enc("float64", -2.5)).read_float64() == -2.5
    assert _enc("float64", 1.0) == struct.pack(">d", 1.0)
    assert Reader(_enc("bool", True)).read_bool() is True


def test_views_are_zero_copy():
    data = bytearray(_enc("nullable_bytes", b"hello") + _enc("compact_nullable_bytes", b"world"))
    r = Reader(data)
    v1 = r.read_nullable_bytes_view()
    v2 = r.read_compact_nullable_bytes_view()
    assert bytes(v1) == b"hello" and bytes(v2) == b"world"
    data[4] = ord("J")                  # the view sees the underlying buffer
    assert bytes(v1) == b"Jello"


def test_reader_on_memoryview_slice():
    payload = b"xx" + _enc("int32", 7) + b"yy"
    r = Reader(memoryview(payload)[2:6])
    assert r.read_int32() == 7
    assert r.remaining() == 0
    with pytest.raises(DecodeError):
        r.read_int8()


@pytest.mark.parametrize("data,method,match", [
    (b"\x00\x05ab", "read_string", "truncated"),
    (b"\xff\xfe", "read_nullable_string", "invalid string length"),
    (b"\xff\xff", "read_string", "invalid string length"),
    (b"\x00\x02\xff\xfe", "read_string", "UTF-8"),
    (b"\x00", "read_compact_string", "null"),
    (b"\x80\x80\x80\x80\x80\x01", "read_uvarint32", "32 bits"),
    (b"\xff" * 11, "read_uvarint", "more than 10 bytes"),
    (b"\x80", "read_uvarint", "truncated"),
    (b"\x7f\xff\xff\xff", "read_array_len", "exceeds"),
    (b"\xff\xff\xff\xfe", "read_array_len", "invalid array length"),
    (b"\x7f\xff\xff\xff", "read_bytes", "truncated"),
    (b"\xff\xff\xff\xff\x0f", "read_compact_array_len", "exceeds"),
])
def test_bad_input_names_the_problem(data, method, match):
    with pytest.raises(DecodeError, match=match):
        getattr(Reader(data), method)()


PRIMITIVES = [
    ("int8", st.integers(-2**7, 2**7 - 1)),
    ("int16", st.integers(-2**15, 2**15 - 1)),
    ("int32", st.integers(-2**31, 2**31 - 1)),
    ("int64", st.integers(-2**63, 2**63 - 1)),
    ("uint16", st.integers(0, 2**16 - 1)),
    ("uint32", st.integers(0, 2**32 - 1)),
    ("varint", st.integers(-2**31, 2**31 - 1)),
    ("varlong", st.integers(-2**63, 2**63 - 1)),
    ("uvarint", st.integers(0, 2**64 - 1)),
    ("float64", st.floats(allow_nan=False)),
    ("string", st.text(max_size=50)),
    ("nullable_string", st.none() | st.text(max_size=50)),
    ("compact_string", st.text(max_size=50)),
    ("compact_nullable_string", st.none() | st.text(max_size=50)),
    ("bytes", st.binary(max_size=50)),
    ("nullable_bytes", st.none() | st.binary(max_size=50)),
    ("compact_bytes", st.binary(max_size=50)),
    ("compact_nullable_bytes", st.none() | st.binary(max_size=50)),
    ("uuid", st.uuids()),
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(range(len(PRIMITIVES))).flatmap(
    lambda i: st.tuples(st.just(PRIMITIVES[i][0]), PRIMITIVES[i][1])), max_size=20))
def test_round_trip_any_sequence(items):
    w = Writer(16)                          # small start: exercises buffer growth
    for kind, value in items:
        getattr(w, "write_" + kind)(value)
    r = Reader(w.getvalue())
    for kind, value in items:
        assert getattr(r, "read_" + kind)() == value
    assert r.remaining() == 0


READERS = [name for name in dir(Reader) if name.startswith("read_")
           and name not in ("read_raw", "read_view")]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.sampled_from(READERS))
def test_random_bytes_only_raise_decode_error(data, method):
    r = Reader(data)
    try:
        getattr(r, method)()
    except DecodeError:
        return
    assert 0 <= r.pos <= len(data)
