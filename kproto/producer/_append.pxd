# C-level declaration of the producer's batch, so the other typed modules of
# the producer (kproto/producer/_acknowledge.pyx) read and write its fields as
# C fields, as the per-record fast path of _append.pyx does.
from kproto.records._batch cimport BatchBuilder


cdef class ProducerBatch:
    cdef public object topic
    cdef public object partition
    cdef readonly tuple tp          # (topic, partition), made once (see _init_batch)
    cdef public BatchBuilder builder
    cdef public object parts        # () until the first told handle, then a list
    cdef public object created_ms
    cdef public object deadline_ms
    cdef public object attempts
    cdef public object retry_after_ms
    cdef public object reserved
    cdef public bint full
    cdef public object base_sequence
    cdef public object producer_id
    cdef public object epoch
    cdef public object done
    cdef public object in_flight
    cdef public bint maybe_written
    cdef public object drained_ms
    cdef object _outcome            # None until something needs it (see ProducerBatch.outcome)
    cdef public object callbacks    # () until the first callback, then a list


# the batch's outcome, made on first use (ProducerBatch.outcome)
cdef object _batch_outcome(ProducerBatch b)
