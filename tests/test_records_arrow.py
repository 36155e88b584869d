"""ColumnBuffers (records in Arrow's layout) and their Arrow arrays, checked
against the list-building columns() reader they must agree with."""
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from kproto.errors import DecodeError
from kproto.records import BatchBuilder, ColumnBuffers, LegacyBatchBuilder, read_batches
from kproto.records.arrow import arrow_columns


def build(records, codec="none", base_offset=0, **kw):
    b = BatchBuilder(codec, 1 << 22, base_offset=base_offset, **kw)
    for ts, k, v in records:
        b.append(ts, k, v)
    return b.build()


def as_lists(cb):
    return tuple(a.to_pylist() for a in arrow_columns(cb))


def expected(batches, min_offset=-1):
    cols = ([], [], [], [])
    for b in batches:
        for o, t, k, v in zip(*b.columns()):
            if o >= min_offset:
                for c, x in zip(cols, (o, t, k, v)):
                    c.append(x)
    return cols


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "snappy", "zstd"])
def test_nulls_empties_and_several_batches_match_columns(codec):
    first = [(1000 + i, b"k%d" % i, b"v" * i) for i in range(5)]                 # no nulls yet
    second = [(2000 + i, None if i % 2 else b"", None if i % 3 == 0 else b"x%d" % i) for i in range(13)]
    batches = read_batches(build(first, codec) + build(second, codec, base_offset=5))
    cb = ColumnBuffers()
    for b in batches:
        assert cb.add(b) == (len(b), True)
    assert len(cb) == 18 and cb.last_offset == 17
    assert as_lists(cb) == tuple(expected(batches))
    assert cb.key_nulls == 6 and cb.value_nulls == 5
    keys = arrow_columns(cb)[2]
    assert keys.null_count == 6 and keys.type == pa.binary()


def test_min_offset_and_max_records_resume_where_they_stopped():
    batches = read_batches(build([(i, b"k", b"v%d" % i) for i in range(10)]))
    cb = ColumnBuffers()
    assert cb.add(batches[0], 3, 4) == (4, False)
    assert cb.last_offset == 6
    assert cb.add(batches[0], 7, -1) == (3, True)
    assert as_lists(cb)[0] == [3, 4, 5, 6, 7, 8, 9]
    assert as_lists(cb)[3] == [b"v%d" % i for i in range(3, 10)]


def test_log_append_time_stamps_every_record_with_the_batch_max_timestamp():
    b = BatchBuilder("none", 1 << 20, timestamp_type=1)
    for i in range(3):
        b.append(100 + i, None, b"v")
    (batch,) = read_batches(b.build())
    cb = ColumnBuffers()
    cb.add(batch)
    assert as_lists(cb)[1] == batch.columns()[1]
    assert len(set(as_lists(cb)[1])) == 1


def test_legacy_records_go_through_add_record():
    b = LegacyBatchBuilder(1, "gzip", 1 << 20, base_offset=40)
    for i in range(4):
        b.append(500 + i, None if i == 2 else b"k%d" % i, b"v%d" % i)
    (batch,) = read_batches(b.build())
    cb = ColumnBuffers()
    for r in batch.records():
        cb.add_record(r.offset, r.timestamp, r.key, r.value)
    assert as_lists(cb) == tuple(expected([batch]))


def test_exported_buffers_never_move_under_the_arrays():
    batches = read_batches(build([(0, None, b"v" * 100)] * 3) + build([(0, None, b"w" * 100)] * 3000,
                                                                      base_offset=3))
    cb = ColumnBuffers()
    cb.add(batches[0])
    arrays = arrow_columns(cb)
    with pytest.raises(BufferError):
        cb.add(batches[1])                    # would reallocate under the live arrays
    assert arrays[3].to_pylist() == [b"v" * 100] * 3
    del arrays


def test_a_corrupt_batch_raises_decode_error():
    raw = bytearray(build([(0, b"k", b"value")] * 4))
    raw[60] = 5                               # record count 5: the 5th record runs past the end
    (batch,) = read_batches(bytes(raw), check_crc=False)
    with pytest.raises(DecodeError):
        ColumnBuffers().add(batch)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**40), st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=300))), min_size=1, max_size=60),
       st.integers(-1, 70))
