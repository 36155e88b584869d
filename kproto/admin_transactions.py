"""Transaction administration, as operations of :class:`kproto.admin.AdminCore`
(mixed in), named as Java's ``Admin`` (KIP-664, what ``kafka-transactions``
uses):

* ``describe_producers``: the active producers of partitions (DescribeProducers
  at each leader), with the start offset of a transaction still open;
* ``list_transactions``: every transactional id of every coordinator
  (ListTransactions on every broker), filtered by state, producer id or age;
* ``describe_transactions``: a transaction's state at its coordinator
  (FindCoordinator key type 1, then DescribeTransactions);
* ``abort_transaction``: the abort marker written straight to a partition
  leader (WriteTxnMarkers), which ends a *hanging* transaction - one the
  coordinator no longer knows, that holds the last stable offset back;
* ``fence_producers``: InitProducerId for transactional ids, bumping their
  epoch so that their current producers are fenced.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from kproto import error_codes
from kproto.cluster import TopicPartition
from kproto.errors import UnsupportedVersionError

__all__ = ["TransactionAdmin", "ProducerState", "TransactionListing", "TransactionDescription",
           "AbortTransactionSpec", "ProducerIdAndEpoch", "TRANSACTION_STATES"]

#: The transaction states a coordinator reports (Kafka's TransactionState names).
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")
_INT16_MAX = 32767
_CONCURRENT_TRANSACTIONS = 51


class ProducerState(NamedTuple):
    """An active producer of a partition (Java's ``ProducerState``)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: Optional[int]                   # None: unknown (not transactional)
    current_transaction_start_offset: Optional[int]    # None: no transaction open on the partition


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str                            # one of TRANSACTION_STATES


class TransactionDescription(NamedTuple):
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: Optional[int]           # None: no transaction open
    topic_partitions: Tuple[TopicPartition, ...]       # the partitions of the open transaction


class AbortTransactionSpec(NamedTuple):
    """What ``abort_transaction`` needs, as ``describe_producers`` reports it
    for the partition (Java's ``AbortTransactionSpec``)."""
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    @classmethod
    def for_producer(cls, tp, state: ProducerState) -> "AbortTransactionSpec":
        """The spec that aborts ``state``'s open transaction on ``tp`` (an
        unknown coordinator epoch is 0, as kafka-transactions takes it)."""
        return cls(TopicPartition(*tp), state.producer_id, state.producer_epoch,
                   0 if state.coordinator_epoch is None else state.coordinator_epoch)


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    epoch: int


def _optional(v) -> Optional[int]:
    return None if v is None or v < 0 else v


def _list_transactions_body(states, producer_ids, duration_filter_ms, pattern):
    def build(version):
        if duration_filter_ms is not None and version < 1:
            raise UnsupportedVersionError(
                f"the duration filter needs ListTransactions v1 (KIP-994); the broker speaks v{version}")
        if pattern is not None and version < 2:
            raise UnsupportedVersionError(
                f"the transactional id pattern needs ListTransactions v2 (KIP-1152); the broker speaks v{version}")
        return {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": -1 if duration_filter_ms is None else duration_filter_ms,
                "transactional_id_pattern": pattern}
    return build


class TransactionAdmin:
    """The transaction operations of AdminCore (a mixin of the core's machinery)."""

    def _coordinator_error(self, call, code, context, now) -> bool:
        """As ``_group_error``, and CONCURRENT_TRANSACTIONS (the coordinator is
        still ending the id's last transaction) is retried after the backoff,
        as Java's handlers do. True when the call is finished with it."""
        if code == _CONCURRENT_TRANSACTIONS:
            self._retry(call, error_codes.error_for_code(code, None, context), now)
            return True
        return self._group_error(call, code, None, context, now)

    def describe_producers(self, partitions, *, timeout_ms=None, now):
        """{TopicPartition: (ProducerState, ...)}: the active producers of each
        partition, from its leader (DescribeProducers)."""
        from kproto.admin import _no_dups
        keys = [TopicPartition(*tp) for tp in partitions]
        _no_dups(keys, "describe_producers")
        op = self._op("describe_producers", keys, now, timeout_ms)

        def build(node, call=None):
            by: dict = {}
            for tp in call.keys:
                by.setdefault(tp.topic, []).append(tp.partition)
            return {"topics": [{"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(by.items())]}

        def parse(body):
            for t in body.get("topics") or []:
                for p in t.get("partitions") or []:
                    states = tuple(ProducerState(
                        s["producer_id"], s["producer_epoch"], s.get("last_sequence", -1),
                        s.get("last_timestamp", -1), _optional(s.get("coordinator_epoch")),
                        _optional(s.get("current_txn_start_offset"))) for s in p.get("active_producers") or [])
                    yield TopicPartition(t["name"], p["partition_index"]), p["error_code"], states

        if keys:
            self._to_leaders(op, keys, "DescribeProducers", build, parse, now)
        return op

    def list_transactions(self, *, states=None, producer_ids=None, duration_filter_ms=None,
                          transactional_id_pattern=None, timeout_ms=None, now):
        """[TransactionListing] of every broker's transaction coordinator
        (ListTransactions): ``states`` keeps these states (TRANSACTION_STATES),
        ``producer_ids`` these producers, ``duration_filter_ms`` the
        transactions open longer than that, ``transactional_id_pattern`` the
        ids matching this regular expression (the broker's)."""
        states = list(states or ())
        unknown = [s for s in states if s not in TRANSACTION_STATES]
        if unknown:
            raise ValueError(f"list_transactions: unknown state(s) {unknown}; the states are "
                             f"{list(TRANSACTION_STATES)}")
        producer_ids = [int(p) for p in producer_ids or ()]
        if duration_filter_ms is not None and duration_filter_ms < 0:
            raise ValueError(f"list_transactions: duration_filter_ms must be >= 0, not {duration_filter_ms}")
        op = self._op("list_transactions", ["transactions"], now, timeout_ms, single=True)
        found: dict = {}

        def collect(node, body):
            for t in body.get("transaction_states") or []:
                found[t["transactional_id"]] = TransactionListing(
                    t["transactional_id"], t["producer_id"], t["transaction_state"])

        self._every_broker(op, "transactions", "ListTransactions",
                           _list_transactions_body(states, producer_ids, duration_filter_ms,
                                                   transactional_id_pattern),
                           collect, lambda: sorted(found.values()))
        return op

    def describe_transactions(self, transactional_ids, *, timeout_ms=None, now):
        """{transactional id: TransactionDescription}, from each id's
        transaction coordinator; an unknown id fails with
        TransactionalIdNotFoundError."""
        from kproto.admin import _no_dups
        ids = list(transactional_ids)
        _no_dups(ids, "describe_transactions")
        op = self._op("describe_transactions", ids, now, timeout_ms)
        for tid in ids:
            def build(node, call=None, tid=tid):
                return {"transactional_ids": [tid]}

            def handle(call, body, now, tid=tid):
                d = next((x for x in body.get("transaction_states") or [] if x.get("transactional_id") == tid), None)
                if d is None:
                    self._unanswered(call, op, "DescribeTransactions")
                    return
                if self._coordinator_error(call, d["error_code"], f"describe transaction {tid!r}", now):
                    return
                self._complete(op, tid, value=TransactionDescription(
                    call.node, d["transaction_state"], d["producer_id"], d["producer_epoch"],
                    d["transaction_timeout_ms"], _optional(d.get("transaction_start_time_ms")),
                    tuple(sorted(TopicPartition(t["topic"], p) for t in d.get("topics") or []
                                 for p in t["partitions"]))))

            self._group_call(op, tid, "DescribeTransactions", build, handle, key_type=1)
        return op

    def abort_transaction(self, spec, *, timeout_ms=None, now):
        """Abort the open transaction of ``spec`` (AbortTransactionSpec:
        partition, producer id and epoch, coordinator epoch, as
        describe_producers reports them) on that partition: an abort marker
        written by its leader (WriteTxnMarkers), as Java's
        ``Admin.abortTransaction``. For a hanging transaction; one the
        coordinator still runs is its to end. The one item is the partition."""
        spec = AbortTransactionSpec(TopicPartition(*spec[0]), *spec[1:])
        if not 0 <= spec.producer_epoch <= _INT16_MAX:
            raise ValueError(f"abort_transaction: producer_epoch {spec.producer_epoch} is not a producer "
                             f"epoch (0..{_INT16_MAX})")
        tp = spec.topic_partition
        op = self._op("abort_transaction", [tp], now, timeout_ms)

        def build(node, call=None):
            return {"markers": [{"producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                                 "transaction_result": False, "coordinator_epoch": spec.coordinator_epoch,
                                 "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]}

        def parse(body):
            for m in body.get("markers") or []:
                if m.get("producer_id") != spec.producer_id:
                    continue
                for t in m.get("topics") or []:
                    for p in t.get("partitions") or []:
                        yield TopicPartition(t["name"], p["partition_index"]), p["error_code"], None

        self._to_leaders(op, [tp], "WriteTxnMarkers", build, parse, now)
        return op

    def fence_producers(self, transactional_ids, *, timeout_ms=None, now):
        """{transactional id: ProducerIdAndEpoch}: each id's epoch bumped at
        its transaction coordinator (InitProducerId, as Java's Admin), so a
        producer still using it is fenced (ProducerFencedError on its next
        send) and its open transaction aborted."""
        from kproto.admin import _no_dups
        ids = list(transactional_ids)
        _no_dups(ids, "fence_producers")
        op = self._op("fence_producers", ids, now, timeout_ms)
        # The coordinator writes the new epoch with this transaction timeout;
        # Java's FenceProducersOptions uses the request's own timeout.
        txn_timeout = self.config.request_timeout_ms
        for tid in ids:
            def build(node, call=None, tid=tid):
                return {"transactional_id": tid, "transaction_timeout_ms": txn_timeout,
                        "producer_id": -1, "producer_epoch": -1}

            def handle(call, body, now, tid=tid):
                if self._coordinator_error(call, body.get("error_code", 0), f"fence producers of {tid!r}", now):
                    return
                self._complete(op, tid, value=ProducerIdAndEpoch(body["producer_id"], body["producer_epoch"]))

            self._group_call(op, tid, "InitProducerId", build, handle, key_type=1)
        return op
