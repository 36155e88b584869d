# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""The consumer's Fetch request body written in C.

A consumer at a low rate sends one Fetch per answer: with one partition the
body differs from the last only in the partition's fetch offset, yet the
generic codec (kproto._codec) walked the schema's plan for every field of
every topic and partition each time. :func:`fetch_request_body` writes the
same bytes straight from the same body dict (the one ``Fetcher._build``
makes), field by field, with the Writer the codec uses for each value.

It writes every version the client speaks, 4 to 18: classic encodings up to
11, compact lengths and tagged fields from 12, topics by id from 13
(KIP-516), no replica_id from 15 (KIP-903). The tagged fields a consumer
never sets - cluster_id, replica_state, a partition's replica_directory_id
and high_watermark - are not written (none present: an empty tagged
section), and a body carrying one of them is left to the generic codec
(None is returned), which stays the reference:
tests/test_fetch_request_writer.py checks both give the same bytes.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kproto._wire cimport Writer
from uuid import UUID as _UUID

__all__ = ["fetch_request_body", "FetchFrame", "FIRST_VERSION", "LAST_VERSION"]

#: the versions written here (the client's Fetch range)
FIRST_VERSION = 4
LAST_VERSION = 18

cdef int FIRST_FLEXIBLE_VERSION = 12     # compact arrays/strings and tagged fields from here
cdef int FIRST_TOPIC_ID_VERSION = 13     # topics named by id only (KIP-516)
cdef int LAST_REPLICA_ID_VERSION = 14    # replica_id moved into the tagged replica_state (KIP-903)

# The body's tagged fields: present, they send the body to the generic codec
# (as does a partition's key not written here: see _write_partition).
cdef frozenset _BODY_TAGGED = frozenset({"cluster_id", "replica_state"})


cdef inline object _get(dict d, str key, object default):
    cdef PyObject* v = PyDict_GetItem(d, key)
    return default if v is NULL else <object>v


cdef inline int _array_len(Writer w, Py_ssize_t n, bint flexible) except -1:
    if flexible:
        w.write_compact_array_len(n)
    else:
        w.write_array_len(n)
    return 0


# The last topic id written and its 16 bytes: uuid.UUID.bytes is a Python
# property (an int's to_bytes) and a quiet consumer's Fetch names the same
# topic id object every time (the metadata's).
cdef object _last_id = None
cdef bytes _last_id_bytes = None


cdef inline int _topic_ref(Writer w, dict topic, bint by_id, bint flexible) except -1:
    """A topic's name (v4-12) or id (v13+)."""
    global _last_id, _last_id_bytes
    cdef object topic_id
    if by_id:
        topic_id = topic["topic_id"]
        if topic_id is not _last_id or _last_id is None:
            w.write_uuid(topic_id)           # checks the type; the bytes are kept below
            if isinstance(topic_id, _UUID):
                _last_id, _last_id_bytes = topic_id, topic_id.bytes
        else:
            w.put_raw(<const unsigned char*>_last_id_bytes, 16)
    elif flexible:
        w.write_compact_string(topic["topic"])
    else:
        w.write_string(topic["topic"])
    return 0


cdef inline int _optional(dict p, str key, int64_t default, int64_t* out) except -1:
    """``p[key]`` into ``out`` (``default`` when absent); 1 when present."""
    cdef PyObject* v = PyDict_GetItem(p, key)
    if v is NULL:
        out[0] = default
        return 0
    out[0] = <int64_t><object>v
    return 1


cdef Py_ssize_t _write_partition(Writer w, dict p, int version, bint flexible) except -1:
    """One FetchPartition; returns how many of ``p``'s keys it read (all of
    them, or ``p`` holds a field written only by the codec). Every known key
    is looked up at every version - once each, no scan of the dict's keys -
    so that the count is the same whatever the version writes."""
    cdef int64_t leader_epoch, last_fetched_epoch, log_start_offset
    cdef Py_ssize_t known = 3                # partition, fetch_offset, partition_max_bytes: required
    known += _optional(p, "current_leader_epoch", -1, &leader_epoch)
    known += _optional(p, "last_fetched_epoch", -1, &last_fetched_epoch)
    known += _optional(p, "log_start_offset", -1, &log_start_offset)
    w.write_int32(<int32_t>p["partition"])
    if version >= 9:
        w.write_int32(<int32_t>leader_epoch)
    w.write_int64(<int64_t>p["fetch_offset"])
    if version >= 12:
        w.write_int32(<int32_t>last_fetched_epoch)
    if version >= 5:
        w.write_int64(log_start_offset)
    w.write_int32(<int32_t>p["partition_max_bytes"])
    if flexible:
        w.write_uvarint(0)                   # no tagged fields
    return known


