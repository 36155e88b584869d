"""Arrow arrays over :class:`~kproto.records.ColumnBuffers`, without copying.

pyarrow is optional: it is imported here, when a caller asks for Arrow.
The arrays keep the ColumnBuffers' bytearrays alive (and, through the buffer
export, unresizable), so they stay valid after the consumer moves on.
"""
from __future__ import annotations

__all__ = ["arrow_columns"]


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
