"""The record accumulator: per-partition queues of open batches.

Java's ``RecordAccumulator`` without locks or blocking. ``append`` adds a
record to the last batch of its partition or opens a new one; a batch
reserves what it may hold (see below; at least the record's size) of
``buffer.memory``, and when that budget is spent ``append`` raises
:class:`BufferExhausted` - the core never waits: it answers the driver an
:class:`~kproto.producer.waits.AppendBlocked` until ``max.block.ms``, and
memory comes back when batches complete (``release``).

A batch opens small (``INITIAL_BATCH_RESERVE`` bytes, or batch.size if
smaller) and doubles, up to batch.size, while records keep coming and
buffer.memory has room: a large batch.size then costs memory only on the
partitions whose traffic fills it, so many partitions at a low rate hold no
more than they would with Java's 16 KiB, and one busy partition sends few
large requests (each request costs the network thread the same however many
records it carries).

``ready`` tells which leaders have sendable data and when to look again;
``drain`` takes batches for those leaders up to ``max.request.size`` per
request. Delivery bookkeeping (retries, sequences, expiry) lives on
:class:`ProducerBatch`; policy lives in the sender.
"""
from __future__ import annotations

import collections
from bisect import bisect_left

from kproto.driver import TIMER_RESOLUTION_MS
from kproto.errors import KafkaError
from kproto.producer._append import ProducerBatch  # typed: the per-record fast path reads it in C
from kproto.producer._drain import drain_node  # _drain_node in C (the reference stays below)
from kproto.records import BatchBuilder, estimate_size_in_bytes

#: ``ready``'s topics with an unknown leader when there are none (shared: not made every round)
_NO_TOPICS: frozenset = frozenset()

__all__ = ["iter_parts", "ProducerBatch", "RecordAccumulator", "BufferExhausted", "RecordTooLargeError",
           "INITIAL_BATCH_RESERVE"]

# What a new batch reserves of buffer.memory (and takes in records) before it
# grows: Java's old batch.size default, so a partition written slowly holds
# what it held before batch.size grew.
INITIAL_BATCH_RESERVE = 16384


class BufferExhausted(KafkaError):
    """No room in buffer.memory for a new batch right now (the driver waits)."""

    retriable = True


class RecordTooLargeError(KafkaError, ValueError):
    """A record larger than max.request.size or buffer.memory. From
    send_many, ``index`` is the row (else None)."""

    def __init__(self, message: str = "", index=None):
        super().__init__(message)
        self.index = index


def iter_parts(parts):
    """(handle, offset_delta, count) for each part of a batch."""
    for part in parts:
        if type(part) is tuple:
            yield part
        else:
            yield part, part._delta, 1


