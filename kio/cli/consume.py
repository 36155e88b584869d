"""``kio consume``: print records, one per line, as text or JSON."""
from __future__ import annotations

import base64
import json
import sys
import time

from kio.cli.common import (
    EXIT_INTERRUPTED, EXIT_OK, Progress, UsageError, interrupts, properties, topic_name,
)
from kproto.errors import KafkaError


def add_parser(sub, common):
    p = sub.add_parser("consume", parents=[common], help="print records of a topic")
    p.add_argument("--topic", required=True, type=topic_name)
    p.add_argument("--group", help="consume as a member of this group (commits its offsets)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when there is no committed one")
    p.add_argument("--partition", type=int, action="append",
                   help="read only this partition (repeatable; not with --group)")
    p.add_argument("--offset", default=None,
                   help="start offset for --partition: a number, 'earliest' or 'latest'")
    p.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    p.add_argument("--format", default="{value}",
                   help="output line, with {topic} {partition} {offset} {timestamp} {key} {value} "
                        "{headers} (default: {value})")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.add_argument("--idle-timeout", type=float, default=None,
                   help="exit when no record arrives for this many seconds")
    p.set_defaults(func=run)


def _text(b):
    return "null" if b is None else b.decode("utf-8", "replace")


def _json_bytes(b):
    """JSON for key/value bytes: text when UTF-8, else {"base64": ...}."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def _formatter(args):
    if args.json:
        def fmt(r):
            return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                               "timestamp": r.timestamp, "key": _json_bytes(r.key),
                               "value": _json_bytes(r.value),
                               "headers": [[k, _json_bytes(v)] for k, v in (r.headers or ())]},
                              ensure_ascii=False)
        return fmt
    template = args.format.replace("\\t", "\t").replace("\\n", "\n")
    try:
        template.format(topic="", partition=0, offset=0, timestamp=0, key="", value="", headers="")
    except (KeyError, IndexError, ValueError) as e:
        raise UsageError(f"--format {args.format!r}: {e!r} (fields: topic partition offset "
                         f"timestamp key value headers)") from None

    def fmt(r):
        hs = ",".join(f"{k}:{_text(v)}" for k, v in (r.headers or ()))
        return template.format(topic=r.topic, partition=r.partition, offset=r.offset,
                               timestamp=r.timestamp, key=_text(r.key), value=_text(r.value), headers=hs)
    return fmt


def _config(args) -> dict:
    conf = {"bootstrap.servers": args.bootstrap_server,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "default.api.timeout.ms": int(args.timeout * 1000)}
    given = properties(args.property)
    if args.group:
        conf["group.id"] = args.group
        # The first records come once the group is joined, and a coordinator
        # holds the JoinGroup for a time that grows with session.timeout.ms
        # (Tansu, the bundled broker: half of it, ~23 s with Java's 45 s
        # default; Kafka: group.initial.rebalance.delay.ms, 3 s by default).
        # A console tool wants records within seconds: the smallest session
        # timeout brokers accept by default (group.min.session.timeout.ms), a
        # heartbeat a third of it. --property overrides both. With
        # group.protocol=consumer the broker owns both (and they may not be set).
        protocol = {k.replace("_", "."): v for k, v in given.items()}.get("group.protocol", "classic")
        if str(protocol).strip().lower() != "consumer":
            conf["session.timeout.ms"] = 6000
            conf["heartbeat.interval.ms"] = 2000
    conf.update(given)
    return conf


def topic_partitions(args, topic, chosen=None):
    """TopicPartitions of ``topic`` (all, or the ``chosen`` numbers, checked)."""
    from kio.admin import Admin
    from kio.consumer import TopicPartition

    with Admin({"bootstrap.servers": args.bootstrap_server,
                "default.api.timeout.ms": int(args.timeout * 1000)}) as admin:
        count = len(admin.describe_topics([topic])[topic].partitions)
    bad = [p for p in chosen or () if not 0 <= p < count]
    if bad:
        raise UsageError(f"--partition {bad[0]}: topic {topic!r} has partitions 0..{count - 1}")
    return [TopicPartition(topic, p) for p in (chosen or range(count))]


def _assign(consumer, args):
    """Assign mode: the chosen partitions (default: all of the topic's)."""
    tps = topic_partitions(args, args.topic, args.partition)
    consumer.assign(tps)
    start = args.offset if args.offset is not None else ("earliest" if args.from_beginning else "latest")
    if start == "earliest":
        consumer.seek_to_beginning(tps)
    elif start == "latest":
        consumer.seek_to_end(tps)
    else:
        try:
            offset = int(start)
        except ValueError:
            raise UsageError(f"--offset {start!r}: a number, 'earliest' or 'latest'") from None
        for tp in tps:
            consumer.seek(tp, offset)


def run(args) -> int:
    from kio.consumer import Consumer

    if args.group and (args.partition or args.offset is not None):
        raise UsageError("--partition/--offset select partitions by hand: not with --group")
    fmt = _formatter(args)
    out = sys.stdout
    progress = Progress("consume")
    count = 0
    last_record = time.monotonic()
    with Consumer(_config(args)) as consumer:
        try:
            if args.group:
                consumer.subscribe([args.topic])
            else:
                _assign(consumer, args)
            while args.max_messages is None or count < args.max_messages:
                left = None if args.max_messages is None else args.max_messages - count
                with interrupts.deferred():      # records polled are printed before stopping
                    records = consumer.poll(timeout=0.5, max_records=left)
                    if records:
                        out.write("".join(fmt(r) + "\n" for r in records))
                        out.flush()
                        count += len(records)
                now = time.monotonic()
                if records:
                    last_record = now
                    progress.update(count)
                elif args.idle_timeout is not None and now - last_record >= args.idle_timeout:
                    if args.group and not consumer.assignment():
                        raise KafkaError(f"no partition of {args.topic!r} was assigned to group "
                                         f"{args.group!r} within {args.idle_timeout} s "
                                         f"(is the broker at {args.bootstrap_server} reachable?)")
                    break
        except KeyboardInterrupt:
            progress.done()
            print(f"interrupted after {count:,} records", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            # the reader went away (| head): stop quietly, like other tools
            sys.stdout = None
            return EXIT_OK
        finally:
            progress.done()
    return EXIT_OK
