"""Transactions: the coordinator protocol of Java's ``TransactionManager``, sans-IO.

``init_transactions`` finds the transaction coordinator (FindCoordinator, key
type 1) and gets a producer id/epoch from it (InitProducerId with the
transactional id; this fences older producers with the same id).
``begin_transaction`` is local. Before a batch of a partition new to the
transaction is drained, AddPartitionsToTxn registers the partition with the
coordinator (v3 or lower: v4+ is broker-to-broker). ``commit``/``abort`` wait
until every batch of the transaction is resolved, then send EndTxn.
``send_offsets_to_transaction`` is AddOffsetsToTxn to the transaction
coordinator followed by TxnOffsetCommit to the group coordinator.

Errors: fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, ...) from the
coordinator is fatal - the producer must be closed; a batch that fails inside a
transaction makes the transaction *abortable* (commit raises that error, abort
works) unless its error is one Java's producer treats as fatal there
(PRODUCER_FENCED, the authorization errors, UNSUPPORTED_VERSION,
INVALID_PRODUCER_ID_MAPPING): a leader's INVALID_PRODUCER_EPOCH is abortable. Coordinator
errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ..._LOAD_IN_PROGRESS) look
the coordinator up again; CONCURRENT_TRANSACTIONS retries.

Coordinator lookups back off as the group coordinator's do (retry.backoff.ms
growing to retry.backoff.max.ms, +-20% jitter: :class:`~kproto.backoff.RetryBackoff`):
a failed FindCoordinator, and a coordinator lost before it answered anything
(its connection refused, NOT_COORDINATOR), count as failures; an answer from
the coordinator starts the count afresh. A coordinator whose connection
fails is looked up again (it may have moved) rather than waited for.

Every operation returns a :class:`TxnResult` (``done``/``error``); drivers wait on it.
"""
from __future__ import annotations

import collections
import enum
from typing import Optional

from kproto import error_codes
from kproto.backoff import RetryBackoff
from kproto.errors import KafkaError
from kproto.requests import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, find_coordinator_body

__all__ = ["TransactionManager", "TxnResult", "TxnState", "TransactionStateError",
           "TransactionAbortedError"]

COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
CONCURRENT_TRANSACTIONS = 51


class TransactionStateError(KafkaError):
    """The operation is not allowed in the current transaction state."""


class TransactionAbortedError(KafkaError):
    """The record was not sent: its transaction was aborted."""


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TxnResult:
    """Outcome of one transactional operation."""
    __slots__ = ("name", "done", "error")

    def __init__(self, name):
        self.name, self.done, self.error = name, False, None

    def _finish(self, error=None):
        if not self.done:
            self.done, self.error = True, error

    def __repr__(self):
        return f"<TxnResult {self.name} {'pending' if not self.done else self.error or 'ok'}>"


def _is_fatal(err):
    """A transaction coordinator's answer the producer cannot go on after
    (an old coordinator's INVALID_PRODUCER_EPOCH means fenced, as in Java)."""
    return getattr(err, "name", "") in (
        "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "INVALID_TXN_STATE", "INVALID_PRODUCER_ID_MAPPING", "CLUSTER_AUTHORIZATION_FAILED",
        "UNSUPPORTED_VERSION", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "TRANSACTIONAL_ID_NOT_FOUND")


