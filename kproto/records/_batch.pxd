# C-level declaration of the record batch builder, so other Cython modules
# (the producer's per-record fast path, kproto/producer/_append.pyx) append a
# record with a C call instead of a Python method call.
from libc.stdint cimport int32_t, int64_t

cimport cython


# Not tracked by the cyclic GC (no_gc, in _batch.pyx): its only object fields are the
# compressed records (bytes) and the compression level (an int or None), which
# cannot refer back to it, so it can be in no reference cycle. The producer
# keeps one per batch alive until the broker answers; tracked, each was one
# more object for every collection to walk and one more towards the next.
@cython.final
cdef class BatchBuilder:
    cdef unsigned char* buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t batch_size
    cdef readonly int compression
    cdef readonly int64_t base_offset
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int timestamp_type
    cdef readonly int32_t record_count
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef object _payload          # compressed records, cached until next append
    cdef readonly object compression_level
    cdef Py_ssize_t _limit             # batch_size in uncompressed bytes
    cdef double _ratio_estimate

    cdef int _reserve(self, Py_ssize_t n) except -1
    # Encode one record; its size, or 0 when the batch is full.
    cdef Py_ssize_t _append(self, int64_t ts, object key, object value, object headers) except -1
    # The same from raw bytes (length -1: null) and header pairs sized already.
    cdef Py_ssize_t _put_record(self, int64_t ts, const unsigned char* kp, Py_ssize_t kn,
                                const unsigned char* vp, Py_ssize_t vn,
                                object hseq, Py_ssize_t hcount, Py_ssize_t hsize) except -1
    cdef int _set_ratio(self, double ratio) except -1
    # shrink_to_fit for C callers (the producer's drain): the bytes the buffer now holds
    cdef Py_ssize_t _shrink_to_fit(self) except -1
    # The built batch (what build() returns): its size, then written at a
    # pointer, so a request writer puts it in place without a bytes object.
    cdef Py_ssize_t _built_size(self) except -1
    cdef int _write_built(self, unsigned char* o, Py_ssize_t total) except -1
    # set_producer_state for C callers; is_transactional -1 leaves it as it is
    cdef int _set_producer_state(self, int64_t producer_id, int producer_epoch, int32_t base_sequence,
                                 int is_transactional) except -1