cpdef bytes fetch_request_body(int version, dict body, list marks=None):
    """The encoded body of a Fetch request of ``version`` (4-18) for
    ``body``, a dict of the codec's field names as ``Fetcher._build`` makes
    it; None when the version is not one written here or the body carries a
    field this writer does not write (a tagged one): the generic codec then
    encodes it. ``marks``, when given, receives where each partition entry
    starts in the bytes (FetchFrame patches them)."""
    cdef bint flexible = version >= FIRST_FLEXIBLE_VERSION
    cdef bint by_id = version >= FIRST_TOPIC_ID_VERSION
    cdef Writer w
    cdef list topics, parts, forgotten, ids
    cdef dict topic, p
    cdef Py_ssize_t i, j, n, m
    if version < FIRST_VERSION or version > LAST_VERSION:
        return None
    for key in _BODY_TAGGED:
        if _get(body, key, None) is not None:
            return None
    topics = body["topics"]
    n = PyList_GET_SIZE(topics)
    w = Writer()
    if version <= LAST_REPLICA_ID_VERSION:
        w.write_int32(<int32_t>_get(body, "replica_id", -1))
    w.write_int32(<int32_t>body["max_wait_ms"])
    w.write_int32(<int32_t>body["min_bytes"])
    w.write_int32(<int32_t>_get(body, "max_bytes", 2147483647))
    w.write_int8(<int8_t>_get(body, "isolation_level", 0))
    if version >= 7:
        w.write_int32(<int32_t>_get(body, "session_id", 0))
        w.write_int32(<int32_t>_get(body, "session_epoch", -1))
    _array_len(w, n, flexible)
    for i in range(n):
        topic = <dict>PyList_GET_ITEM(topics, i)
        _topic_ref(w, topic, by_id, flexible)
        parts = topic["partitions"]
        m = PyList_GET_SIZE(parts)
        _array_len(w, m, flexible)
        for j in range(m):
            p = <dict>PyList_GET_ITEM(parts, j)
            if marks is not None:
                marks.append(w.pos)
            if _write_partition(w, p, version, flexible) != PyDict_Size(p):
                return None                  # a key not written here (a tagged field): the codec's
        if flexible:
            w.write_uvarint(0)
    if version >= 7:
        forgotten = _get(body, "forgotten_topics_data", [])
        _array_len(w, PyList_GET_SIZE(forgotten), flexible)
        for topic in forgotten:
            _topic_ref(w, topic, by_id, flexible)
            ids = topic["partitions"]
            _array_len(w, PyList_GET_SIZE(ids), flexible)
            for partition in ids:
                w.write_int32(<int32_t>partition)
            if flexible:
                w.write_uvarint(0)
    if version >= 11:
        rack = _get(body, "rack_id", "")
        if flexible:
            w.write_compact_string(rack)
        else:
            w.write_string(rack)
    if flexible:
        w.write_uvarint(0)                   # no tagged fields (cluster_id, replica_state)
    return w.getvalue()


# -- re-using the last body ----------------------------------------------------------
# A consumer at a low rate sends, round after round, a Fetch that differs from
# the last only in the fetch offsets (and the session epoch): the same
# partitions, the same topics, the same settings. Every field of a partition
# entry has a fixed width, so such a body is the last one's bytes with those
# numbers written over them: no walk of the dicts, no Writer.

cdef inline void _put32(char* p, int32_t v) noexcept:
    cdef uint32_t u = <uint32_t>v
    p[0] = <char>(u >> 24); p[1] = <char>(u >> 16); p[2] = <char>(u >> 8); p[3] = <char>u


cdef inline void _put64(char* p, int64_t v) noexcept:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[i] = <char>(u >> (56 - 8 * i))


