# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""The producer's per-record fast path: ``ProducerCore.append_serialized``'s
common case, typed, in C.

Appending one record to a partition's open batch is what every ``send()``
does, and interpreted it cost several thousand instructions a record
(``bench/send_cost.py``). :class:`FastAppend` does exactly what the Python
implementation does in its common case - a topic whose partitions are
known, a bytes/None key and value with no headers, an int (or float)
timestamp, an explicit partition, a murmur2 partition of the key, or the
topic's current sticky partition, and a last batch of that partition that is
open and takes the record at its current size, or no open batch there and
room in buffer.memory for a new one (opened as ``RecordAccumulator.append``
opens it: with random keys over many partitions nearly every record opens a
batch) - and hands every other call, unchanged, to the Python
implementation (metadata not known yet, a
growing batch, headers, serializable objects, a closed or failed producer,
memory to wait for, bad arguments: whatever that returns or raises is the
answer). Its ``append`` has the same signature
and result, so ``ProducerCore.append_serialized`` is bound to it and a
driver pays no extra frame.

It holds no state of its own that could go stale: every decision reads the
producer's own objects (the cluster's ``partitions`` map, the sticky
partitioner's map, the accumulator's per-partition deques and the batch's
``full`` flag). A closed or failed producer needs no check of its own when
appending to an open batch (opening one checks it, see ``_open_batch``):
closing and a fatal error empty every partition's queue at once
(``Sender._fail_all``), and afterwards only the Python paths, which refuse
first, could open a batch - so the fast path finds no open batch and hands
the call to the Python implementation, which raises the reason. The caches it
keeps cannot go stale either: per topic, the list of the accumulator's
deques by partition (a deque, once made for a partition, is never replaced
nor removed from ``RecordAccumulator.queues``, so a cached one is the live
one), and per handle class, its ``notify`` (a class attribute: see
``DeliveryHandle``), whether it keeps Python's own attribute access, and
the offsets of the slots append writes, when they are slots.

:class:`ProducerBatch` lives here, as a typed class, so that the fast path
reads a batch's ``full``, ``builder``, ``parts``, ``outcome`` and
``callbacks`` as C fields (Python code sees the same attributes as before).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE, PyList_SET_ITEM
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact, PyLong_FromLongLong, PyLong_FromSsize_t
from cpython.object cimport PyObject, PyObject_GenericGetAttr, PyObject_GenericSetAttr, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_CheckExact
from libc.stdint cimport int64_t

from kproto.producer._murmur2 cimport _murmur2
from kproto.records._batch cimport BatchBuilder

from kproto.producer.outcome import BatchOutcome

from collections import deque

from types import MemberDescriptorType

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    int T_OBJECT_EX
    int READONLY

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

__all__ = ["Allocator", "FastAppend", "ProducerBatch"]

cdef object _object_getattribute = object.__getattribute__
cdef object _object_setattr = object.__setattr__


cdef class ProducerBatch:
    """One batch of one partition and the deliveries waiting on it.

    ``outcome`` is shared by the handles attached to the batch (those with
    ``notify`` false, see :mod:`kproto.producer.outcome`); ``parts`` lists
    the handles told one by one, in record order: a bare handle owns one
    record, whose offset delta is the handle's ``_delta``; a ``(handle,
    delta, count)`` tuple owns ``count`` consecutive records from ``delta``
    (a bulk send). Deltas are stored, not counted from the parts, because
    attached records between them are in no part. A bare handle instead of
    a tuple per record matters: every container allocated per record is one
    more object for the cyclic garbage collector to walk while batches wait.

    ``callbacks`` serves attached handles that carry an ``on_delivery``
    callback: a flat list of (callback, delta, timestamp) triples, three
    items per record and no object of its own, so a record with a callback
    keeps nothing alive but its callback (usually one function shared by
    every record) while the batch waits; :func:`complete_results` calls
    them, in record order with the parts.

    Both are the shared empty tuple until something goes in
    (:meth:`parts_list`, :meth:`callbacks_list` make the list): with keys
    over many partitions most batches hold a record or two, and with kio's
    handles (attached, no callback) neither list was ever used - two
    objects per batch the cyclic GC walked while the batch waited.

    ``full``: no more appends (drained, retried, split, refused a record,
    or records after the first filled it to batch.size); only the last batch of a partition's queue may be open.
    ``maybe_written``: an attempt ended without an answer (timeout,
    disconnect), so the broker may have written the batch."""

    # (its fields are declared in _append.pxd, for the other typed modules)

    def __init__(self, topic, partition, BatchBuilder builder, now, deadline_ms, reserved):
        _init_batch(self, topic, partition, None, builder, now, deadline_ms, reserved)

    @property
    def outcome(self):
        """The :class:`BatchOutcome` its attached handles share, made on
        first use: a batch whose handles are all told one by one (or that
        has none attached yet) has none, one object fewer per batch for the
        cyclic GC to walk while it waits."""
        return _batch_outcome(self)

    @outcome.setter
    def outcome(self, value):
        self._outcome = value

    @property
    def outcome_if_made(self):
        """The batch's outcome if anything made it (None: no handle is
        attached to it, nobody can wait on it)."""
        return self._outcome

    def parts_list(self):
        """``parts`` as a list to add to (made on first use)."""
        return _parts_list(self)

    def callbacks_list(self):
        """``callbacks`` as a list to add to (made on first use)."""
        return _callbacks_list(self)

    @property
    def record_count(self):
        return self.builder.record_count

    @property
    def has_sequence(self):
        return self.base_sequence >= 0

    def __repr__(self):
        return (f"<ProducerBatch {self.topic}-{self.partition} n={self.record_count} "
                f"seq={self.base_sequence} attempts={self.attempts}>")


