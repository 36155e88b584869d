"""The sender: turns ready batches into Produce requests and handles the answers.

Java's ``Sender.runOnce`` + ``handleProduceResponse``/``completeBatch``,
sans-IO. One ``run_once(now)`` does: producer-id bookkeeping (idempotence),
``ready`` -> connect/skip nodes that are not ready -> ``drain`` (sequences
assigned here) -> expire batches past ``delivery.timeout.ms`` -> one Produce
request per node. Responses complete batches, or put them back for a retry
after ``retry.backoff.ms * 2**attempts`` (+-20% jitter, capped at
``retry.backoff.max.ms``) while ``retries`` and the delivery deadline allow.

Error policy as in Java: leadership errors (``invalid_metadata``) refresh
metadata and retry; MESSAGE_TOO_LARGE splits a multi-record batch and
retries the halves; DUPLICATE_SEQUENCE_NUMBER is success; other retriable
errors retry; everything else fails the batch at once.
"""
from __future__ import annotations

import bisect
from functools import partial
from typing import NamedTuple, Optional, Sequence

from kproto import error_codes
from kproto.backoff import ExponentialBackoff
from kproto.errors import KafkaError, KafkaTimeoutError
from kproto.messages import EncodedBody
from kproto.producer._acknowledge import acknowledge, acknowledge_all, assign_sequence, can_drain
from kproto.producer._produce_answer import ACKNOWLEDGED, read_acknowledged
from kproto.producer._produce_request import gather_batches, produce_request_body
from kproto.producer.idempotence import PidState
from kproto.records import BatchBuilder, read_batches

__all__ = ["Sender", "BatchResult", "DeliveryTimeoutError"]

NONE = 0
MESSAGE_TOO_LARGE = 10
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
UNKNOWN_PRODUCER_ID = 59
PRODUCE_API_KEY = 0
#: A round's leaders awaiting an answer when there are none (shared: not made every round)
_NO_NODES: frozenset = frozenset()
#: A round's drained batches when no leader was ready (shared, never filled)
_NOTHING_DRAINED: dict = {}
#: PidState.READY, looked up once: run_once compares it every round, and a
#: member read on the class goes through Python 3.11's EnumMeta.__getattr__
_PID_READY = PidState.READY


class DeliveryTimeoutError(KafkaTimeoutError):
    """A record was not acknowledged within delivery.timeout.ms."""


class BatchResult(NamedTuple):
    """Event: a batch is complete. ``parts`` as in ProducerBatch."""
    topic: str
    partition: int
    base_offset: int
    log_append_time: int
    error: Optional[BaseException]
    parts: list
    outcome: object         # the batch's BatchOutcome, None when no handle was attached (none made)
    callbacks: Sequence = ()  # as in ProducerBatch