#: a failed *batch* (a partition leader's answer) is fatal only for these, as
#: in Java's TransactionManager; anything else, INVALID_PRODUCER_EPOCH
#: included (a leader that saw a newer epoch: KIP-588 makes it abortable),
#: only makes the transaction abortable
_FATAL_FOR_A_BATCH = frozenset((
    "PRODUCER_FENCED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "UNSUPPORTED_VERSION", "INVALID_PRODUCER_ID_MAPPING"))


class _Step:
    """One coordinator request waiting to be sent: ``body(version)``,
    ``on_ok(response)``, retried on coordinator errors."""
    __slots__ = ("api", "coordinator", "body", "on_ok", "result", "max_version")

    def __init__(self, api, coordinator, body, on_ok, result, max_version=None):
        self.api, self.coordinator, self.body, self.on_ok = api, coordinator, body, on_ok
        self.result, self.max_version = result, max_version


class TransactionManager:
    def __init__(self, transactional_id, idempotence, transaction_timeout_ms=60000, retry_backoff_ms=100,
                 retry_backoff_max_ms=1000, rng=None):
        self.transactional_id = transactional_id
        self.idem = idempotence                  # holds producer id / epoch / sequences
        self.timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        #: consecutive coordinator failures (lookups, coordinators lost before answering)
        self.coordinator_backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms, rng)
        self._found_at = 0                       # when the last coordinator was found
        self._served = False                     # ... and whether it answered since
        self.state = TxnState.UNINITIALIZED
        self.error: Optional[BaseException] = None
        self.coordinators: dict = {}             # ("txn"|"group", key) -> node id
        self.steps = collections.deque()
        self.partitions: set = set()             # registered with the coordinator
        self.pending_partitions: set = set()     # to register before their batches drain
        self._adding: set = set()
        self._in_flight = False
        self._retry_at = 0
        self._end: Optional[TxnResult] = None    # commit/abort waiting for batches

    # -- user operations (return TxnResult) -----------------------------------------------
    def init_transactions(self):
        if self.state is not TxnState.UNINITIALIZED:
            raise TransactionStateError(f"init_transactions in state {self.state.name}")
        self.state = TxnState.INITIALIZING
        res = TxnResult("init_transactions")
        self.idem.state = self.idem.state.__class__.INITIALIZING    # no idempotent init of its own

        def ok(body):
            self.idem.on_init_response(body, None, [])
            self.state = TxnState.READY
        self.steps.append(_Step("InitProducerId", ("txn", self.transactional_id),
                                lambda v: {"transactional_id": self.transactional_id,
                                           "transaction_timeout_ms": self.timeout_ms,
                                           "producer_id": -1, "producer_epoch": -1}, ok, res))
        return res

    def begin_transaction(self):
        self._check_not_fatal()
        if self.state is not TxnState.READY:
            raise TransactionStateError(
                f"begin_transaction needs a READY producer (state {self.state.name}; call "
                f"init_transactions first, and end the previous transaction)")
        self.state = TxnState.IN_TRANSACTION

    def maybe_add_partition(self, tp):
        """send() inside a transaction: register the partition if new."""
        if self.state is not TxnState.IN_TRANSACTION:
            self._check_not_fatal()
            raise TransactionStateError(f"cannot send outside a transaction (state {self.state.name}); "
                                        f"call begin_transaction first")
        if tp not in self.partitions:
            self.pending_partitions.add(tp)

    def send_offsets_to_transaction(self, offsets: dict, group_id: str):
        """``offsets``: {(topic, partition): next offset to consume, an int or
        an OffsetAndMetadata (Java's type: its leader epoch and metadata are
        committed too)}."""
        entries = {}
        for tp, off in offsets.items():
            epoch, meta = -1, ""
            if hasattr(off, "offset") and not isinstance(off, int):
                epoch = getattr(off, "leader_epoch", None)
                epoch = -1 if epoch is None else epoch
                meta = getattr(off, "metadata", None) or ""
                off = off.offset
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise ValueError(f"send_offsets_to_transaction: the offset of {tp!r} must be an "
                                 f"int >= 0 or an OffsetAndMetadata, not {off!r}")
            entries[tuple(tp)] = (off, epoch, meta)
        if self.state is not TxnState.IN_TRANSACTION:
            self._check_not_fatal()
            raise TransactionStateError(f"send_offsets_to_transaction outside a transaction "
                                        f"(state {self.state.name})")
        res = TxnResult("send_offsets_to_transaction")
        idem = self.idem

        def commit_offsets(_body):
            topics = {}
            for (t, p), (off, epoch, meta) in sorted(entries.items()):
                topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                                 "committed_leader_epoch": epoch, "committed_metadata": meta})
            self.steps.appendleft(_Step(
                "TxnOffsetCommit", ("group", group_id),
                lambda v: {"transactional_id": self.transactional_id, "group_id": group_id,
                           "producer_id": idem.producer_id, "producer_epoch": idem.epoch,
                           "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                           "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                lambda body: self._check_partition_errors(body, "TxnOffsetCommit"), res))
        self.steps.append(_Step(
            "AddOffsetsToTxn", ("txn", self.transactional_id),
            lambda v: {"transactional_id": self.transactional_id, "producer_id": idem.producer_id,
                       "producer_epoch": idem.epoch, "group_id": group_id},
            commit_offsets, TxnResult("AddOffsetsToTxn")))
        return res

    def commit_transaction(self):
        return self._end_transaction(True)

    def abort_transaction(self):
        return self._end_transaction(False)

    def _end_transaction(self, commit):
        name = "commit_transaction" if commit else "abort_transaction"
        if self.state is TxnState.FATAL_ERROR:
            raise self.error
        if commit and self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionStateError(
                f"cannot commit: the transaction failed ({self.error}); call abort_transaction") \
                from self.error
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            raise TransactionStateError(f"{name} without a transaction (state {self.state.name})")
        self.state = TxnState.COMMITTING if commit else TxnState.ABORTING
        self._end = TxnResult(name)
        return self._end

    # -- hooks used by the sender ----------------------------------------------------------
    def can_drain(self, batch):
        return batch.tp in self.partitions and self.state in (
            TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR, TxnState.ABORTING)

    def on_batch_failed(self, error):
        if isinstance(error, TransactionAbortedError):
            return
        if getattr(error, "name", "") in _FATAL_FOR_A_BATCH:
            self._fatal(error)
        elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            if self.state is TxnState.COMMITTING and self._end is not None:
                err = TransactionStateError(f"commit failed: a record of the transaction failed "
                                            f"({error}); call abort_transaction")
                err.__cause__ = error
                self._end._finish(err)
                self._end = None
            self.state = TxnState.ABORTABLE_ERROR
            self.error = error

    @property
    def aborting(self):
        return self.state is TxnState.ABORTING

    def _fatal(self, error):
        self.state = TxnState.FATAL_ERROR
        self.error = error
        for s in self.steps:
            s.result._finish(error)
        self.steps.clear()
        if self._end is not None:
            self._end._finish(error)

    def _check_not_fatal(self):
        if self.state is TxnState.FATAL_ERROR:
            raise self.error

    def _check_partition_errors(self, body, what):
        for t in body.get("topics") or body.get("results_by_topic_v3_and_below") or []:
            for p in t.get("partitions") or t.get("results_by_partition") or []:
                code = p.get("error_code", p.get("partition_error_code", 0))
                if code:
                    raise error_codes.error_for_code(code, context=f"{what} {t['name']}-{p['partition_index']}")

    # -- the loop (called by the sender before draining) -------------------------------------
    def poll(self, client, cluster, now, unresolved_batches):
        """Send the next coordinator request if one is due; returns a time to
        come back (ms) or None."""
        if self.state is TxnState.FATAL_ERROR or self._in_flight:
            return None
        if now < self._retry_at:
            return self._retry_at
        if self.state is TxnState.ABORTING:
            self.pending_partitions.clear()      # their batches were aborted, never sent
        if self.pending_partitions - self._adding \
                and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING) \
                and not any(s.api == "AddPartitionsToTxn" for s in self.steps):
            self._queue_add_partitions()
        if not self.steps and self._end is not None and unresolved_batches == 0 and not self.pending_partitions:
            self._queue_end_txn()
        if not self.steps:
            return None
        step = self.steps[0]
        key = step.coordinator
        node = self.coordinators.get(key)
        if node is not None and client.is_unavailable(node, now):
            # Java: a coordinator that cannot be connected to is looked up again.
            self._coordinator_lost(key, now)
            node = None
            if now < self._retry_at:
                return self._retry_at
        if node is None:
            return self._find_coordinator(client, now, key)
        if not client.ready(node, now):
            return None
        version = client.api_version(node, step.api)
        if version is None:
            self.steps.popleft()
            err = KafkaError(f"the broker does not support {step.api}: transactions are not possible")
            step.result._finish(err)
            self._fatal(err)
            return None
        if step.max_version is not None:
            version = min(version, step.max_version)
        self._in_flight = True
        client.send(node, step.api, step.body(version), now, version=version,
                    callback=lambda req: self._on_response(req, step, key))
        return None

    def _find_coordinator(self, client, now, key):
        node = client.least_loaded_node(now)
        if node is None or not client.ready(node, now):
            return None
        self._in_flight = True
        body = find_coordinator_body(key[1], KEY_TYPE_TRANSACTION if key[0] == "txn" else KEY_TYPE_GROUP)
        client.send(node, "FindCoordinator", body, now,
                    callback=lambda req: self._on_coordinator(req, key, client.cluster))
        return None

    def _on_coordinator(self, req, key, cluster):
        self._in_flight = False
        if req.error is not None:
            self._retry_at = req.completed_at + self.coordinator_backoff.failed()
            return
        body = req.result
        c = (body.get("coordinators") or [None])[0] if body.get("coordinators") else body
        code = c.get("error_code", 0)
        if code:
            err = error_codes.error_for_code(code, c.get("error_message"), context=f"FindCoordinator {key}")
            if err.retriable:
                self._retry_at = req.completed_at + self.coordinator_backoff.failed()
            else:
                self._fatal(err)
            return
        cluster.add_node(c["node_id"], c["host"], c["port"])
        self.coordinators[key] = c["node_id"]
        self._found_at = req.completed_at
        self._served = False

    def _coordinator_lost(self, key, now):
        """Forget the coordinator of ``key``: looked up again at once if it
        had served (answered, or was kept longer than the longest backoff),
        else after the growing backoff (lost before it answered: a failure)."""
        self.coordinators.pop(key, None)
        served = self._served or now - self._found_at >= self.retry_backoff_max_ms
        self._retry_at = now + self.coordinator_backoff.lost(served)

    def _coordinator_answered(self):
        self._served = True
        self.coordinator_backoff.reset()

    def _on_response(self, req, step, key):
        self._in_flight = False
        now = req.completed_at
        if req.error is not None:                         # disconnect / timeout: look up again
            self._coordinator_lost(key, now)
            return
        body = req.result
        code = body.get("error_code", 0)
        try:
            if code:
                raise error_codes.error_for_code(code, context=step.api)
            if step.api == "AddPartitionsToTxn":
                self._check_partition_errors(body, step.api)
            step.on_ok(body)
        except KafkaError as err:
            c = getattr(err, "code", None)
            if c in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
                self._coordinator_lost(key, now)
                return
            self._coordinator_answered()                  # (as the coordinator)
            if c in (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) or err.retriable:
                self._retry_at = now + min(self.retry_backoff_ms, 20 if c == CONCURRENT_TRANSACTIONS else 1000)
                return
            self.steps.remove(step)
            if step.api == "AddPartitionsToTxn":
                self._adding.clear()
            if _is_fatal(err):
                step.result._finish(err)
                self._fatal(err)
            else:
                step.result._finish(err)
                if step.api != "EndTxn":
                    self.on_batch_failed(err)
            return
        self._coordinator_answered()
        self.steps.remove(step)      # (on_ok may have queued a follow-up step in front)
        step.result._finish(None)

    def _queue_add_partitions(self):
        tps = sorted(self.pending_partitions)
        self._adding = set(tps)
        idem = self.idem
        topics = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)

        def ok(body):
            self.partitions.update(tps)
            self.pending_partitions.difference_update(tps)
            self._adding = set()
        self.steps.appendleft(_Step(
            "AddPartitionsToTxn", ("txn", self.transactional_id),
            lambda v: {"v3_and_below_transactional_id": self.transactional_id,
                       "v3_and_below_producer_id": idem.producer_id,
                       "v3_and_below_producer_epoch": idem.epoch,
                       "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            ok, TxnResult("AddPartitionsToTxn"), max_version=3))

    def _queue_end_txn(self):
        commit = self.state is TxnState.COMMITTING
        end = self._end
        idem = self.idem

        def ok(body):
            idem.adopt_end_txn_epoch(body)
            self.partitions.clear()
            self.pending_partitions.clear()
            self.state = TxnState.READY
            self.error = None
            self._end = None
        if not self.partitions:
            # Nothing was sent in this transaction: nothing to tell the coordinator.
            ok({})
            end._finish(None)
            return
        self.steps.append(_Step(
            "EndTxn", ("txn", self.transactional_id),
            lambda v: {"transactional_id": self.transactional_id, "producer_id": idem.producer_id,
                       "producer_epoch": idem.epoch, "committed": commit}, ok, end))