cdef int _init_batch(ProducerBatch self, object topic, object partition, tuple tp, BatchBuilder builder,
                     object now, object deadline_ms, object reserved) except -1:
    """``ProducerBatch.__init__``: also what ``_new_batch`` runs on an
    instance made without the Python call (argument parsing per batch).
    ``tp``: the partition's ``(topic, partition)`` key if the caller keeps
    one (the fast path: one tuple per partition, not one per batch, and dict
    lookups with it find their key by identity), else None: made here.
    Every dict and set of the producer keyed by partition (queues, in flight,
    muted, sequences, a request's batches) is then given ``batch.tp``, not a
    new tuple. ``topic`` and ``partition`` must not change afterwards."""
    self.topic = topic
    self.partition = partition
    self.tp = (topic, partition) if tp is None else tp
    self.builder = builder
    self.parts = _EMPTY_TUPLE
    self.created_ms = now
    self.deadline_ms = deadline_ms
    self.attempts = 0
    self.retry_after_ms = 0
    self.reserved = reserved
    self.full = False
    self.base_sequence = -1
    self.producer_id = -1
    self.epoch = -1
    self.done = False
    self.in_flight = False
    self.maybe_written = False
    self.drained_ms = None
    self._outcome = None
    self.callbacks = _EMPTY_TUPLE
    return 0


cdef object _batch_outcome(ProducerBatch b):
    """``b.outcome``: made on first use (see ProducerBatch.outcome)."""
    if b._outcome is None:
        b._outcome = _new_outcome(b.topic, b.partition)
    return b._outcome


# BatchOutcome(topic, partition) without its __init__ call: every batch
# makes one, and the class call (argument parsing, ten slot assignments
# through their descriptors) cost a third of opening a batch. The outcome of
# a template instance is copied slot by slot instead (what PyMember_SetOne
# does for an object slot), then its topic and partition set: the same
# object __init__ makes, as long as every value __init__ sets is immutable
# and shared safely - checked once here, else every outcome is made by the
# class call (tests/test_producer_batch_objects.py compares the two).
cdef object _OUTCOME_TEMPLATE = None      # BatchOutcome(None, None), or None: use the class call
cdef Py_ssize_t _outcome_slots[16]        # offsets of BatchOutcome's slots, in __slots__ order
cdef Py_ssize_t _outcome_nslots = 0
cdef Py_ssize_t _outcome_topic = -1, _outcome_partition = -1


cdef int _learn_outcome() except -1:
    global _OUTCOME_TEMPLATE, _outcome_nslots, _outcome_topic, _outcome_partition
    cdef PyMemberDef* member
    cdef object template = BatchOutcome(None, None)
    names = BatchOutcome.__slots__
    if len(names) > 16:
        return 0
    for i, name in enumerate(names):
        desc = BatchOutcome.__dict__.get(name)
        if type(desc) is not MemberDescriptorType:
            return 0
        member = (<PyMemberDescrObject*><PyObject*>desc).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            return 0
        if type(getattr(template, name)) not in (type(None), bool, int):
            return 0                     # a value that may not be shared between outcomes
        _outcome_slots[i] = member.offset
        if name == "topic":
            _outcome_topic = member.offset
        elif name == "partition":
            _outcome_partition = member.offset
    if _outcome_topic < 0 or _outcome_partition < 0:
        return 0
    _outcome_nslots = len(names)
    _OUTCOME_TEMPLATE = template
    return 0


