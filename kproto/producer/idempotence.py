"""Idempotent producing: producer id/epoch and per-partition sequence numbers.

The part of Java's ``TransactionManager`` that the idempotent producer needs
(KIP-98, KAFKA-5494 for 5 in flight, KIP-360 for epoch bumps):

* InitProducerId gives (producer id, epoch); nothing is drained before it.
* A batch gets its base sequence when it is drained (not when it is opened),
  so retried batches keep theirs and new batches continue after them; the
  sequence of a partition wraps to 0 after ``2**31 - 1`` as the protocol says.
* Every sent but unacknowledged batch of a partition stays in ``unacked``
  (in sequence order) until it succeeds or fails for good. A retried batch
  may only be drained when it is the oldest unacknowledged one - the broker
  would reject anything else as out of order - which brings the partition
  down to one request in flight until it has caught up (as in Java).
* A partition's first batch of an epoch goes alone: Kafka takes any sequence
  from a producer it has no state for, so a later batch could be written
  while the first is refused, leaving a gap.
* OUT_OF_ORDER_SEQUENCE_NUMBER is retriable when an earlier batch of the
  partition is still unresolved (it failed first; this one just followed it);
  it is a real error only for the batch right after the last acknowledged
  sequence. For a batch behind the last acknowledged sequence (the broker
  wrote past it) it is final in the epoch: the batch is sent again under a new
  epoch if no attempt of it may have been written, else it fails.
  DUPLICATE_SEQUENCE_NUMBER means the broker already has it.
* When sequence state can no longer be trusted (UNKNOWN_PRODUCER_ID, a real
  out-of-order, a sent batch that expired or failed for good, a split) the
  epoch is bumped: draining stops, in-flight requests finish, InitProducerId
  is sent with the current id/epoch (v3+; older brokers hand out a new id),
  then every partition restarts at sequence 0.
"""
from __future__ import annotations

import enum

from kproto import error_codes
# a partition's sequence state: a C class the cyclic GC does not track (see its docstring)
from kproto.producer._acknowledge import PartitionSequences as _Partition

__all__ = ["IdempotenceManager", "increment_sequence", "MAX_SEQUENCE"]

MAX_SEQUENCE = 2 ** 31 - 1


def increment_sequence(seq: int, inc: int) -> int:
    """Java ``DefaultRecordBatch.incrementSequence``: wraps to 0 after int32 max."""
    if seq > MAX_SEQUENCE - inc:
        return inc - (MAX_SEQUENCE - seq) - 1
    return seq + inc


class PidState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    BUMP_PENDING = "BUMP_PENDING"
    FATAL = "FATAL"


