# cython: language_level=3, boundscheck=False, wraparound=False
"""Fetch answers decoded without a Python object per partition.

Why this exists: with a thousand partitions assigned, each Fetch answer
carries a thousand partition entries with a few records each. The generic
codec (kproto._codec) makes a dict per partition with every field of the
schema - three nested dicts of tagged defaults included - and the fetcher
then reads them back key by key: about 25,000 instructions per partition
and answer before a record is looked at (bench/RESULTS.md, issue 27).

:func:`decode_fetch_response` reads a Fetch response (v4-v18) into a
:class:`FetchAnswer`: the per-partition fields in a C array, the records as
byte ranges of the frame. :func:`apply_fetch_answer` then walks that array
and updates the fetcher's per-partition state directly (high watermark, last
stable offset, log start offset), handing only the partitions with records
to the fetcher (``Fetcher._take_records``) and only the partitions with an
error to the fetcher's reference path, as the dict the codec would have made
(``Fetcher._on_partition``): errors are rare, and their handling stays in
one place.

The codec and ``Fetcher.on_fetch_response`` on its dict stay the reference:
tests/test_fetch_answer.py decodes the same bytes both ways and checks that
``FetchAnswer.as_dict()`` equals the codec's dict and that both paths leave
the fetcher in the same state.
"""
cimport cython
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t

from kproto._wire cimport Reader

from kproto.errors import DecodeError
from kproto.records import CONTROL_ABORT, RecordBatch, read_batches

# Fetch v12 is the first flexible version (compact strings and arrays,
# tagged fields, response header v1); v13 names topics by id; v16 adds the
# node endpoints of KIP-951.
DEF FIRST_FLEXIBLE = 12
DEF FIRST_TOPIC_ID = 13
DEF FIRST_NODE_ENDPOINTS = 16
MIN_VERSION, MAX_VERSION = 4, 18


cdef class FetchAnswer:
    """A decoded Fetch response: its top-level fields as attributes, its
    partitions in a C array (see the module docstring)."""
    def __cinit__(self):
        self.parts = NULL
        self.count = self.cap = 0
        self.topics = []
        self.aborted = []
        self.node_endpoints = []

    def __dealloc__(self):
        if self.parts != NULL:
            PyMem_Free(self.parts)
            self.parts = NULL

    def __len__(self):
        """The number of partition entries, over all topics."""
        return self.count

    cdef PartitionEntry* _new_entry(self) except NULL:
        cdef Py_ssize_t cap
        cdef PartitionEntry* grown
        if self.count == self.cap:
            cap = self.cap * 2 if self.cap else 64
            grown = <PartitionEntry*>PyMem_Realloc(self.parts, cap * sizeof(PartitionEntry))
            if grown == NULL:
                raise MemoryError()
            self.parts, self.cap = grown, cap
        self.count += 1
        return &self.parts[self.count - 1]

    cdef object _records(self, PartitionEntry* e):
        if e.records_pos < 0:
            return None
        return memoryview(self.data)[e.records_pos:e.records_pos + e.records_len]

    cdef dict _partition_dict(self, PartitionEntry* e):
        """The partition as the codec decodes it (every field, defaults included)."""
        return {
            "partition_index": e.partition, "error_code": e.error_code,
            "high_watermark": e.high_watermark, "last_stable_offset": e.last_stable_offset,
            "log_start_offset": e.log_start_offset,
            "diverging_epoch": {"epoch": e.diverging_epoch, "end_offset": e.diverging_end_offset},
            "current_leader": {"leader_id": e.leader_id, "leader_epoch": e.leader_epoch},
            "snapshot_id": {"end_offset": e.snapshot_end_offset, "epoch": e.snapshot_epoch},
            "aborted_transactions": None if e.aborted < 0 else self.aborted[e.aborted],
            "preferred_read_replica": e.preferred_read_replica,
            "records": self._records(e),
        }

    def as_dict(self) -> dict:
        """The whole answer as the generic codec decodes it (tests, debugging)."""
        cdef Py_ssize_t i = 0
        cdef list responses = []
        cdef list parts
        for ti, topic in enumerate(self.topics):
            parts = []
            while i < self.count and self.parts[i].topic == ti:
                parts.append(self._partition_dict(&self.parts[i]))
                i += 1
            key = "topic_id" if self.version >= FIRST_TOPIC_ID else "topic"
            other = "topic" if self.version >= FIRST_TOPIC_ID else "topic_id"
            responses.append({key: topic, other: "" if other == "topic" else _ZERO_UUID,
                              "partitions": parts})
        return {"throttle_time_ms": self.throttle_time_ms, "error_code": self.error_code,
                "session_id": self.session_id, "responses": responses,
                "node_endpoints": self.node_endpoints}


