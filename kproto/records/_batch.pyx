# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Kafka RecordBatch v2 (magic 2): builder and zero-copy reader.

Layout (61-byte header, then the records, compressed as one block when the
codec is not none; the record count stays outside the compressed block)::

    0 baseOffset int64      8 batchLength int32   12 partitionLeaderEpoch int32
    16 magic int8           17 crc uint32 (CRC-32C of bytes 21..end)
    21 attributes int16     23 lastOffsetDelta int32
    27 baseTimestamp int64  35 maxTimestamp int64  43 producerId int64
    51 producerEpoch int16  53 baseSequence int32  57 recordCount int32
    61 records: [length varint, attributes int8, timestampDelta varlong,
                 offsetDelta varint, key varint-bytes, value varint-bytes,
                 headerCount varint, headers: [key varint-string, value varint-bytes]]

The builder varint-encodes each record straight into one growable C buffer, so
appending creates no Python object. The reader parses batches in place from the
caller's buffer and only materialises Python objects on request: ``records()``
lazily, ``columns()`` as four lists without any Record object.

Every length and count read from the wire is checked against the bytes that
remain before it is used, so hostile input raises DecodeError (CorruptRecordError
for CRC failures) and never makes us over-read or over-allocate.
"""
from kproto._buffer cimport grow_buffer
from cpython.bytes cimport (
    PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact,
)
from cpython.bytearray cimport (
    PyByteArray_CheckExact, PyByteArray_AS_STRING, PyByteArray_GET_SIZE,
)
from cpython.buffer cimport (
    PyObject_GetBuffer, PyBuffer_Release, PyObject_CheckBuffer, PyBUF_SIMPLE, PyBuffer_FillInfo,
)
from cpython.list cimport PyList_Append, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.string cimport memcpy, memset
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t, INT32_MAX

cimport cython

from kproto._varint cimport (
    zigzag64, unzigzag64, uvarint_size, encode_uvarint, decode_uvarint,
)

import struct as _struct

from kproto._crc import crc32c as _crc32c

from kproto import compression as _compression
from kproto.errors import CorruptRecordError, DecodeError, EncodeError

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


# ---------------------------------------------------------------------------
# constants

cdef enum:
    LOG_OVERHEAD = 12            # baseOffset + batchLength
    BATCH_OVERHEAD = 61          # full v2 header incl. record count
    CRC_OFFSET = 17
    ATTR_OFFSET = 21             # CRC covers bytes from here to the end
    MAGIC_OFFSET = 16
    MIN_RECORD_SIZE = 7          # len, attrs, ts, offset, key, value, headers: 1 byte each
    MIN_RECORD_BODY = 6
    LEGACY_MIN_MESSAGE = 14      # v0: crc + magic + attrs + key len + value len
    # record upper bound overhead: length(5) + attributes(1) + ts delta(10) + offset delta(5)
    MAX_RECORD_OVERHEAD = 21

RECORD_BATCH_OVERHEAD = BATCH_OVERHEAD
DEFAULT_MAX_DECOMPRESSED_SIZE = _compression.DEFAULT_MAX_DECOMPRESSED_SIZE

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

cdef int ATTR_CODEC_MASK = 0x07
cdef int ATTR_TIMESTAMP_TYPE = 0x08
cdef int ATTR_TRANSACTIONAL = 0x10
cdef int ATTR_CONTROL = 0x20
cdef int ATTR_DELETE_HORIZON = 0x40

cdef object _legacy_mod = None


cdef object _legacy():
    # Imported lazily: legacy.py imports Record from this module.
    global _legacy_mod
    if _legacy_mod is None:
        from kproto.records import legacy
        _legacy_mod = legacy
    return _legacy_mod


# ---------------------------------------------------------------------------
# big-endian helpers

cdef inline void _put16(unsigned char* p, uint16_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 8)
    p[1] = <unsigned char>v


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void _put64(unsigned char* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef inline uint16_t _get16(const unsigned char* p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]


cdef inline uint32_t _get32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) |
            (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline uint64_t _get64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>_get32(p) << 32) | _get32(p + 4)


cdef inline Py_ssize_t _svarint_size(int64_t v) noexcept nogil:
    return uvarint_size(zigzag64(v))


cdef inline Py_ssize_t _put_svarint(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint64_t u = zigzag64(v)
    if u < 0x80:
        p[0] = <unsigned char>u
        return 1
    return encode_uvarint(p, u)


# ---------------------------------------------------------------------------
# byte-like arguments without a Python object per call

cdef struct _Bytes:
    const unsigned char* p
    Py_ssize_t n            # -1 for null
    bint has_view
    Py_buffer view


cdef inline int _get_bytes(object o, _Bytes* b, str what) except -1:
    """Point b at the bytes of a bytes/bytearray/buffer object (n=-1 for None).

    Only other buffer exporters (memoryview...) take a Py_buffer, which the
    caller releases with _release."""
    b.has_view = 0
    if o is None:
        b.p = NULL
        b.n = -1
        return 0
    if PyBytes_CheckExact(o):
        b.p = <const unsigned char*>PyBytes_AS_STRING(o)
        b.n = PyBytes_GET_SIZE(o)
        return 0
    if PyByteArray_CheckExact(o):
        b.p = <const unsigned char*>PyByteArray_AS_STRING(o)
        b.n = PyByteArray_GET_SIZE(o)
        return 0
    if PyObject_CheckBuffer(o) and not PyUnicode_Check(o):
        try:
            PyObject_GetBuffer(o, &b.view, PyBUF_SIMPLE)
        except BufferError as e:
            raise EncodeError(f"{what}: cannot use a non-contiguous buffer ({e})") from None
        b.has_view = 1
        b.p = <const unsigned char*>b.view.buf
        b.n = b.view.len
        return 0
    raise EncodeError(
        f"{what} must be bytes, bytearray, memoryview or None, not {type(o).__name__}")


cdef inline void _release(_Bytes* b) noexcept:
    if b.has_view:
        b.has_view = 0
        PyBuffer_Release(&b.view)


cdef inline Py_ssize_t _bytes_field_size(Py_ssize_t n) noexcept nogil:
    """Encoded size of a varint-length-prefixed nullable byte field."""
    if n < 0:
        return 1
    return uvarint_size(zigzag64(n)) + n


cdef inline unsigned char* _put_bytes_field(unsigned char* w, const unsigned char* p,
                                            Py_ssize_t n) noexcept nogil:
    if n < 0:
        w[0] = 1            # zigzag(-1)
        return w + 1
    w += _put_svarint(w, n)
    if n:
        memcpy(w, p, n)
    return w + n


cdef inline object _header_pair(object h):
    if PyTuple_CheckExact(h) and PyTuple_GET_SIZE(h) == 2:
        return h
    try:
        k, v = h
    except (TypeError, ValueError):
        raise EncodeError(
            f"a header must be a (str key, bytes value) pair, not {h!r}") from None
    return (k, v)


cdef inline const char* _header_key(object k, Py_ssize_t* n) except NULL:
    if PyUnicode_Check(k):
        return PyUnicode_AsUTF8AndSize(k, n)
    if PyBytes_CheckExact(k):
        n[0] = PyBytes_GET_SIZE(k)
        return PyBytes_AS_STRING(k)
    raise EncodeError(f"a header key must be str, not {type(k).__name__}")


cdef Py_ssize_t _headers_size(object hseq, Py_ssize_t count) except -1:
    """Encoded size of the header entries (not the count)."""
    cdef Py_ssize_t i, klen, total = 0
    cdef _Bytes vb
    cdef object pair
    for i in range(count):
        pair = _header_pair(<object>PySequence_Fast_GET_ITEM(hseq, i))
        _header_key(<object>PyTuple_GET_ITEM(pair, 0), &klen)
        _get_bytes(<object>PyTuple_GET_ITEM(pair, 1), &vb, "header value")
        _release(&vb)
        total += uvarint_size(zigzag64(klen)) + klen + _bytes_field_size(vb.n)
    return total


cdef unsigned char* _write_headers(unsigned char* w, unsigned char* wend, object hseq,
                                   Py_ssize_t count) except NULL:
    """Write the header entries sized by _headers_size, never past wend (a
    header object that changed in between raises instead of overflowing)."""
    cdef Py_ssize_t i, klen
    cdef const char* kp
    cdef _Bytes vb
    cdef object pair
    for i in range(count):
        pair = _header_pair(<object>PySequence_Fast_GET_ITEM(hseq, i))
        kp = _header_key(<object>PyTuple_GET_ITEM(pair, 0), &klen)
        _get_bytes(<object>PyTuple_GET_ITEM(pair, 1), &vb, "header value")
        if (uvarint_size(zigzag64(klen)) + klen + _bytes_field_size(vb.n)) > wend - w:
            _release(&vb)
            raise EncodeError("headers changed while the record was being encoded")
        w += _put_svarint(w, klen)
        memcpy(w, kp, klen)
        w += klen
        w = _put_bytes_field(w, vb.p, vb.n)
        _release(&vb)
    return w


# ---------------------------------------------------------------------------
# builder

# -- the buffer pool ---------------------------------------------------------------------
# Java's BufferPool keeps the freed batch.size buffers for the next batches.
# Here every batch the producer opens mallocs its buffer (batch.size + 256
# bytes, 16,640 by default) and frees it when it is drained (shrink_to_fit
# copies the records to a buffer of their size) or dropped: with keys over
# thousands of partitions, one malloc and one free of 16 KiB per record.
# The pool keeps those buffers instead: a few size classes, each the
# capacity a builder opens with (a class is made by the first builder that
# opens with that capacity, while a slot is free), each a stack of free
# buffers, all bounded together by ``_pool_limit`` bytes. Only buffers of a
# class's exact capacity go back; any other is freed. The pool is memory the
# process holds, not memory batches hold: the producer's buffer.memory
# accounting (RecordAccumulator.used_memory, what batches reserve) does not
# see it, as it did not see what the allocator kept of freed buffers.
# Every call holds the GIL (builders are made, shrunk and freed under it).
cdef enum:
    _POOL_CLASSES = 4
    _POOL_DEPTH = 512

cdef Py_ssize_t _pool_cap[_POOL_CLASSES]                    # 0: a free slot
cdef unsigned char* _pool_free[_POOL_CLASSES][_POOL_DEPTH]
cdef Py_ssize_t _pool_count[_POOL_CLASSES]
cdef Py_ssize_t _pool_bytes = 0
cdef Py_ssize_t _pool_limit = 4 * 1024 * 1024


cdef inline int _pool_class(Py_ssize_t cap, bint make) noexcept:
    """The class of buffers of capacity ``cap`` (made when ``make`` and a
    slot is free); -1 when there is none."""
    cdef int i
    for i in range(_POOL_CLASSES):
        if _pool_cap[i] == cap:
            return i
    if make and _pool_limit > 0:
        for i in range(_POOL_CLASSES):
            if _pool_cap[i] == 0:
                _pool_cap[i] = cap
                _pool_count[i] = 0
                return i
    return -1


cdef unsigned char* _pool_take(Py_ssize_t cap) noexcept:
    """A pooled buffer of exactly ``cap`` bytes, or NULL (the caller mallocs)."""
    global _pool_bytes
    cdef int i = _pool_class(cap, True)
    if i < 0 or _pool_count[i] == 0:
        return NULL
    _pool_count[i] -= 1
    _pool_bytes -= cap
    return _pool_free[i][_pool_count[i]]


cdef bint _pool_give(unsigned char* buf, Py_ssize_t cap) noexcept:
    """Keep ``buf`` (``cap`` bytes) for a later builder; False when the pool
    does not take it (the caller frees it)."""
    global _pool_bytes
    cdef int i
    if _pool_bytes + cap > _pool_limit:
        return False
    i = _pool_class(cap, False)
    if i < 0 or _pool_count[i] >= _POOL_DEPTH:
        return False
    _pool_free[i][_pool_count[i]] = buf
    _pool_count[i] += 1
    _pool_bytes += cap
    return True


def buffer_pool_stats():
    """{capacity: free buffers pooled} and the pool's bytes and limit, as
    ``(classes, pooled_bytes, limit_bytes)``."""
    return ({_pool_cap[i]: _pool_count[i] for i in range(_POOL_CLASSES) if _pool_cap[i]},
            _pool_bytes, _pool_limit)


def set_buffer_pool_limit(Py_ssize_t limit_bytes):
    """Bound the bytes the pool keeps (0: keep none, every buffer freed as
    before); buffers beyond the new bound are freed now. Returns the old bound."""
    global _pool_limit, _pool_bytes
    cdef Py_ssize_t old = _pool_limit
    cdef int i
    if limit_bytes < 0:
        raise ValueError(f"the buffer pool's limit is a number of bytes, 0 or more, not {limit_bytes}")
    _pool_limit = limit_bytes
    for i in range(_POOL_CLASSES):
        while _pool_count[i] and _pool_bytes > _pool_limit:
            _pool_count[i] -= 1
            _pool_bytes -= _pool_cap[i]
            PyMem_Free(_pool_free[i][_pool_count[i]])
        if _pool_count[i] == 0:
            _pool_cap[i] = 0             # the slot is free for another capacity
    return old


@cython.no_gc                   # why: see _batch.pxd
cdef class BatchBuilder:
    """Accumulates records into one RecordBatch v2 (magic 2).

    ``append`` encodes the record into a C buffer right away; ``build`` writes
    the header, compresses the records once (cached until the next append) and
    computes the CRC. Producer id/epoch/sequence can be changed until (and
    between) builds, because the idempotent producer assigns them at drain time.
    """
    # (fields: see _batch.pxd)

    def __cinit__(self, compression=0, Py_ssize_t batch_size=16384, *,
                  int64_t base_offset=0, int64_t producer_id=-1,
                  int producer_epoch=-1, int32_t base_sequence=-1,
                  bint is_transactional=False, bint is_control=False,
                  int timestamp_type=0, compression_level=None,
                  double compression_ratio_estimate=1.0, magic=2):
        cdef Py_ssize_t cap
        if magic != 2:
            raise ValueError(
                f"BatchBuilder writes magic 2 only (got {magic!r}); use "
                "kproto.records.legacy.LegacyBatchBuilder for v0/v1 message sets")
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 (create) or 1 (log append), "
                             f"not {timestamp_type}")
        if not -32768 <= producer_epoch <= 32767:
            raise ValueError(f"producer_epoch {producer_epoch} does not fit in int16")
        if compression is None or (type(compression) is int and compression == 0):
            self.compression = 0           # the common case, without a Python call
        else:
            self.compression = _compression.check_codec(compression)
        if compression_level is not None and type(compression_level) is not int:
            # exactly an int: the builder is not tracked by the cyclic GC
            # (see _batch.pxd), so it must hold nothing that could refer back to it
            raise TypeError(f"compression_level must be an int or None, not "
                            f"{type(compression_level).__name__}")
        self.compression_level = compression_level
        self.batch_size = batch_size
        self._set_ratio(compression_ratio_estimate)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.timestamp_type = timestamp_type
        self.record_count = 0
        self.first_timestamp = -1
        self.max_timestamp = -1
        self._payload = None
        cap = batch_size + 256 if batch_size > 0 else 1024
        if cap > 1024 * 1024:
            cap = 1024 * 1024
        if cap < 1024:
            cap = 1024
        self.buf = _pool_take(cap)
        if self.buf == NULL:
            self.buf = <unsigned char*>PyMem_Malloc(cap)
            if self.buf == NULL:
                raise MemoryError()
        self.cap = cap
        self.pos = BATCH_OVERHEAD

    def __dealloc__(self):
        if self.buf != NULL:
            if not _pool_give(self.buf, self.cap):
                PyMem_Free(self.buf)
            self.buf = NULL

    cdef int _reserve(self, Py_ssize_t n) except -1:
        return grow_buffer(&self.buf, &self.cap, self.pos + n)

    cdef Py_ssize_t _put_record(self, int64_t ts, const unsigned char* kp, Py_ssize_t kn,
                                const unsigned char* vp, Py_ssize_t vn,
                                object hseq, Py_ssize_t hcount, Py_ssize_t hsize) except -1:
        """Encode one record from raw key/value bytes (length -1: null) and
        ``hcount`` header pairs of ``hseq`` sized ``hsize`` (by _headers_size);
        its size, or 0 if the batch is full."""
        cdef Py_ssize_t body, total
        cdef int64_t ts_delta, base_ts
        cdef unsigned char* w
        base_ts = ts if self.record_count == 0 else self.first_timestamp
        # unsigned wrap-around: exact for any int64 pair, and what Java does
        ts_delta = <int64_t>(<uint64_t>ts - <uint64_t>base_ts)
        body = (1 + _svarint_size(ts_delta) + _svarint_size(self.record_count)
                + _bytes_field_size(kn) + _bytes_field_size(vn)
                + _svarint_size(hcount) + hsize)
        total = _svarint_size(body) + body
        if self.record_count > 0:
            if self.pos + total > self._limit or self.record_count == INT32_MAX:
                return 0
        if self.pos + total > INT32_MAX - LOG_OVERHEAD:
            raise EncodeError(f"record of {total} bytes does not fit in a record batch")
        if self.pos + total > self.cap:
            self._reserve(total)
        w = self.buf + self.pos
        w += _put_svarint(w, body)
        w[0] = 0            # record attributes (unused)
        w += 1
        w += _put_svarint(w, ts_delta)
        w += _put_svarint(w, self.record_count)
        w = _put_bytes_field(w, kp, kn)
        w = _put_bytes_field(w, vp, vn)
        w += _put_svarint(w, hcount)
        if hcount:
            _write_headers(w, self.buf + self.pos + total, hseq, hcount)
        self.pos += total
        if self.record_count == 0:
            self.first_timestamp = ts
            self.max_timestamp = ts
        elif ts > self.max_timestamp:
            self.max_timestamp = ts
        self.record_count += 1
        self._payload = None
        return total

    cdef Py_ssize_t _append(self, int64_t ts, object key, object value,
                            object headers) except -1:
        """Encode one record; return its size, or 0 if the batch is full."""
        cdef _Bytes kb, vb
        cdef object hseq = None
        cdef Py_ssize_t hcount = 0, hsize = 0
        kb.has_view = 0
        vb.has_view = 0
        try:
            # headers first: sizing them may run Python code (sequence protocol),
            # which must not happen while we hold raw key/value pointers
            if headers is not None:
                hseq = PySequence_Fast(headers, "headers must be a sequence of (key, value) pairs")
                hcount = PySequence_Fast_GET_SIZE(hseq)
                if hcount:
                    hsize = _headers_size(hseq, hcount)
            # bytes and None inline; everything else through _get_bytes
            if key is None:
                kb.n = -1
                kb.p = NULL
            elif PyBytes_CheckExact(key):
                kb.p = <const unsigned char*>PyBytes_AS_STRING(key)
                kb.n = PyBytes_GET_SIZE(key)
            else:
                _get_bytes(key, &kb, "key")
            if PyBytes_CheckExact(value):
                vb.p = <const unsigned char*>PyBytes_AS_STRING(value)
                vb.n = PyBytes_GET_SIZE(value)
            else:
                _get_bytes(value, &vb, "value")
            return self._put_record(ts, kb.p, kb.n, vb.p, vb.n, hseq, hcount, hsize)
        finally:
            _release(&kb)
            _release(&vb)

    def append(self, int64_t timestamp_ms, key, value, headers=None):
        """Append one record; return its encoded size, or 0 if the batch is full.

        The first record is always accepted, whatever its size (the producer
        checks max.request.size on its own)."""
        return self._append(timestamp_ms, key, value, headers)

    def append_many(self, timestamps, keys, values, headers=None, Py_ssize_t start=0):
        """Append records from columns until the batch is full; return how many.

        ``timestamps`` is one int for all records or a sequence; ``keys`` is
        None (all null) or a sequence; ``headers`` None or one header list per
        record. Records are taken from index ``start`` on (so a caller feeding
        one big column into successive batches never slices it): the return
        value n means records start..start+n-1 were appended."""
        cdef object vseq = PySequence_Fast(values, "values must be a sequence")
        cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(vseq)
        cdef object kseq = None, tseq = None, hseq = None
        cdef bint single_ts = isinstance(timestamps, int)
        cdef int64_t ts = 0
        cdef Py_ssize_t i
        cdef object key = None, hdr = None
        if start < 0 or start > n:
            raise ValueError(f"start {start} is outside the {n} values")
        if single_ts:
            ts = timestamps
        else:
            tseq = PySequence_Fast(timestamps, "timestamps must be an int or a sequence")
            if PySequence_Fast_GET_SIZE(tseq) != n:
                raise ValueError(f"{PySequence_Fast_GET_SIZE(tseq)} timestamps for {n} values")
        if keys is not None:
            kseq = PySequence_Fast(keys, "keys must be None or a sequence")
            if PySequence_Fast_GET_SIZE(kseq) != n:
                raise ValueError(f"{PySequence_Fast_GET_SIZE(kseq)} keys for {n} values")
        if headers is not None:
            hseq = PySequence_Fast(headers, "headers must be None or a sequence")
            if PySequence_Fast_GET_SIZE(hseq) != n:
                raise ValueError(f"{PySequence_Fast_GET_SIZE(hseq)} header lists for {n} values")
        for i in range(start, n):
            if not single_ts:
                ts = <object>PySequence_Fast_GET_ITEM(tseq, i)
            if kseq is not None:
                key = <object>PySequence_Fast_GET_ITEM(kseq, i)
            if hseq is not None:
                hdr = <object>PySequence_Fast_GET_ITEM(hseq, i)
            if self._append(ts, key, <object>PySequence_Fast_GET_ITEM(vseq, i), hdr) == 0:
                return i - start
        return n - start

    def set_producer_state(self, int64_t producer_id, int producer_epoch,
                           int32_t base_sequence, is_transactional=None):
        """Set idempotence/transaction fields (at drain time); cheap, no rebuild
        of the records."""
        self._set_producer_state(producer_id, producer_epoch, base_sequence,
                                 -1 if is_transactional is None else bool(is_transactional))

    cdef int _set_producer_state(self, int64_t producer_id, int producer_epoch, int32_t base_sequence,
                                 int is_transactional) except -1:
        """``set_producer_state`` for C callers (the sender's sequencing,
        kproto/producer/_acknowledge.pyx): ``is_transactional`` -1 leaves it."""
        if not -32768 <= producer_epoch <= 32767:
            raise ValueError(f"producer_epoch {producer_epoch} does not fit in int16")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        if is_transactional >= 0:
            self.is_transactional = is_transactional
        return 0

    def set_base_offset(self, int64_t base_offset):
        self.base_offset = base_offset

    @property
    def attributes(self):
        return (self.compression | (ATTR_TIMESTAMP_TYPE if self.timestamp_type else 0)
                | (ATTR_TRANSACTIONAL if self.is_transactional else 0)
                | (ATTR_CONTROL if self.is_control else 0))

    @property
    def last_offset_delta(self):
        return self.record_count - 1

    cdef int _set_ratio(self, double ratio) except -1:
        cdef double room
        if not ratio > 0.0:
            raise ValueError(f"compression_ratio_estimate must be > 0, not {ratio}")
        if self.compression == 0 or ratio >= 1.0:
            ratio = 1.0
        self._ratio_estimate = ratio
        # "full" compares uncompressed bytes with batch_size / ratio
        room = (self.batch_size - BATCH_OVERHEAD) / ratio
        if room > <double>(INT32_MAX - LOG_OVERHEAD):
            room = <double>(INT32_MAX - LOG_OVERHEAD)
        self._limit = BATCH_OVERHEAD + <Py_ssize_t>room
        return 0

    def set_compression_ratio_estimate(self, double ratio):
        """Let a compressed batch take more records: it is full when its
        uncompressed records times ``ratio`` reach batch_size (like the Java
        producer's per-topic CompressionRatioEstimator). Feed it from
        ``compression_ratio`` of earlier batches; 1.0 (default) is exact and
        never overshoots."""
        self._set_ratio(ratio)

    def grow(self, Py_ssize_t batch_size):
        """Raise batch_size to ``batch_size`` (never lower it): the batch takes
        more records from now on. The producer opens batches small and grows
        them while records keep coming, so a large batch.size costs memory
        only where the traffic fills it."""
        if batch_size > self.batch_size:
            self.batch_size = batch_size
            self._set_ratio(self._ratio_estimate)

    def shrink_to_fit(self):
        """Give back the buffer's room beyond the records written, and return
        the bytes the buffer now holds. For a batch that takes no more
        records (the producer drained it): a batch sent with a few records
        otherwise keeps the room it opened with until the broker answers,
        and with many partitions those rooms fill buffer.memory. A later
        append still works (the buffer grows again).

        The records are copied to a buffer of their size and the large one
        freed whole, not shrunk in place: the allocator then hands the whole
        block to the next batch, where the tail a shrink leaves could not
        serve it (the process grew by ~20 MB at 1,000 partitions); the
        buffer pool (below) keeps it for the next batch instead, when it has
        room. Only worth it when at least half the buffer is unused."""
        return self._shrink_to_fit()

    cdef Py_ssize_t _shrink_to_fit(self) except -1:
        """``shrink_to_fit`` for C callers (the producer's drain)."""
        cdef unsigned char* smaller
        if self.cap >= 2 * self.pos:
            smaller = <unsigned char*>PyMem_Malloc(self.pos)
            if smaller != NULL:          # else the larger buffer is kept: still valid
                memcpy(smaller, self.buf, self.pos)
                if not _pool_give(self.buf, self.cap):
                    PyMem_Free(self.buf)
                self.buf = smaller
                self.cap = self.pos
        return self.cap

    @property
    def compression_ratio_estimate(self):
        return self._ratio_estimate

    @property
    def compression_ratio(self):
        """Compressed / uncompressed size of the records after build() (1.0
        without compression or before the first build)."""
        if self._payload is None or self.pos == BATCH_OVERHEAD:
            return 1.0
        return len(self._payload) / <double>(self.pos - BATCH_OVERHEAD)

    @property
    def room(self):
        """Uncompressed record bytes (with their record overheads) the batch
        still takes before it refuses one; an empty batch takes its first
        record whatever its size."""
        return max(0, self._limit - self.pos)

    def size_in_bytes(self):
        """Size of the built batch if known, else the uncompressed size so far
        (an upper bound for compressed batches)."""
        if self._payload is not None:
            return BATCH_OVERHEAD + len(self._payload)
        return self.pos

    def is_empty(self):
        return self.record_count == 0

    def build(self):
        """Return the whole batch as bytes. Can be called again (e.g. after
        set_producer_state); compression runs once per set of records."""
        cdef Py_ssize_t total = self._built_size()
        cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
        # `out` is ours alone until we return it, so writing into it is safe
        self._write_built(<unsigned char*>PyBytes_AS_STRING(out), total)
        return out

    cdef Py_ssize_t _built_size(self) except -1:
        """The size of the built batch (compressing its records first, once)."""
        cdef Py_ssize_t total
        if self.compression == 0:
            total = self.pos
        else:
            if self._payload is None:
                raw = PyBytes_FromStringAndSize(<char*>self.buf + BATCH_OVERHEAD,
                                                self.pos - BATCH_OVERHEAD)
                payload_obj = _compression.compress(self.compression, raw,
                                                    self.compression_level)
                if not PyBytes_CheckExact(payload_obj):
                    payload_obj = bytes(payload_obj)
                self._payload = payload_obj
            total = BATCH_OVERHEAD + PyBytes_GET_SIZE(self._payload)
        if total - LOG_OVERHEAD > INT32_MAX:
            raise EncodeError(f"record batch of {total} bytes is too large")
        return total

    cdef int _write_built(self, unsigned char* o, Py_ssize_t total) except -1:
        """Write the built batch, ``total`` bytes (``_built_size()``, called
        just before), at ``o``: what ``build()`` returns, without a bytes
        object of its own (the Produce request writer puts it straight into
        the request, kproto/producer/_produce_request.pyx)."""
        cdef const unsigned char* payload
        cdef int attrs = (self.compression | (ATTR_TIMESTAMP_TYPE if self.timestamp_type else 0)
                          | (ATTR_TRANSACTIONAL if self.is_transactional else 0)
                          | (ATTR_CONTROL if self.is_control else 0))
        if self.compression == 0:
            payload = self.buf + BATCH_OVERHEAD
        else:
            payload = <const unsigned char*>PyBytes_AS_STRING(self._payload)
        _put64(o, <uint64_t>self.base_offset)
        _put32(o + 8, <uint32_t>(total - LOG_OVERHEAD))
        _put32(o + 12, <uint32_t>-1)               # partitionLeaderEpoch
        o[16] = 2                                  # magic
        _put16(o + 21, <uint16_t>attrs)
        _put32(o + 23, <uint32_t>(self.record_count - 1))
        _put64(o + 27, <uint64_t>self.first_timestamp)
        _put64(o + 35, <uint64_t>self.max_timestamp)
        _put64(o + 43, <uint64_t>self.producer_id)
        _put16(o + 51, <uint16_t>self.producer_epoch)
        _put32(o + 53, <uint32_t>self.base_sequence)
        _put32(o + 57, <uint32_t>self.record_count)
        memcpy(o + BATCH_OVERHEAD, payload, total - BATCH_OVERHEAD)
        _put32(o + CRC_OFFSET, _crc_of_memory(o + ATTR_OFFSET, total - ATTR_OFFSET))
        return 0

    @staticmethod
    def estimate_size_in_bytes(key_size, value_size, headers=None):
        """Upper bound of a batch holding one record of these sizes.

        key_size/value_size: an int, None/-1 for null, or the bytes themselves.
        The producer compares it with max.request.size before appending."""
        cdef Py_ssize_t k = _size_arg(key_size)
        cdef Py_ssize_t v = _size_arg(value_size)
        cdef Py_ssize_t hcount = 0, hsize = 0
        cdef object hseq
        if headers is not None:
            hseq = PySequence_Fast(headers, "headers must be a sequence of (key, value) pairs")
            hcount = PySequence_Fast_GET_SIZE(hseq)
            hsize = _headers_size(hseq, hcount)
        return (BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + _bytes_field_size(k)
                + _bytes_field_size(v) + _svarint_size(hcount) + hsize)

    def __repr__(self):
        return (f"<BatchBuilder {self.record_count} records, {self.pos} bytes, "
                f"codec={_compression.CODEC_NAMES[self.compression]}>")


cdef Py_ssize_t _size_arg(object x) except -2:
    if x is None:
        return -1
    if isinstance(x, int):
        return -1 if x < 0 else x
    return len(x)


def build_control_batch(bint commit, int64_t producer_id, int producer_epoch,
                        int32_t coordinator_epoch, int64_t timestamp_ms, *,
                        int64_t base_offset=0):
    """An end-transaction marker batch (transactional + control, one record).

    Key: version int16 0 + type int16 (0 abort, 1 commit); value: version
    int16 0 + coordinator epoch int32. Brokers write these (on EndTxn); we need
    them for tests and fake brokers."""
    cdef BatchBuilder b = BatchBuilder(
        0, 1 << 20, base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=-1, is_transactional=True,
        is_control=True)
    b._append(timestamp_ms, _struct.pack(">hh", 0, 1 if commit else 0),
              _struct.pack(">hi", 0, coordinator_epoch), None)
    return b.build()


@cython.final
cdef class _Span:
    """Raw memory lent to a function that takes a buffer (the CRC-32C
    function) for one call. Made per call rather than shared, because that
    function may release the GIL while it reads; it holds no object, so the
    cyclic garbage collector does not track it - the memoryview of the
    bytes and its slice that ``build()`` made before were three tracked
    objects per batch."""
    cdef const unsigned char* data
    cdef Py_ssize_t size

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, <void*>self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef uint32_t _crc_of_memory(const unsigned char* data, Py_ssize_t n) except? 0:
    """The CRC-32C of ``n`` bytes at ``data`` (memory the caller keeps valid)."""
    cdef _Span span = _Span.__new__(_Span)
    span.data = data
    span.size = n
    return _crc32c(span)


# ---------------------------------------------------------------------------
# reader

cdef class _Buf:
    """The fetch data every batch of a response keeps alive: a memoryview and
    a raw pointer into it.

    No Py_buffer is held: ``mv`` holds its own export of the data (so a
    bytearray cannot be resized under the pointer), and a second, long-lived
    export - on ``mv`` or on the data's owner - made the garbage collector
    fail to clear them when batches ended up in a reference cycle
    ("BufferError: memoryview has 1 exported buffer")."""
    cdef const unsigned char* data
    cdef Py_ssize_t size
    cdef readonly object mv        # 1-D unsigned byte memoryview of the data

    def __cinit__(self, obj):
        cdef Py_buffer view
        cdef object mv = memoryview(obj)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())
        if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
            mv = mv.cast("B")
        self.mv = mv
        PyObject_GetBuffer(mv, &view, PyBUF_SIMPLE)
        self.data = <const unsigned char*>view.buf
        self.size = view.len
        PyBuffer_Release(&view)


cdef struct _Rec:
    int64_t ts_delta
    int32_t offset_delta
    Py_ssize_t key_pos
    Py_ssize_t key_len        # -1: null
    Py_ssize_t val_pos
    Py_ssize_t val_len
    Py_ssize_t hdr_pos
    Py_ssize_t hdr_count
    Py_ssize_t end


# Error codes of the nogil record parsing helpers (valid positions are >= 0).
cdef enum:
    E_TRUNCATED = -1        # == VARINT_TRUNCATED
    E_TOO_LONG = -2         # == VARINT_TOO_LONG
    E_RANGE = -3            # varint outside int32
    E_NEGATIVE = -4         # negative length (not -1 where null is allowed)
    E_OVERRUN = -5          # length larger than what is left of the record


cdef Py_ssize_t _sv32_slow(const unsigned char* d, Py_ssize_t pos, Py_ssize_t end,
                           int64_t* out) noexcept nogil:
    cdef uint64_t u = 0
    cdef Py_ssize_t c
    cdef int64_t v
    c = decode_uvarint(d + pos, end - pos, &u, 5)
    if c < 0:
        return c
    v = unzigzag64(u)
    if v < -2147483648 or v > 2147483647:
        return E_RANGE
    out[0] = v
    return pos + c


cdef inline Py_ssize_t _sv32(const unsigned char* d, Py_ssize_t pos, Py_ssize_t end,
                             int64_t* out) noexcept nogil:
    """Decode a zigzag varint of at most 5 bytes in int32 range: new pos or E_*.

    One- and two-byte varints (all lengths below 8 KiB) are decoded inline."""
    cdef uint64_t u
    if end > pos:
        u = d[pos]
        if u < 0x80:
            out[0] = <int64_t>(u >> 1) ^ -<int64_t>(u & 1)
            return pos + 1
        if end - pos >= 2 and d[pos + 1] < 0x80:
            u = (u & 0x7F) | (<uint64_t>d[pos + 1] << 7)
            out[0] = <int64_t>(u >> 1) ^ -<int64_t>(u & 1)
            return pos + 2
    return _sv32_slow(d, pos, end, out)


cdef inline Py_ssize_t _len(const unsigned char* d, Py_ssize_t pos, Py_ssize_t end,
                            Py_ssize_t* out, bint nullable) noexcept nogil:
    """A varint length that fits before end (-1 allowed when nullable)."""
    cdef int64_t v = 0
    pos = _sv32(d, pos, end, &v)
    if pos < 0:
        return pos
    if v < 0:
        if v == -1 and nullable:
            out[0] = -1
            return pos
        return E_NEGATIVE
    if v > end - pos:
        return E_OVERRUN
    out[0] = <Py_ssize_t>v
    return pos


cdef int _raise_rec(Py_ssize_t code, str what) except -1:
    if code == E_TRUNCATED:
        raise DecodeError(f"record batch: {what} varint is truncated")
    if code == E_TOO_LONG:
        raise DecodeError(f"record batch: {what} varint is too long")
    if code == E_RANGE:
        raise DecodeError(f"record batch: {what} is out of int32 range")
    if code == E_NEGATIVE:
        raise DecodeError(f"record batch: negative {what}")
    if code == E_OVERRUN:
        raise DecodeError(f"record batch: {what} exceeds the bytes left in the record")
    raise DecodeError(f"record batch: invalid {what}")


cdef int _parse_record(const unsigned char* d, Py_ssize_t pos, Py_ssize_t n,
                       _Rec* r) except -1:
    """Parse (and bounds-check) the record at pos; fill r.

    The work is done by noexcept helpers returning error codes so the C
    compiler can inline them; exceptions are built only on the error path."""
    cdef int64_t length = 0, v = 0
    cdef uint64_t u = 0
    cdef Py_ssize_t c, end, i, hk, hv, p
    p = _sv32(d, pos, n, &length)
    if p < 0:
        return _raise_rec(p, "record length")
    pos = p
    if length < MIN_RECORD_BODY or length > n - pos:
        raise DecodeError(f"record batch: invalid record length {length} "
                          f"({n - pos} bytes left)")
    end = pos + <Py_ssize_t>length
    pos += 1                                   # record attributes (unused)
    if d[pos] < 0x80:
        u = d[pos]
        pos += 1
    else:
        c = decode_uvarint(d + pos, end - pos, &u, 10)
        if c < 0:
            return _raise_rec(c, "timestamp delta")
        pos += c
    r.ts_delta = unzigzag64(u)
    p = _sv32(d, pos, end, &v)
    if p < 0:
        return _raise_rec(p, "offset delta")
    pos = p
    r.offset_delta = <int32_t>v
    p = _len(d, pos, end, &r.key_len, True)
    if p < 0:
        return _raise_rec(p, "key length")
    pos = p
    r.key_pos = pos
    if r.key_len > 0:
        pos += r.key_len
    p = _len(d, pos, end, &r.val_len, True)
    if p < 0:
        return _raise_rec(p, "value length")
    pos = p
    r.val_pos = pos
    if r.val_len > 0:
        pos += r.val_len
    p = _sv32(d, pos, end, &v)
    if p < 0:
        return _raise_rec(p, "header count")
    pos = p
    if v < 0 or v > (end - pos) // 2:
        raise DecodeError(f"record batch: invalid header count {v}")
    r.hdr_count = <Py_ssize_t>v
    r.hdr_pos = pos
    for i in range(r.hdr_count):
        p = _len(d, pos, end, &hk, False)
        if p < 0:
            return _raise_rec(p, "header key length")
        pos = p + hk
        p = _len(d, pos, end, &hv, True)
        if p < 0:
            return _raise_rec(p, "header value length")
        pos = p
        if hv > 0:
            pos += hv
    if pos != end:
        raise DecodeError(f"record batch: record has {end - pos} unexpected bytes "
                          f"after its last header")
    r.end = end
    return 0


cdef object _parse_headers(const unsigned char* d, Py_ssize_t pos, Py_ssize_t count,
                           Py_ssize_t end):
    """Headers of an already validated record as [(str, bytes | None)]."""
    cdef list out = PyList_New(count)
    cdef Py_ssize_t i, kl = 0, vl = 0
    cdef object k, v, pair
    for i in range(count):
        pos = _len(d, pos, end, &kl, False)
        if pos < 0:
            _raise_rec(pos, "header key length")
        try:
            k = PyUnicode_DecodeUTF8(<const char*>d + pos, kl, NULL)
        except UnicodeDecodeError as e:
            raise DecodeError(f"record batch: header key is not UTF-8 ({e})") from None
        pos += kl
        pos = _len(d, pos, end, &vl, True)
        if pos < 0:
            _raise_rec(pos, "header value length")
        if vl < 0:
            v = None
        else:
            v = PyBytes_FromStringAndSize(<const char*>d + pos, vl)
            pos += vl
        pair = (k, v)
        Py_INCREF(pair)
        PyList_SET_ITEM(out, i, pair)
    return out


cdef inline object _bytes_or_none(const unsigned char* d, Py_ssize_t pos, Py_ssize_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>d + pos, n)


@cython.freelist(256)
@cython.no_gc
cdef class Record:
    """One record: offset, timestamp, timestamp_type, key, value, headers.

    Not tracked by the cyclic GC (it only holds bytes and a list of pairs) and
    served from a freelist: a fetch creates millions of these."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef object _headers           # None until asked for when the record has none
    # Where the record came from; set by the consumer's fetcher (records(topic, partition)).
    cdef readonly object topic
    cdef readonly int32_t partition
    # Share groups (KIP-932): how many times the group delivered the record;
    # 0 (shown as None) for what a Consumer reads. A field here, not a
    # subclass: a Python subclass of this type costs ~6x a Record to make.
    cdef int32_t _delivery_count

    def __init__(self, int64_t offset, int64_t timestamp, int timestamp_type,
                 key, value, headers=None, topic=None, int32_t partition=-1):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self._headers = headers

    @property
    def headers(self):
        """[(str, bytes | None)]"""
        if self._headers is None:
            self._headers = []
        return self._headers

    @property
    def delivery_count(self):
        """How many times a share group delivered this record (1 the first
        time); None for records a Consumer reads (Java's deliveryCount())."""
        return self._delivery_count if self._delivery_count > 0 else None

    def _set_delivery_count(self, int32_t count):
        """The share consumer's fetcher records the delivery count."""
        self._delivery_count = count

    def __repr__(self):
        dc = f", delivery_count={self._delivery_count}" if self._delivery_count > 0 else ""
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}{dc})")

    def _tuple(self):
        return (self.offset, self.timestamp, self.timestamp_type, self.key,
                self.value, self.headers)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._tuple() == (<Record>other)._tuple()

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))


