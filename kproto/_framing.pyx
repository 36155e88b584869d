# cython: language_level=3, boundscheck=False, wraparound=False
"""Kafka message framing: a 4-byte big-endian size, then that many bytes.

:class:`FrameDecoder` turns an arbitrary chunking of a byte stream (what
``recv`` returns: one byte, or megabytes holding many frames) into whole frames.
It is the two-phase read of Java's ``NetworkReceive``: read the 4-byte size,
validate it, only then allocate the frame, then fill it. Costs:

* each byte is copied at most once; a frame split over many chunks is filled
  in place in a buffer allocated once at its final size (no growing buffer,
  no quadratic joins);
* a frame lying wholly inside one fed chunk is copied once into ``bytes`` -
  or, when the chunk is immutable ``bytes`` and the frame is large
  (>= ``ZERO_COPY_MIN`` bytes), not copied at all: you get a read-only
  ``memoryview`` slice of the chunk. So frames are bytes-like objects (``bytes``
  or ``memoryview``); call ``bytes(frame)`` if you need ``bytes``. A mutable
  chunk (bytearray, a recv_into buffer) is never aliased, since the driver
  may reuse it.

A size that is negative or above ``max_frame_size`` raises
:class:`kproto.errors.FrameError` - usually the peer is not a Kafka broker
(an HTTP server, a TLS port) and the message says what the bytes look like.
After that the decoder stays failed: the stream has lost its framing and
cannot be resynchronised, so every later ``feed`` raises again.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.string cimport memcpy
from libc.stdint cimport int32_t, uint32_t

from kproto.errors import FrameError

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

# Whole frames at least this large, found inside an immutable bytes chunk, are
# handed out as memoryview slices instead of being copied.
ZERO_COPY_MIN = 64 * 1024

cdef Py_ssize_t _ZERO_COPY_MIN = ZERO_COPY_MIN


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0]) << 24) | ((<uint32_t>p[1]) << 16) | ((<uint32_t>p[2]) << 8) | (<uint32_t>p[3])


cdef str _hint(const unsigned char* p, str which):
    """Guess what the four 'size' bytes really are, for the error message."""
    cdef bytes b = PyBytes_FromStringAndSize(<const char*>p, 4)
    if b == b"HTTP":
        return f"{which} look like an HTTP response"
    if (p[0] == 0x15 or p[0] == 0x16) and p[1] == 0x03:
        kind = "alert" if p[0] == 0x15 else "handshake"
        return (f"{which} look like a TLS {kind}: the port probably expects TLS "
                f"(security.protocol=SSL) or is a TLS endpoint")
    if all(0x20 <= c < 0x7F for c in b):
        return f"{which} are text: {b.decode('ascii')!r}"
    return ""


def frame(payload):
    """Return ``payload`` (any bytes-like object) with its 4-byte size prefix."""
    cdef Py_buffer view
    cdef bytes out
    cdef unsigned char* dst
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        if view.len > 0x7FFFFFFF:
            raise FrameError(f"payload of {view.len} bytes does not fit a 4-byte frame size")
        out = PyBytes_FromStringAndSize(NULL, view.len + 4)
        dst = <unsigned char*>PyBytes_AS_STRING(out)
        dst[0] = <unsigned char>(view.len >> 24)
        dst[1] = <unsigned char>(view.len >> 16)
        dst[2] = <unsigned char>(view.len >> 8)
        dst[3] = <unsigned char>view.len
        if view.len:
            memcpy(dst + 4, view.buf, view.len)
        return out
    finally:
        PyBuffer_Release(&view)


cdef class FrameDecoder:
    """Incremental decoder of size-prefixed frames; see the module docstring.

    ``feed(data)`` returns the list of frames completed by ``data`` (often
    empty). ``pending_bytes`` is how many bytes of an incomplete frame (size
    prefix included) are buffered; ``frames_decoded`` counts frames so far.
    """

    cdef readonly Py_ssize_t max_frame_size
    cdef readonly Py_ssize_t frames_decoded
    cdef unsigned char hdr[4]
    cdef Py_ssize_t hdr_len         # bytes of the size prefix buffered (0..4)
    cdef bytes body                 # frame under construction, allocated at its size
    cdef Py_ssize_t body_size
    cdef Py_ssize_t body_pos
    cdef object error               # the FrameError that failed the decoder, or None

    def __init__(self, Py_ssize_t max_frame_size=DEFAULT_MAX_FRAME_SIZE):
        if max_frame_size < 0 or max_frame_size > 0x7FFFFFFF:
            raise ValueError(f"max_frame_size must be in 0..2147483647, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self.hdr_len = 0
        self.body = None
        self.body_size = 0
        self.body_pos = 0
        self.frames_decoded = 0
        self.error = None

    @property
    def pending_bytes(self):
        """Bytes of a not yet complete frame held by the decoder (prefix included)."""
        if self.body is not None:
            return 4 + self.body_pos
        return self.hdr_len

    @property
    def failed(self):
        """True once a bad size was seen; every later feed raises."""
        return self.error is not None

    cdef int _check_size(self, const unsigned char* p) except -1:
        cdef int32_t size = <int32_t>_be32(p)
        cdef str hint
        cdef str msg
        if size >= 0 and size <= self.max_frame_size:
            return 0
        if size < 0:
            msg = f"frame size {size} is negative"
        else:
            msg = f"frame size {size} exceeds the maximum {self.max_frame_size}"
        hint = _hint(p, "the first bytes" if self.frames_decoded == 0 else "the size bytes")
        if self.frames_decoded == 0:
            msg += " \u2014 is this a Kafka broker?"
        else:
            msg += f" \u2014 the stream is corrupt or out of sync after {self.frames_decoded} frames"
        if hint:
            msg += f" ({hint})"
        self.error = FrameError(msg)
        self.body = None
        self.hdr_len = 0
        raise self.error

    def feed(self, data):
        """Consume ``data`` (any bytes-like object) and return completed frames."""
        cdef Py_buffer view
        cdef const unsigned char* p
        cdef Py_ssize_t n, pos = 0, take, size
        cdef list out = []
        cdef object mv = None
        cdef bint immutable
        if self.error is not None:
            raise FrameError(f"the frame decoder failed earlier and cannot continue: {self.error}")
        immutable = type(data) is bytes
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char*>view.buf
            n = view.len
            while pos < n:
                if self.body is not None:
                    # Filling a frame that started in an earlier chunk.
                    take = self.body_size - self.body_pos
                    if take > n - pos:
                        take = n - pos
                    memcpy(<unsigned char*>PyBytes_AS_STRING(self.body) + self.body_pos, p + pos, take)
                    self.body_pos += take
                    pos += take
                    if self.body_pos == self.body_size:
                        out.append(self.body)
                        self.body = None
                        self.frames_decoded += 1
                    continue
                if self.hdr_len == 0 and n - pos >= 4:
                    # Fast path: the whole size prefix is in this chunk.
                    self._check_size(p + pos)
                    size = <Py_ssize_t>_be32(p + pos)
                    pos += 4
                else:
                    take = 4 - self.hdr_len
                    if take > n - pos:
                        take = n - pos
                    memcpy(self.hdr + self.hdr_len, p + pos, take)
                    self.hdr_len += take
                    pos += take
                    if self.hdr_len < 4:
                        break
                    self._check_size(self.hdr)
                    size = <Py_ssize_t>_be32(self.hdr)
                    self.hdr_len = 0
                if n - pos >= size:
                    # The whole frame is in this chunk: one copy, or none.
                    if immutable and size >= _ZERO_COPY_MIN:
                        if mv is None:
                            mv = memoryview(data)
                        out.append(mv[pos:pos + size])
                    else:
                        out.append(PyBytes_FromStringAndSize(<const char*>(p + pos), size))
                    pos += size
                    self.frames_decoded += 1
                else:
                    # Size validated: allocate the frame once, at its final size.
                    self.body = PyBytes_FromStringAndSize(NULL, size)
                    self.body_size = size
                    self.body_pos = 0
        finally:
            PyBuffer_Release(&view)
        return out
