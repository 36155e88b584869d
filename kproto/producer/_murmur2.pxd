# C-level murmur2 for other Cython modules (the producer's per-record fast
# path, kproto/producer/_append.pyx): Java's Utils.murmur2 as a signed int32.
from libc.stdint cimport int32_t

cdef int32_t _murmur2(const unsigned char* data, Py_ssize_t length) noexcept nogil