cdef object _lz4_block_decompress = None     # lz4.block.decompress, loaded lazily
cdef bint _lz4_block_missing = 0


cdef inline uint32_t _get32le(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) |
            (<uint32_t>p[3] << 24))


cdef object _lz4_fast(object mv, Py_ssize_t start, Py_ssize_t n,
                      const unsigned char* p, Py_ssize_t max_size):
    """Decompress the LZ4 frame(s) of a v2 batch by walking the frame here and
    handing each block to lz4.block (the frame API costs ~2 us more per call,
    a sizeable share of a 16 KiB batch).

    Only frames of independent blocks without dictionary (what every Kafka
    client writes) take this path; anything else returns None and goes to
    kproto.compression. Frame checksums are not verified: the batch CRC-32C
    covers these bytes. Output is bounded per block by the frame's block size
    and in total by max_size."""
    global _lz4_block_decompress, _lz4_block_missing
    cdef Py_ssize_t pos = 0, size, bmax, total = 0, csum
    cdef uint32_t word
    cdef int flg, bd
    cdef list out = None
    cdef object chunk
    if _lz4_block_decompress is None:
        if _lz4_block_missing:
            return None
        try:
            from lz4.block import decompress
        except ImportError:
            _lz4_block_missing = 1
            return None
        _lz4_block_decompress = decompress
    while True:
        if n - pos < 7 or _get32le(p + pos) != 0x184D2204:
            return None
        flg = p[pos + 4]
        bd = p[pos + 5]
        if (flg >> 6) != 1 or (flg & 0x03) or not (flg & 0x20) or (bd & 0x8F):
            return None
        if (bd >> 4) < 4:
            return None
        bmax = (<Py_ssize_t>1) << (8 + 2 * (bd >> 4))     # 4: 64 KiB ... 7: 4 MiB
        pos += 7 + (8 if flg & 0x08 else 0)
        csum = 4 if flg & 0x10 else 0
        while True:
            if n - pos < 4:
                raise DecodeError("lz4 frame is truncated")
            word = _get32le(p + pos)
            pos += 4
            if word == 0:
                break
            size = word & 0x7FFFFFFF
            if size > bmax or size + csum > n - pos:
                raise DecodeError(f"lz4 block of {size} bytes is truncated or larger "
                                  f"than the frame's {bmax}-byte blocks")
            if word & 0x80000000:
                chunk = PyBytes_FromStringAndSize(<const char*>p + pos, size)
            else:
                try:
                    chunk = _lz4_block_decompress(mv[start + pos:start + pos + size],
                                                  uncompressed_size=bmax)
                except Exception as e:       # lz4.block.LZ4BlockError
                    raise DecodeError(f"invalid lz4 data: {e}") from None
            pos += size + csum
            total += PyBytes_GET_SIZE(chunk)
            if total > max_size:
                raise DecodeError(
                    f"lz4 data decompresses to more than {max_size} bytes "
                    f"(max_decompressed_size); refusing (corrupt or a compression bomb)")
            if out is None:
                out = [chunk]
            else:
                out.append(chunk)
        if flg & 0x04:
            if n - pos < 4:
                raise DecodeError("lz4 frame is truncated")
            pos += 4
        if pos == n:
            break
    if out is None:
        return b""
    if len(out) == 1:
        return out[0]
    return b"".join(out)