class IdempotenceManager:
    def __init__(self, transactional_id=None, transaction_timeout_ms=60000):
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.epoch = -1
        self.state = PidState.UNINITIALIZED
        self.fatal_error = None
        self.partitions: dict[tuple, _Partition] = {}
        self.epoch_bumps = 0
        self._bumping_with_id = False
        self._bump_refused = False

    # -- producer id -----------------------------------------------------------------
    @property
    def ready(self):
        return self.state is PidState.READY

    def needs_init_request(self, in_flight_batches: int) -> bool:
        if self.state is PidState.UNINITIALIZED:
            return True
        return self.state is PidState.BUMP_PENDING and in_flight_batches == 0

    def init_request_body(self, version) -> dict:
        bump = (self.state is PidState.BUMP_PENDING and self.producer_id >= 0 and version >= 3
                and not self._bump_refused)
        self._bumping_with_id = bump
        self.state = PidState.INITIALIZING
        return {"transactional_id": self.transactional_id,
                "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": self.producer_id if bump else -1,
                "producer_epoch": self.epoch if bump else -1}

    def on_init_response(self, body, error, queued_batches):
        """Returns an exception if InitProducerId failed for good, else None
        (a retriable failure just asks again)."""
        if error is None and body.get("error_code", 0):
            error = error_codes.error_for_code(body["error_code"], context="InitProducerId")
        if error is not None:
            if self._bumping_with_id and self.transactional_id is None:
                # The broker refused to bump our epoch (Tansu answers
                # UNKNOWN_SERVER_ERROR): a fresh producer id is as good for an
                # idempotent producer - its sequences start at 0 too.
                self._bump_refused = True
                self.state = PidState.BUMP_PENDING
                return None
            if getattr(error, "retriable", False):
                self.state = PidState.UNINITIALIZED if self.producer_id < 0 else PidState.BUMP_PENDING
                return None
            self.state = PidState.FATAL
            self.fatal_error = error
            return error
        self.producer_id = body["producer_id"]
        self.epoch = body["producer_epoch"]
        self.partitions.clear()
        for b in queued_batches:           # re-sequence what was waiting (new epoch)
            b.base_sequence = -1
        self.state = PidState.READY
        return None

    def adopt_end_txn_epoch(self, body) -> None:
        """EndTxn v5+ (KIP-890 part 2, transaction.version 2): the coordinator
        bumps the epoch at the end of every transaction and answers with the
        producer id and epoch to use from now on (a new id when the epoch ran
        out). The sequences start over with the new epoch. Older versions (and
        brokers without TV2) answer -1: nothing changes."""
        pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
        if pid < 0 or epoch < 0 or (pid, epoch) == (self.producer_id, self.epoch):
            return
        self.producer_id = pid
        self.epoch = epoch
        self.partitions.clear()

    def request_epoch_bump(self):
        if self.transactional_id is not None:
            # Transactional producers do not bump on their own: the failure
            # makes the transaction abortable (TransactionManager).
            return
        if self.state in (PidState.READY, PidState.INITIALIZING, PidState.UNINITIALIZED):
            if self.producer_id >= 0 or self.state is PidState.READY:
                self.state = PidState.BUMP_PENDING
        self.epoch_bumps += 1

    # -- sequences ---------------------------------------------------------------------
    def _part(self, tp) -> _Partition:
        p = self.partitions.get(tp)
        if p is None:
            p = self.partitions[tp] = _Partition()
        return p

    def can_drain(self, batch) -> bool:
        if self.state is not PidState.READY:
            return False
        p = self.partitions.get(batch.tp)
        if p is None or not p.unacked:
            return True
        if batch.has_sequence:
            return p.unacked[0] is batch
        # Until the broker has acknowledged one batch of this epoch on the
        # partition, it may have no state for the producer there, and Kafka
        # then takes any sequence: a later batch in flight could be written
        # while the first one is refused (NOT_LEADER_OR_FOLLOWER on a partition
        # just created), leaving a gap nothing can fill. So the first batch
        # goes alone; after its answer the partition has five in flight again.
        return p.last_acked >= 0

    def is_behind_acknowledged(self, batch) -> bool:
        """Did the broker acknowledge sequences after this batch's start? Then
        an OUT_OF_ORDER_SEQUENCE_NUMBER answer for it is final in this epoch:
        the broker wrote past it and will never take it in order."""
        p = self._part(batch.tp)
        return p.last_acked >= 0 and not _seq_after(batch.base_sequence, p.last_acked)

    def assign(self, batch):
        """Called at drain: give a new batch its sequence (retries keep theirs)."""
        if not batch.has_sequence or batch.producer_id != self.producer_id or batch.epoch != self.epoch:
            p = self._part(batch.tp)
            batch.base_sequence = p.next_sequence
            batch.producer_id = self.producer_id
            batch.epoch = self.epoch
            p.next_sequence = increment_sequence(p.next_sequence, batch.record_count)
            p.unacked_list().append(batch)
        batch.builder.set_producer_state(self.producer_id, self.epoch, batch.base_sequence,
                                         self.transactional_id is not None)

    def is_next_expected(self, batch) -> bool:
        """Is this batch the one right after the last acknowledged sequence?"""
        p = self._part(batch.tp)
        return batch.base_sequence == increment_sequence(p.last_acked, 1) if p.last_acked >= 0 \
            else batch.base_sequence == 0

    def _forget(self, batch):
        p = self.partitions.get(batch.tp)
        if p is not None:
            p.forget(batch)         # (the list dropped once empty: see PartitionSequences)
        return p

    def on_success(self, batch):
        p = self._forget(batch)
        if p is not None and batch.producer_id == self.producer_id and batch.epoch == self.epoch:
            last = increment_sequence(batch.base_sequence, batch.record_count - 1)
            if p.last_acked < 0 or _seq_after(last, p.last_acked):
                p.last_acked = last

    def resequence(self, batch):
        """Send the batch again under a new epoch: it was never written (every
        attempt was refused), but its sequence can no longer be accepted."""
        self._forget(batch)
        self.request_epoch_bump()

    def on_failure(self, batch):
        """A batch failed for good (an error, or it expired queued or in
        flight). If it had a sequence, the broker may or may not have written
        it: the partition's sequence state is unknown, so the epoch is bumped
        and later batches do not wait behind it."""
        self._forget(batch)
        if batch.has_sequence and batch.producer_id == self.producer_id:
            self.request_epoch_bump()


def _seq_after(a, b):
    """a comes after b in the wrapping int32 sequence space."""
    return 0 < ((a - b) % (MAX_SEQUENCE + 1)) < (MAX_SEQUENCE + 1) // 2
