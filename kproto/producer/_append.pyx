# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""The producer's per-record fast path: ``ProducerCore.append_serialized``'s
common case, typed, in C.

Appending one record to a partition's open batch is what every ``send()``
does, and interpreted it cost several thousand instructions a record
(``bench/send_cost.py``). :class:`FastAppend` does exactly what the Python
implementation does in its common case - a topic whose partitions are
known, a bytes/None key and value with no headers, an explicit partition,
a murmur2 partition of the key, or the topic's current sticky partition,
and a last batch of that partition that is open and takes the record at its
current size - and hands every other call, unchanged, to the Python
implementation (metadata not known yet, a new or growing batch, headers,
serializable objects, a closed or failed producer, bad arguments: whatever
that returns or raises is the answer). Its ``append`` has the same signature
and result, so ``ProducerCore.append_serialized`` is bound to it and a
driver pays no extra frame.

It holds no state of its own that could go stale: every decision reads the
producer's own objects (the cluster's ``partitions`` map, the sticky
partitioner's map, the accumulator's per-partition deques, the batch's
``full`` flag, ``closed`` and the sender's ``fatal_error``). The only cache
is, per topic, the list of the accumulator's deques by partition: a deque,
once made for a partition, is never replaced nor removed from
``RecordAccumulator.queues``, so a cached one is always the live one.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact, PyLong_FromSsize_t
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t

from kproto.producer._murmur2 cimport _murmur2
from kproto.records._batch cimport BatchBuilder

import collections

__all__ = ["FastAppend"]

cdef object _deque = collections.deque


cdef class FastAppend:
    """``append(topic, value, key, partition, headers, timestamp_ms, now,
    handle)``: ``ProducerCore.append_serialized`` for the common case (see
    the module docstring), ``slow`` (the Python implementation) otherwise.
    ``appended`` counts the records it appended (the core's
    ``records_queued`` metric adds them)."""

    cdef object _slow               # the Python implementation, bound to its core
    cdef object _core
    cdef object _sender
    cdef object _txn                # TransactionManager or None
    cdef dict _partitions           # Cluster.partitions: topic -> {partition: leader}
    cdef dict _queues               # RecordAccumulator.queues: (topic, partition) -> deque
    cdef dict _sticky               # StickyPartitioner._sticky: topic -> partition
    cdef dict _topic_queues         # topic -> [deque or None by partition] (see the docstring)
    cdef Py_ssize_t _small_record   # key + value below this: no size check needed
    cdef public long long appended

    def __init__(self, core, slow):
        self._slow = slow
        self._core = core
        self._sender = core.sender
        self._txn = core.transactions
        self._partitions = core.cluster.partitions
        self._queues = core.accumulator.queues
        self._sticky = core.partitioner._sticky
        self._topic_queues = {}
        self._small_record = core._small_record
        self.appended = 0

    cdef object _partition_queue(self, object topic, Py_ssize_t p, object p_obj):
        """The accumulator's deque of (topic, p), or None while it has none."""
        cdef PyObject* found = PyDict_GetItem(self._topic_queues, topic)
        cdef list dqs
        cdef object dq
        if found == NULL or PyList_GET_SIZE(<list>found) <= p:
            # first record of the topic, or more partitions than before
            dqs = [None] * (p + 1) if found == NULL else (<list>found) + [None] * (p + 1 - PyList_GET_SIZE(<list>found))
            PyDict_SetItem(self._topic_queues, topic, dqs)
        else:
            dqs = <list>found
        dq = <object>PyList_GET_ITEM(dqs, p)
        if dq is None:
            dq = self._queues.get((topic, p_obj))
            if dq is not None:
                dqs[p] = dq
        return dq

    def append(self, topic, value, key, partition, headers, timestamp_ms, now, handle=None):
        """Append one serialized record (see ``ProducerCore.append_serialized``);
        returns ``handle``."""
        cdef PyObject* found
        cdef Py_ssize_t n, p, klen, vlen, count
        cdef long long ll
        cdef int overflow = 0
        cdef int64_t ts
        cdef object p_obj, dq, batch, parts = None, outcome = None, on_delivery = None, delta
        cdef BatchBuilder builder
        cdef bint notify

        if handle is None or headers is not None or not PyLong_CheckExact(timestamp_ms):
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if self._core.closed or self._sender.fatal_error is not None:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        found = PyDict_GetItem(self._partitions, topic)
        if found == NULL:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        n = len(<object>found)
        if value is None:
            vlen = 0
        elif PyBytes_CheckExact(value):
            vlen = PyBytes_GET_SIZE(value)
        else:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if key is None:
            klen = 0
        elif PyBytes_CheckExact(key):
            klen = PyBytes_GET_SIZE(key)
        else:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if n == 0 or klen + vlen >= self._small_record:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        ts = PyLong_AsLongLongAndOverflow(timestamp_ms, &overflow)
        if overflow:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)

        # -- the partition: explicit, murmur2 of the key, or the sticky one
        if partition is None:
            if key is not None:
                p = (_murmur2(<const unsigned char*>PyBytes_AS_STRING(key), klen) & 0x7FFFFFFF) % n
                p_obj = PyLong_FromSsize_t(p)
            else:
                found = PyDict_GetItem(self._sticky, topic)
                if found == NULL or not PyLong_CheckExact(<object>found):
                    return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
                p_obj = <object>found
                ll = PyLong_AsLongLongAndOverflow(p_obj, &overflow)
                if overflow or ll < 0 or ll >= n:
                    return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
                p = <Py_ssize_t>ll
        elif PyLong_CheckExact(partition):
            ll = PyLong_AsLongLongAndOverflow(partition, &overflow)
            if overflow or ll < 0 or ll >= n:
                return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
            p = <Py_ssize_t>ll
            p_obj = partition
        else:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)

        # -- the partition's open batch, and where the record's handle goes
        dq = self._partition_queue(topic, p, p_obj)
        if dq is None or not dq:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        batch = dq[len(dq) - 1]
        if batch.full:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        builder = <BatchBuilder?>batch.builder
        notify = handle.notify
        if notify:
            parts = batch.parts
            if type(parts) is not list:
                return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        else:
            outcome = batch.outcome
            on_delivery = handle.on_delivery
            if on_delivery is not None:
                parts = batch.callbacks
                if type(parts) is not list:
                    return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if self._txn is not None:
            self._txn.maybe_add_partition((topic, p_obj))
        count = builder.record_count
        if not builder._append(ts, key, value, None):
            # full at its current size: growing it, or a new batch, is the slow path's
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)

        # -- the record is in the batch: its handle's bookkeeping
        delta = PyLong_FromSsize_t(count)
        handle.topic = topic
        handle.partition = p_obj
        handle.timestamp = timestamp_ms
        handle._delta = delta
        if notify:
            PyList_Append(parts, handle)
        else:
            handle._outcome = outcome
            if on_delivery is not None:
                PyList_Append(parts, on_delivery)
                PyList_Append(parts, delta)
                PyList_Append(parts, timestamp_ms)
        self.appended += 1
        return handle