cdef class RecordBatch:
    """A RecordBatch v2 parsed in place from a fetch buffer.

    Header fields are read eagerly (61 bytes); records are decompressed and
    decoded only when ``records()``, ``columns()`` or ``control_type`` need them.
    """
    cdef _Buf _buf
    cdef Py_ssize_t _start             # offset of the batch in _buf
    cdef readonly Py_ssize_t size_in_bytes
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count
    cdef Py_ssize_t _max_decompressed

    def __init__(self, *args, **kwargs):
        raise TypeError("RecordBatch objects come from read_batches()")

    @property
    def compression(self):
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self):
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self):
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self):
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def buffer(self):
        """The raw bytes of the whole batch (a memoryview; zero copy)."""
        return self._buf.mv[self._start:self._start + self.size_in_bytes]

    def compute_crc(self):
        return _crc_of(self._buf, self._start + ATTR_OFFSET, self.size_in_bytes - ATTR_OFFSET)

    def validate_crc(self):
        """True if the stored CRC-32C matches the batch bytes."""
        return self.compute_crc() == self.crc

    cdef object _region(self, const unsigned char** rp, Py_ssize_t* rlen):
        """Point rp/rlen at the records bytes; return the object owning them.

        Uncompressed: in place in the fetch buffer. Compressed: decompressed
        now and not cached, so a fetch of many compressed batches never keeps
        them all decompressed (the caller/iterator holds it while reading)."""
        cdef const unsigned char* base
        cdef Py_ssize_t plen
        cdef int codec
        cdef object data
        base = self._buf.data + self._start
        plen = self.size_in_bytes - BATCH_OVERHEAD
        if self.record_count < 0:
            raise DecodeError(f"record batch: negative record count {self.record_count}")
        codec = self.attributes & ATTR_CODEC_MASK
        if codec == 0:
            data = self._buf
            rp[0] = base + BATCH_OVERHEAD
            rlen[0] = plen
        else:
            if codec > 4:
                raise DecodeError(f"record batch: unknown compression codec id {codec}")
            data = None
            if codec == 3:
                data = _lz4_fast(self._buf.mv, self._start + BATCH_OVERHEAD, plen,
                                 base + BATCH_OVERHEAD, self._max_decompressed)
            if data is None:
                data = _compression.decompress(
                    codec,
                    self._buf.mv[self._start + BATCH_OVERHEAD:self._start + self.size_in_bytes],
                    self._max_decompressed)
            if not PyBytes_CheckExact(data):
                data = bytes(data)
            rp[0] = <const unsigned char*>PyBytes_AS_STRING(data)
            rlen[0] = PyBytes_GET_SIZE(data)
        if self.record_count > rlen[0] // MIN_RECORD_SIZE:
            raise DecodeError(
                f"record batch: {self.record_count} records cannot fit in "
                f"{rlen[0]} bytes")
        return data

    cdef inline int64_t _ts(self, int64_t delta) noexcept:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return self.max_timestamp
        return <int64_t>(<uint64_t>self.base_timestamp + <uint64_t>delta)

    cdef int _check_end(self, Py_ssize_t pos, Py_ssize_t rlen) except -1:
        if pos != rlen:
            raise DecodeError(f"record batch: {rlen - pos} bytes left over after "
                              f"{self.record_count} records")
        return 0

    def records(self, topic=None, int32_t partition=-1, int64_t min_offset=-1):
        """Iterate the records lazily (one Record object at a time).

        ``topic``/``partition`` are stamped on every Record; records below
        ``min_offset`` (a fetch may return a batch that starts before the
        position) are skipped without creating objects. Compressed batches
        are decompressed here, once per call."""
        cdef _RecordIter it = _RecordIter(self)
        it.topic = topic
        it.partition = partition
        it.min_offset = min_offset
        return it

    def __iter__(self):
        return self.records()

    def __len__(self):
        return self.record_count

    def columns(self):
        """(offsets, timestamps, keys, values) as four lists, no Record objects.

        Headers are validated but not returned; use records() for them."""
        cdef Py_ssize_t n, i, pos = 0
        cdef list offsets, timestamps, keys, values
        cdef _Rec r
        cdef const unsigned char* d
        cdef object o, ts_obj = None
        cdef int64_t last_delta = 0
        cdef bint log_append = self.attributes & ATTR_TIMESTAMP_TYPE
        cdef uint64_t base_off = <uint64_t>self.base_offset
        cdef Py_ssize_t rlen
        cdef object owner = self._region(&d, &rlen)
        n = self.record_count
        offsets = PyList_New(n)
        timestamps = PyList_New(n)
        keys = PyList_New(n)
        values = PyList_New(n)
        if log_append:
            ts_obj = self.max_timestamp
        for i in range(n):
            _parse_record(d, pos, rlen, &r)
            o = PyLong_FromLongLong(<int64_t>(base_off + <uint64_t><int64_t>r.offset_delta))
            Py_INCREF(o)
            PyList_SET_ITEM(offsets, i, o)
            if not log_append and (ts_obj is None or r.ts_delta != last_delta):
                ts_obj = PyLong_FromLongLong(
                    <int64_t>(<uint64_t>self.base_timestamp + <uint64_t>r.ts_delta))
                last_delta = r.ts_delta
            Py_INCREF(ts_obj)
            PyList_SET_ITEM(timestamps, i, ts_obj)
            o = _bytes_or_none(d, r.key_pos, r.key_len)
            Py_INCREF(o)
            PyList_SET_ITEM(keys, i, o)
            o = _bytes_or_none(d, r.val_pos, r.val_len)
            Py_INCREF(o)
            PyList_SET_ITEM(values, i, o)
            pos = r.end
        self._check_end(pos, rlen)
        return offsets, timestamps, keys, values

    def append_columns(self, list offsets, list timestamps, list keys, list values,
                       int64_t min_offset=-1, Py_ssize_t max_records=-1):
        """columns() appended to existing lists: the records at or above
        min_offset, at most max_records (-1: all). Returns (taken, complete,
        last offset taken); complete is True when every record at or above
        min_offset was taken. The consumer's bulk drain uses it to gather a
        partition's batches without intermediate lists."""
        cdef Py_ssize_t i, pos = 0, taken = 0
        cdef _Rec r
        cdef const unsigned char* d
        cdef object ts_obj = None
        cdef int64_t off, last = -1, last_delta = 0
        cdef bint log_append = self.attributes & ATTR_TIMESTAMP_TYPE
        cdef Py_ssize_t rlen
        cdef object owner = self._region(&d, &rlen)
        if log_append:
            ts_obj = self.max_timestamp
        for i in range(self.record_count):
            _parse_record(d, pos, rlen, &r)
            pos = r.end
            off = self.base_offset + r.offset_delta
            if off < min_offset:
                continue
            if taken == max_records:
                return taken, False, last
            PyList_Append(offsets, off)
            if not log_append and (ts_obj is None or r.ts_delta != last_delta):
                ts_obj = self.base_timestamp + r.ts_delta
                last_delta = r.ts_delta
            PyList_Append(timestamps, ts_obj)
            PyList_Append(keys, _bytes_or_none(d, r.key_pos, r.key_len))
            PyList_Append(values, _bytes_or_none(d, r.val_pos, r.val_len))
            last = off
            taken += 1
        self._check_end(pos, rlen)
        return taken, True, last

    def _control_record(self):
        cdef _Rec r
        cdef const unsigned char* d
        cdef Py_ssize_t rlen
        if not (self.attributes & ATTR_CONTROL):
            return None
        owner = self._region(&d, &rlen)
        if self.record_count == 0:
            return None
        _parse_record(d, 0, rlen, &r)
        if r.key_len < 4:
            raise DecodeError("control record: key shorter than 4 bytes")
        ctype = <int16_t>_get16(d + r.key_pos + 2)
        epoch = None
        if r.val_len >= 6:
            epoch = <int32_t>_get32(d + r.val_pos + 2)
        return ctype, epoch

    @property
    def control_type(self):
        """For control batches: CONTROL_ABORT (0), CONTROL_COMMIT (1) or another
        control type; None for data batches."""
        cr = self._control_record()
        return None if cr is None else cr[0]

    @property
    def coordinator_epoch(self):
        cr = self._control_record()
        return None if cr is None else cr[1]

    def __repr__(self):
        return (f"<RecordBatch base_offset={self.base_offset} "
                f"last_offset={self.base_offset + self.last_offset_delta} "
                f"records={self.record_count} "
                f"codec={_compression.CODEC_NAMES.get(self.attributes & 7, '?')} "
                f"{self.size_in_bytes} bytes>")


