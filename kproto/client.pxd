# Cython declarations that augment kproto/client.py (compiled as it is, see
# setup.py COMPILED_PY_MODULES): NetworkClient becomes an extension type with
# its attributes in C fields (issue 27, branch tprod: every request and
# answer of every core goes through it). The .py stays the single source and
# still runs interpreted; every field is ``public``: readable and writable
# from Python as before. A test that replaces a method on an instance
# subclasses NetworkClient in Python (its instances take attributes).

cimport cython
from kproto.connection cimport Connection

cdef class NetworkClient:
    cdef public object cluster, authenticator_factory, auth_error, client_id, request_timeout_ms
    cdef public object _metadata_in_flight, on_metadata, on_ready, telemetry, _conn_due
    cdef public object connection_class
    cdef public list _errors, _actions
    cdef public dict _warned_at, conn_config, connections, stats, node_latency, api_latency
    cdef public set _wanted
    cdef public bint _all_down, closing, _reconnect_bootstrap, _brokers_check_cluster, _telemetry_waits
    cdef public long long progress, _polled_progress

    # What a driver calls for every read and write, and what they call: C
    # calls, and the connection's fields read as C fields.
    @cython.locals(c=Connection)
    cpdef received(self, node, data, now)
    @cython.locals(c=Connection)
    cpdef sent(self, node, n, now)
    @cython.locals(c=Connection)
    cpdef nodes_with_output(self)
    cpdef _handle(self, events, now=*, from_driver=*)
    @cython.locals(c=Connection)
    cpdef _walk_deadlines(self, now)