class Sender:
    def __init__(self, cfg, client, cluster, accumulator, idempotence, partitioner, metrics, rng):
        self.cfg = cfg
        self.acks = cfg.acks
        # read once: Config's attributes are a Python __getattr__, costly on every request
        self.request_timeout_ms = cfg.request_timeout_ms
        self.client = client
        self.cluster = cluster
        self.acc = accumulator
        self.idem = idempotence
        self.partitioner = partitioner
        self.metrics = metrics
        self.results: list = []                 # BatchResult events not yet collected
        self.results_records = 0                # how many records those results hold
        self.in_flight: dict = {}               # id(batch) -> batch, sent and unanswered
        # No batch in flight has a delivery deadline before this (None: none
        # sent since the last walk): in_flight is walked for expiry only once it
        # has passed (see RecordAccumulator._expiry_floor).
        self._in_flight_floor = None
        self.retry_backoff = ExponentialBackoff(cfg.retry_backoff_ms, max(cfg.retry_backoff_max_ms,
                                                                        cfg.retry_backoff_ms), rng=rng)
        self.guarantee_order = cfg.max_in_flight_requests_per_connection == 1
        self._muted: set = set()
        self._produce_versions: dict = {}       # node -> (its connection's VersionTable, Produce version)
        self._raw_ids: dict = {}                # topic -> its topic id and two lookups of it: _by_topic_id
        self._init_in_flight = False
        # A round by this time (None: none) is promised to batches opened while
        # a Produce is in flight, so they need not wake the driver: see
        # _answer_round. _answer_rtt_ms is the last Produce's round trip.
        self._answer_round_by = None
        self._answer_rtt_ms = 0.0
        self._init_retry_at = 0                  # a failed InitProducerId: ask again then
        self._init_failures = 0
        self.fatal_error: Optional[BaseException] = None
        self.txn = None                          # TransactionManager, set by the core
        # acknowledged(batch, base_offset, log_append_time): a batch the broker
        # took, completed in C (kproto/producer/_acknowledge.pyx); the twin
        # tests bind acknowledged_in_python, its reference, instead.
        self.acknowledged = partial(acknowledge, self, BatchResult)
        # assign(batch): its sequence at drain (IdempotenceManager.assign), in C
        self.assign = partial(assign_sequence, idempotence) if idempotence is not None else None
        # can_drain(batch): whether idempotence lets a drain take a queue's
        # head (IdempotenceManager.can_drain), in C
        self.can_drain = partial(can_drain, idempotence, PidState.READY) if idempotence is not None else None
        # read_answer(by_tp, by_id, version, payload): a Produce answer that
        # acknowledges every batch, read in C straight into its batches
        # (kproto/producer/_produce_answer.pyx); None: every answer goes
        # through the generic codec and the dicts of _on_produce (the reference)
        self.read_answer = read_acknowledged
        # write_request(version, transactional_id, acks, timeout_ms, topics,
        # ids): a Produce request's body written in C from its batches
        # (kproto/producer/_produce_request.pyx), None for a version it does
        # not write; None: every request as dicts for the generic codec
        # (_body_for_codec, the reference)
        self.write_request = produce_request_body
        # gather(batches, topics, by_tp, now): the per-batch bookkeeping of a
        # request, in C (gather_batches); gather_in_python is its reference
        self.gather = partial(gather_batches, self)
        # a partition's leader epoch rose: its retries waiting out a back-off go now
        cluster.on_leader_moved = self._leader_moved

    def use_python_reference(self):
        """Complete and sequence batches with the Python code the C functions
        of kproto/producer/_acknowledge.pyx are checked against, write and
        read every Produce request and answer with the generic codec (no
        ``write_request``, no ``read_answer``), and let
        the accumulator walk every partition in ``ready`` and ``drain`` (twin tests)."""
        self.acknowledged = self.acknowledged_in_python
        self.assign = self.idem.assign if self.idem is not None else None
        self.can_drain = self.idem.can_drain if self.idem is not None else None
        self.read_answer = None
        self.write_request = None
        self.gather = self.gather_in_python
        self.acc.use_walk_reference()

    # -- the loop -----------------------------------------------------------------------
    def run_once(self, now) -> Optional[float]:
        """Do everything due now; returns the next time something is due (or None)."""
        # At a low rate every batch costs two of these (its linger timer's and
        # its answer's), mostly with nothing to do: what is not due is told
        # by reading a field, not by a call (issue 27, branch psend).
        next_at = None
        txn = self.txn
        acc = self.acc
        if txn is not None:
            if txn.aborting:
                self._abort_undrained()
            next_at = txn.poll(self.client, self.cluster, now, len(acc.incomplete))
            if txn.state.name == "FATAL_ERROR" and self.fatal_error is None:
                self._fatal(txn.error)
        elif self.idem is not None and self.idem.state is not _PID_READY and not self._maybe_init_producer_id(now):
            # No producer id yet: nothing may be drained, but deadlines still run.
            acc.next_round_ms = None                # every new batch wakes the driver
            self._expire(now)
            exp = self._next_expiry()
            if self._init_retry_at > now and (exp is None or self._init_retry_at < exp):
                exp = self._init_retry_at
            return exp
        drained = _NOTHING_DRAINED
        awaited = ()
        if _holds_a_batch(acc.nonempty):            # (ready over empty queues finds nothing)
            nodes, delay, unknown = acc.ready(self.cluster, now, self._muted)
            if unknown:
                self.cluster.request_update()
            if delay is not None and (next_at is None or now + delay < next_at):
                next_at = now + delay
            if nodes:
                drained, awaited = self._drain_ready(nodes, now, txn)
        # Batches past delivery.timeout.ms: only once the earliest deadline
        # of a queued or an in-flight batch has come (floors of both).
        exp = acc.next_expiry()
        floor = self._in_flight_floor
        if (exp is not None and now >= exp) or (floor is not None and now >= floor):
            self._expire(now)
            exp = acc.next_expiry()
        if drained:
            for node, batches in drained.items():
                self._send_produce(node, batches, now)
            exp = acc.next_expiry()
        floor = self._in_flight_floor                # (lowered by what was sent)
        if floor is not None and (exp is None or floor < exp):
            exp = floor
        if exp is not None and (next_at is None or exp < next_at):
            next_at = exp
        if drained or self._answer_round_by is not None:
            by = self._answer_round(now, drained)
            if by is not None and (next_at is None or by < next_at):
                next_at = by
        # What the accumulator needs to tell whether a new batch must wake the driver.
        acc.next_round_ms = next_at
        acc.awaited_nodes = frozenset(awaited) if awaited else _NO_NODES
        return next_at

    def _drain_ready(self, nodes, now, txn):
        """Drain the batches of ``nodes`` (the leaders ``ready`` found with a
        batch due) whose connection can take a request: ({node: batches},
        the nodes a response in flight brings the next round for)."""
        ready_nodes = []
        awaited = ()
        client = self.client
        for node in nodes:
            if client.ready(node, now):
                ready_nodes.append(node)
            elif client.in_flight(node):
                # at its limit of requests in flight: its next response brings a round
                awaited = awaited + (node,)
        if not ready_nodes:
            return _NOTHING_DRAINED, awaited
        can_drain = self.can_drain
        if txn is not None:
            idem_can_drain = self.can_drain
            can_drain = lambda b: txn.can_drain(b) and idem_can_drain(b)  # noqa: E731
        drained = self.acc.drain(self.cluster, ready_nodes, now, can_drain)
        for node in ready_nodes:
            if node not in drained and client.in_flight():
                # every head held back (can_drain: an idempotent partition's
                # first batch of an epoch goes alone; a transaction's partition
                # not added yet) until an answer in flight comes: it brings a round
                awaited = awaited + (node,)
        return drained, awaited

    def _answer_round(self, now, drained):
        """The round promised to batches opened while Produce answers are
        awaited (None: none). At a low rate each batch otherwise costs the
        driver three wake-ups: the send() that opens it (to set its linger
        timer), the timer, the answer. A round by ``sent + linger.ms`` (the
        answer's, or a timer's if the answer is late) comes before any batch
        opened since is due, so the accumulator need not wake the driver for
        it (``next_round_ms``): the answer's round sets its timer.

        The promise costs a round of its own only when the answer is late and
        no batch opened meanwhile, so it is made only while that is unlikely:
        answers come back within linger.ms, or records come faster than one
        per linger.ms (a batch just sent holds more than one: one opens before
        the promised round, and that round replaces its wake-up)."""
        linger = self.acc.linger_ms
        if drained and linger > 0 and self.acks != 0 and (
                self._answer_rtt_ms < linger or _holds_many(drained)):
            self._answer_round_by = now + linger
        by = self._answer_round_by
        if by is not None and (by <= now or not self.in_flight):
            by = self._answer_round_by = None       # kept, or no answer left to bring the round
        return by

    def _next_expiry(self):
        best = self.acc.next_expiry()
        floor = self._in_flight_floor
        if floor is not None and (best is None or floor < best):
            best = floor
        return best

    def _leader_moved(self, topic, partition, now=None):
        """The cache learnt a newer leader of ``topic``/``partition`` (a
        Metadata answer or a KIP-951 hint) at ``now`` (None: not told):
        every batch of it waiting out a retry back-off was refused by an
        older leader, so its retry goes to the new one now (Java:
        ``ProducerBatch.maybeUpdateLeaderEpoch`` in ``RecordAccumulator.ready``
        and ``drain``, which then skip the back-off). Queued batches only: one
        in flight is judged when its answer comes (``_complete``'s mark).
        Rare (a leader move), so a walk of one queue."""
        dq = self.acc.queues.get((topic, partition))
        if not dq:
            return
        for b in dq:
            if b.attempts > 0 and not b.in_flight:
                due = b.drained_ms if now is None else now     # a time not after the next round's
                if b.retry_after_ms > due:
                    b.retry_after_ms = due
                    self.metrics["backoffs_cut_by_new_leader"] += 1

    # -- producer id ---------------------------------------------------------------------
    def _maybe_init_producer_id(self, now) -> bool:
        idem = self.idem
        if idem.ready:
            return True
        if idem.fatal_error is not None or self._init_in_flight or now < self._init_retry_at:
            return False
        if not idem.needs_init_request(len(self.in_flight)):
            return False
        node = self.client.least_loaded_node(now)
        if node is None or not self.client.ready(node, now):
            return False
        version = self.client.api_version(node, "InitProducerId")
        if version is None:
            idem.fatal_error = KafkaError(
                f"broker {node} does not support InitProducerId: idempotence is not possible; "
                f"set enable.idempotence=false")
            self._fatal(idem.fatal_error)
            return False
        body = idem.init_request_body(version)
        self._init_in_flight = True
        self.client.send(node, "InitProducerId", body, now, callback=self._on_init)
        return False

    def _on_init(self, req):
        self._init_in_flight = False
        err = self.idem.on_init_response(req.result, req.error, list(self.acc.queued_batches()))
        if err is not None:
            self._fatal(err)
        elif self.idem.ready:
            self._init_failures = 0
        else:
            # Retriable (COORDINATOR_LOAD_IN_PROGRESS while a broker starts, a
            # lost connection): ask again after retry.backoff.ms, growing, as
            # Java does - at once made a request loop as fast as the broker answers.
            self._init_retry_at = req.completed_at + self.retry_backoff.backoff(self._init_failures)
            self._init_failures += 1

    # -- sending -------------------------------------------------------------------------
    def _send_produce(self, node, batches, now):
        # Per batch only what each batch needs: with many partitions a request
        # carries a batch of a record or two per partition, so per-topic work
        # (metadata.max.idle.ms bookkeeping, the sticky partition) is done once
        # per topic, not once per batch.
        topics: dict = {}          # topic -> its batches, in drain order
        by_tp = {}
        self.gather(batches, topics, by_tp, now)
        acc = self.acc
        # Produce v13 (KIP-516) names topics by id only: used when the broker
        # offers it and every topic's id is known, else v12 and names.
        # (_produce_version's common case inline: the version known for this
        # node's connection, a method call less per request)
        known = self._produce_versions.get(node)
        c = self.client.connections.get(node)
        if known is not None and c is not None and known[0] is c.versions:
            version = known[1]
        else:
            version = self._produce_version(node)
        ids = self.cluster.topic_ids
        by_id = raw_ids = None
        if version is not None and version >= 13:
            by_id, raw_ids = _by_topic_id(topics, ids, self._raw_ids)
            if by_id is None:
                version = 12
        transactional_id = self.idem.transactional_id if self.idem is not None else None
        body = None
        write = self.write_request
        if write is not None and version is not None:
            data = write(version, transactional_id, self.acks, self.request_timeout_ms, topics, raw_ids)
            if data is not None:
                body = EncodedBody(PRODUCE_API_KEY, version, data)
        if body is None:
            body = self._body_for_codec(transactional_id, topics, ids if by_id is not None else None)
        if acc.compression:
            # after the batches were built: their compression ratios are known
            for b in batches:
                acc.record_compression(b)
        m = self.metrics
        m["requests"] += 1
        m["batches_sent"] += len(batches)
        read = self.read_answer
        # the clock of leader moves as this attempt goes out: a refused batch
        # whose leader moved since is retried without the back-off (_complete)
        mark = self.cluster.leader_moves
        self.client.send(node, "Produce", body, now, expect_response=self.acks != 0, version=version,
                         callback=lambda req: self._on_produce(req, by_tp, by_id, mark),
                         decoder=partial(read, by_tp, by_id) if read is not None else None)

    def _produce_version(self, node):
        """The Produce version of ``node``'s connection (None: not known),
        kept per node with the connection's version table it came from: a
        new connection (a new table) asks again. Asked for every request;
        the table's lookup is Python (kproto.versions)."""
        c = self.client.connections.get(node)
        table = c.versions if c is not None else None
        known = self._produce_versions.get(node)
        if known is not None and known[0] is table:
            return known[1]
        version = self.client.api_version(node, "Produce")
        self._produce_versions[node] = (table, version)
        return version

    def gather_in_python(self, batches, topics, by_tp, now):
        """Each batch of a request, in drain order: its sequence, its place
        in ``topics`` (topic -> batches) and ``by_tp``, in flight (and the
        expiry floor), muted when order is guaranteed, and for a first
        attempt the sticky partitioner's bookkeeping. ``gather`` does this
        in C (kproto/producer/_produce_request.pyx); this is its reference."""
        assign, in_flight, muted = self.assign, self.in_flight, self._muted
        guarantee_order = self.guarantee_order
        floor = self._in_flight_floor
        sticky: dict = {}          # topic -> its sticky partition (None: none), for first attempts
        for b in batches:
            if assign is not None:
                assign(b)
            topic = b.topic
            parts = topics.get(topic)
            if parts is None:
                parts = topics[topic] = []
            parts.append(b)
            by_tp[(topic, b.partition)] = b
            b.in_flight = True
            in_flight[id(b)] = b
            if floor is None or b.deadline_ms < floor:
                floor = b.deadline_ms
            if guarantee_order:
                muted.add(b.tp)
            if b.attempts == 0:
                if topic not in sticky:
                    sticky[topic] = self.first_attempt_of_topic(topic, now)
                # Only a batch of the topic's sticky partition moves the sticky
                # choice (on_new_batch would do nothing else).
                if sticky[topic] == b.partition:
                    sticky[topic] = self.sticky_batch_sent(topic, b.partition)
        self._in_flight_floor = floor

    def first_attempt_of_topic(self, topic, now):
        """A request carries first attempts of ``topic``: its
        metadata.max.idle.ms bookkeeping; returns its sticky partition (None: none)."""
        cluster = self.cluster
        cluster.touch(topic, now)
        return self.partitioner.current_of(topic, cluster)

    def sticky_batch_sent(self, topic, partition):
        """The first attempt of a batch of ``topic``'s sticky partition goes
        out: the partitioner moves on (``on_new_batch``); returns the new
        sticky partition."""
        n = self.cluster.partition_count(topic)
        self.partitioner.on_new_batch(topic, n, partition, self.cluster.available_partitions(topic))
        return self._sticky_partition(topic)

    def _body_for_codec(self, transactional_id, topics, ids):
        """The Produce request as a dict for the generic codec (by topic id
        when ``ids`` is given): the reference of ``write_request``, and the
        body of a version it does not write."""
        topic_data = []
        for t, batches in topics.items():
            entry = {"name": t} if ids is None else {"topic_id": ids[t]}
            entry["partition_data"] = [{"index": b.partition, "records": b.builder.build()} for b in batches]
            topic_data.append(entry)
        return {"transactional_id": transactional_id, "acks": self.acks,
                "timeout_ms": self.cfg.request_timeout_ms, "topic_data": topic_data}

    def _sticky_partition(self, topic):
        return self.partitioner.current_of(topic, self.cluster)

    def _on_produce(self, req, by_tp, by_id=None, mark=None):
        now = req.completed_at
        rtt = self._answer_rtt_ms = now - req.sent_at
        m = self.metrics
        m["request_latency_ms_total"] += rtt
        m["responses"] += 1
        result = req.result
        if result is not None and req.error is None:
            acked = result.get(ACKNOWLEDGED)
            if acked is not None:        # every batch acknowledged, read in C (read_answer): most answers
                acknowledge_all(self, BatchResult, acked)
                return
        if req.error is not None:
            # Disconnect/timeout: every batch gets the same (retriable) error.
            self.cluster.request_update()
            for b in by_tp.values():
                b.maybe_written = True   # the broker may have written it before the failure
                self._complete(b, req.error, -1, -1, now, mark)
            return
        if result is None:               # acks=0: done once written
            for b in by_tp.values():
                self._complete(b, None, -1, -1, now)
            return
        seen = set()
        endpoints = req.result.get("node_endpoints")
        for t in req.result.get("responses") or []:
            if by_id is None:
                name = t["name"]
            else:               # (by_id's keys are the ids' 16 bytes: see _by_topic_id)
                topic_id = t.get("topic_id")
                name = by_id.get(topic_id.bytes) if topic_id is not None else None
            for p in t.get("partition_responses") or []:
                b = by_tp.get((name, p["index"]))
                if b is None:
                    continue
                seen.add(id(b))
                code = p.get("error_code", 0)
                if code == NONE or code == DUPLICATE_SEQUENCE_NUMBER:
                    self.acknowledged(b, p.get("base_offset", -1), p.get("log_append_time_ms", -1))
                    continue
                err = error_codes.error_for_code(
                    code, p.get("error_message"),
                    context=f"producing to {b.topic}-{b.partition}")
                # a hint naming a newer leader moves it in the cache now (KIP-951)
                self.cluster.apply_leader_hint(b.topic, b.partition, p, endpoints, req.node_id, now)
                self._complete(b, err, p.get("base_offset", -1), p.get("log_append_time_ms", -1), now, mark)
        for b in by_tp.values():
            if id(b) not in seen:
                self._complete(b, KafkaError(f"the Produce response has no result for "
                                             f"{b.topic}-{b.partition}"), -1, -1, now)

    # -- completing -----------------------------------------------------------------------
    def acknowledged_in_python(self, b, base_offset, log_append_time):
        """What ``acknowledged`` does in C: the reference the twin tests check it against."""
        self._complete(b, None, base_offset, log_append_time, None)

    def _complete(self, b, err, base_offset, log_append_time, now, mark=None):
        """One batch's answer. ``mark``: the cluster's clock of leader moves
        when this attempt went out (None: unknown). A retriable error is
        retried at once when the partition's leader moved since (its epoch
        rose: a KIP-951 hint in this very answer, or a Metadata answer that
        came while the batch was in flight), else after retry.backoff.ms,
        growing - and if the leader moves while the batch waits, the wait
        ends then (``_leader_moved``): Java's ``shouldBackoff`` /
        ``hasLeaderChangedForTheOngoingRetry``. A hint that names the
        refusing leader again (a broker still taking the leadership of a new
        partition) moves nothing: that retry waits like any other."""
        self.in_flight.pop(id(b), None)
        b.in_flight = False
        self._muted.discard(b.tp)
        if b.done:                       # expired while in flight; the answer is too late
            return
        idem = self.idem
        if err is None:
            if idem is not None:
                idem.on_success(b)
            self._finish(b, None, base_offset, log_append_time)
            return
        code = getattr(err, "code", None)
        if code == MESSAGE_TOO_LARGE and b.record_count > 1:
            self._split(b, now)
            return
        retriable = err.retriable
        if idem is not None and b.has_sequence:
            if code == OUT_OF_ORDER_SEQUENCE_NUMBER:
                if idem.is_behind_acknowledged(b):
                    # The broker wrote later batches of the partition (it had no
                    # state for the producer when this one was refused): this
                    # sequence can never be accepted. Retried below under a new
                    # epoch, unless the broker may already have the batch.
                    if b.maybe_written:
                        idem.on_failure(b)
                        self._finish(b, error_codes.error_for_code(
                            code, f"the broker wrote later records of {b.topic}-{b.partition} while "
                                  f"this batch (sequence {b.base_sequence}) was refused, and an earlier "
                                  f"attempt may have been written, so it is not sent again",
                            context=f"producing to {b.topic}-{b.partition}"), -1, -1)
                        return
                    idem.resequence(b)
                    retriable = True
                else:
                    # Only the batch right after the last acknowledged one is really
                    # out of order; the others follow an earlier failed batch.
                    retriable = not idem.is_next_expected(b)
                    if not retriable:
                        idem.on_failure(b)
                        self._finish(b, err, -1, -1)
                        return
            elif code == UNKNOWN_PRODUCER_ID:
                idem.request_epoch_bump()
                retriable = True
        if getattr(err, "invalid_metadata", False):
            # Java (Sender.completeBatch): ask for a refresh, hint or not, and
            # keep the leader the cache has - forgetting it took the partition
            # from the partitioner and remade the drain's node lists
            self.cluster.request_update()
        if retriable and b.attempts < self.cfg.retries and now < b.deadline_ms and self.fatal_error is None:
            self.metrics["retries"] += 1
            moved = mark is not None and self.cluster.leader_moved_since(b.topic, b.partition, mark)
            if moved:
                self.metrics["retries_to_new_leader"] += 1
            self.acc.reenqueue(b, now, 0 if moved else self.retry_backoff.backoff(b.attempts))
            return
        if idem is not None:
            idem.on_failure(b)
        self._finish(b, err, -1, -1)

    def _finish(self, b, err, base_offset, log_append_time):
        b.done = True
        self.acc.release(b)
        m = self.metrics
        if err is None:
            m["records_sent"] += b.record_count
        else:
            m["records_failed"] += b.record_count
            m["errors"][type(err).__name__] = m["errors"].get(type(err).__name__, 0) + 1
            if self.txn is not None:
                self.txn.on_batch_failed(err)
        self.results.append(BatchResult(b.topic, b.partition, base_offset, log_append_time, err, b.parts,
                                        b.outcome_if_made, b.callbacks))
        self.results_records += b.record_count

    def _split(self, b, now):
        """MESSAGE_TOO_LARGE: re-batch the records into halves (at most
        batch.size each) and queue them in place of the original."""
        self.metrics["splits"] += 1
        records = [r for rb in read_batches(b.builder.build()) for r in rb.records()]
        target = max(1, min(self.acc.batch_size, b.builder.size_in_bytes() // 2))
        new, starts = [], []
        cur = None
        for i, r in enumerate(records):
            if cur is None or not cur.builder.append(r.timestamp, r.key, r.value, r.headers):
                builder = BatchBuilder(self.acc.compression, target,
                                       compression_level=self.acc.compression_level)
                builder.append(r.timestamp, r.key, r.value, r.headers)
                cur = type(b)(b.topic, b.partition, builder, b.created_ms, b.deadline_ms, 0)
                new.append(cur)
                starts.append(i)
        # Map every delivery part of the old batch onto the new batches.
        starts.append(len(records))
        for part in b.parts:
            bare = type(part) is not tuple              # one record's own handle
            handle, delta, count = (part, part._delta, 1) if bare else part
            lo, hi = delta, delta + count
            for k, nb in enumerate(new):
                s, e = starts[k], starts[k + 1]
                a, z = max(lo, s), min(hi, e)
                if a < z:
                    if bare:
                        handle._delta = a - s
                        nb.parts_list().append(handle)
                    else:
                        nb.parts_list().append((handle, a - s, z - a))
        cbs = b.callbacks
        for i in range(0, len(cbs), 3):
            delta = cbs[i + 1]
            k = bisect.bisect_right(starts, delta) - 1
            new[k].callbacks_list().extend((cbs[i], delta - starts[k], cbs[i + 2]))
        b.outcome.split([(starts[k], nb.outcome) for k, nb in enumerate(new)])
        # Memory: the original reservation is handed over to the first piece.
        self.acc.incomplete.discard(b)
        for nb in new:
            nb.attempts = b.attempts
            nb.full = True
            nb.retry_after_ms = now
            self.acc.incomplete.add(nb)
        new[0].reserved = b.reserved
        self.acc.note_deadline(b.deadline_ms)
        dq = self.acc.queues[b.tp]
        for nb in reversed(new):
            dq.appendleft(nb)
        self.acc.nonempty[b.tp] = dq
        if self.idem is not None and b.has_sequence:
            self.idem._forget(b)
            self.idem.request_epoch_bump()

    def _expire(self, now):
        # An expired in-flight batch stays in in_flight (done) until its
        # request comes back, so an epoch bump waits for that request.
        queued = self.acc.expired(now)
        floor = self._in_flight_floor
        if not queued and (floor is None or now < floor):
            return                      # every round but a rare one: nothing made
        expired = [(b, False) for b in queued]
        if floor is not None and now >= floor:
            expired += [(b, True) for b in self.in_flight.values() if b.deadline_ms <= now and not b.done]
            self._in_flight_floor = min((b.deadline_ms for b in self.in_flight.values()
                                         if not b.done and b.deadline_ms > now), default=None)
        for b, in_flight in expired:
            if self.idem is not None:
                # A batch sent before (in flight, or waiting for a retry) leaves
                # a gap in its partition's sequences (Java: handleFailedBatch).
                self.idem.on_failure(b)
            self._finish(b, self._timeout_error(b, now, in_flight), -1, -1)

    def _timeout_error(self, b, now, in_flight):
        where = "in flight" if in_flight else ("waiting for a retry" if b.attempts else "in the accumulator")
        return DeliveryTimeoutError(
            f"{b.record_count} record(s) for {b.topic}-{b.partition} expired {where}: "
            f"{now - b.created_ms:.0f} ms since the batch was created exceeds delivery.timeout.ms "
            f"({self.acc.delivery_timeout_ms} ms)")

    def _abort_undrained(self):
        from kproto.producer.transactions import TransactionAbortedError
        err = TransactionAbortedError("the transaction was aborted before this record was sent")
        for dq in self.acc.queues.values():
            while dq:
                b = dq.popleft()
                if self.idem is not None:
                    self.idem._forget(b)
                self._finish(b, err, -1, -1)

    def _fatal(self, err):
        """The producer cannot go on: fail every queued batch with ``err``
        and tell error_cb."""
        self.fatal_error = err
        self.client.report_error(err)
        self._fail_all(err)

    def _fail_all(self, err):
        # Every queue emptied, so no batch is left open: the per-record fast
        # path (kproto/producer/_append.pyx) relies on it to leave a closed
        # or failed producer's sends to append_serialized, which raises.
        for dq in self.acc.queues.values():
            while dq:
                self._finish(dq.popleft(), err, -1, -1)

    def abort_incomplete(self, err):
        """close(): fail everything not yet acknowledged (queued and in flight)."""
        self._fail_all(err)
        for b in list(self.in_flight.values()):
            if not b.done:
                self._finish(b, err, -1, -1)
        self.in_flight.clear()


def _holds_a_batch(queues) -> bool:
    """Whether one of the accumulator's ``nonempty`` queues holds a batch
    (it keeps a queue a drain emptied until its next ``ready``: the round
    after a batch left, most rounds at a low rate, finds only that one)."""
    for dq in queues.values():
        if dq:
            return True
    return False


def _holds_many(drained) -> bool:
    """Whether a drained batch holds more than one record (a loop: a
    compiled generator expression costs more than the walk)."""
    for batches in drained.values():
        for b in batches:
            if b.builder.record_count > 1:
                return True
    return False


def _by_topic_id(topics, ids, cache):
    """``({topic id: topic}, {topic: topic id})`` of a request's topics, each
    id as its 16 bytes (``uuid.UUID.bytes``), or ``(None, None)`` when an id
    is not known. The answer's reader (``read_acknowledged``) looks the ids
    up by their bytes, and the request's writer writes them as they are: a
    ``uuid.UUID`` key was hashed and compared by uuid.py's Python methods,
    and its bytes made by another, for every request.

    ``cache``: topic -> (its id, {the id's bytes: topic}, {topic: the id's
    bytes}), kept by the sender; an id the metadata replaced (a topic made
    again) is not the cached one. A request of one topic (a quiet
    producer's every request) gets the cached pair itself: nobody writes
    to them (the writer, the reader and ``_on_produce`` only look up)."""
    if len(topics) == 1:
        for t in topics:
            topic_id = ids.get(t)
            if topic_id is None:
                return None, None
            known = cache.get(t)
            if known is None or known[0] is not topic_id:
                known = cache[t] = _topic_id_entry(t, topic_id)
            return known[1], known[2]
    by_id = {}
    raw_ids = {}
    for t in topics:        # (a loop: ``all(genexpr)`` compiled cost more than a request's one topic)
        topic_id = ids.get(t)
        if topic_id is None:
            return None, None
        known = cache.get(t)
        if known is None or known[0] is not topic_id:
            known = cache[t] = _topic_id_entry(t, topic_id)
        raw = known[2][t]
        by_id[raw] = t
        raw_ids[t] = raw
    return by_id, raw_ids


def _topic_id_entry(topic, topic_id):
    """``_by_topic_id``'s cache entry of ``topic``, whose id is ``topic_id``."""
    raw = topic_id.bytes
    return (topic_id, {raw: topic}, {topic: raw})