import uuid as _uuid
cdef object _ZERO_UUID = _uuid.UUID(int=0)


@cython.final
cdef class PartitionState:
    """One assigned partition's state (see kproto.consumer.positions, which
    exports it): where it is read from next (``position``, None until
    known), the leader epoch fetched with, ``paused``, a pending offset
    reset (``reset_to``: EARLIEST/LATEST), the last high watermark, last
    stable offset and log start offset answered, and ``fetch_entry``, its
    entry in Fetch requests, reused (:func:`fetch_partitions`).

    A C class rather than a Python one with ``__slots__``: it is read per
    partition of every answer, drain and Fetch (select_fetchable,
    fetch_partitions, apply_fetch_answer, drain_columns), and typed there
    each field is a struct member, not an attribute lookup (issue 27)."""

    def __init__(self):
        self.position = None
        self.leader_epoch = -1
        self.paused = False
        self.reset_to = None                 # EARLIEST/LATEST while a reset is pending
        self.high_watermark = None
        self.last_stable_offset = None
        self.log_start_offset = None
        self.preferred_read_replica = None
        self.fetch_entry = None

    def __repr__(self):
        return (f"PartitionState(position={self.position!r}, leader_epoch={self.leader_epoch!r}, "
                f"paused={self.paused!r}, reset_to={self.reset_to!r}, high_watermark={self.high_watermark!r})")


@cython.no_gc
cdef class Buffered:
    """The records of one partition from one fetch answer, not yet drained
    (the fetcher's queue holds these; a C class: made once per partition
    and answer, and read on every drain). Not tracked by the cyclic GC
    (no_gc): nothing it refers to refers back to it, and a thousand
    tracked objects per answer made the GC run more often."""

    def __init__(self, tp, list batches, aborted):
        self.tp = tp
        self.batches = batches
        self.next_batch = 0
        self.record_iter = None
        self.current = None                  # the batch record_iter reads
        # read_committed: (first_offset, producer_id) sorted by offset, and the
        # producers whose aborted transaction is open; None without any (most
        # answers: a container fewer per partition, and fewer GC passes)
        self.aborted = sorted([(a["first_offset"], a["producer_id"]) for a in aborted]) if aborted else None
        self.aborted_pids = set() if aborted else None
        self.state = None                    # the partition's PartitionState, set by Fetcher._next_head


cdef inline Py_ssize_t _array_len(Reader r, bint flexible) except? -2:
    return r.read_compact_array_len() if flexible else r.read_array_len()


cdef int _skip_tagged(Reader r) except -1:
    """Skip a tagged-fields section whose tags this version does not define."""
    cdef uint32_t count, i, size
    count = r.read_tagged_count()
    for i in range(count):
        r.read_uvarint32()
        size = r.read_uvarint32()
        r.need(size, b"tagged field")
        r.pos += size
    return 0


cdef int _partition_tagged(Reader r, PartitionEntry* e) except -1:
    """A partition's tagged fields: diverging_epoch (0), current_leader (1),
    snapshot_id (2); others are skipped, as the codec does."""
    cdef uint32_t count, i, tag, size
    cdef Py_ssize_t start, saved_end
    count = r.read_tagged_count()
    for i in range(count):
        tag = r.read_uvarint32()
        size = r.read_uvarint32()
        r.need(size, b"tagged field")
        if tag > 2:
            r.pos += size
            continue
        start = r.pos
        saved_end = r.end
        r.end = start + size             # a value may not read past its declared size
        try:
            if tag == 0:
                e.diverging_epoch = r.read_int32()
                e.diverging_end_offset = r.read_int64()
            elif tag == 1:
                e.leader_id = r.read_int32()
                e.leader_epoch = r.read_int32()
            else:
                e.snapshot_end_offset = r.read_int64()
                e.snapshot_epoch = r.read_int32()
            _skip_tagged(r)
        finally:
            r.end = saved_end
        if r.pos != start + size:
            raise DecodeError(f"tagged field {tag} declares {size} bytes but its value takes {r.pos - start}")
    return 0


