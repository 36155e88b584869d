# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""A Produce request body written in C straight from the drained batches,
and the batches' bookkeeping as they are sent.

With keys spread over many partitions a Produce request carries hundreds of
batches of a record or two. The generic codec (kproto._codec) wanted a dict
per partition ({"index", "records"}) holding the batch built as a bytes
object of its own, then walked the schema for every field of every
partition. :func:`produce_request_body` writes the same bytes from the
batches themselves: each batch's header, records and CRC go straight into
the request (``BatchBuilder._write_built``), and nothing is allocated per
partition.

It writes the versions the sender uses, 3 to 13: classic encodings up to 8,
compact lengths and (empty) tagged fields from 9, topics by id from 13
(KIP-516). For any other version it returns None and the sender builds the
dicts for the generic codec, which stays the reference: with
``Sender.use_python_reference()`` every request goes that way, and
tests/test_producer_produce_request.py checks both give the same bytes.

:func:`gather_batches` is the sender's per-batch loop before a request is
written (``Sender.gather_in_python``, the reference): each batch's sequence,
its place in the request and in the in-flight map, the expiry floor, muting
and the sticky partitioner, per batch in drain order, with a Python call
only per topic (or when the sticky partition's batch goes out).
"""
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_FromVoidPtr
from cpython.object cimport PyObject
from libc.stdint cimport int32_t

from functools import partial

from kproto._wire cimport Writer
from kproto.producer._acknowledge cimport _assign_sequence
from kproto.producer._append cimport ProducerBatch
from kproto.records._batch cimport BatchBuilder

from kproto.producer._acknowledge import assign_sequence as _assign_sequence_function

__all__ = ["gather_batches", "produce_request_body", "FIRST_VERSION", "LAST_VERSION"]

#: the versions written here (the sender's); others go to the generic codec
FIRST_VERSION = 3
LAST_VERSION = 13

cdef int FIRST_FLEXIBLE_VERSION = 9       # compact arrays/strings and tagged fields from here
cdef int FIRST_TOPIC_ID_VERSION = 13      # topics named by id only (KIP-516)


cdef int _write_partition(Writer w, ProducerBatch b, bint flexible) except -1:
    """One PartitionProduceData: the index, the batch as nullable records
    (never null here), and (flexible) no tagged fields."""
    cdef BatchBuilder builder = b.builder
    cdef Py_ssize_t size = builder._built_size()
    w.write_int32(<int32_t>b.partition)
    if flexible:
        w.write_uvarint(<unsigned long long>size + 1)
    else:
        w.write_int32(<int32_t>size)
    w.reserve(size)
    builder._write_built(w.buf + w.pos, size)
    w.pos += size
    if flexible:
        w.write_uvarint(0)
    return 0


cpdef bytes produce_request_body(int version, object transactional_id, int acks, int timeout_ms,
                                 dict topics, dict topic_ids):
    """The encoded body of a Produce request of ``version`` carrying
    ``topics`` (topic -> list of ProducerBatch, in the request's order; a
    topic's partition appears once), its topics named by the ids in
    ``topic_ids`` (topic -> uuid.UUID) when given, which v13 requires and
    earlier versions refuse; None when ``version`` is not one written here
    (the generic codec then encodes the request)."""
    cdef bint flexible = version >= FIRST_FLEXIBLE_VERSION
    cdef bint by_id = version >= FIRST_TOPIC_ID_VERSION
    cdef Writer w
    cdef list batches
    cdef Py_ssize_t i, n
    if version < FIRST_VERSION or version > LAST_VERSION:
        return None
    if by_id != (topic_ids is not None):
        raise ValueError(f"Produce v{version} names topics by "
                         f"{'id' if by_id else 'name'}, but topic ids were "
                         f"{'not ' if topic_ids is None else ''}given")
    w = Writer(4096)
    if flexible:
        w.write_compact_nullable_string(transactional_id)
    else:
        w.write_nullable_string(transactional_id)
    w.write_int16(acks)
    w.write_int32(timeout_ms)
    if flexible:
        w.write_compact_array_len(len(topics))
    else:
        w.write_array_len(len(topics))
    for topic, value in topics.items():
        batches = <list?>value
        if by_id:
            w.write_uuid(topic_ids[topic])
        elif flexible:
            w.write_compact_string(topic)
        else:
            w.write_string(topic)
        n = PyList_GET_SIZE(batches)
        if flexible:
            w.write_compact_array_len(n)
        else:
            w.write_array_len(n)
        for i in range(n):
            _write_partition(w, <ProducerBatch?><object>PyList_GET_ITEM(batches, i), flexible)
        if flexible:
            w.write_uvarint(0)                  # the topic's tagged fields
    if flexible:
        w.write_uvarint(0)                      # the request's tagged fields
    return w.getvalue()


def gather_batches(sender, list batches, dict topics, dict by_tp, now):
    """``Sender.gather_in_python(batches, topics, by_tp, now)`` in C, the
    same steps in the same order: for each batch its sequence
    (``sender.assign``), then ``topics`` (topic -> its batches) and
    ``by_tp`` ((topic, partition) -> batch) of the request, marked in flight
    (``sender.in_flight``, the expiry floor), muted when the sender
    guarantees order; a first attempt also tells the sticky partitioner
    (``sender.first_attempt_of_topic`` once per topic,
    ``sender.sticky_batch_sent`` for the sticky partition's batch)."""
    cdef object assign = sender.assign
    cdef dict in_flight = <dict?>sender.in_flight
    cdef set muted = <set?>sender._muted if sender.guarantee_order else None
    cdef object floor = sender._in_flight_floor
    cdef dict sticky = {}            # topic -> its sticky partition (None: none), for first attempts
    cdef ProducerBatch b
    cdef object topic, tp, partition, chosen, idem, pid = None, epoch = None
    cdef dict partitions = None
    cdef bint transactional = False, in_c = False
    cdef PyObject* found
    if type(assign) is partial and (<object>assign).func is _assign_sequence_function \
            and len((<object>assign).args) == 1 and not (<object>assign).keywords:
        # the sender's usual assign (partial(assign_sequence, idem)): in C, the
        # manager's state read once for the request (nothing here changes it)
        idem = (<object>assign).args[0]
        pid, epoch, partitions = idem.producer_id, idem.epoch, <dict?>idem.partitions
        transactional = idem.transactional_id is not None
        in_c = True
    for item in batches:
        b = <ProducerBatch?>item
        if in_c:
            _assign_sequence(pid, epoch, partitions, transactional, b)
        elif assign is not None:
            assign(b)
        topic = b.topic
        partition = b.partition
        found = PyDict_GetItemWithError(topics, topic)
        if found == NULL:
            PyDict_SetItem(topics, topic, [b])
        else:
            PyList_Append(<list?><object>found, b)
        tp = b.tp
        PyDict_SetItem(by_tp, tp, b)
        b.in_flight = True
        PyDict_SetItem(in_flight, PyLong_FromVoidPtr(<void*>b), b)      # id(b)
        if floor is None or b.deadline_ms < floor:
            floor = b.deadline_ms
        if muted is not None:
            muted.add(tp)
        if b.attempts == 0:
            found = PyDict_GetItemWithError(sticky, topic)
            if found == NULL:
                chosen = sender.first_attempt_of_topic(topic, now)
                PyDict_SetItem(sticky, topic, chosen)
            else:
                chosen = <object>found
            # only a batch of the topic's sticky partition moves the sticky choice
            if chosen == partition:
                PyDict_SetItem(sticky, topic, sender.sticky_batch_sent(topic, partition))
    sender._in_flight_floor = floor
