# C-level declarations of kproto/producer/_acknowledge.pyx, for the drain
# (kproto/producer/_drain.pyx), which asks can_drain of every head it takes.
cimport cython

from kproto.producer._append cimport ProducerBatch


@cython.no_gc
@cython.final
cdef class PartitionSequences:
    cdef public object next_sequence
    cdef public object last_acked
    cdef public object unacked      # () while none, else a list (see PartitionSequences)


cdef bint _can_drain(object idem, object ready_state, ProducerBatch b) except -1

# assign_sequence with the idempotence manager's state read once per request
# (kproto/producer/_produce_request.pyx)
cdef int _assign_sequence(object pid, object epoch, dict partitions, bint transactional,
                          ProducerBatch b) except -1