cdef class FetchFrame:
    """A Fetch body written by :func:`fetch_request_body`, kept with where
    its partition entries and session epoch are, so that :meth:`patched`
    can give the next body of the same shape by copying it and writing the
    new numbers in place. The shape: the version, every top-level field but
    the session epoch, the topics in order, and the very same partition
    entry dicts in order (the fetcher keeps one per partition and updates
    it), holding the same keys; no forgotten topics."""
    cdef readonly int version
    cdef readonly bytes data
    cdef list keys                # the body's fields but topics and session_epoch,
    cdef list values              # and their values
    cdef list refs                # each topic's id or name
    cdef list entries             # every partition entry, in order
    cdef list sizes               # each entry's number of keys
    cdef list counts              # partitions per topic
    cdef list marks               # where each entry starts in ``data``
    cdef Py_ssize_t epoch_at      # where the session epoch is (-1: below v7)

    @staticmethod
    def write(int version, dict body):
        """(bytes, FetchFrame or None): the body written as fetch_request_body
        does (None, None when it does not write it); no frame for a body with
        forgotten topics (a request that changes the session, not repeated)."""
        cdef list marks = []
        cdef bytes data = fetch_request_body(version, body, marks)
        if data is None:
            return None, None
        if _get(body, "forgotten_topics_data", None):
            return data, None
        cdef FetchFrame f = FetchFrame.__new__(FetchFrame)
        f.version, f.data, f.marks = version, data, marks
        f.keys, f.values = [], []
        for k, v in body.items():
            if k != "topics" and k != "session_epoch":
                f.keys.append(k)
                f.values.append(v)
        f.refs, f.entries, f.sizes, f.counts = [], [], [], []
        for topic in body["topics"]:
            f.refs.append(topic.get("topic_id") if version >= FIRST_TOPIC_ID_VERSION else topic.get("topic"))
            parts = topic["partitions"]
            f.counts.append(len(parts))
            for p in parts:
                f.entries.append(p)
                f.sizes.append(PyDict_Size(p))
        # replica_id (to v14), max_wait_ms, min_bytes, max_bytes, isolation_level, session_id
        f.epoch_at = ((4 if version <= LAST_REPLICA_ID_VERSION else 0) + 17) if version >= 7 else -1
        return data, f

    cpdef bytes patched(self, int version, dict body):
        """The body for ``body`` as this frame's bytes with its fetch offsets,
        leader epochs, partition sizes and session epoch written in; None
        when ``body`` is not of this frame's shape (write it anew)."""
        cdef list topics, parts
        cdef Py_ssize_t i, j, k = 0, n, m
        cdef dict p
        cdef PyObject* got
        cdef object value
        if version != self.version or PyDict_Size(body) != PyList_GET_SIZE(self.keys) + 2:
            return None
        for i in range(PyList_GET_SIZE(self.keys)):
            got = PyDict_GetItem(body, <object>PyList_GET_ITEM(self.keys, i))
            value = <object>PyList_GET_ITEM(self.values, i)
            if got is NULL:
                return None
            if <object>got is not value and <object>got != value:   # (mostly the very same objects)
                return None
        topics = body["topics"]
        n = PyList_GET_SIZE(topics)
        if n != PyList_GET_SIZE(self.refs):
            return None
        cdef object stored
        for i in range(n):
            topic = <dict>PyList_GET_ITEM(topics, i)
            got = PyDict_GetItem(topic, "topic_id" if version >= FIRST_TOPIC_ID_VERSION else "topic")
            stored = <object>PyList_GET_ITEM(self.refs, i)
            if got is NULL or (<object>got is not stored and <object>got != stored):
                return None                       # (a topic id is mostly the very same UUID)
            parts = topic["partitions"]
            m = PyList_GET_SIZE(parts)
            if m != <Py_ssize_t>self.counts[i]:
                return None
            for j in range(m):
                p = <dict>PyList_GET_ITEM(parts, j)
                if p is not self.entries[k] or PyDict_Size(p) != <Py_ssize_t>self.sizes[k]:
                    return None
                k += 1
        cdef Py_ssize_t size = PyBytes_GET_SIZE(self.data)
        cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
        cdef char* buf = PyBytes_AS_STRING(out)
        memcpy(buf, PyBytes_AS_STRING(self.data), size)
        if self.epoch_at >= 0:
            _put32(buf + self.epoch_at, <int32_t>_get(body, "session_epoch", -1))
        cdef char* at
        for k in range(PyList_GET_SIZE(self.entries)):
            p = <dict>PyList_GET_ITEM(self.entries, k)
            at = buf + <Py_ssize_t>self.marks[k] + 4          # after the partition index
            if version >= 9:
                _put32(at, <int32_t>_get(p, "current_leader_epoch", -1))
                at += 4
            _put64(at, <int64_t>p["fetch_offset"])
            at += 8
            if version >= 12:
                _put32(at, <int32_t>_get(p, "last_fetched_epoch", -1))
                at += 4
            if version >= 5:
                _put64(at, <int64_t>_get(p, "log_start_offset", -1))
                at += 8
            _put32(at, <int32_t>p["partition_max_bytes"])
        return out
