"""``kio transactions list|describe|abort``: Kafka's ``kafka-transactions``.

``abort`` ends a hanging transaction on one partition: it finds the
partition's open transactions with DescribeProducers and writes the abort
marker (Admin.abort_transaction) for the one starting at ``--start-offset``,
or, with ``--producer-id``, that producer's.
"""
from __future__ import annotations

from kio.cli.common import EXIT_OK, UsageError
from kproto.admin_transactions import TRANSACTION_STATES, AbortTransactionSpec
from kproto.cluster import TopicPartition

__all__ = ["add_parsers"]


def add_parsers(sub, common, admin_factory) -> None:
    tx = sub.add_parser("transactions", help="list, describe and abort transactions")
    tsub = tx.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("list", parents=[common], help="every transactional id the coordinators know")
    p.add_argument("--state", action="append", choices=TRANSACTION_STATES, help="repeatable")
    p.add_argument("--producer-id", action="append", type=int, help="repeatable")
    p.add_argument("--duration-filter", type=int, metavar="MS", help="only transactions open longer than MS")
    p.set_defaults(func=lambda args: transactions_list(args, admin_factory))
    p = tsub.add_parser("describe", parents=[common], help="a transaction's state at its coordinator")
    p.add_argument("--transactional-id", required=True)
    p.set_defaults(func=lambda args: transactions_describe(args, admin_factory))
    p = tsub.add_parser("abort", parents=[common], help="abort a hanging transaction on one partition")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--start-offset", type=int, help="the offset the hanging transaction starts at")
    which.add_argument("--producer-id", type=int, help="the producer whose open transaction to abort")
    p.set_defaults(func=lambda args: transactions_abort(args, admin_factory))


def transactions_list(args, admin_factory) -> int:
    with admin_factory(args) as admin:
        listing = admin.list_transactions(states=args.state, producer_ids=args.producer_id,
                                          duration_filter_ms=args.duration_filter)
    print("TRANSACTIONAL-ID\tPRODUCER-ID\tSTATE")
    for t in listing:
        print(f"{t.transactional_id}\t{t.producer_id}\t{t.state}")
    return EXIT_OK


def transactions_describe(args, admin_factory) -> int:
    tid = args.transactional_id
    with admin_factory(args) as admin:
        d = admin.describe_transactions([tid])[tid]
    start = "-" if d.transaction_start_time_ms is None else d.transaction_start_time_ms
    print("COORDINATOR\tTRANSACTIONAL-ID\tPRODUCER-ID\tPRODUCER-EPOCH\tSTATE\tTIMEOUT-MS\tSTART-TIME-MS\tPARTITIONS")
    parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions) or "-"
    print(f"{d.coordinator_id}\t{tid}\t{d.producer_id}\t{d.producer_epoch}\t{d.state}\t"
          f"{d.transaction_timeout_ms}\t{start}\t{parts}")
    return EXIT_OK


def transactions_abort(args, admin_factory) -> int:
    tp = TopicPartition(args.topic, args.partition)
    with admin_factory(args) as admin:
        producers = admin.describe_producers([tp])[tp]
        open_ = [s for s in producers if s.current_transaction_start_offset is not None]
        if args.start_offset is not None:
            match = [s for s in open_ if s.current_transaction_start_offset == args.start_offset]
            what = f"starting at offset {args.start_offset}"
        else:
            match = [s for s in open_ if s.producer_id == args.producer_id]
            what = f"of producer {args.producer_id}"
        if not match:
            starts = ", ".join(f"producer {s.producer_id} at offset {s.current_transaction_start_offset}"
                               for s in open_) or "none"
            raise UsageError(f"{tp.topic}-{tp.partition} has no open transaction {what} (open: {starts})")
        spec = AbortTransactionSpec.for_producer(tp, match[0])
        admin.abort_transaction(spec)
    print(f"aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) on "
          f"{tp.topic}-{tp.partition}, which started at offset {match[0].current_transaction_start_offset}")
    return EXIT_OK