cdef class _RecordIter:
    cdef RecordBatch batch
    cdef object owner                  # keeps the records bytes alive
    cdef const unsigned char* rp
    cdef Py_ssize_t rlen
    cdef Py_ssize_t pos
    cdef int32_t index
    cdef object topic
    cdef int32_t partition
    cdef int64_t min_offset

    def __cinit__(self, RecordBatch batch):
        self.topic = None
        self.partition = -1
        self.min_offset = -1
        self.batch = batch
        self.owner = batch._region(&self.rp, &self.rlen)
        self.pos = 0
        self.index = 0

    def __iter__(self):
        return self

    def __next__(self):
        cdef RecordBatch b = self.batch
        cdef _Rec r
        cdef Record rec
        cdef int64_t offset
        cdef const unsigned char* d = self.rp
        while True:
            if self.index >= b.record_count:
                if self.index == b.record_count:
                    self.index += 1
                    self.owner = None          # done: let a decompressed buffer go
                    b._check_end(self.pos, self.rlen)
                raise StopIteration
            _parse_record(d, self.pos, self.rlen, &r)
            offset = <int64_t>(<uint64_t>b.base_offset + <uint64_t><int64_t>r.offset_delta)
            if offset >= self.min_offset:
                break
            self.pos = r.end
            self.index += 1
        rec = Record.__new__(Record)
        rec.topic = self.topic
        rec.partition = self.partition
        rec.offset = offset
        rec.timestamp = b._ts(r.ts_delta)
        rec.timestamp_type = 1 if b.attributes & ATTR_TIMESTAMP_TYPE else 0
        rec.key = _bytes_or_none(d, r.key_pos, r.key_len)
        rec.value = _bytes_or_none(d, r.val_pos, r.val_len)
        if r.hdr_count:
            rec._headers = _parse_headers(d, r.hdr_pos, r.hdr_count, r.end)
        self.pos = r.end
        self.index += 1
        return rec


