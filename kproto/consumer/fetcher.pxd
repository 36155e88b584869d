# Augments fetcher.py when Cython compiles it (setup.py's
# COMPILED_PY_MODULES): Fetcher becomes a C class, so that in its methods
# every ``self.x`` is a struct member rather than an attribute lookup (a
# dict lookup of ~200 instructions, dozens per Fetch answer: issue 27). The
# .py stays the source; interpreted, Fetcher is the plain class there.
# Every attribute stays readable and writable from Python (the tests drive
# the private ones: _buffered, _quiet, _frames); none can be added, and
# methods cannot be replaced on an instance (subclass instead).

cimport cython

from kproto.consumer.fetch_session cimport FetchSession


cdef class Fetcher:
    # The methods on the path of every Fetch and answer, cpdef: called from
    # the Fetcher's own methods they are C calls (a subclass may still
    # override them in Python), and their session is typed (its fields and
    # methods reached in C).
    @cython.locals(session=FetchSession)
    cpdef _quiet_request(self, quiet, version_of, leaders_version)
    cpdef _request(self, node, version, session_id, epoch, topic_entries, forgotten, offsets, names, index,
                   session_epoch)
    @cython.locals(session=FetchSession)
    cpdef on_fetch_response(self, request, body)

    cdef public object positions
    cdef public object fetch_min_bytes
    cdef public object fetch_max_wait_ms
    cdef public object fetch_max_bytes
    cdef public object max_partition_fetch_bytes
    cdef public int isolation
    cdef public bint check_crcs
    cdef public object max_poll_records
    cdef public object client_rack
    cdef public bint write_in_c
    cdef public bint use_sessions
    cdef public dict sessions
    cdef public bint incremental_plan
    cdef public object _plan
    cdef public set _plan_dirty
    cdef public bint reuse_frames
    cdef public dict _frames
    cdef public Py_ssize_t frames_reused
    cdef public bint quiet_path
    cdef public object _quiet
    cdef public Py_ssize_t quiet_requests
    cdef public set _in_flight_nodes
    cdef public object _buffered
    cdef public list _errors
    cdef public bint metadata_refresh_needed
    cdef public set _resets_in_flight
    cdef public object leader_hint
