# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""A batch's sequence when it is sent, and its completion once the broker
acknowledged it, in C.

With keys spread over many partitions nearly every record is a batch of its
own, and each Produce answer completes hundreds of them: interpreted, that
was five Python frames per batch (``Sender._complete``,
``IdempotenceManager.on_success`` and ``_forget``, ``Sender._finish``,
``RecordAccumulator.release``) plus a BatchResult made through its Python
``__new__``. :func:`acknowledge` does the same work, in the same order, on
the same objects; ``Sender.acknowledged_in_python`` is the reference it is
checked against (tests/test_producer_core_fast_append.py runs every twin
script both ways). :func:`acknowledge_all` acknowledges every batch of a
Produce answer read in C (kproto/producer/_produce_answer.pyx), reading
the sender's containers once for the whole answer.
:func:`assign_sequence` is ``IdempotenceManager.assign`` (the reference),
called for every batch a Produce request carries; :func:`can_drain` is
``IdempotenceManager.can_drain`` (the reference), asked for every head of a
queue a drain looks at.
"""
cimport cython
from cpython.dict cimport PyDict_GetItemWithError
from cpython.long cimport PyLong_FromVoidPtr
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

from kproto.producer._append cimport ProducerBatch

cdef extern from "Python.h":
    ctypedef PyObject* (*allocfunc)(PyTypeObject*, Py_ssize_t)
    ctypedef struct _AllocType "PyTypeObject":
        allocfunc tp_alloc

__all__ = ["acknowledge", "acknowledge_all", "assign_sequence", "can_drain", "PartitionSequences"]


@cython.no_gc
@cython.final
cdef class PartitionSequences:
    """One partition's sequence state (``IdempotenceManager.partitions``):
    the next sequence to give, the last one the broker acknowledged, and the
    sent batches not yet resolved, in sequence order (``unacked``).

    Not tracked by the cyclic garbage collector: a producer keeps one per
    partition it ever wrote (10,000 partitions, 10,000 of them), each walked
    by every full collection, and it can be in no reference cycle - it holds
    two ints and its list, and nothing that list reaches (batches, their
    builders, outcomes and handles) refers back to it. The list itself stays
    tracked, so cycles through the batches it holds are still found.

    ``unacked`` is the shared empty tuple while the partition has no batch
    waiting for an answer (:meth:`unacked_list` makes the list, :meth:`forget`
    drops it again once empty): a partition written now and then keeps no
    tracked object here between its batches, so with 10,000 partitions the
    full collections walk 10,000 lists fewer."""

    # (its fields are declared in _acknowledge.pxd, for kproto/producer/_drain.pyx)

    def __cinit__(self):
        self.next_sequence = 0
        self.last_acked = -1
        self.unacked = _EMPTY_TUPLE

    def unacked_list(self):
        """``unacked`` as a list to add to (made on first use)."""
        return _unacked_list(self)

    def forget(self, batch):
        """Drop ``batch`` from ``unacked`` if it is there (the list dropped
        too once empty)."""
        _forget(self, batch)

    def __repr__(self):
        return (f"<PartitionSequences next={self.next_sequence} last_acked={self.last_acked} "
                f"unacked={len(self.unacked)}>")

cdef tuple _EMPTY_TUPLE = ()


cdef inline list _unacked_list(PartitionSequences p):
    if type(p.unacked) is not list:
        p.unacked = []
    return <list>p.unacked


cdef int _forget(PartitionSequences p, object b) except -1:
    """``p.unacked.remove(b)`` if it is there (the oldest, usually), the
    empty tuple again when none is left."""
    cdef list unacked
    if type(p.unacked) is not list:
        return 0
    unacked = <list>p.unacked
    if unacked and unacked[0] is b:
        del unacked[0]
    else:
        try:
            unacked.remove(b)
        except ValueError:
            pass
    if not unacked:
        p.unacked = _EMPTY_TUPLE
    return 0


# the sequence space of a partition (kproto.producer.idempotence)
cdef long long MAX_SEQUENCE = 2147483647



cdef inline int _put(object t, Py_ssize_t i, object value) except -1:
    Py_INCREF(value)                 # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(t, i, value)
    return 0


cdef object _batch_result(object result_type, ProducerBatch b, object base_offset, object log_append_time):
    """``BatchResult(b.topic, b.partition, base_offset, log_append_time,
    None, b.parts, outcome, b.callbacks)``: what ``tuple.__new__(BatchResult,
    fields)`` makes (BatchResult is a named tuple), allocated by the type and
    filled in place, without the Python call and the tuple of fields it copies."""
    cdef PyObject* made = (<_AllocType*>result_type).tp_alloc(<PyTypeObject*>result_type, 8)
    if made == NULL:
        raise MemoryError()
    cdef object r = <object>made
    Py_DECREF(r)                     # <object> took a reference of its own
    _put(r, 0, b.topic)
    _put(r, 1, b.partition)
    _put(r, 2, base_offset)
    _put(r, 3, log_append_time)
    _put(r, 4, None)
    _put(r, 5, b.parts)
    _put(r, 6, b._outcome)
    _put(r, 7, b.callbacks)
    return r


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


cdef class _Sender:
    """What acknowledging reads of the sender (its in-flight map, muted
    partitions, idempotence manager, accumulator, metrics and results),
    fetched once per call rather than once per batch."""
    cdef dict in_flight
    cdef set muted
    cdef object idem
    cdef object pid, epoch           # the idempotence manager's, unchanged while an answer is read
    cdef dict idem_partitions
    cdef set incomplete
    cdef list results
    cdef object result_type
    cdef long long records          # records acknowledged: for metrics and results_records
    cdef object released            # memory given back: for acc.used_memory

    def __cinit__(self, sender, result_type):
        self.in_flight = <dict?>sender.in_flight
        self.muted = <set?>sender._muted
        self.idem = sender.idem
        self.idem_partitions = <dict?>self.idem.partitions if self.idem is not None else None
        if self.idem is not None:
            self.pid = self.idem.producer_id
            self.epoch = self.idem.epoch
        if not isinstance(result_type, type) or not issubclass(result_type, tuple) \
                or (<type>result_type).__basicsize__ != (<type>tuple).__basicsize__:
            raise TypeError(f"result_type must be a named tuple type, not {result_type!r}")
        self.incomplete = <set?>sender.acc.incomplete
        self.results = <list?>sender.results
        self.result_type = result_type
        self.records = 0
        self.released = 0

    cdef int one(self, ProducerBatch b, object base_offset, object log_append_time) except -1:
        """``sender._complete(b, None, base_offset, log_append_time, now)``,
        but for the totals (see ``finish``)."""
        cdef object tp, last_acked, idem
        cdef PartitionSequences p
        cdef list unacked
        cdef PyObject* found
        cdef long long last
        self.in_flight.pop(PyLong_FromVoidPtr(<void*>b), None)      # id(b)
        b.in_flight = False
        tp = b.tp
        self.muted.discard(tp)
        if b.done:                       # expired while in flight; the answer is too late
            return 0
        # IdempotenceManager.on_success: the partition's sequences move past it
        idem = self.idem
        if idem is not None:
            found = PyDict_GetItemWithError(self.idem_partitions, tp)
            if found != NULL:
                p = <PartitionSequences?>found
                _forget(p, b)
                if b.producer_id == self.pid and b.epoch == self.epoch:
                    last = _increment_sequence(b.base_sequence, b.builder.record_count - 1)
                    last_acked = p.last_acked
                    if last_acked < 0 or _seq_after(last, last_acked):
                        p.last_acked = last
        # Sender._finish, for a success
        b.done = True
        if b in self.incomplete:         # RecordAccumulator.release
            self.incomplete.discard(b)
            self.released = self.released + b.reserved
        self.records += b.builder.record_count
        self.results.append(_batch_result(self.result_type, b, base_offset, log_append_time))
        return 0

    cdef int finish(self, sender) except -1:
        """The totals into the sender: memory released, records sent."""
        cdef object acc
        if self.released:
            acc = sender.acc
            acc.used_memory -= self.released
        if self.records:
            (<dict?>sender.metrics)["records_sent"] += self.records
            sender.results_records += self.records
        return 0


def acknowledge(sender, result_type, ProducerBatch b, base_offset, log_append_time):
    """``sender._complete(b, None, base_offset, log_append_time, now)``: the
    broker wrote batch ``b`` (or already had it). ``result_type`` is
    BatchResult (a named tuple: made here without its Python ``__new__``)."""
    cdef _Sender s = _Sender(sender, result_type)
    s.one(b, base_offset, log_append_time)
    s.finish(sender)


def acknowledge_all(sender, result_type, list acked):
    """``acknowledge`` for each (batch, base_offset, log_append_time) triple
    of the flat list ``acked`` (kproto/producer/_produce_answer.pyx), in
    order, with the sender's objects fetched once for the whole answer."""
    cdef _Sender s = _Sender(sender, result_type)
    cdef Py_ssize_t i
    try:
        for i in range(0, len(acked) - 2, 3):
            s.one(<ProducerBatch?>acked[i], acked[i + 1], acked[i + 2])
    finally:
        s.finish(sender)             # what was acknowledged counts, whatever happened after


