# C-level varint helpers shared by the wire primitives (_wire.pyx) and the
# record batch code (records/_batch.pyx). Header-only: everything is inline,
# so both modules get the same code without a Python call in between.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

# Return codes of decode_uvarint (consumed bytes on success are > 0).
cdef enum:
    VARINT_TRUNCATED = -1   # ran out of input before the last byte
    VARINT_TOO_LONG = -2    # more bytes than the type allows (corrupt input)


cdef inline uint64_t zigzag64(int64_t v) nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int64_t unzigzag64(uint64_t v) nogil:
    return <int64_t>(v >> 1) ^ -<int64_t>(v & 1)


cdef inline Py_ssize_t uvarint_size(uint64_t v) nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline Py_ssize_t encode_uvarint(unsigned char* out, uint64_t v) nogil:
    """Write v as an unsigned LEB128 varint; return the bytes written (1..10)."""
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        out[n] = <unsigned char>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    out[n] = <unsigned char>v
    return n + 1


cdef inline Py_ssize_t decode_uvarint(const unsigned char* p, Py_ssize_t avail,
                                      uint64_t* out, int max_bytes) nogil:
    """Read an unsigned varint of at most max_bytes (5 for 32-bit, 10 for 64-bit).

    Returns the number of bytes consumed, VARINT_TRUNCATED or VARINT_TOO_LONG.
    """
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef Py_ssize_t i = 0
    cdef unsigned char b
    while True:
        if i >= avail:
            return VARINT_TRUNCATED
        if i >= max_bytes:
            return VARINT_TOO_LONG
        b = p[i]
        result |= (<uint64_t>(b & 0x7F)) << shift
        i += 1
        if not (b & 0x80):
            out[0] = result
            return i
        shift += 7
