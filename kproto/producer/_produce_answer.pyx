# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""A Produce answer read straight into the batches it acknowledges, in C.

With keys spread over many partitions a Produce request carries hundreds of
batches of a record or two, and the generic codec (kproto._codec) answered
each with a dict of eight fields (index, error code, offsets, record errors,
error message, tagged fields) that ``Sender._on_produce`` then looked up again
by (topic, partition): per batch, more instructions than the batch's own
acknowledgement. :func:`read_acknowledged` reads the answer's bytes once and
matches each partition's answer to its batch as it goes, making no object per
partition but the three entries it returns for it.

It takes only the common answer: every partition acknowledged (error code
NONE or DUPLICATE_SEQUENCE_NUMBER, which the sender takes as success), each
batch of the request answered exactly once, no record errors, no error
message and no tagged fields (a leader hint comes only with an error). For
anything else - an error, a partition missing or answered twice, bytes it
does not expect, a truncated answer - it returns None and changes nothing:
the connection then decodes the answer with the generic codec, and
``Sender._on_produce`` handles it (or the DecodeError) as before. That
Python path is the reference the twin tests check this one against
(tests/test_producer_core_fast_append.py: the sender's
``use_python_reference`` sends without this reader).
"""
from libc.stdint cimport int16_t, int32_t, int64_t
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject

from kproto._wire cimport Reader

from kproto.errors import DecodeError

__all__ = ["ACKNOWLEDGED", "read_acknowledged"]

#: the key of the answer dict that holds what read_acknowledged matched
ACKNOWLEDGED = "acknowledged (kproto.producer._produce_answer)"

cdef int FIRST_FLEXIBLE_VERSION = 9       # compact arrays/strings and tagged fields from here
cdef int FIRST_TOPIC_ID_VERSION = 13      # topics named by id only (KIP-516)
cdef int16_t NONE = 0
cdef int16_t DUPLICATE_SEQUENCE_NUMBER = 46


cdef inline Py_ssize_t _array_len(Reader r, bint flexible) except? -2:
    """An array's length; -1 for a null array."""
    return r.read_compact_array_len() if flexible else r.read_array_len()


def read_acknowledged(dict by_tp, object by_id, int version, payload):
    """``(correlation_id, {"throttle_time_ms": ms, ACKNOWLEDGED: [batch,
    base_offset, log_append_time, ...]})`` for a Produce answer of
    ``version`` (the frame without its size prefix) in which every batch of
    the request (``by_tp``: (topic, partition) -> batch; ``by_id``: topic
    id, as its 16 bytes (``uuid.UUID.bytes``) -> name, when the request named topics by id) was acknowledged, three
    entries per batch in the answer's order; None for any other answer (see
    the module docstring), which the generic decoder then reads."""
    cdef Reader r = Reader(payload)
    cdef bint flexible = version >= FIRST_FLEXIBLE_VERSION
    cdef bint by_topic_id = version >= FIRST_TOPIC_ID_VERSION
    cdef Py_ssize_t ntopics, nparts, i, j
    cdef int32_t cid, throttle = 0
    cdef int16_t code
    cdef int64_t base_offset, log_append_time
    cdef list acked = []
    cdef set seen = set()
    cdef object name, batch
    cdef PyObject* found
    if by_topic_id and by_id is None:
        return None
    try:
        cid = r.read_int32()
        if flexible and r.read_uvarint32() != 0:        # the response header's tagged fields
            return None
        ntopics = _array_len(r, flexible)
        if ntopics < 0:
            return None
        for i in range(ntopics):
            if by_topic_id:
                # the id's 16 bytes as the key: a uuid.UUID made here would
                # be hashed and compared by uuid.py's Python methods
                r.need(16, b"uuid")
                found = PyDict_GetItemWithError(<dict>by_id, PyBytes_FromStringAndSize(<const char*>r.data + r.pos, 16))
                r.pos += 16
                if found == NULL:
                    return None
                name = <object>found
            else:
                name = r.read_compact_string() if flexible else r.read_string()
            nparts = _array_len(r, flexible)
            if nparts < 0:
                return None
            for j in range(nparts):
                found = PyDict_GetItemWithError(by_tp, (name, r.read_int32()))
                code = r.read_int16()
                base_offset = r.read_int64()
                log_append_time = r.read_int64() if version >= 2 else -1
                if version >= 5:
                    r.read_int64()                      # log_start_offset
                if version >= 8:
                    if _array_len(r, flexible) > 0:     # record_errors
                        return None
                    if (r.read_compact_nullable_string() if flexible else r.read_nullable_string()) is not None:
                        return None                     # error_message
                if flexible and r.read_uvarint32() != 0:
                    return None                         # tagged fields: current_leader (with an error)
                if found == NULL or (code != NONE and code != DUPLICATE_SEQUENCE_NUMBER):
                    return None
                batch = <object>found
                if batch in seen:
                    return None
                seen.add(batch)
                acked.append(batch)
                acked.append(base_offset)
                acked.append(log_append_time)
            if flexible and r.read_uvarint32() != 0:
                return None
        if version >= 1:
            throttle = r.read_int32()
        if flexible and r.read_uvarint32() != 0:        # node_endpoints (with a leader hint)
            return None
        if r.pos != r.end:
            return None
    except DecodeError:
        return None
    if len(seen) != len(by_tp):
        return None
    return cid, {"throttle_time_ms": throttle, ACKNOWLEDGED: acked}