cdef object _new_outcome(object topic, object partition):
    """``BatchOutcome(topic, partition)`` (see above)."""
    cdef object outcome, template = _OUTCOME_TEMPLATE
    cdef Py_ssize_t i
    if template is None:
        return BatchOutcome(topic, partition)
    outcome = (<PyTypeObject*>object).tp_new(BatchOutcome, <PyObject*>_EMPTY_TUPLE, NULL)
    cdef PyObject* value
    for i in range(_outcome_nslots):
        value = (<PyObject**>((<char*><PyObject*>template) + _outcome_slots[i]))[0]
        if value == NULL:                # (never: __init__ sets every slot)
            return BatchOutcome(topic, partition)
        _put_slot(outcome, _outcome_slots[i], <object>value)
    _put_slot(outcome, _outcome_topic, topic)
    _put_slot(outcome, _outcome_partition, partition)
    return outcome


def new_outcome(topic, partition):
    """What a batch's outcome is made with (tests compare it with the class call)."""
    return _new_outcome(topic, partition)


_learn_outcome()
#: whether outcomes are copied from the template (False: made by the class call)
OUTCOME_COPIED = _OUTCOME_TEMPLATE is not None


cdef inline list _parts_list(ProducerBatch b):
    if type(b.parts) is not list:
        b.parts = list(b.parts)
    return <list>b.parts


cdef inline list _callbacks_list(ProducerBatch b):
    if type(b.callbacks) is not list:
        b.callbacks = list(b.callbacks)
    return <list>b.callbacks


cdef ProducerBatch _new_batch(object topic, object partition, tuple tp, BatchBuilder builder, object now,
                              object deadline_ms, object reserved):
    """``ProducerBatch(topic, partition, builder, now, deadline_ms, reserved)``
    without the Python call: the fast path opens one per record when keys
    spread over many partitions. ``tp``: see ``_init_batch``."""
    cdef ProducerBatch batch = ProducerBatch.__new__(ProducerBatch)
    _init_batch(batch, topic, partition, tp, builder, now, deadline_ms, reserved)
    return batch


