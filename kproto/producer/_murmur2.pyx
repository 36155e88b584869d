# cython: language_level=3, boundscheck=False, wraparound=False
"""Kafka's murmur2 key hash (Java ``Utils.murmur2``, seed 0x9747b28c) in C.

Keyed records must land where every Kafka client puts them:
``toPositive(murmur2(key)) % numPartitions``. This is on the path of every
keyed send, so it runs on the key's bytes with no Python object per step;
``group_by_partition`` does a whole column of keys at once for send_many.
"""
from libc.stdint cimport int32_t, uint32_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE

cdef uint32_t _M = 0x5bd1e995
cdef uint32_t _SEED = 0x9747b28c


cdef inline uint32_t _get_le32(const unsigned char* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef int32_t _murmur2(const unsigned char* data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t h = _SEED ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t i, n4 = length // 4, tail = (length // 4) * 4
    for i in range(n4):
        k = _get_le32(data + i * 4)
        k *= _M
        k ^= k >> 24
        k *= _M
        h *= _M
        h ^= k
    cdef Py_ssize_t rest = length % 4
    if rest == 3:
        h ^= <uint32_t>data[tail + 2] << 16
    if rest >= 2:
        h ^= <uint32_t>data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return <int32_t>h


def murmur2(const unsigned char[::1] data not None):
    """Java's ``Utils.murmur2`` as a signed int32."""
    return _murmur2(&data[0] if data.shape[0] else NULL, data.shape[0])


cdef inline int _partition(const unsigned char* data, Py_ssize_t length, int n) noexcept nogil:
    return (_murmur2(data, length) & 0x7FFFFFFF) % n


cdef inline int _partition_of(const unsigned char[::1] key, int n) except -1:
    return _partition(&key[0] if key.shape[0] else NULL, key.shape[0], n)


def murmur2_partition(const unsigned char[::1] key not None, int num_partitions):
    """``toPositive(murmur2(key)) % num_partitions`` (toPositive clears the sign bit)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return _partition_of(key, num_partitions)


cdef inline int _key_partition(object key, int n) except -1:
    """The murmur2 partition of a non-null key: bytes without a copy, any
    other buffer through a memoryview."""
    if PyBytes_CheckExact(key):
        return _partition(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), n)
    return _partition_of(key, n)


cdef inline Py_ssize_t _size(object v) except -1:
    if v is None:
        return 0
    if PyBytes_CheckExact(v):
        return PyBytes_GET_SIZE(v)
    return len(v)


def group_by_partition(keys, values, Py_ssize_t start, Py_ssize_t end, int num_partitions,
                       int null_key_partition):
    """Rows start..end-1 grouped by the murmur2 partition of their key (rows
    with a null key go to ``null_key_partition``, the sticky choice):
    {partition: (rows, keys, values)} with the rows in order within each
    group, {partition: key+value bytes}, and the key+value bytes of the
    largest row (what bounds the room a batch may leave unused)."""
    cdef object kseq, vseq
    cdef Py_ssize_t r, n, row_size, largest = 0
    cdef int p
    cdef object key, value
    cdef list rows_p
    cdef dict groups = {}
    cdef dict sizes = {}
    cdef Py_ssize_t* size_of
    cdef list lists
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    kseq = PySequence_Fast(keys, "keys must be a sequence")
    vseq = PySequence_Fast(values, "values must be a sequence")
    n = min(PySequence_Fast_GET_SIZE(kseq), PySequence_Fast_GET_SIZE(vseq))
    if start < 0 or end > n or start > end:
        raise ValueError(f"rows {start}..{end} are outside the {n} keys and values")
    if not 0 <= null_key_partition < num_partitions:
        raise ValueError(f"null_key_partition {null_key_partition} is not in [0, {num_partitions})")
    # Per partition: three lists (rows, keys, values) and a byte count, in
    # plain arrays indexed by partition - no dict lookup per row.
    lists = [None] * (3 * num_partitions)
    size_of = <Py_ssize_t*>PyMem_Calloc(num_partitions, sizeof(Py_ssize_t))
    if size_of == NULL:
        raise MemoryError()
    try:
        for r in range(start, end):
            key = <object>PySequence_Fast_GET_ITEM(kseq, r)
            value = <object>PySequence_Fast_GET_ITEM(vseq, r)
            p = null_key_partition if key is None else _key_partition(key, num_partitions)
            rows_p = lists[3 * p]
            if rows_p is None:
                rows_p = lists[3 * p] = []
                lists[3 * p + 1] = []
                lists[3 * p + 2] = []
            PyList_Append(rows_p, r)
            PyList_Append(<list>lists[3 * p + 1], key)
            PyList_Append(<list>lists[3 * p + 2], value)
            row_size = _size(key) + _size(value)
            size_of[p] += row_size
            if row_size > largest:
                largest = row_size
        for p in range(num_partitions):
            if lists[3 * p] is not None:
                groups[p] = (lists[3 * p], lists[3 * p + 1], lists[3 * p + 2])
                sizes[p] = size_of[p]
    finally:
        PyMem_Free(size_of)
    return groups, sizes, largest


def all_bytes_or_none(seq):
    """True when every item of the list/tuple is exactly bytes or None (the
    common case send_many checks before anything else)."""
    cdef object fast = PySequence_Fast(seq, "expected a sequence")
    cdef Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast)
    cdef object v
    for i in range(n):
        v = <object>PySequence_Fast_GET_ITEM(fast, i)
        if v is not None and not PyBytes_CheckExact(v):
            return False
    return True


def first_row_over(keys, values, Py_ssize_t start, Py_ssize_t limit):
    """The index of the first row from ``start`` on whose key and value
    together take more than ``limit`` bytes, or -1. send_many's size check
    runs this over the whole column (a C loop, no object per row) and looks
    closely only at the rows it finds."""
    cdef object vseq = PySequence_Fast(values, "values must be a sequence")
    cdef object kseq = None if keys is None else PySequence_Fast(keys, "keys must be a sequence")
    cdef Py_ssize_t r, n = PySequence_Fast_GET_SIZE(vseq), size
    for r in range(start, n):
        size = _size(<object>PySequence_Fast_GET_ITEM(vseq, r))
        if kseq is not None:
            size += _size(<object>PySequence_Fast_GET_ITEM(kseq, r))
        if size > limit:
            return r
    return -1