cdef list _node_endpoints(Reader r):
    cdef Py_ssize_t n = r.read_compact_array_len(), i
    if n < 0:
        raise DecodeError("null node_endpoints where the field is not nullable")
    out = []
    for i in range(n):
        node_id = r.read_int32()
        host = r.read_compact_string()
        port = r.read_int32()
        rack = r.read_compact_nullable_string()
        _skip_tagged(r)
        out.append({"node_id": node_id, "host": host, "port": port, "rack": rack})
    return out


cdef int _top_tagged(Reader r, FetchAnswer a) except -1:
    cdef uint32_t count, i, tag, size
    cdef Py_ssize_t start, saved_end
    count = r.read_tagged_count()
    for i in range(count):
        tag = r.read_uvarint32()
        size = r.read_uvarint32()
        r.need(size, b"tagged field")
        if tag != 0 or a.version < FIRST_NODE_ENDPOINTS:
            r.pos += size
            continue
        start = r.pos
        saved_end = r.end
        r.end = start + size
        try:
            a.node_endpoints = _node_endpoints(r)
        finally:
            r.end = saved_end
        if r.pos != start + size:
            raise DecodeError(f"tagged field {tag} declares {size} bytes but its value takes {r.pos - start}")
    return 0


cdef int _read_partition(Reader r, FetchAnswer a, int32_t topic, int version) except -1:
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef PartitionEntry* e = a._new_entry()
    cdef Py_ssize_t n, i
    cdef list aborted
    e.topic = topic
    e.partition = r.read_int32()
    e.error_code = r.read_int16()
    e.high_watermark = r.read_int64()
    e.last_stable_offset = r.read_int64()
    e.log_start_offset = r.read_int64() if version >= 5 else -1
    e.diverging_epoch, e.diverging_end_offset = -1, -1
    e.leader_id, e.leader_epoch = -1, -1
    e.snapshot_end_offset, e.snapshot_epoch = -1, -1
    n = _array_len(r, flexible)
    if n < 0:
        e.aborted = -1
    else:
        aborted = []
        for i in range(n):
            producer_id = r.read_int64()
            first_offset = r.read_int64()
            if flexible:
                _skip_tagged(r)
            aborted.append({"producer_id": producer_id, "first_offset": first_offset})
        e.aborted = len(a.aborted)
        a.aborted.append(aborted)
    e.preferred_read_replica = r.read_int32() if version >= 11 else -1
    if flexible:
        e.records_len = r._compact_len(True, b"bytes")
    else:
        e.records_len = r._classic_len32(True, b"bytes")
    if e.records_len < 0:
        e.records_pos, e.records_len = -1, 0
    else:
        e.records_pos = r.pos
        r.pos += e.records_len
    if flexible:
        _partition_tagged(r, e)
    return 0