cdef class FastAppend:
    """``append(topic, value, key, partition, headers, timestamp_ms, now,
    handle)``: ``ProducerCore.append_serialized`` for the common case (see
    the module docstring), ``slow`` (the Python implementation) otherwise.
    ``appended`` counts the records it appended (the core's
    ``records_queued`` metric adds them). ``handle_class``: what it makes
    for a call that brings no handle (the core's ``DeliveryHandle``, as the
    Python implementation makes one); None leaves such calls to ``slow``."""

    cdef object _slow               # the Python implementation, bound to its core
    cdef object _handle_class       # what it makes when given no handle (DeliveryHandle), or None
    cdef object _core               # the ProducerCore (closed?) and its
    cdef object _sender             #   Sender (fatal_error?): checked before opening a batch
    cdef object _acc                # RecordAccumulator: memory, wake-ups, expiry floor
    cdef object _txn                # TransactionManager or None
    cdef dict _partitions           # Cluster.partitions: topic -> {partition: leader}
    cdef dict _queues               # RecordAccumulator.queues: (topic, partition) -> deque
    cdef dict _nonempty             # RecordAccumulator.nonempty: the queues that may hold a batch
    cdef dict _sticky               # StickyPartitioner._sticky: topic -> partition
    cdef dict _topic_queues         # topic -> [deque or None by partition] (see the docstring)
    cdef dict _topic_keys           # topic -> [(topic, partition) or None by partition]: each
                                    #   partition's key, made once (see _init_batch)
    cdef Py_ssize_t _small_record   # key + value below this: no size check needed
    # The accumulator's configuration, read once: RecordAccumulator.__init__
    # sets these and nothing changes them afterwards (its per-round state -
    # used_memory, wakeup, next_round_ms, ... - is read on every batch). The
    # ratio map and the set of incomplete batches are objects it never replaces.
    cdef object _batch_size, _buffer_memory, _linger_ms, _compression, _level, _delivery_timeout_ms
    cdef dict _ratio
    cdef set _incomplete
    cdef type _htype                # the handle class seen last, and of that class:
    cdef bint _hnotify              #   its ``notify``,
    cdef bint _hplain               #   whether it keeps object's __getattribute__/__setattr__,
    cdef bint _hslots               #   whether what append writes are its own slots, at
    cdef Py_ssize_t _slot[5]        #   these offsets (topic, partition, timestamp, _delta, _outcome)
    cdef public long long appended

    def __init__(self, core, slow, handle_class=None):
        self._slow = slow
        self._handle_class = handle_class
        self._core = core
        self._sender = core.sender
        self._acc = core.accumulator
        self._txn = core.transactions
        self._partitions = core.cluster.partitions
        self._queues = core.accumulator.queues
        self._nonempty = core.accumulator.nonempty
        self._sticky = core.partitioner._sticky
        self._topic_queues = {}
        self._topic_keys = {}
        self._small_record = core._small_record
        acc = core.accumulator
        self._batch_size = acc.batch_size
        self._buffer_memory = acc.buffer_memory
        self._linger_ms = acc.linger_ms
        self._compression = acc.compression
        self._level = acc.compression_level
        self._delivery_timeout_ms = acc.delivery_timeout_ms
        self._ratio = <dict?>acc._ratio
        self._incomplete = <set?>acc.incomplete
        self._htype = None
        self.appended = 0

    cdef int _learn_handle_type(self, object handle) except -1:
        cdef type t = type(handle)
        cdef PyMemberDef* member
        cdef int i
        self._htype = None
        self._hnotify = bool(t.notify)
        self._hplain = (getattr(t, "__getattribute__", None) is _object_getattribute
                        and getattr(t, "__setattr__", None) is _object_setattr)
        # Where object.__setattr__ would put what append writes: the same
        # slots, written directly (what PyMember_SetOne does for an object
        # slot), saving the generic lookup of each name on every record.
        self._hslots = self._hplain
        for i, name in enumerate(_HANDLE_FIELDS[:4] if self._hnotify else _HANDLE_FIELDS):
            desc = getattr(t, name, None)
            if type(desc) is not MemberDescriptorType:
                self._hslots = False
                break
            member = (<PyMemberDescrObject*><PyObject*>desc).d_member
            if member.type != T_OBJECT_EX or member.flags & READONLY:
                self._hslots = False
                break
            self._slot[i] = member.offset
        self._htype = t
        return 0

    cdef object _partition_queue(self, object topic, Py_ssize_t p, object p_obj):
        """The accumulator's deque of (topic, p), or None while it has none."""
        cdef PyObject* found = PyDict_GetItemWithError(self._topic_queues, topic)
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
            dq = self._queues.get(self._partition_key(topic, p, p_obj))
            if dq is not None:
                dqs[p] = dq
        return dq

    cdef tuple _partition_key(self, object topic, Py_ssize_t p, object p_obj):
        """``(topic, p)``, the same tuple every time for a partition: the
        key its batches carry (``ProducerBatch.tp``)."""
        cdef PyObject* found = PyDict_GetItemWithError(self._topic_keys, topic)
        cdef list keys
        cdef object key
        if found == NULL or PyList_GET_SIZE(<list>found) <= p:
            keys = [None] * (p + 1) if found == NULL else (<list>found) + [None] * (p + 1 - PyList_GET_SIZE(<list>found))
            PyDict_SetItem(self._topic_keys, topic, keys)
        else:
            keys = <list>found
        key = <object>PyList_GET_ITEM(keys, p)
        if key is None:
            key = (topic, p_obj)
            keys[p] = key
        return <tuple>key

    cdef ProducerBatch _open_batch(self, object topic, Py_ssize_t p, object p_obj, object dq, Py_ssize_t need,
                                   object now):
        """A new open batch at the end of ``dq`` (None: the partition has no
        deque yet, made here) for a record of ``need`` bytes (its estimate),
        as ``RecordAccumulator.append`` opens one (``_wants_round``, then
        ``_new_batch``, the same state changed in the same order); None,
        with nothing changed, where the Python path must
        answer instead: a closed or failed producer (it raises), no room in
        buffer.memory (it blocks), a transaction that refuses the partition."""
        cdef object acc = self._acc
        cdef object batch_size, limit, reserve, used, ratio, nxt, due, deadline, floor, awaited, leader, level
        cdef BatchBuilder builder
        cdef ProducerBatch batch
        cdef tuple tp
        if self._core.closed or self._sender.fatal_error is not None:
            return None
        batch_size = self._batch_size
        limit = min(batch_size, max(acc.initial_reserve, need))
        reserve = max(limit, need)
        used = acc.used_memory
        if used + reserve > self._buffer_memory:
            return None
        tp = self._partition_key(topic, p, p_obj)
        if self._txn is not None:
            try:
                self._txn.maybe_add_partition(tp)
            except Exception:
                return None          # the Python path raises it (after the same checks)
        if dq is None:               # the partition's first batch: its deque, kept for good
            dq = deque()
            self._queues[tp] = dq
            (<list>self._topic_queues[topic])[p] = dq
        # _wants_round: wake the driver only if its next round comes too late
        if not acc.wakeup:
            due = now if acc.flushing else now + self._linger_ms
            nxt = acc.next_round_ms
            if nxt is None or not nxt <= due:
                awaited = acc.awaited_nodes
                leader = acc.leader
                if not (awaited and leader is not None and leader(topic, p_obj) in awaited):
                    acc.next_round_ms = due if nxt is None or due < nxt else nxt
                    acc.wakeup = True
        # _new_batch
        level = self._level
        # (positional when there is no level: no keyword dict to make and
        # parse, a fifth of opening a batch)
        builder = BatchBuilder(self._compression, limit) if level is None else \
            BatchBuilder(self._compression, limit, compression_level=level)
        ratio = self._ratio.get(topic)
        if ratio is not None and ratio < 1.0:
            builder._set_ratio(min(1.0, ratio * 1.05))
        acc.used_memory = used + reserve
        acc.waiting_for_memory = False
        deadline = now + self._delivery_timeout_ms
        batch = _new_batch(topic, p_obj, tp, builder, now, deadline, reserve)
        self._incomplete.add(batch)
        floor = acc._expiry_floor
        if floor is None or deadline < floor:
            acc._expiry_floor = deadline
        dq.append(batch)
        PyDict_SetItem(self._nonempty, tp, dq)
        return batch

    def append(self, topic, value, key, partition, headers, timestamp_ms, now, handle=None):
        """Append one serialized record (see ``ProducerCore.append_serialized``);
        returns ``handle``."""
        cdef PyObject* found
        cdef Py_ssize_t n, p, klen, vlen, count
        cdef const unsigned char* kp = NULL
        cdef const unsigned char* vp = NULL
        cdef long long ll
        cdef int overflow = 0
        cdef int64_t ts
        cdef object p_obj, dq, on_delivery = None, delta, ts_obj
        cdef list parts = None
        cdef ProducerBatch batch
        cdef BatchBuilder builder
        cdef bint notify, plain

        if handle is None and self._handle_class is not None:
            # what the Python path makes (it does so later, with no effect
            # between): the keyword ``send()`` of tests and scripts comes here
            handle = self._handle_class()
        if handle is None or headers is not None:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        # the timestamp: an int, or a float of milliseconds (drivers pass
        # time.time() * 1000, cheaper than time_ns() // 10**6), made an int as
        # int() does; anything else, or out of int64's range, is the slow path's
        if PyLong_CheckExact(timestamp_ms):
            ts = PyLong_AsLongLongAndOverflow(timestamp_ms, &overflow)
            if overflow:
                return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
            ts_obj = timestamp_ms
        elif PyFloat_CheckExact(timestamp_ms) and -9.2e18 <= PyFloat_AS_DOUBLE(timestamp_ms) <= 9.2e18:
            ts = <int64_t>PyFloat_AS_DOUBLE(timestamp_ms)       # NaN fails the test above
            ts_obj = None                                        # made once the record is in
        else:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if not PyUnicode_CheckExact(topic):
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        found = PyDict_GetItemWithError(self._partitions, topic)
        if found == NULL:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        n = len(<object>found)
        # lengths -1 for null (as encoded); both count 0 against the size limit
        if not _raw_bytes(value, &vp, &vlen) or not _raw_bytes(key, &kp, &klen):
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if n == 0 or (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) >= self._small_record:
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)

        # -- the partition: explicit, murmur2 of the key, or the sticky one
        if partition is None:
            if key is not None:
                p = (_murmur2(kp, klen) & 0x7FFFFFFF) % n
                p_obj = PyLong_FromSsize_t(p)
            else:
                found = PyDict_GetItemWithError(self._sticky, topic)
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
        batch = <ProducerBatch?>dq[len(dq) - 1] if dq else None
        if batch is None or batch.full:
            # No open batch: open one here (one in C instead of five Python
            # frames; with keys over many partitions nearly every record does),
            # or leave it to the slow path when it must refuse or wait.
            batch = self._open_batch(topic, p, p_obj, dq,
                                     (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + 64, now)
            if batch is None:
                return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        builder = batch.builder
        if type(handle) is not self._htype:
            self._learn_handle_type(handle)
        notify = self._hnotify
        plain = self._hplain
        if notify:
            parts = _parts_list(batch)
        else:
            if plain:
                try:
                    on_delivery = PyObject_GenericGetAttr(handle, "on_delivery")
                except AttributeError:      # left to the class's __getattr__, if any
                    on_delivery = handle.on_delivery
            else:
                on_delivery = handle.on_delivery
            if on_delivery is not None:
                parts = _callbacks_list(batch)
        if self._txn is not None:
            self._txn.maybe_add_partition(batch.tp)
        count = builder.record_count
        # (kp and vp point into bytes objects this call holds: still valid)
        if not builder._put_record(ts, kp, klen, vp, vlen, None, 0, 0):
            if count == 0:
                raise AssertionError("an empty batch refused a record")   # as RecordAccumulator.append
            # full at its current size: growing it, or a new batch, is the slow path's
            return self._slow(topic, value, key, partition, headers, timestamp_ms, now, handle)
        if count > 0 and builder.pos >= builder._limit:
            # filled exactly: at batch.size it is full and sendable now
            # (RecordAccumulator._filled, which also asks for a round)
            self._acc._filled(batch, now)

        # -- the record is in the batch: its handle's bookkeeping
        delta = PyLong_FromSsize_t(count)
        if ts_obj is None:
            ts_obj = PyLong_FromLongLong(ts)
        if self._hslots:
            _put_slot(handle, self._slot[0], topic)
            _put_slot(handle, self._slot[1], p_obj)
            _put_slot(handle, self._slot[2], ts_obj)
            _put_slot(handle, self._slot[3], delta)
            if not notify:
                _put_slot(handle, self._slot[4], _batch_outcome(batch))
        elif plain:
            PyObject_GenericSetAttr(handle, "topic", topic)
            PyObject_GenericSetAttr(handle, "partition", p_obj)
            PyObject_GenericSetAttr(handle, "timestamp", ts_obj)
            PyObject_GenericSetAttr(handle, "_delta", delta)
            if not notify:
                PyObject_GenericSetAttr(handle, "_outcome", _batch_outcome(batch))
        else:
            handle.topic = topic
            handle.partition = p_obj
            handle.timestamp = ts_obj
            handle._delta = delta
            if not notify:
                handle._outcome = _batch_outcome(batch)
        if notify:
            PyList_Append(parts, handle)
        elif on_delivery is not None:
            PyList_Append(parts, on_delivery)
            PyList_Append(parts, delta)
            PyList_Append(parts, ts_obj)
        self.appended += 1
        return handle


cdef class Allocator:
    """``Allocator(cls).new()`` is ``object.__new__(cls)`` - an instance whose
    ``__init__`` has not run - at the cost of a C call: the drivers make one
    future per record this way (kio's DeliveryFuture initialises lazily), and
    ``object.__new__(cls)`` from Python builds and slices an argument tuple
    and checks its caller each time (about 600 instructions a record)."""

    cdef type _cls

    def __init__(self, type cls):
        if cls.__new__ is not object.__new__:
            raise TypeError(f"{cls.__qualname__} has its own __new__: object.__new__ cannot make it")
        self._cls = cls

    def new(self):
        """A new instance of the class, not initialised."""
        return (<PyTypeObject*>object).tp_new(self._cls, <PyObject*>_EMPTY_TUPLE, NULL)


cdef tuple _EMPTY_TUPLE = ()
#: what append writes on a handle, in FastAppend._slot's order (the last only when attached)
cdef tuple _HANDLE_FIELDS = ("topic", "partition", "timestamp", "_delta", "_outcome")


cdef inline bint _raw_bytes(object o, const unsigned char** data, Py_ssize_t* length) noexcept:
    """A key or value the fast path takes: None (length -1, as encoded) or
    exact bytes; False for anything else (the slow path's)."""
    if o is None:
        length[0] = -1
        return True
    if PyBytes_CheckExact(o):
        data[0] = <const unsigned char*>PyBytes_AS_STRING(o)
        length[0] = PyBytes_GET_SIZE(o)
        return True
    return False


cdef inline void _put_slot(object obj, Py_ssize_t offset, object value) noexcept:
    """obj's object slot at ``offset`` = value (PyMember_SetOne, T_OBJECT_EX)."""
    cdef PyObject** field = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = field[0]
    Py_INCREF(value)
    field[0] = <PyObject*>value
    Py_XDECREF(old)
