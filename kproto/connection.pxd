# Cython declarations that augment kproto/connection.py (compiled as it is,
# see setup.py COMPILED_PY_MODULES): the classes named here become extension
# types with their attributes in C fields, so that reading one is a struct
# read instead of CPython's generic attribute lookup (issue 27, branch tprod).
# The .py stays the single source and still runs interpreted; every field is
# ``public``: readable and writable from Python as before.

cimport cython

cdef class InFlightRequest:
    # One is made per request (~4k instructions as a class with __slots__).
    cdef public object api, version, correlation_id, body, node_id
    cdef public object timeout_ms, sent_at, deadline, written_at, completed_at
    cdef public object result, error, callback, decoder
    cdef public bint expect_response, written, done, internal
    # stream offset just past its last byte; the connection's request count
    cdef public long long _end, _seq


cdef class Connection:
    # Every request and answer reads and writes a dozen of these (_enqueue,
    # bytes_sent, receive_data); typed ``self`` makes each a struct access.
    # Configuration and state, as in __init__:
    cdef public object node_id, host, port, client_id, request_timeout_ms, max_in_flight
    cdef public object connections_max_idle_ms, connection_setup_timeout_ms, max_frame_size
    cdef public object authenticator, client_software_name, _client_software_version, _rng, backoff
    cdef public object state, versions, api_versions_response, last_error, last_close_reason
    cdef public object last_throttle_time_ms, throttled_until
    cdef public object failed_attempts, last_connect_attempt, reconnect_backoff_current_ms
    cdef public bint connect_failed, reauthenticating
    cdef public object connect_started_at, last_activity, sessions_started, reauthentications
    cdef public object expected_broker
    cdef public long long _next_correlation_id, _seq
    cdef public dict _versions_checked, _header_tails
    # The session's (_reset_session): byte counts as C integers
    cdef public object _decoder, _out, _awaiting, _unwritten, _raw_deadline, _reauth_at
    cdef public long long _out_offset, _out_pending, _stream_queued, _stream_sent
    cdef public long long _noresp_in_flight, _apiversions_attempts

    # The per-request and per-answer methods: C calls between them, and the
    # requests they handle typed (their fields read as C fields). cpdef keeps
    # them callable (and overridable by a Python subclass) as before.
    cpdef _enqueue(self, api, body, now, version, expect_response, timeout_ms, callback, internal=*)
    @cython.locals(req=InFlightRequest)
    cpdef bytes_sent(self, n, now)
    cpdef _mark_written(self, InFlightRequest req, now, events, done)
    @cython.locals(req=InFlightRequest, first=InFlightRequest)
    cpdef _handle_frame(self, payload, now, events, done)
    cpdef _maybe_throttle(self, InFlightRequest req, throttle_ms, now)
    cpdef _decode(self, InFlightRequest req, payload)
    cpdef _complete(self, InFlightRequest req, body, now, events, done)
