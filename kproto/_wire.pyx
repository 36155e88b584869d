# cython: language_level=3
# cython: boundscheck=False, wraparound=False, cdivision=True
"""Kafka wire primitives.

``Writer`` appends big-endian integers, varints, strings, bytes and array
lengths to a growable C buffer. ``Reader`` decodes the same forms from any
object that exports a buffer (bytes, bytearray, memoryview) without copying it;
``read_view`` and the ``*_view`` readers hand out zero-copy memoryview slices.

Every read checks the remaining length first and raises
:class:`kproto.errors.DecodeError` on truncated or invalid input. Lengths read
from the wire are checked against the bytes actually remaining before anything
is allocated, so a hostile length cannot make us allocate gigabytes; array
lengths are also bounded by Kafka's ``MAX_ARRAY_ELEMENTS`` (see _wire.pxd).
"""
from kproto._buffer cimport grow_buffer
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.object cimport PyObject_GenericSetAttr
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_AsUTF8String
from libc.string cimport memcpy
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from kproto._varint cimport (
    zigzag64, unzigzag64, encode_uvarint, decode_uvarint,
    VARINT_TRUNCATED, VARINT_TOO_LONG,
)

import uuid as _uuid

from kproto.errors import DecodeError, EncodeError

cdef object UUID = _uuid.UUID
cdef object _UUID_SAFE_UNKNOWN = _uuid.SafeUUID.unknown


cdef object _uuid_from_halves(uint64_t high, uint64_t low):
    """``uuid.UUID(int=high << 64 | low)`` without ``UUID.__init__``'s
    argument checks (what ``UUID.__init__`` stores, set as it sets it): a
    Produce answer reads a topic id per topic, and the checks were most of
    its cost at low rates."""
    cdef object u = UUID.__new__(UUID)
    PyObject_GenericSetAttr(u, "int", (<object>high << 64) | <object>low)
    PyObject_GenericSetAttr(u, "is_safe", _UUID_SAFE_UNKNOWN)
    return u


cdef inline bytes _as_utf8(object s, str what):
    if isinstance(s, str):
        return PyUnicode_AsUTF8String(s)
    if isinstance(s, bytes):
        return <bytes>s
    raise EncodeError(f"{what}: expected str, got {type(s).__name__}")


