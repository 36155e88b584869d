# C-level interface of the consumer's Fetch answer path (see _fetch.pyx).
from libc.stdint cimport int16_t, int32_t, int64_t


cdef struct PartitionEntry:
    int32_t topic                   # index into FetchAnswer.topics
    int32_t partition
    int16_t error_code
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset
    int32_t preferred_read_replica
    Py_ssize_t aborted              # index into FetchAnswer.aborted, -1: null
    Py_ssize_t records_pos          # -1: null records
    Py_ssize_t records_len
    # tagged fields (v12+), at their schema defaults when absent
    int32_t diverging_epoch
    int64_t diverging_end_offset
    int32_t leader_id
    int32_t leader_epoch
    int64_t snapshot_end_offset
    int32_t snapshot_epoch



cdef class FetchAnswer:
    cdef readonly int version
    cdef readonly int32_t throttle_time_ms
    cdef readonly int16_t error_code
    cdef readonly int32_t session_id
    cdef readonly list node_endpoints
    cdef object data                # the frame the records ranges point into
    cdef list topics                # per topic: its name (v4-v12) or its id (v13+)
    cdef list aborted               # per partition with a non-null list: [{producer_id, first_offset}]
    cdef PartitionEntry* parts
    cdef Py_ssize_t count
    cdef Py_ssize_t cap

    cdef PartitionEntry* _new_entry(self) except NULL
    cdef object _records(self, PartitionEntry* e)
    cdef dict _partition_dict(self, PartitionEntry* e)


cdef class PartitionState:
    # kproto.consumer.positions.PartitionState (documented there): a C class
    # so that the fetcher's per-partition paths here read and write its
    # fields as struct members, not by attribute lookup. Every field stays
    # readable and writable from Python; objects where None is a value.
    cdef public object position
    cdef public object leader_epoch
    cdef public bint paused
    cdef public object reset_to
    cdef public object high_watermark
    cdef public object last_stable_offset
    cdef public object log_start_offset
    cdef public object preferred_read_replica
    cdef public dict fetch_entry


cdef class Buffered:
    cdef public object tp
    cdef public list batches
    cdef public Py_ssize_t next_batch
    cdef public object record_iter
    cdef public object current
    cdef public list aborted
    cdef public set aborted_pids
    cdef public object state