# Up to this many bytes, the CRC-32C of a region is taken over a copy: slicing
# the fetch data's memoryview costs several times a small copy, and a fetch
# over many partitions checks one small batch per partition (bench/consumer_cost.py).
cdef enum:
    CRC_COPY_MAX = 4096


cdef object _crc_of(_Buf buf, Py_ssize_t start, Py_ssize_t n):
    """The CRC-32C of ``n`` bytes of ``buf`` from ``start``."""
    if n <= CRC_COPY_MAX:
        return _crc32c(PyBytes_FromStringAndSize(<const char*>(buf.data + start), n))
    return _crc32c(buf.mv[start:start + n])


cdef RecordBatch _new_batch(_Buf buf, Py_ssize_t start, Py_ssize_t size,
                            bint check_crc, Py_ssize_t max_decompressed):
    cdef const unsigned char* p = buf.data + start
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    b._buf = buf
    b._start = start
    b.size_in_bytes = size
    b.base_offset = <int64_t>_get64(p)
    b.batch_length = <int32_t>_get32(p + 8)
    b.partition_leader_epoch = <int32_t>_get32(p + 12)
    b.magic = p[16]
    b.crc = _get32(p + 17)
    b.attributes = _get16(p + 21)
    b.last_offset_delta = <int32_t>_get32(p + 23)
    b.base_timestamp = <int64_t>_get64(p + 27)
    b.max_timestamp = <int64_t>_get64(p + 35)
    b.producer_id = <int64_t>_get64(p + 43)
    b.producer_epoch = <int16_t>_get16(p + 51)
    b.base_sequence = <int32_t>_get32(p + 53)
    b.record_count = <int32_t>_get32(p + 57)
    b._max_decompressed = max_decompressed
    if b.record_count < 0:
        raise DecodeError(f"record batch at offset {b.base_offset}: negative record "
                          f"count {b.record_count}")
    if check_crc:
        actual = _crc_of(buf, start + ATTR_OFFSET, size - ATTR_OFFSET)
        if actual != b.crc:
            raise CorruptRecordError(
                f"record batch at offset {b.base_offset}: CRC-32C mismatch "
                f"(stored {b.crc:#010x}, computed {actual:#010x})")
    return b


