# cython: language_level=3
"""The producer's per-record hot path in C: one record into the open batch
of its partition.

``send()`` appends to a batch that is already open almost every time (a new
batch once per batch.size bytes). Done in Python, that step - the queue
lookup, the open-batch checks, the builder call and attaching the record's
handle - cost about as much as the rest of ``send()``; here it is a few C
calls. Everything rarer (no open batch, a full batch, growing one, buffer
memory) stays in :meth:`RecordAccumulator.append`, which the caller falls
back to when this returns None.
"""
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject


def append_open(dict queues, tuple tp, ts, key, value, headers, handle):
    """Append one record to the open last batch of ``tp`` in ``queues``
    (RecordAccumulator.queues) and attach ``handle`` as
    RecordAccumulator.append does; returns the batch, or None when there is
    no open batch or it refused the record at its current limit (nothing
    was changed: take RecordAccumulator.append)."""
    cdef PyObject* found = PyDict_GetItem(queues, tp)
    if found == NULL:
        return None
    dq = <object>found
    cdef Py_ssize_t queued = len(dq)
    if queued == 0:
        return None
    batch = dq[queued - 1]
    if batch.full:
        return None
    builder = batch.builder
    n = builder.record_count
    if not builder.append(ts, key, value, headers):
        return None
    handle._delta = n
    if handle.notify:
        PyList_Append(batch.parts, handle)
    else:
        handle._outcome = batch.outcome
        on_delivery = handle.on_delivery
        if on_delivery is not None:
            callbacks = batch.callbacks
            PyList_Append(callbacks, on_delivery)
            PyList_Append(callbacks, n)
            PyList_Append(callbacks, ts)
    return batch
