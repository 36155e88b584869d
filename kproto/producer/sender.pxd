# Cython declarations that augment kproto/producer/sender.py (compiled as it
# is, see setup.py COMPILED_PY_MODULES): Sender becomes an extension type with
# its attributes in C fields (issue 27, branch tprod). Every field is
# ``public``: readable and writable from Python as before (the C helpers of
# _acknowledge.pyx and _produce_request.pyx read and write some). A test that
# replaces a method on a live sender subclasses it in Python.

cdef class Sender:
    cdef public object cfg, acks, request_timeout_ms, client, cluster, acc, idem, partitioner, metrics
    cdef public list results
    cdef public object results_records
    cdef public dict in_flight, _produce_versions, _raw_ids
    cdef public set _muted
    cdef public object _in_flight_floor, retry_backoff, _answer_round_by, _answer_rtt_ms
    cdef public object _init_retry_at, _init_failures, fatal_error, txn
    cdef public bint guarantee_order, _init_in_flight
    cdef public object acknowledged, assign, can_drain, read_answer, write_request, gather