class RecordAccumulator:
    def __init__(self, *, batch_size=16384, linger_ms=5, buffer_memory=32 * 1024 * 1024,
                 compression=0, delivery_timeout_ms=120000, max_request_size=1048576,
                 compression_level=None):
        self.batch_size = batch_size
        # what a new batch reserves and takes before it grows (see _grow)
        self.initial_reserve = min(batch_size, INITIAL_BATCH_RESERVE)
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.compression_level = compression_level
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_request_size = max_request_size
        self.queues: dict[tuple, collections.deque] = {}
        # The queues that may hold a batch (tp -> its deque in ``queues``): a
        # superset of the non-empty ones. Every batch put in a queue puts its
        # queue here (the fast path of _append.pyx included); ``ready`` and
        # ``drain`` drop the ones they find empty. With thousands of
        # partitions and a batch on a few hundred of them, a round looks at
        # those few hundred instead of every partition the producer ever wrote.
        self.nonempty: dict[tuple, collections.deque] = {}
        # partitions_by_node() last seen by drain, and from it (topic,
        # partition) -> (leader, index in that leader's list)
        self._by_node = None
        self._position: dict = {}
        self.used_memory = 0
        self.flushing = 0          # >0 while a flush/close wants everything sent now
        self.waiting_for_memory = False
        self._drain_index: dict[int, int] = {}
        self._ratio: dict[str, float] = {}     # per-topic compression ratio estimate
        self.incomplete = set()                 # every batch not yet completed
        # No queued batch has a delivery deadline before this (None: none is
        # queued): ``expired`` walks the queues only once it has passed, not on
        # every round of the sender, which with many partitions was the
        # round's main cost. Lowered by every batch queued (note_deadline),
        # made exact again by the walk.
        self._expiry_floor = None
        # Set when a batch was opened or filled and the sender's next round
        # would come too late for it (see _wants_round): drivers wake their
        # network loop and clear it (Java wakes on every
        # RecordAppendResult.batchIsFull/newBatchCreated).
        self.wakeup = False
        # What the sender's last round said about the next one (see
        # _wants_round): by when it runs anyway (None: no time set), and the
        # leaders it could not send to because their requests in flight are
        # at the limit - a response brings a round for them. ``leader`` is the
        # cluster's (topic, partition) -> node, set by the core.
        self.next_round_ms = None
        self.awaited_nodes: frozenset = frozenset()
        self.leader = None

    # -- appending ----------------------------------------------------------------------
    def check_record_size(self, key_len, value_len, headers):
        size = estimate_size_in_bytes(key_len, value_len, headers)
        if size > self.max_request_size:
            raise RecordTooLargeError(
                f"the record is {size} bytes when serialized, larger than max.request.size "
                f"({self.max_request_size})")
        if size > self.buffer_memory:
            raise RecordTooLargeError(
                f"the record is {size} bytes when serialized, larger than buffer.memory "
                f"({self.buffer_memory})")
        return size

    def _new_batch(self, topic, partition, need, now):
        limit = min(self.batch_size, max(self.initial_reserve, need))
        reserve = max(limit, need)
        if self.used_memory + reserve > self.buffer_memory:
            self.waiting_for_memory = True
            raise BufferExhausted(
                f"buffer.memory ({self.buffer_memory} bytes) is exhausted: {self.used_memory} bytes "
                f"are held by batches waiting to be sent")
        builder = BatchBuilder(self.compression, limit, compression_level=self.compression_level)
        ratio = self._ratio.get(topic)
        if ratio is not None and ratio < 1.0:
            builder.set_compression_ratio_estimate(min(1.0, ratio * 1.05))
        self.used_memory += reserve
        self.waiting_for_memory = False
        batch = ProducerBatch(topic, partition, builder, now, now + self.delivery_timeout_ms, reserve)
        self.incomplete.add(batch)
        self.note_deadline(batch.deadline_ms)
        return batch

    def _grow(self, batch):
        """The open ``batch`` refused a record at its current limit: double the
        limit (up to batch.size) if buffer.memory has room for the difference.
        False: the batch is as large as it gets (it is then sent as full)."""
        builder = batch.builder
        cur = builder.batch_size
        if cur >= self.batch_size:
            return False
        new = min(self.batch_size, cur * 2)
        extra = new - cur
        if self.used_memory + extra > self.buffer_memory:
            return False
        self.used_memory += extra
        batch.reserved += extra
        builder.grow(new)
        return True

    def _tail(self, tp):
        dq = self.queues.get(tp)
        if dq is None:
            dq = self.queues[tp] = collections.deque()
            return dq, None
        # Drained, retried and split batches are marked full: only a batch that
        # is still open for appends is not.
        if dq and not dq[-1].full:
            return dq, dq[-1]
        return dq, None

    def open_room(self, tp):
        """(room, growth): what the open last batch of ``tp`` still takes at its
        current limit (BatchBuilder.room) and the buffer.memory it may still
        reserve by growing to batch.size; (0, 0) when there is none."""
        batch = self._tail(tp)[1]
        if batch is None:
            return 0, 0
        return batch.builder.room, max(0, self.batch_size - batch.builder.batch_size)

    def append(self, topic, partition, ts, key, value, headers, handle, now, size_hint=0):
        """Append one record; returns the batch (its ``parts`` get the handle).
        Raises BufferExhausted when a new batch is needed and memory is spent."""
        dq = self.queues.get((topic, partition))
        if dq:
            batch = dq[-1]
            if not batch.full:
                builder = batch.builder
                n = builder.record_count
                while not builder.append(ts, key, value, headers):
                    if not self._grow(batch):       # rare: once per doubling
                        break
                else:
                    handle._delta = n
                    if handle.notify:
                        batch.parts_list().append(handle)
                    else:
                        handle._outcome = batch.outcome
                        if handle.on_delivery is not None:
                            batch.callbacks_list().extend((handle.on_delivery, n, ts))
                    if builder.room == 0:
                        self._filled(batch, now)
                    return batch
                batch.full = True
                # a full batch is sendable now, not after linger.ms (asked even
                # while a wake-up is pending: drivers woken without a round
                # only read next_round_ms, which must hold the earliest due)
                if self._wants_round(topic, partition, now, now):
                    self.wakeup = True
            elif self._wants_round(topic, partition, now, now + self.linger_ms):
                self.wakeup = True
        else:
            if dq is None:
                dq = self.queues[(topic, partition)] = collections.deque()
            if self._wants_round(topic, partition, now, now + self.linger_ms):
                self.wakeup = True
        batch = self._new_batch(topic, partition, size_hint, now)
        if not batch.builder.append(ts, key, value, headers):    # first record always fits
            raise AssertionError("an empty batch refused a record")
        handle._delta = 0
        if handle.notify:
            batch.parts_list().append(handle)
        else:
            handle._outcome = batch.outcome
            if handle.on_delivery is not None:
                batch.callbacks_list().extend((handle.on_delivery, 0, ts))
        dq.append(batch)
        self.nonempty[(topic, partition)] = dq
        return batch

    def _filled(self, batch, now):
        """``batch``, given a record after its first, has no room left: at
        batch.size it is full, sendable now rather than after linger.ms
        (Java's ``MemoryRecordsBuilder.isFull``: the records written reach
        the write limit, and the append answers ``batchIsFull``, which wakes
        the sender); below batch.size it grows at the next record instead.

        Only from the second record on: Java's first record never fills its
        batch (uncompressed), as its buffer is sized to the record's upper
        bound (21 bytes of record overhead where it writes a few) when that
        is larger than batch.size; a record larger than batch.size waits
        linger.ms there too (measured: tests/test_producer_big_record.py)."""
        if batch.builder.batch_size < self.batch_size:
            return
        batch.full = True
        if self._wants_round(batch.topic, batch.partition, now, now):
            self.wakeup = True

    def _wants_round(self, topic, partition, now, due):
        """Whether a batch opened (or filled) now for ``topic``/``partition``,
        sendable at ``due``, needs the network side woken: not when its next
        round comes by then anyway, nor when the partition's leader waits
        for a response (that brings a round). One wake-up per new batch made
        the network thread run a round per record when records are spread
        over many partitions (each one opens a batch)."""
        if self.flushing:
            due = now                       # a flush wants every batch sent now
        nxt = self.next_round_ms
        if nxt is not None and nxt <= due:
            return False
        if self.awaited_nodes and self.leader is not None and \
                self.leader(topic, partition) in self.awaited_nodes:
            return False
        self.next_round_ms = due if nxt is None or due < nxt else nxt
        return True

    def append_many(self, topic, partition, ts, keys, values, headers, handle, now, start=0):
        """Append ``values[start:]`` (and keys/headers) to as many batches as it
        takes; returns how many were appended before memory ran out (the
        driver waits and calls again from there)."""
        tp = (topic, partition)
        dq, batch = self._tail(tp)
        total = len(values)
        i = start
        while i < total:
            if batch is None:
                try:
                    batch = self._new_batch(topic, partition, 0, now)
                except BufferExhausted:
                    break
                dq.append(batch)
                self.nonempty[tp] = dq
                self.wakeup = True
            first = batch.builder.record_count
            n = batch.builder.append_many(ts, keys, values, headers, i)
            if n:
                parts = batch.parts_list()
                last = parts[-1] if parts else None
                if type(last) is tuple and last[0] is handle and last[1] + last[2] == first:
                    parts[-1] = (handle, last[1], last[2] + n)     # the same call, after a grow
                else:
                    parts.append((handle, first, n))
                i += n
            if i < total:
                if self._grow(batch):
                    continue
                if n == 0 and batch.builder.record_count == 0:
                    raise AssertionError("an empty batch refused a record")
                batch.full = True
                batch = None
            elif n and batch.builder.room == 0 and batch.builder.record_count > 1:
                self._filled(batch, now)       # the last rows filled it exactly
        return i - start

    # -- readiness ------------------------------------------------------------------------
    def ready(self, cluster, now, muted=()):
        """(ready_nodes, next_check_ms_from_now, topics_with_unknown_leader).

        The next check counts only partitions of leaders that are not ready:
        a ready leader's partitions all go with its next request (``drain``
        takes every partition's head), so their linger times need no round
        of their own - while that leader waits for responses, they made the
        network side wake for nothing, once per partition. Retry back-off
        times always count (``drain`` skips a batch backing off, whatever
        its leader does).

        Looks only at the queues that may hold a batch (``nonempty``), in no
        particular order: nothing here depends on the order.
        ``ready_by_walk`` is the reference it is checked against."""
        return self._ready_over(self._live_queues().items(), cluster, now, muted)

    def _live_queues(self):
        """``nonempty`` with the queues emptied since (by drains, aborts,
        expiries) dropped: the queues that hold a batch."""
        nonempty = self.nonempty
        empty = [tp for tp, dq in nonempty.items() if not dq]
        for tp in empty:
            del nonempty[tp]
        return nonempty

    def ready_by_walk(self, cluster, now, muted=()):
        """``ready``, walking every partition's queue (the reference)."""
        return self._ready_over(self.queues.items(), cluster, now, muted)

    def _ready_over(self, queues, cluster, now, muted):
        # Run on every round of the sender, mostly over a queue or two at low
        # rates: the unknown-leader set and the per-leader waits are made
        # only when needed, and the minimum is a loop, not a generator (a
        # compiled generator costs more than the rest of a one-queue walk).
        nodes = set()
        unknown = _NO_TOPICS
        waits = None              # leader -> the earliest linger wait of its partitions
        retry_delay = None
        anyway = self.waiting_for_memory or self.flushing > 0
        linger = self.linger_ms
        for tp, dq in queues:
            if not dq:
                continue
            leader = cluster.leader(tp[0], tp[1])
            if leader is None:
                if unknown is _NO_TOPICS:
                    unknown = set()
                unknown.add(tp[0])
                continue
            if tp in muted:
                continue
            batch = dq[0]
            if batch.in_flight:
                continue
            if batch.attempts > 0 and now < batch.retry_after_ms:
                # drain skips it: its retry time counts whatever its leader does
                wait = batch.retry_after_ms - now
                if retry_delay is None or wait < retry_delay:
                    retry_delay = wait
                continue
            if leader in nodes:
                continue
            wait = batch.created_ms + linger - now
            # due within the drivers' timer resolution: their timer rounds
            # down (kproto.driver.wait_ms), this round is the linger's own
            if anyway or wait < TIMER_RESOLUTION_MS or batch.full or len(dq) > 1:
                nodes.add(leader)
            elif waits is None:
                waits = {leader: wait}
            else:
                known = waits.get(leader)
                if known is None or wait < known:
                    waits[leader] = wait
        next_delay = retry_delay
        if waits is not None:
            for node, wait in waits.items():
                if node not in nodes and (next_delay is None or wait < next_delay):
                    next_delay = wait
        return nodes, next_delay, unknown

    def drain(self, cluster, nodes, now, can_drain=None):
        """{node: [batches]} with at most ``max_request_size`` bytes per node.
        ``can_drain(batch)`` (idempotence gating) may veto a partition's head.

        Each node's partitions are taken in the order of its list in
        ``cluster.partitions_by_node()``, from where its last drain stopped
        and round the list, as ``drain_by_walk`` (the reference) walks them;
        but only the partitions whose queue may hold a batch are looked at,
        in that order (their indexes sorted), not the whole list; each
        node's heads are taken by ``drain_node`` (kproto/producer/_drain.pyx),
        whose reference is ``_drain_node``."""
        by_node = cluster.partitions_by_node()
        position = self._positions(by_node)
        wanted = {node: [] for node in nodes}
        for tp in self._live_queues():
            where = position.get(tp)
            if where is not None:
                found = wanted.get(where[0])
                if found is not None:
                    found.append(where[1])
        out = {}
        for node in nodes:
            tps = by_node.get(node)
            if not tps:
                continue
            start = self._drain_index.get(node, 0) % len(tps)
            indexes = wanted[node]
            indexes.sort()
            first = bisect_left(indexes, start)
            batches = drain_node(self, node, tps, indexes[first:] + indexes[:first], start, now, can_drain)
            if batches:
                out[node] = batches
        return out

    def drain_by_walk(self, cluster, nodes, now, can_drain=None):
        """``drain``, walking every partition of each node, each node's heads
        taken by ``_drain_node`` (the references)."""
        out = {}
        by_node = cluster.partitions_by_node()
        for node in nodes:
            tps = by_node.get(node) or []
            if not tps:
                continue
            start = self._drain_index.get(node, 0) % len(tps)
            batches = self._drain_node(node, tps, [(start + k) % len(tps) for k in range(len(tps))],
                                       start, now, can_drain)
            if batches:
                out[node] = batches
        return out

    def _drain_node(self, node, tps, indexes, start, now, can_drain):
        """The batches one request to ``node`` takes: the heads of the queues
        of ``tps[i]`` for ``i`` in ``indexes`` (walk order), up to
        max.request.size; the node's next drain starts where this one
        stopped (or one further along when it took them all)."""
        size = 0
        batches = []
        queues = self.queues
        for i in indexes:
            dq = queues.get(tps[i])
            if not dq:
                continue
            batch = dq[0]
            if batch.in_flight or (batch.attempts > 0 and now < batch.retry_after_ms):
                continue
            if can_drain is not None and not can_drain(batch):
                continue
            est = batch.builder.size_in_bytes()
            if batches and size + est > self.max_request_size:
                self._drain_index[node] = i
                return batches
            dq.popleft()
            batch.full = True
            batch.drained_ms = now
            self._release_unused(batch)
            size += est
            batches.append(batch)
        self._drain_index[node] = start + 1
        return batches

    def _release_unused(self, batch):
        """A drained batch takes no more records: free its buffer's room beyond
        them, and give that back to buffer.memory now rather than when the
        broker answers. At 1,000 partitions a drain sends batches of a few
        records that each held the 16 KiB they opened with: a few thousand
        filled buffer.memory, send() blocked, and as the exhausted buffer
        makes every partition ready at once, the next batches were as small
        again (bench/RESULTS.md, "The first round on a fresh topic").
        ``drain_node`` (kproto/producer/_drain.pyx) does the same in C; this
        is its reference (``_drain_node`` calls it)."""
        held = batch.builder.shrink_to_fit()
        if held < batch.reserved:
            self.used_memory -= batch.reserved - held
            batch.reserved = held

    def _positions(self, by_node):
        """(topic, partition) -> (leader, index in its list), for ``by_node``
        (made again only when the cluster made a new one: a metadata change)."""
        if by_node is not self._by_node:
            self._position = {tp: (node, i) for node, tps in by_node.items() for i, tp in enumerate(tps)}
            self._by_node = by_node
        return self._position

    def use_walk_reference(self):
        """``ready`` and ``drain`` walk every partition (the references the
        incremental ones are checked against: the twin tests)."""
        self.ready = self.ready_by_walk
        self.drain = self.drain_by_walk

    # -- after sending ------------------------------------------------------------------------
    def reenqueue(self, batch, now, backoff_ms):
        """Put a failed batch back at the head of its queue (in sequence order,
        so an idempotent partition resends in the order it first sent)."""
        batch.attempts += 1
        batch.full = True
        batch.retry_after_ms = now + backoff_ms
        batch.in_flight = False
        tp = batch.tp
        dq = self.queues.setdefault(tp, collections.deque())
        self.nonempty[tp] = dq
        self.note_deadline(batch.deadline_ms)
        if batch.has_sequence:
            i = 0
            while i < len(dq) and dq[i].has_sequence and dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)
        else:
            dq.appendleft(batch)

    def record_compression(self, batch):
        if self.compression:
            r = batch.builder.compression_ratio
            old = self._ratio.get(batch.topic, 1.0)
            self._ratio[batch.topic] = r if r < old else (old * 0.9 + r * 0.1)

    def release(self, batch):
        """The batch is complete: give its memory back."""
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.used_memory -= batch.reserved

    def remove_queued(self, batch):
        dq = self.queues.get(batch.tp)
        if dq is not None:
            try:
                dq.remove(batch)
            except ValueError:
                pass

    def note_deadline(self, deadline_ms):
        """A batch with this delivery deadline was queued (keeps ``_expiry_floor`` a floor)."""
        floor = self._expiry_floor
        if floor is None or deadline_ms < floor:
            self._expiry_floor = deadline_ms

    def expired(self, now):
        """Queued (not in flight) batches past their delivery deadline, removed."""
        floor = self._expiry_floor
        if floor is None or now < floor:
            return []
        out = []
        for dq in self.queues.values():
            while dq and dq[0].deadline_ms <= now and not dq[0].in_flight:
                out.append(dq.popleft())
            if len(dq) > 1 and dq[0].attempts > 0:
                # a retried batch in front may hide older ones behind it
                for b in [b for b in dq if b.deadline_ms <= now and not b.in_flight]:
                    dq.remove(b)
                    out.append(b)
        self._expiry_floor = min((b.deadline_ms for dq in self.queues.values() for b in dq), default=None)
        return out

    def next_expiry(self):
        """When ``expired`` may next find something (a floor: it may find nothing then)."""
        return self._expiry_floor

    @property
    def has_undrained(self):
        return any(self.queues.values())

    @property
    def has_incomplete(self):
        return bool(self.incomplete)

    def queued_batches(self):
        for dq in self.queues.values():
            yield from dq
