# cython: language_level=3, boundscheck=False, wraparound=False
"""Kafka's murmur2 key hash (Java ``Utils.murmur2``, seed 0x9747b28c) in C.

Keyed records must land where every Kafka client puts them:
``toPositive(murmur2(key)) % numPartitions``. This is on the path of every
keyed send, so it runs on the key's bytes with no Python object per step;
``group_by_partition`` does a whole column of keys at once for send_many.
"""
from libc.stdint cimport int32_t, uint32_t

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


cdef inline int _partition_of(const unsigned char[::1] key, int n) except -1:
    return (_murmur2(&key[0] if key.shape[0] else NULL, key.shape[0]) & 0x7FFFFFFF) % n


def murmur2_partition(const unsigned char[::1] key not None, int num_partitions):
    """``toPositive(murmur2(key)) % num_partitions`` (toPositive clears the sign bit)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return _partition_of(key, num_partitions)


def group_by_partition(keys, values, Py_ssize_t start, Py_ssize_t end, int num_partitions,
                       int null_key_partition):
    """Rows start..end-1 grouped by the murmur2 partition of their key (rows
    with a null key go to ``null_key_partition``, the sticky choice):
    {partition: (rows, keys, values)} with the rows in order within each
    group, and {partition: key+value bytes}."""
    cdef dict groups = {}
    cdef dict sizes = {}
    cdef Py_ssize_t r
    cdef int p
    cdef object key, value
    cdef tuple g
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    for r in range(start, end):
        key = keys[r]
        value = values[r]
        if key is None:
            p = null_key_partition
        else:
            p = _partition_of(key, num_partitions)
        g = groups.get(p)
        if g is None:
            g = groups[p] = ([], [], [])
            sizes[p] = 0
        (<list>g[0]).append(r)
        (<list>g[1]).append(key)
        (<list>g[2]).append(value)
        sizes[p] = <Py_ssize_t>sizes[p] + (0 if key is None else len(key)) + (0 if value is None else len(value))
    return groups, sizes
