# Cython declarations that augment kproto/connection.py (compiled as it is,
# see setup.py COMPILED_PY_MODULES): the classes named here become extension
# types with their attributes in C fields, so that reading one is a struct
# read instead of CPython's generic attribute lookup (issue 27, branch tprod).
# The .py stays the single source and still runs interpreted; every field is
# ``public``: readable and writable from Python as before.

cdef class InFlightRequest:
    # One is made per request (~4k instructions as a class with __slots__).
    cdef public object api, version, correlation_id, body, node_id
    cdef public object timeout_ms, sent_at, deadline, written_at, completed_at
    cdef public object result, error, callback, decoder
    cdef public bint expect_response, written, done, internal
    # stream offset just past its last byte; the connection's request count
    cdef public long long _end, _seq
