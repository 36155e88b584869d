# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""The batches one Produce request to a node takes, in C.

With keys over many partitions nearly every record is a batch of its own,
and each round's drain takes hundreds of queue heads: interpreted (even
compiled as Python), each cost a Python call of the idempotence check, a
method call for the batch's size and a dozen generic attribute reads and
writes. :func:`drain_node` is ``RecordAccumulator._drain_node`` (the
reference, which ``drain_by_walk`` and so the twin-core tests run) doing the
same steps in the same order on the same objects, the batch's fields read as
C fields and the sender's usual idempotence check (``partial(can_drain, idem,
READY)``, kproto/producer/sender.py) made as a C call; any other
``can_drain`` (a transaction's, the Python reference) is called as it is.
``_release_unused`` (the drained batch's buffer shrunk to its records, the
rest of its reservation given back to buffer.memory) is done here in C, the
memory given back summed and taken off ``used_memory`` once per call.
"""
from functools import partial

from kproto.producer._acknowledge cimport _can_drain
from kproto.producer._append cimport ProducerBatch
from kproto.records._batch cimport BatchBuilder

from kproto.producer._acknowledge import can_drain as _can_drain_function

__all__ = ["drain_node"]


def drain_node(acc, node, tps, list indexes, start, now, can_drain):
    """``acc._drain_node(node, tps, indexes, start, now, can_drain)``: the
    heads of the queues of ``tps[i]`` for ``i`` in ``indexes`` (walk order)
    that one request to ``node`` takes, up to max.request.size; sets where
    the node's next drain starts."""
    cdef dict queues = <dict?>acc.queues
    cdef dict drain_index = <dict?>acc._drain_index
    cdef object max_size = acc.max_request_size
    cdef list batches = []
    cdef object size = 0, est, dq, idem = None, ready_state = None, released = 0
    cdef Py_ssize_t held
    cdef ProducerBatch batch
    cdef bint in_c = False
    if type(can_drain) is partial and (<object>can_drain).func is _can_drain_function \
            and len((<object>can_drain).args) == 2 and not (<object>can_drain).keywords:
        idem, ready_state = (<object>can_drain).args
        in_c = True
    try:
        for i in indexes:
            dq = queues.get(tps[i])
            if not dq:
                continue
            batch = <ProducerBatch?>dq[0]
            if batch.in_flight or (batch.attempts > 0 and now < batch.retry_after_ms):
                continue
            if in_c:
                if not _can_drain(idem, ready_state, batch):
                    continue
            elif can_drain is not None and not can_drain(batch):
                continue
            est = batch.builder.size_in_bytes()
            if batches and size + est > max_size:
                drain_index[node] = i
                return batches
            dq.popleft()
            batch.full = True
            batch.drained_ms = now
            # acc._release_unused(batch): the buffer.memory beyond its records,
            # given back now (summed, and taken off used_memory once, below)
            held = (<BatchBuilder>batch.builder)._shrink_to_fit()
            if held < batch.reserved:
                released = released + (batch.reserved - held)
                batch.reserved = held
            size = size + est
            batches.append(batch)
        drain_index[node] = start + 1
        return batches
    finally:
        if released:
            acc.used_memory -= released