def test_property_matches_columns(records, min_offset):
    batches = read_batches(build(records[: len(records) // 2]) +
                           build(records[len(records) // 2:], base_offset=len(records) // 2)
                           if len(records) > 1 else build(records))
    cb = ColumnBuffers()
    lists = ([], [], [], [])
    for b in batches:
        assert cb.add(b, min_offset)[1]
        assert b.append_columns(*lists, min_offset)[1]
    assert as_lists(cb) == tuple(expected(batches, min_offset)) == lists


def test_append_columns_stops_at_max_records_and_resumes():
    (batch,) = read_batches(build([(i, None, b"v%d" % i) for i in range(10)], base_offset=50))
    lists = ([], [], [], [])
    assert batch.append_columns(*lists, 52, 3) == (3, False, 54)
    assert batch.append_columns(*lists, 55) == (5, True, 59)
    assert lists[0] == list(range(52, 60)) and lists[3] == [b"v%d" % i for i in range(2, 10)]
    assert lists[2] == [None] * 8


def _headers_of(batches, min_offset=-1):
    return [list(r.headers) for b in batches for r in b.records() if r.offset >= min_offset]


def test_headers_and_timestamp_types_match_the_record_reader():
    from kproto.records.arrow import arrow_headers, arrow_timestamp_types
    b = BatchBuilder("lz4", 1 << 20, base_offset=0)
    hs = [[], [("a", b"1")], [("a", None), ("bé", b"")], [], [("x", b"y" * 40)] * 3]
    for i, h in enumerate(hs):
        b.append(1000 + i, None, b"v%d" % i, h)
    la = BatchBuilder("none", 1 << 20, base_offset=5, timestamp_type=1)
    la.append(7, b"k", b"w", [("z", None)])
    batches = read_batches(b.build() + la.build())
    cb = ColumnBuffers(headers=True)
    for batch in batches:
        assert cb.add(batch) == (len(batch), True)
    assert arrow_timestamp_types(cb).to_pylist() == [0] * 5 + [1]
    got = arrow_headers(cb).to_pylist()
    assert [[(e["key"], e["value"]) for e in row] for row in got] == _headers_of(batches)
    assert arrow_headers(cb).type == pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    assert cb.header_value_nulls == 2
    # resumed part-way, only the records taken carry their headers
    cb2 = ColumnBuffers(headers=True)
    assert cb2.add(batches[0], 2, 2) == (2, False)
    assert [[(e["key"], e["value"]) for e in row] for row in arrow_headers(cb2).to_pylist()] == hs[2:4]
    with pytest.raises(ValueError, match="without headers"):
        arrow_headers(ColumnBuffers())


def test_a_header_key_that_is_not_utf8_is_a_decode_error():
    from kproto.records.arrow import arrow_headers
    raw = bytearray(build([(0, None, b"v")]))
    b = BatchBuilder("none", 1 << 20)
    b.append(0, None, b"v", [("k\x7f", b"1")])
    raw = bytearray(b.build())
    raw[raw.index(b"k\x7f") + 1] = 0xFF        # break the key's UTF-8
    (batch,) = read_batches(bytes(raw), check_crc=False)
    cb = ColumnBuffers(headers=True)
    cb.add(batch)
    with pytest.raises(DecodeError, match="not UTF-8"):
        arrow_headers(cb)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=30))),
                         max_size=4), min_size=1, max_size=40), st.integers(-1, 45))
def test_property_headers_match_the_record_reader(headers, min_offset):
    from kproto.records.arrow import arrow_headers
    b = BatchBuilder("none", 1 << 22)
    for i, h in enumerate(headers):
        b.append(i, None, b"v", h)
    batches = read_batches(b.build())
    cb = ColumnBuffers(headers=True)
    for batch in batches:
        assert cb.add(batch, min_offset)[1]
    got = [[(e["key"], e["value"]) for e in row] for row in arrow_headers(cb).to_pylist()]
    assert got == _headers_of(batches, min_offset)
