"""Arrow arrays over :class:`~kproto.records.ColumnBuffers`, without copying.

pyarrow is optional: it is imported here, when a caller asks for Arrow.
The arrays keep the ColumnBuffers' bytearrays alive (and, through the buffer
export, unresizable), so they stay valid after the consumer moves on.
"""
from __future__ import annotations

__all__ = ["arrow_columns", "arrow_timestamp_types", "arrow_headers", "HEADER_TYPE"]


def arrow_columns(cb):
    """(offsets int64, timestamps int64, keys binary, values binary) arrays."""
    import pyarrow as pa
    n = len(cb)
    buf = pa.py_buffer

    def binary(valid, nulls, offsets, data):
        return pa.Array.from_buffers(pa.binary(), n, [buf(valid) if nulls else None, buf(offsets), buf(data)],
                                     null_count=nulls)

    return (pa.Array.from_buffers(pa.int64(), n, [None, buf(cb.offsets)]),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(cb.timestamps)]),
            binary(cb.key_valid, cb.key_nulls, cb.key_offsets, cb.key_data),
            binary(cb.value_valid, cb.value_nulls, cb.value_offsets, cb.value_data))


def arrow_timestamp_types(cb):
    """The records' timestamp types as int32 (0 CreateTime, 1 LogAppendTime)."""
    import pyarrow as pa
    return pa.Array.from_buffers(pa.int32(), len(cb), [None, pa.py_buffer(cb.timestamp_types)])


def HEADER_TYPE():
    """``list<struct<key: string, value: binary>>``: Spark's Kafka headers column."""
    import pyarrow as pa
    return pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_headers(cb):
    """The records' headers (``ColumnBuffers(headers=True)``) as
    :func:`HEADER_TYPE`; a record without headers is an empty list. Header keys are
    checked to be UTF-8 (a Java client can only write UTF-8 keys; anything
    else would be a corrupt string column)."""
    import pyarrow as pa
    if not cb.with_headers:
        raise ValueError("these column buffers were gathered without headers (ColumnBuffers(headers=True))")
    n, h = len(cb), cb.header_count
    buf = pa.py_buffer
    keys = pa.Array.from_buffers(pa.string(), h, [None, buf(cb.header_key_offsets), buf(cb.header_key_data)])
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid as e:
        from kproto.errors import DecodeError
        raise DecodeError(f"record batch: a header key is not UTF-8 ({e})") from None
    nulls = cb.header_value_nulls
    values = pa.Array.from_buffers(pa.binary(), h, [buf(cb.header_value_valid) if nulls else None,
                                                    buf(cb.header_value_offsets), buf(cb.header_value_data)],
                                   null_count=nulls)
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(cb.header_offsets)])
    return pa.ListArray.from_arrays(offsets, entries, type=HEADER_TYPE())