def parse_batches(buffer, bint check_crc=True,
                  Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Split fetch data into batches: return (batches, bytes_consumed).

    A partial batch at the end is normal (the broker cuts the response at the
    fetch size) and is left out; bytes_consumed tells where it starts. A
    length that is negative or too small for a batch, or an unknown magic, is
    a DecodeError. Magic 0/1 entries come back as legacy.LegacyBatch objects.
    """
    cdef _Buf buf = _Buf(buffer)
    cdef const unsigned char* p = buf.data
    cdef Py_ssize_t n = buf.size
    cdef Py_ssize_t pos = 0, size
    cdef int32_t length
    cdef int magic
    cdef list out = []
    while n - pos >= LOG_OVERHEAD:
        length = <int32_t>_get32(p + pos + 8)
        if length < LEGACY_MIN_MESSAGE:
            raise DecodeError(f"record batch at byte {pos}: invalid batch length {length}")
        if length > n - pos - LOG_OVERHEAD:
            break                               # partial batch: wait for more
        size = LOG_OVERHEAD + <Py_ssize_t>length
        magic = p[pos + MAGIC_OFFSET]
        if magic == 2:
            if size < BATCH_OVERHEAD:
                raise DecodeError(f"record batch at byte {pos}: length {length} is "
                                  f"shorter than the v2 header")
            out.append(_new_batch(buf, pos, size, check_crc, max_decompressed_size))
        elif magic == 0 or magic == 1:
            out.append(_legacy()._read_entry(buf.mv, pos, size, check_crc,
                                             max_decompressed_size))
        else:
            raise DecodeError(f"record batch at byte {pos}: unknown magic {magic}")
        pos += size
    return out, pos


def read_batches(buffer, bint check_crc=True,
                 Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """The complete batches in fetch data (v2 RecordBatch or legacy v0/v1)."""
    return parse_batches(buffer, check_crc, max_decompressed_size)[0]


# ---------------------------------------------------------------------------
# Columnar accumulation straight into Arrow-layout buffers
# ---------------------------------------------------------------------------

cdef class ColumnBuffer:
    """One growable C buffer exposed through the buffer protocol (read-only),
    so pyarrow can wrap it without a copy. It stops growing once exported:
    arrays built over it must never see it move."""
    cdef unsigned char* p
    cdef Py_ssize_t n, cap
    cdef int exports

    def __cinit__(self):
        self.cap = 256
        self.n = 0
        self.exports = 0
        self.p = <unsigned char*>PyMem_Malloc(self.cap)
        if self.p == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.p)

    cdef inline int reserve(self, Py_ssize_t extra) except -1:
        if self.n + extra > self.cap:
            if self.exports:
                raise BufferError("column buffer is exported (its arrays are in use) and cannot grow")
            grow_buffer(&self.p, &self.cap, self.n + extra)
        return 0

    def __len__(self):
        return self.n

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.p
        view.obj = self
        view.len = self.n
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1


cdef inline void _col64(ColumnBuffer b, int64_t v) noexcept:
    memcpy(b.p + b.n, &v, 8)
    b.n += 8


cdef inline void _col32(ColumnBuffer b, int32_t v) noexcept:
    memcpy(b.p + b.n, &v, 4)
    b.n += 4


cdef inline int _bitmap_room(ColumnBuffer bits, Py_ssize_t rows) except -1:
    """Size a validity bitmap for `rows` rows (the bits themselves are all
    written by ColumnBuffers._bit before Arrow reads them)."""
    cdef Py_ssize_t need = (rows + 7) >> 3
    if need > bits.n:
        bits.reserve(need - bits.n)
        bits.n = need
    return 0


cdef class ColumnBuffers:
    """Records of one partition accumulated in Arrow's memory layout, with no
    Python object per record: offsets and timestamps as native int64, the
    timestamp types (0 CreateTime, 1 LogAppendTime) as int32, keys and values
    as binary columns (int32 offsets, data, validity bitmap built only once a
    null shows up).

    With ``headers=True`` the records' headers are gathered too, as the
    buffers of Arrow's ``list<struct<key: string, value: binary>>``: per
    record an int32 offset into the headers, per header its key (offsets,
    UTF-8 data) and value (offsets, data, validity bitmap once a null value
    shows up).

    The bulk consumer path (``poll_batch(arrow=True)``, the Spark source) hands
    these buffers to pyarrow without copying them (see
    :mod:`kproto.records.arrow`); nothing here imports pyarrow.
    """
    cdef readonly ColumnBuffer offsets, timestamps, timestamp_types
    cdef readonly ColumnBuffer key_offsets, key_data, value_offsets, value_data
    cdef readonly ColumnBuffer key_valid, value_valid      # None while no null was seen
    cdef readonly Py_ssize_t length, key_nulls, value_nulls
    cdef readonly int64_t last_offset
    cdef readonly bint with_headers
    cdef readonly ColumnBuffer header_offsets, header_key_offsets, header_key_data
    cdef readonly ColumnBuffer header_value_offsets, header_value_data
    cdef readonly ColumnBuffer header_value_valid          # None while no null value was seen
    cdef readonly Py_ssize_t header_count, header_value_nulls

    def __cinit__(self, bint headers=False):
        self.offsets = ColumnBuffer()
        self.timestamps = ColumnBuffer()
        self.timestamp_types = ColumnBuffer()
        self.key_offsets = ColumnBuffer()
        self.value_offsets = ColumnBuffer()
        self.key_data = ColumnBuffer()
        self.value_data = ColumnBuffer()
        _col32(self.key_offsets, 0)
        _col32(self.value_offsets, 0)
        self.key_valid = self.value_valid = None
        self.length = self.key_nulls = self.value_nulls = 0
        self.last_offset = -1
        self.with_headers = headers
        self.header_value_valid = None
        self.header_count = self.header_value_nulls = 0
        if headers:
            self.header_offsets = ColumnBuffer()
            self.header_key_offsets = ColumnBuffer()
            self.header_key_data = ColumnBuffer()
            self.header_value_offsets = ColumnBuffer()
            self.header_value_data = ColumnBuffer()
            _col32(self.header_offsets, 0)
            _col32(self.header_key_offsets, 0)
            _col32(self.header_value_offsets, 0)

    def __len__(self):
        return self.length

    cdef int _reserve(self, Py_ssize_t rows, Py_ssize_t key_bytes, Py_ssize_t value_bytes) except -1:
        self.offsets.reserve(8 * rows)
        self.timestamps.reserve(8 * rows)
        self.timestamp_types.reserve(4 * rows)
        self.key_offsets.reserve(4 * rows)
        self.value_offsets.reserve(4 * rows)
        self.key_data.reserve(key_bytes)
        self.value_data.reserve(value_bytes)
        if self.key_valid is not None:
            _bitmap_room(self.key_valid, self.length + rows)
        if self.value_valid is not None:
            _bitmap_room(self.value_valid, self.length + rows)
        if self.with_headers:
            self.header_offsets.reserve(4 * rows)
        return 0

    cdef ColumnBuffer _start_bitmap(self, Py_ssize_t room):
        """The first null: a validity bitmap with every earlier row valid."""
        cdef ColumnBuffer bits = ColumnBuffer()
        cdef Py_ssize_t need = (self.length + room + 7) >> 3
        bits.reserve(need)
        memset(bits.p, 0xFF, need)
        bits.n = need
        return bits

    cdef inline void _bit(self, ColumnBuffer bits, bint valid) noexcept:
        if valid:
            bits.p[self.length >> 3] |= <unsigned char>(1 << (self.length & 7))
        else:
            bits.p[self.length >> 3] &= <unsigned char>~(1 << (self.length & 7))

    cdef inline void _append(self, int64_t offset, int64_t ts, int32_t ts_type,
                             const unsigned char* key, Py_ssize_t key_len,
                             const unsigned char* value, Py_ssize_t value_len, Py_ssize_t room):
        _col64(self.offsets, offset)
        _col64(self.timestamps, ts)
        _col32(self.timestamp_types, ts_type)
        if key_len > 0:
            memcpy(self.key_data.p + self.key_data.n, key, key_len)
            self.key_data.n += key_len
        elif key_len < 0:
            if self.key_valid is None:
                self.key_valid = self._start_bitmap(room)
            self.key_nulls += 1
        if self.key_valid is not None:
            self._bit(self.key_valid, key_len >= 0)
        _col32(self.key_offsets, <int32_t>self.key_data.n)
        if value_len > 0:
            memcpy(self.value_data.p + self.value_data.n, value, value_len)
            self.value_data.n += value_len
        elif value_len < 0:
            if self.value_valid is None:
                self.value_valid = self._start_bitmap(room)
            self.value_nulls += 1
        if self.value_valid is not None:
            self._bit(self.value_valid, value_len >= 0)
        _col32(self.value_offsets, <int32_t>self.value_data.n)
        self.last_offset = offset
        self.length += 1

    cdef int _header_value_bit(self, bint valid) except -1:
        """The validity bit of header number header_count (a bitmap only
        once a null value shows up; every earlier value is valid)."""
        cdef Py_ssize_t i = self.header_count, need = (self.header_count + 8) >> 3
        cdef ColumnBuffer bits = self.header_value_valid
        if bits is None:
            if valid:
                return 0
            bits = self.header_value_valid = ColumnBuffer()
            bits.reserve(need)
            memset(bits.p, 0xFF, need)
            bits.n = need
        elif bits.n < need:
            bits.reserve(need - bits.n)
            bits.p[bits.n] = 0xFF
            bits.n = need
        if valid:
            bits.p[i >> 3] |= <unsigned char>(1 << (i & 7))
        else:
            bits.p[i >> 3] &= <unsigned char>~(1 << (i & 7))
            self.header_value_nulls += 1
        return 0

    cdef int _append_headers(self, const unsigned char* d, Py_ssize_t pos, Py_ssize_t count,
                             Py_ssize_t end) except -1:
        """The headers of one record already validated by _parse_record."""
        cdef Py_ssize_t i, kl = 0, vl = 0
        cdef ColumnBuffer kd = self.header_key_data, vd = self.header_value_data
        if self.header_key_data.n + (end - pos) > INT32_MAX or self.header_value_data.n + (end - pos) > INT32_MAX:
            raise OverflowError("a header column would pass 2 GiB")
        self.header_key_offsets.reserve(4 * count)
        self.header_value_offsets.reserve(4 * count)
        for i in range(count):
            pos = _len(d, pos, end, &kl, False)
            if pos < 0:
                _raise_rec(pos, "header key length")
            kd.reserve(kl)
            memcpy(kd.p + kd.n, d + pos, kl)
            kd.n += kl
            pos += kl
            _col32(self.header_key_offsets, <int32_t>kd.n)
            pos = _len(d, pos, end, &vl, True)
            if pos < 0:
                _raise_rec(pos, "header value length")
            self._header_value_bit(vl >= 0)
            if vl > 0:
                vd.reserve(vl)
                memcpy(vd.p + vd.n, d + pos, vl)
                vd.n += vl
                pos += vl
            _col32(self.header_value_offsets, <int32_t>vd.n)
            self.header_count += 1
        if self.header_count > INT32_MAX:
            raise OverflowError("a header column would pass 2**31 headers")
        _col32(self.header_offsets, <int32_t>self.header_count)
        return 0

    def add_record(self, int64_t offset, int64_t timestamp, key, value, int32_t timestamp_type=0,
                   headers=None):
        """One record from Python objects (legacy message sets: no headers)."""
        cdef const unsigned char[::1] kv, vv
        cdef const unsigned char* kp = NULL
        cdef const unsigned char* vp = NULL
        cdef Py_ssize_t kn = -1, vn = -1
        if headers:
            raise ValueError("add_record takes records without headers (legacy message sets)")
        if key is not None:
            kv = key
            kn = kv.shape[0]
            kp = &kv[0] if kn else NULL
        if value is not None:
            vv = value
            vn = vv.shape[0]
            vp = &vv[0] if vn else NULL
        if self.key_data.n + max(kn, 0) > INT32_MAX or self.value_data.n + max(vn, 0) > INT32_MAX:
            raise OverflowError("a binary column would pass 2 GiB")
        self._reserve(1, max(kn, 0), max(vn, 0))
        self._append(offset, timestamp, timestamp_type, kp, kn, vp, vn, 1)
        if self.with_headers:
            _col32(self.header_offsets, <int32_t>self.header_count)

    def add(self, RecordBatch batch, int64_t min_offset=-1, Py_ssize_t max_records=-1):
        """Append the records of `batch` at or above `min_offset`, at most
        `max_records` (-1: all). Returns (taken, complete): complete is True
        when every record of the batch at or above min_offset was taken.
        Takes nothing (not complete) rather than let a binary column pass
        2 GiB, the limit of Arrow's int32 offsets."""
        cdef Py_ssize_t i, pos = 0, rlen, taken = 0
        cdef _Rec r
        cdef const unsigned char* d
        cdef int64_t off, ts
        cdef bint log_append = batch.attributes & ATTR_TIMESTAMP_TYPE
        cdef object owner = batch._region(&d, &rlen)
        cdef Py_ssize_t rows = batch.record_count
        if self.key_data.n + rlen > INT32_MAX or self.value_data.n + rlen > INT32_MAX:
            return 0, False
        # The records' bytes bound their keys' and values' bytes: one
        # reservation per batch, no capacity check per record.
        self._reserve(rows, rlen, rlen)
        for i in range(rows):
            _parse_record(d, pos, rlen, &r)
            pos = r.end
            off = batch.base_offset + r.offset_delta
            if off < min_offset:
                continue
            if taken == max_records:
                return taken, False
            ts = batch.max_timestamp if log_append else batch.base_timestamp + r.ts_delta
            self._append(off, ts, 1 if log_append else 0, d + r.key_pos, r.key_len, d + r.val_pos, r.val_len,
                         rows - i)
            if self.with_headers:
                self._append_headers(d, r.hdr_pos, r.hdr_count, r.end)
            taken += 1
        batch._check_end(pos, rlen)
        return taken, True