def decode_fetch_response(int version, payload):
    """Decode a Fetch response frame body (header included, no size prefix).

    Returns (correlation_id, FetchAnswer); the answer's records are views of
    ``payload``. Raises DecodeError on malformed or truncated input or on
    bytes left after the body (as kproto.messages.decode_response does)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise DecodeError(f"Fetch v{version} response: this decoder reads v{MIN_VERSION}-v{MAX_VERSION}")
    cdef Reader r = Reader(payload)
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef FetchAnswer a = FetchAnswer()
    cdef Py_ssize_t ntopics, nparts, t, p
    a.version = version
    a.data = payload
    try:
        correlation_id = r.read_int32()
        if flexible:
            _skip_tagged(r)                  # response header v1
    except DecodeError as exc:
        raise DecodeError(f"Fetch v{version} response: header: {exc}") from None
    try:
        a.throttle_time_ms = r.read_int32()
        a.error_code = r.read_int16() if version >= 7 else 0
        a.session_id = r.read_int32() if version >= 7 else 0
        ntopics = _array_len(r, flexible)
        if ntopics < 0:
            raise DecodeError("null responses where the field is not nullable")
        for t in range(ntopics):
            if version >= FIRST_TOPIC_ID:
                a.topics.append(r.read_uuid())
            elif flexible:
                a.topics.append(r.read_compact_string())
            else:
                a.topics.append(r.read_string())
            nparts = _array_len(r, flexible)
            if nparts < 0:
                raise DecodeError("null partitions where the field is not nullable")
            for p in range(nparts):
                _read_partition(r, a, <int32_t>t, version)
            if flexible:
                _skip_tagged(r)
        if flexible:
            _top_tagged(r, a)
        if r.pos != r.end:
            raise DecodeError(f"{r.end - r.pos} bytes left after the body")
    except DecodeError as exc:
        raise DecodeError(f"Fetch v{version} response: {exc}") from None
    return correlation_id, a


def apply_fetch_answer(fetcher, request, FetchAnswer answer, dict states, bint read_committed, bint check_crcs,
                       buffered, set dirty):
    """``Fetcher.on_fetch_response`` for a FetchAnswer, partition errors and
    top-level errors excepted (the caller handles the latter): the same
    checks and state updates as ``Fetcher._on_partition``, from the C array.
    The fetcher's positions' ``states``, whether it reads committed, its
    ``check_crcs``, ``_buffered`` and ``_plan_dirty`` come as arguments: the
    compiled Fetcher reads them as struct members, where here each was an
    attribute lookup per answer."""
    cdef Py_ssize_t i
    cdef int32_t topic_index = -1
    cdef PartitionEntry* e
    cdef dict asked = request.partitions
    cdef dict offsets = request.offsets
    cdef object index = None
    cdef PartitionState st
    by_id = answer.version >= FIRST_TOPIC_ID
    names = request.topic_names
    for i in range(answer.count):
        e = &answer.parts[i]
        if e.topic != topic_index:
            topic_index = e.topic
            topic = answer.topics[topic_index]
            if by_id:
                topic = names.get(topic)
            index = asked.get(topic) if topic is not None else None
        if index is None:
            continue                             # a topic we did not ask for
        tp = index.get(e.partition)
        if tp is None:
            continue                             # a partition we did not ask for
        if e.error_code != 0:
            fetcher._on_partition(request, tp, answer._partition_dict(e), answer.node_endpoints)
            continue
        fetch_offset = offsets.get(tp)
        found = states.get(tp)
        if fetch_offset is None or found is None:
            continue                             # not asked for, or revoked meanwhile
        st = <PartitionState?>found
        if st.position != fetch_offset:
            continue                             # a seek happened meanwhile: stale data
        st.high_watermark = e.high_watermark
        if e.last_stable_offset >= 0:
            st.last_stable_offset = e.last_stable_offset
        if e.log_start_offset >= 0:
            st.log_start_offset = e.log_start_offset
        if e.records_len == 0:
            continue
        _take_records(fetcher, tp, fetch_offset, answer._records(e),
                      answer.aborted[e.aborted] if read_committed and e.aborted >= 0 else None,
                      check_crcs, buffered, dirty)


def take_records(fetcher, tp, fetch_offset, records, aborted):
    """``Fetcher._take_records``: buffer a partition's records (non-empty)
    from an answer - the dict path and :func:`apply_fetch_answer` both end
    here (the latter without a Python call per partition)."""
    _take_records(fetcher, tp, fetch_offset, records, aborted, fetcher.check_crcs, fetcher._buffered,
                  fetcher._plan_dirty)


cdef int _take_records(fetcher, tp, fetch_offset, records, aborted, bint check_crcs, buffered,
                       set dirty) except -1:
    try:
        batches = read_batches(records, check_crcs)
    except DecodeError as exc:
        fetcher._partition_error(exc, tp, fetch_offset)
        return 0
    if not batches:
        # Only part of one batch came back: it is bigger than the fetch size
        # allows (Fetcher._record_too_large says so to the application).
        fetcher._record_too_large(tp, fetch_offset, records)
        return 0
    buffered.append(Buffered(tp, batches, aborted))
    dirty.add(tp)                            # (FetchPlan.mark, without a call per partition)
    return 0


# -- the columnar drain ------------------------------------------------------------

cdef Buffered _next_head(object buffered, dict states, list kept):
    """Fetcher._next_head: the oldest buffered fetch that may be handed out."""
    cdef Buffered buf
    cdef PartitionState st
    while buffered:
        buf = <Buffered>buffered[0]
        found = states.get(buf.tp)
        if found is None:
            buffered.popleft()                   # revoked
            continue
        st = <PartitionState?>found
        if st.paused:
            kept.append(buffered.popleft())      # kept for after resume()
        else:
            buf.state = st
            return buf
    return None


cdef object _next_visible_batch(Buffered buf, PartitionState st, bint read_committed):
    """Fetcher._next_visible_batch: skips what is before the position,
    control batches and aborted transactional batches (moving the position)."""
    cdef Py_ssize_t n = len(buf.batches)
    while buf.next_batch < n:
        batch = buf.batches[buf.next_batch]
        buf.next_batch += 1
        next_offset = batch.next_offset
        if next_offset <= st.position:
            continue                       # entirely before the position
        if read_committed and buf.aborted:
            # Producers whose aborted transaction started at or before this batch.
            last_offset = batch.last_offset
            while buf.aborted and buf.aborted[0][0] <= last_offset:
                buf.aborted_pids.add(buf.aborted.pop(0)[1])
        if batch.is_control:
            if batch.control_type == CONTROL_ABORT:
                if buf.aborted_pids:
                    buf.aborted_pids.discard(batch.producer_id)
            st.position = next_offset
            continue
        if (read_committed and buf.aborted_pids and batch.is_transactional
                and batch.producer_id in buf.aborted_pids):
            st.position = next_offset
            continue
        return batch
    return None


def drain_columns(fetcher, Py_ssize_t limit):
    """Fetcher.drain_columns after its pending errors: the walk of
    Fetcher._walk_columnar with Fetcher.drain_columns' take, on the C
    Buffered (the same steps, tested against it)."""
    cdef dict out = {}
    cdef list kept = []
    cdef Buffered buf
    cdef Py_ssize_t count = 0, n
    cdef tuple cols
    cdef PartitionState st
    buffered = fetcher._buffered
    cdef dict states = fetcher.positions.states
    cdef bint read_committed = fetcher.isolation == 1
    try:
        while count < limit:
            buf = _next_head(buffered, states, kept)
            if buf is None:
                break
            st = <PartitionState?>buf.state
            if buf.record_iter is not None:
                batch = buf.current               # a drain stopped inside this batch
                buf.record_iter = None
            else:
                batch = _next_visible_batch(buf, st, read_committed)
                if batch is None:
                    buffered.popleft()
                    continue
            tp = buf.tp
            cols = out.get(tp)
            if cols is None:
                cols = out[tp] = ([], [], [], [])
            position = st.position
            if type(batch) is RecordBatch:
                taken, complete, last = batch.append_columns(cols[0], cols[1], cols[2], cols[3],
                                                             position, limit - count)
            else:
                taken, complete, last = _take_legacy(batch, cols, position, limit - count)
            n = taken
            count += n
            if complete:
                next_offset = batch.next_offset
                if next_offset > position:
                    st.position = next_offset
            else:
                if n:
                    st.position = last + 1
                buf.current = batch
                buf.record_iter = batch.records(tp.topic, tp.partition, st.position)
                if not n:
                    break                         # the sink is full
            if buf.record_iter is None:
                # Dropped by the drain that hands out its last record, also
                # when only control batches follow (Fetcher._used_up): left
                # buffered, the partition would fetch nothing until a later
                # drain, and an empty one asks for no round.
                if buf.next_batch < len(buf.batches) and _next_visible_batch(buf, st, read_committed) is not None:
                    buf.next_batch -= 1           # a batch to read: the next drain starts with it
                else:
                    buffered.popleft()
    finally:
        buffered.extendleft(reversed(kept))
    return {tp: cols for tp, cols in out.items() if cols[0]}


cdef object _take_legacy(batch, tuple cols, position, Py_ssize_t room):
    from kproto.consumer.fetcher import take_legacy_columns
    return take_legacy_columns(batch, cols, position, room)


# -- building the next fetch -------------------------------------------------------
# A TopicPartition is a NamedTuple: indexed as an object, every tp[0] goes
# through the class's __getitem__ lookup (~800 instructions); cast to tuple it
# is a C array read.

def select_fetchable(dict states, set buffered, leaders_of_topic, set in_flight):
    """The partitions to fetch now, by leader: ({node: [(tp, state)]},
    whether a leader is unknown). Fetchable: assigned, not paused, with a
    position, no reset pending, no buffered data, a known leader
    (``leaders_of_topic(topic)``: {partition: node, -1 unknown} or None)
    without a fetch in flight. Fetcher.fetch_requests' loop, in one pass
    over the states (a thousand partitions per round)."""
    cdef dict by_node = {}
    cdef bint refresh = False
    cdef object topic = None, leaders = None
    cdef list found
    cdef tuple key
    cdef PartitionState st
    for tp, value in states.items():
        st = <PartitionState?>value
        if st.paused or st.position is None or st.reset_to is not None or tp in buffered:
            continue
        key = <tuple>tp
        t = key[0]
        if t is not topic and t != topic:
            topic = t
            leaders = leaders_of_topic(topic) or {}
        leader = leaders.get(key[1], -1)
        if leader is None or leader < 0:
            refresh = True
            continue
        if leader in in_flight:
            continue
        found = by_node.get(leader)
        if found is None:
            found = by_node[leader] = []
        found.append((tp, st))
    return by_node, refresh


def fetch_partitions(list tps, max_bytes, dict known_offsets=None, dict known_epochs=None):
    """The per-partition part of a Fetch request for (tp, state) pairs:
    ({topic: [partition entry]}, {tp: fetch offset}, {topic: {partition: tp}},
    {tp: leader epoch} or None without a session, how many of the
    partitions the session holds already).

    With a fetch session's ``known_offsets`` / ``known_epochs`` (what the
    broker's session holds, kproto.consumer.fetch_session) the entries list
    only the partitions that are new to the session or whose fetch offset or
    leader epoch changed (KIP-227's incremental request); the offsets, index
    and epochs still cover every partition: the answer may name any of them."""
    cdef dict topics = {}, offsets = {}, index = {}
    cdef dict epochs = {} if known_offsets is not None else None
    cdef object topic = None
    cdef list parts = None
    cdef dict by_partition = None
    cdef tuple pair, key
    cdef bint incremental = known_offsets is not None and len(known_offsets) > 0
    cdef Py_ssize_t kept = 0
    cdef PartitionState st
    cdef dict entry
    for pair in tps:
        tp, st = pair[0], <PartitionState?>pair[1]
        key = <tuple>tp
        t = key[0]
        partition = key[1]
        position = st.position
        leader_epoch = st.leader_epoch
        offsets[tp] = position
        if epochs is not None:
            epochs[tp] = leader_epoch
        if t is not topic and t != topic:
            topic = t
            parts = topics.get(topic)
            if parts is None:
                parts = topics[topic] = []
                by_partition = index[topic] = {}
            else:
                by_partition = index[topic]
        by_partition[partition] = tp
        if incremental:
            known = known_offsets.get(tp)
            if known is not None:
                kept += 1                    # (all kept: nothing to forget, no walk for it)
                if known == position and known_epochs.get(tp) == leader_epoch:
                    continue                 # the session holds it as is: not listed
        # The partition's entry is kept on its state and reused by every
        # fetch (only the offset and the epoch change): a thousand dicts
        # fewer per round. An earlier request's body shares it, but that
        # body was encoded when it was sent.
        entry = st.fetch_entry
        if entry is None:
            entry = st.fetch_entry = {
                "partition": partition, "current_leader_epoch": leader_epoch,
                "fetch_offset": position, "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": max_bytes}
        else:
            entry["fetch_offset"] = position
            entry["current_leader_epoch"] = leader_epoch
            entry["partition_max_bytes"] = max_bytes
        parts.append(entry)
    return topics, offsets, index, epochs, kept