def assign_sequence(idem, ProducerBatch b):
    """``idem.assign(b)`` (IdempotenceManager): at drain, a batch without a
    sequence of the current producer id and epoch takes its partition's
    next one (a retry keeps its own); the builder gets the producer state."""
    _assign_sequence(idem.producer_id, idem.epoch, <dict?>idem.partitions, idem.transactional_id is not None, b)


cdef int _assign_sequence(object pid, object epoch, dict partitions, bint transactional,
                          ProducerBatch b) except -1:
    """``assign_sequence`` with the manager's state read by the caller (a
    request's batches all see the same: kproto/producer/_produce_request.pyx)."""
    cdef object tp
    cdef PartitionSequences p
    cdef PyObject* found
    if not b.base_sequence >= 0 or b.producer_id != pid or b.epoch != epoch:
        tp = b.tp
        found = PyDict_GetItemWithError(partitions, tp)
        if found != NULL:
            p = <PartitionSequences?>found
        else:                    # the partition's first batch: idem._part(tp), without its Python call
            p = PartitionSequences.__new__(PartitionSequences)
            partitions[tp] = p
        b.base_sequence = p.next_sequence
        b.producer_id = pid
        b.epoch = epoch
        p.next_sequence = _increment_sequence(p.next_sequence, b.builder.record_count)
        _unacked_list(p).append(b)
    b.builder._set_producer_state(pid, epoch, b.base_sequence, transactional)
    return 0


def can_drain(idem, ready_state, ProducerBatch b):
    """``idem.can_drain(b)`` (IdempotenceManager; ``ready_state`` is
    PidState.READY): whether a drain may take ``b``, the head of its queue."""
    return _can_drain(idem, ready_state, b)


cdef bint _can_drain(object idem, object ready_state, ProducerBatch b) except -1:
    """``can_drain`` for C callers (kproto/producer/_drain.pyx)."""
    cdef PartitionSequences p
    cdef object unacked
    cdef PyObject* found
    if idem.state is not ready_state:
        return False
    found = PyDict_GetItemWithError(<dict?>idem.partitions, b.tp)
    if found == NULL:
        return True
    p = <PartitionSequences?>found
    unacked = p.unacked
    if not unacked:
        return True
    if b.base_sequence >= 0:
        return unacked[0] is b
    # the partition's first batch of an epoch goes alone (see the reference)
    return p.last_acked >= 0
