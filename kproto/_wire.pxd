# Kafka wire primitives: a growable Writer and a zero-copy Reader.
# The message codec engine (_codec.pyx) and anything else in Cython cimports
# these classes and calls their methods through the C vtable.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from cpython.buffer cimport Py_buffer


# Decoding limits. They mirror Apache Kafka 4.4's decoder (as issue 24, point 6
# gives them), so a frame Kafka refuses is refused here too, before anything is
# allocated for it. Like Kafka's generated readers ("Tried to allocate a
# collection of size ..."), Reader also refuses an array longer than the bytes
# remaining. C constants for the codec (cimport), Python ints
# (kproto._wire.MAX_ARRAY_ELEMENTS) for everyone else.
cpdef enum:
    MAX_ARRAY_ELEMENTS = 1000000    # elements one array (classic or compact) may declare
    MAX_TAGGED_FIELDS = 10000       # fields one tagged-fields section may declare


cdef class Writer:
    cdef unsigned char* buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t cap

    cdef int reserve(self, Py_ssize_t n) except -1
    cdef int put_raw(self, const unsigned char* p, Py_ssize_t n) except -1
    cpdef write_int8(self, int8_t v)
    cpdef write_int16(self, int16_t v)
    cpdef write_int32(self, int32_t v)
    cpdef write_int64(self, int64_t v)
    cpdef write_uint16(self, uint16_t v)
    cpdef write_uint32(self, uint32_t v)
    cpdef write_float64(self, double v)
    cpdef write_bool(self, bint v)
    cpdef write_uuid(self, object v)
    cpdef write_varint(self, int32_t v)
    cpdef write_varlong(self, int64_t v)
    cpdef write_uvarint(self, uint64_t v)
    cpdef write_raw(self, object data)
    cpdef write_string(self, object s)
    cpdef write_nullable_string(self, object s)
    cpdef write_compact_string(self, object s)
    cpdef write_compact_nullable_string(self, object s)
    cpdef write_bytes(self, object b)
    cpdef write_nullable_bytes(self, object b)
    cpdef write_compact_bytes(self, object b)
    cpdef write_compact_nullable_bytes(self, object b)
    cpdef write_array_len(self, Py_ssize_t n)
    cpdef write_compact_array_len(self, Py_ssize_t n)
    cpdef write_int32_at(self, Py_ssize_t offset, int32_t v)
    cpdef bytes getvalue(self)


cdef class Reader:
    cdef object obj          # keeps the underlying buffer alive
    cdef Py_buffer view
    cdef bint has_view
    cdef const unsigned char* data
    cdef public Py_ssize_t pos
    cdef public Py_ssize_t end

    cdef int need(self, Py_ssize_t n, const char* what) except -1
    cdef Py_ssize_t _classic_len16(self, bint nullable, const char* what) except? -2
    cdef Py_ssize_t _classic_len32(self, bint nullable, const char* what) except? -2
    cdef Py_ssize_t _compact_len(self, bint nullable, const char* what) except? -2
    cdef Py_ssize_t _array_len(self, Py_ssize_t n, Py_ssize_t start) except? -2
    cdef object _utf8(self, Py_ssize_t n)
    cdef bytes _copy(self, Py_ssize_t n)
    cpdef int8_t read_int8(self) except? -1
    cpdef int16_t read_int16(self) except? -1
    cpdef int32_t read_int32(self) except? -1
    cpdef int64_t read_int64(self) except? -1
    cpdef uint16_t read_uint16(self) except? 0
    cpdef uint32_t read_uint32(self) except? 0
    cpdef double read_float64(self) except? -1
    cpdef bint read_bool(self) except? -1
    cpdef object read_uuid(self)
    cpdef int32_t read_varint(self) except? -1
    cpdef int64_t read_varlong(self) except? -1
    cpdef uint64_t read_uvarint(self) except? 0
    cpdef uint32_t read_uvarint32(self) except? 0
    cdef uint32_t read_tagged_count(self) except? 0
    cpdef object read_string(self)
    cpdef object read_nullable_string(self)
    cpdef object read_compact_string(self)
    cpdef object read_compact_nullable_string(self)
    cpdef object read_bytes(self)
    cpdef object read_nullable_bytes(self)
    cpdef object read_compact_bytes(self)
    cpdef object read_compact_nullable_bytes(self)
    cpdef object read_nullable_bytes_view(self)
    cpdef object read_compact_nullable_bytes_view(self)
    cpdef Py_ssize_t read_array_len(self) except? -2
    cpdef Py_ssize_t read_compact_array_len(self) except? -2
    cpdef object read_raw(self, Py_ssize_t n)
    cpdef object read_view(self, Py_ssize_t n)
    cpdef skip(self, Py_ssize_t n)
    cpdef Py_ssize_t remaining(self)