cdef class Writer:
    """A growable output buffer with Kafka's encoders."""

    def __cinit__(self, Py_ssize_t capacity=256):
        if capacity < 16:
            capacity = 16
        self.buf = <unsigned char*>PyMem_Malloc(capacity)
        if self.buf == NULL:
            raise MemoryError()
        self.cap = capacity
        self.pos = 0

    def __dealloc__(self):
        if self.buf != NULL:
            PyMem_Free(self.buf)
            self.buf = NULL

    def __len__(self):
        return self.pos

    cdef int reserve(self, Py_ssize_t n) except -1:
        return grow_buffer(&self.buf, &self.cap, self.pos + n)

    cdef int put_raw(self, const unsigned char* p, Py_ssize_t n) except -1:
        self.reserve(n)
        memcpy(self.buf + self.pos, p, n)
        self.pos += n
        return 0

    cpdef write_int8(self, int8_t v):
        self.reserve(1)
        self.buf[self.pos] = <uint8_t>v
        self.pos += 1

    cpdef write_int16(self, int16_t v):
        self.write_uint16(<uint16_t>v)

    cpdef write_uint16(self, uint16_t v):
        self.reserve(2)
        self.buf[self.pos] = <uint8_t>(v >> 8)
        self.buf[self.pos + 1] = <uint8_t>v
        self.pos += 2

    cpdef write_int32(self, int32_t v):
        self.write_uint32(<uint32_t>v)

    cpdef write_uint32(self, uint32_t v):
        self.reserve(4)
        cdef unsigned char* p = self.buf + self.pos
        p[0] = <uint8_t>(v >> 24)
        p[1] = <uint8_t>(v >> 16)
        p[2] = <uint8_t>(v >> 8)
        p[3] = <uint8_t>v
        self.pos += 4

    cpdef write_int64(self, int64_t v):
        self.reserve(8)
        cdef uint64_t u = <uint64_t>v
        cdef unsigned char* p = self.buf + self.pos
        cdef int i
        for i in range(8):
            p[7 - i] = <uint8_t>(u >> (8 * i))
        self.pos += 8

    cpdef write_float64(self, double v):
        cdef uint64_t u
        memcpy(&u, &v, 8)
        self.write_int64(<int64_t>u)

    cpdef write_bool(self, bint v):
        self.write_int8(1 if v else 0)

    cpdef write_uuid(self, object v):
        cdef bytes raw
        if v is None:
            raw = b"\x00" * 16
        elif isinstance(v, UUID):
            raw = v.bytes
        elif isinstance(v, (bytes, bytearray)) and len(v) == 16:
            raw = bytes(v)
        else:
            raise EncodeError(f"uuid: expected uuid.UUID or 16 bytes, got {type(v).__name__}")
        self.put_raw(<const unsigned char*>PyBytes_AS_STRING(raw), 16)

    cpdef write_uvarint(self, uint64_t v):
        self.reserve(10)
        self.pos += encode_uvarint(self.buf + self.pos, v)

    cpdef write_varint(self, int32_t v):
        self.write_uvarint(zigzag64(<int64_t>v))

    cpdef write_varlong(self, int64_t v):
        self.write_uvarint(zigzag64(v))

    cpdef write_raw(self, object data):
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self.put_raw(<const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cpdef write_string(self, object s):
        if s is None:
            raise EncodeError("string: null is not allowed here")
        self.write_nullable_string(s)

    cpdef write_nullable_string(self, object s):
        cdef bytes b
        if s is None:
            self.write_int16(-1)
            return
        b = _as_utf8(s, "string")
        if PyBytes_GET_SIZE(b) > 32767:
            raise EncodeError(f"string: {PyBytes_GET_SIZE(b)} bytes is longer than 32767")
        self.write_int16(<int16_t>PyBytes_GET_SIZE(b))
        self.put_raw(<const unsigned char*>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cpdef write_compact_string(self, object s):
        if s is None:
            raise EncodeError("compact string: null is not allowed here")
        self.write_compact_nullable_string(s)

    cpdef write_compact_nullable_string(self, object s):
        cdef bytes b
        if s is None:
            self.write_uvarint(0)
            return
        b = _as_utf8(s, "string")
        self.write_uvarint(<uint64_t>PyBytes_GET_SIZE(b) + 1)
        self.put_raw(<const unsigned char*>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cpdef write_bytes(self, object b):
        if b is None:
            raise EncodeError("bytes: null is not allowed here")
        self.write_nullable_bytes(b)

    cpdef write_nullable_bytes(self, object b):
        cdef Py_buffer view
        if b is None:
            self.write_int32(-1)
            return
        PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
        try:
            if view.len > 0x7FFFFFFF:
                raise EncodeError("bytes: longer than 2147483647")
            self.write_int32(<int32_t>view.len)
            self.put_raw(<const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cpdef write_compact_bytes(self, object b):
        if b is None:
            raise EncodeError("compact bytes: null is not allowed here")
        self.write_compact_nullable_bytes(b)

    cpdef write_compact_nullable_bytes(self, object b):
        cdef Py_buffer view
        if b is None:
            self.write_uvarint(0)
            return
        PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
        try:
            self.write_uvarint(<uint64_t>view.len + 1)
            self.put_raw(<const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cpdef write_array_len(self, Py_ssize_t n):
        """Classic array length (int32); -1 encodes a null array."""
        self.write_int32(<int32_t>n)

    cpdef write_compact_array_len(self, Py_ssize_t n):
        """Compact array length (unsigned varint of n + 1); -1 encodes null."""
        self.write_uvarint(<uint64_t>(n + 1))

    cpdef write_int32_at(self, Py_ssize_t offset, int32_t v):
        """Overwrite 4 bytes at offset (used to back-patch size prefixes)."""
        if offset < 0 or offset + 4 > self.pos:
            raise IndexError("write_int32_at outside the written data")
        cdef uint32_t u = <uint32_t>v
        cdef unsigned char* p = self.buf + offset
        p[0] = <uint8_t>(u >> 24)
        p[1] = <uint8_t>(u >> 16)
        p[2] = <uint8_t>(u >> 8)
        p[3] = <uint8_t>u

    cpdef bytes getvalue(self):
        return PyBytes_FromStringAndSize(<char*>self.buf, self.pos)

    def clear(self):
        self.pos = 0


cdef class Reader:
    """A cursor over a buffer; decodes Kafka primitives without copying.

    ``Reader(data, start=0, end=None)``: data is anything with the buffer
    protocol. The reader holds a reference to it, so views it hands out stay
    valid.
    """

    def __cinit__(self, object data, Py_ssize_t start=0, Py_ssize_t end=-1):
        self.has_view = False
        PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        self.has_view = True
        self.obj = data
        self.data = <const unsigned char*>self.view.buf
        if end < 0 or end > self.view.len:
            end = self.view.len
        if start < 0 or start > end:
            raise ValueError("Reader: start outside the buffer")
        self.pos = start
        self.end = end

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)
            self.has_view = False

    cdef int need(self, Py_ssize_t n, const char* what) except -1:
        if n < 0 or n > self.end - self.pos:
            raise DecodeError(
                f"truncated input: {what.decode('ascii')} needs {n} bytes at offset {self.pos}, "
                f"{self.end - self.pos} remain")
        return 0

    cpdef Py_ssize_t remaining(self):
        return self.end - self.pos

    cpdef skip(self, Py_ssize_t n):
        self.need(n, b"skip")
        self.pos += n

    cpdef int8_t read_int8(self) except? -1:
        self.need(1, b"int8")
        cdef int8_t v = <int8_t>self.data[self.pos]
        self.pos += 1
        return v

    cpdef bint read_bool(self) except? -1:
        return self.read_int8() != 0

    cpdef uint16_t read_uint16(self) except? 0:
        self.need(2, b"int16")
        cdef const unsigned char* p = self.data + self.pos
        self.pos += 2
        return (<uint16_t>p[0] << 8) | p[1]

    cpdef int16_t read_int16(self) except? -1:
        return <int16_t>self.read_uint16()

    cpdef uint32_t read_uint32(self) except? 0:
        self.need(4, b"int32")
        cdef const unsigned char* p = self.data + self.pos
        self.pos += 4
        return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
                | (<uint32_t>p[2] << 8) | p[3])

    cpdef int32_t read_int32(self) except? -1:
        return <int32_t>self.read_uint32()

    cpdef int64_t read_int64(self) except? -1:
        self.need(8, b"int64")
        cdef const unsigned char* p = self.data + self.pos
        cdef uint64_t u = 0
        cdef int i
        for i in range(8):
            u = (u << 8) | p[i]
        self.pos += 8
        return <int64_t>u

    cpdef double read_float64(self) except? -1:
        cdef int64_t i = self.read_int64()
        cdef double d
        memcpy(&d, &i, 8)
        return d

    cpdef object read_uuid(self):
        self.need(16, b"uuid")
        cdef const uint8_t* p = self.data + self.pos
        cdef uint64_t high = 0, low = 0
        cdef int i
        for i in range(8):
            high = (high << 8) | p[i]
            low = (low << 8) | p[8 + i]
        self.pos += 16
        return _uuid_from_halves(high, low)

    cpdef uint64_t read_uvarint(self) except? 0:
        cdef uint64_t v
        cdef Py_ssize_t n = decode_uvarint(self.data + self.pos, self.end - self.pos, &v, 10)
        if n == VARINT_TRUNCATED:
            raise DecodeError(f"truncated input: varint at offset {self.pos}")
        if n == VARINT_TOO_LONG:
            raise DecodeError(f"invalid varint at offset {self.pos}: more than 10 bytes")
        self.pos += n
        return v

    cpdef uint32_t read_uvarint32(self) except? 0:
        cdef uint64_t v
        cdef Py_ssize_t n = decode_uvarint(self.data + self.pos, self.end - self.pos, &v, 5)
        if n == VARINT_TRUNCATED:
            raise DecodeError(f"truncated input: varint at offset {self.pos}")
        if n == VARINT_TOO_LONG or v > 0xFFFFFFFFu:
            raise DecodeError(f"invalid unsigned varint at offset {self.pos}: exceeds 32 bits")
        self.pos += n
        return <uint32_t>v

    cdef uint32_t read_tagged_count(self) except? 0:
        """A tagged-fields section's field count, refused above Kafka's limit
        (MAX_TAGGED_FIELDS) before anything is read or allocated for it."""
        cdef Py_ssize_t start = self.pos
        cdef uint32_t count = self.read_uvarint32()
        if count > MAX_TAGGED_FIELDS:
            raise DecodeError(f"tagged fields at offset {start}: {count} fields declared, "
                              f"more than the limit of {MAX_TAGGED_FIELDS} (Kafka's)")
        return count

    cpdef int32_t read_varint(self) except? -1:
        cdef Py_ssize_t start = self.pos
        cdef int64_t v = unzigzag64(<uint64_t>self.read_uvarint32())
        if v < -2147483648 or v > 2147483647:
            raise DecodeError(f"invalid varint at offset {start}: exceeds int32")
        return <int32_t>v

    cpdef int64_t read_varlong(self) except? -1:
        return unzigzag64(self.read_uvarint())

    # -- lengths --------------------------------------------------------------

    cdef Py_ssize_t _classic_len16(self, bint nullable, const char* what) except? -2:
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self.read_int16()
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise DecodeError(f"invalid {what.decode('ascii')} length {n} at offset {start}")
        self.need(n, what)
        return n

    cdef Py_ssize_t _classic_len32(self, bint nullable, const char* what) except? -2:
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self.read_int32()
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise DecodeError(f"invalid {what.decode('ascii')} length {n} at offset {start}")
        self.need(n, what)
        return n

    cdef Py_ssize_t _compact_len(self, bint nullable, const char* what) except? -2:
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = <Py_ssize_t>self.read_uvarint32() - 1
        if n < 0:
            if nullable:
                return -1
            raise DecodeError(f"null {what.decode('ascii')} at offset {start} where null is not allowed")
        self.need(n, what)
        return n

    cdef object _utf8(self, Py_ssize_t n):
        cdef Py_ssize_t start = self.pos
        self.pos += n
        try:
            return PyUnicode_DecodeUTF8(<const char*>(self.data + start), n, NULL)
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid UTF-8 in string at offset {start}: {exc.reason}") from None

    cdef bytes _copy(self, Py_ssize_t n):
        cdef bytes b = PyBytes_FromStringAndSize(<const char*>(self.data + self.pos), n)
        self.pos += n
        return b

    cpdef object read_string(self):
        return self._utf8(self._classic_len16(False, b"string"))

    cpdef object read_nullable_string(self):
        cdef Py_ssize_t n = self._classic_len16(True, b"string")
        return None if n < 0 else self._utf8(n)

    cpdef object read_compact_string(self):
        return self._utf8(self._compact_len(False, b"string"))

    cpdef object read_compact_nullable_string(self):
        cdef Py_ssize_t n = self._compact_len(True, b"string")
        return None if n < 0 else self._utf8(n)

    cpdef object read_bytes(self):
        return self._copy(self._classic_len32(False, b"bytes"))

    cpdef object read_nullable_bytes(self):
        cdef Py_ssize_t n = self._classic_len32(True, b"bytes")
        return None if n < 0 else self._copy(n)

    cpdef object read_compact_bytes(self):
        return self._copy(self._compact_len(False, b"bytes"))

    cpdef object read_compact_nullable_bytes(self):
        cdef Py_ssize_t n = self._compact_len(True, b"bytes")
        return None if n < 0 else self._copy(n)

    cpdef object read_nullable_bytes_view(self):
        """Nullable int32-prefixed bytes as a zero-copy memoryview (records)."""
        cdef Py_ssize_t n = self._classic_len32(True, b"bytes")
        return None if n < 0 else self.read_view(n)

    cpdef object read_compact_nullable_bytes_view(self):
        """Compact nullable bytes as a zero-copy memoryview (records)."""
        cdef Py_ssize_t n = self._compact_len(True, b"bytes")
        return None if n < 0 else self.read_view(n)

    cpdef Py_ssize_t read_array_len(self) except? -2:
        """Classic array length: -1 for null. A length larger than the bytes
        remaining (every element takes at least one byte) or than
        MAX_ARRAY_ELEMENTS is rejected."""
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self.read_int32()
        if n < -1:
            raise DecodeError(f"invalid array length {n} at offset {start}")
        return self._array_len(n, start)

    cpdef Py_ssize_t read_compact_array_len(self) except? -2:
        """Compact array length: -1 for null; bounded like read_array_len."""
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = <Py_ssize_t>self.read_uvarint32() - 1
        return self._array_len(n, start)

    cdef Py_ssize_t _array_len(self, Py_ssize_t n, Py_ssize_t start) except? -2:
        """The array length n read at offset start, once it is known to fit:
        each element takes at least one byte, so n may not exceed the bytes
        remaining, nor Kafka's MAX_ARRAY_ELEMENTS. Checked before the caller
        allocates the list."""
        if n > self.end - self.pos:
            raise DecodeError(
                f"array length {n} at offset {start} exceeds the {self.end - self.pos} bytes remaining")
        if n > MAX_ARRAY_ELEMENTS:
            raise DecodeError(
                f"array length {n} at offset {start} exceeds the limit of "
                f"{MAX_ARRAY_ELEMENTS} elements (Kafka's)")
        return n

    cpdef object read_raw(self, Py_ssize_t n):
        self.need(n, b"raw bytes")
        return self._copy(n)

    cpdef object read_view(self, Py_ssize_t n):
        self.need(n, b"raw bytes")
        cdef Py_ssize_t start = self.pos
        self.pos += n
        return memoryview(self.obj)[start:start + n]
