# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""A batch the broker acknowledged, completed in C.

With keys spread over many partitions nearly every record is a batch of its
own, and each Produce answer completes hundreds of them: interpreted, that
was five Python frames per batch (``Sender._complete``,
``IdempotenceManager.on_success`` and ``_forget``, ``Sender._finish``,
``RecordAccumulator.release``) plus a BatchResult made through its Python
``__new__``. :func:`acknowledge` does the same work, in the same order, on
the same objects; ``Sender.acknowledged_in_python`` is the reference it is
checked against (tests/test_producer_core_fast_append.py runs every twin
script both ways).
"""
from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject

from kproto.producer._append cimport ProducerBatch

__all__ = ["acknowledge"]

# the sequence space of a partition (kproto.producer.idempotence)
cdef long long MAX_SEQUENCE = 2147483647

cdef object _tuple_new = tuple.__new__


cdef inline long long _increment_sequence(long long seq, long long inc) noexcept:
    """``idempotence.increment_sequence``: wraps to 0 after int32 max."""
    if seq > MAX_SEQUENCE - inc:
        return inc - (MAX_SEQUENCE - seq) - 1
    return seq + inc


cdef inline bint _seq_after(long long a, long long b) noexcept:
    """``idempotence._seq_after``: a comes after b in the wrapping sequence space."""
    cdef long long d = (a - b) % (MAX_SEQUENCE + 1)
    if d < 0:
        d += MAX_SEQUENCE + 1
    return 0 < d < (MAX_SEQUENCE + 1) // 2


def acknowledge(sender, result_type, ProducerBatch b, base_offset, log_append_time):
    """``sender._complete(b, None, base_offset, log_append_time, now)``: the
    broker wrote batch ``b`` (or already had it). ``result_type`` is
    BatchResult (a named tuple: made here without its Python ``__new__``)."""
    cdef object tp, idem, p, acc, last_acked
    cdef list unacked
    cdef set incomplete
    cdef dict metrics
    cdef PyObject* found
    cdef long long last
    (<dict?>sender.in_flight).pop(id(b), None)
    b.in_flight = False
    tp = (b.topic, b.partition)
    (<set?>sender._muted).discard(tp)
    if b.done:                       # expired while in flight; the answer is too late
        return
    # IdempotenceManager.on_success: the partition's sequences move past it
    idem = sender.idem
    if idem is not None:
        found = PyDict_GetItemWithError(<dict?>idem.partitions, tp)
        if found != NULL:
            p = <object>found
            unacked = <list?>p.unacked
            if unacked and unacked[0] is b:
                del unacked[0]
            else:
                try:
                    unacked.remove(b)
                except ValueError:
                    pass
            if b.producer_id == idem.producer_id and b.epoch == idem.epoch:
                last = _increment_sequence(b.base_sequence, b.builder.record_count - 1)
                last_acked = p.last_acked
                if last_acked < 0 or _seq_after(last, last_acked):
                    p.last_acked = last
    # Sender._finish, for a success
    b.done = True
    acc = sender.acc
    incomplete = <set?>acc.incomplete
    if b in incomplete:              # RecordAccumulator.release
        incomplete.discard(b)
        acc.used_memory -= b.reserved
    n = b.builder.record_count
    metrics = <dict?>sender.metrics
    metrics["records_sent"] += n
    (<list?>sender.results).append(_tuple_new(result_type, (
        b.topic, b.partition, base_offset, log_append_time, None, b.parts, b.outcome, b.callbacks)))
    sender.results_records += n
