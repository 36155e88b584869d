# Augments fetch_session.py when Cython compiles it (setup.py's
# COMPILED_PY_MODULES): FetchSession becomes a C class whose methods read
# and write its fields as struct members, not by attribute lookup (issue 27:
# the quiet consumer asks its session several times per Fetch). The .py
# stays the source; interpreted, FetchSession is the plain class there.
# Every field stays readable and writable from Python.

cdef class FetchSession:
    cdef public object node
    cdef public object session_id
    cdef public object epoch
    cdef public dict offsets
    cdef public dict epochs
    cdef public dict topic_ids
    cdef public Py_ssize_t incremental_sent
    cdef public Py_ssize_t full_sent
    cdef public dict errors
