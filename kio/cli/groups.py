"""``kio groups list|reset-offsets|delete-offsets``: the group commands of
``kafka-consumer-groups`` (``describe`` is kio/cli/admin.py's).

``reset-offsets`` works as Kafka's tool: the group must be inactive (no
members), the new offsets are printed and only applied with ``--execute``
(a dry run otherwise), offsets outside a partition's log are moved to its
nearest end.
"""
from __future__ import annotations

import re
import sys
import time
from datetime import datetime

from kio.cli.common import EXIT_ERROR, EXIT_OK, UsageError
from kproto.admin_groups import GROUP_TYPES
from kproto.cluster import TopicPartition

__all__ = ["add_group_actions", "groups_list", "parse_topic_partitions", "parse_duration_ms",
           "parse_datetime_ms"]

#: Group states in which kafka-consumer-groups lets offsets be reset.
_INACTIVE = {"empty", "dead"}
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def add_group_actions(gsub, common, admin_factory) -> None:
    """The group subcommands besides ``describe`` on ``kio groups``'s subparsers."""
    p = gsub.add_parser("list", parents=[common], help="every group with its type and state")
    p.add_argument("--type", action="append", choices=GROUP_TYPES, help="only groups of this type (repeatable)")
    p.add_argument("--state", action="append", help="only groups in this state, e.g. Stable (repeatable)")
    p.set_defaults(func=lambda args: groups_list(args, admin_factory))

    p = gsub.add_parser("reset-offsets", parents=[common],
                        help="reset a group's committed offsets (a dry run unless --execute)")
    p.add_argument("--group", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="T[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2026-01-31T12:00:00 (local time) or ...Z")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS", help="the first offset this long ago, e.g. PT1H")
    p.add_argument("--execute", action="store_true", help="apply the new offsets (default: only print them)")
    p.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    p.set_defaults(func=lambda args: groups_reset_offsets(args, admin_factory))

    p = gsub.add_parser("delete-offsets", parents=[common], help="delete a group's committed offsets")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", action="append", required=True, metavar="T[:P,P...]",
                   help="a topic, or some of its partitions (repeatable)")
    p.set_defaults(func=lambda args: groups_delete_offsets(args, admin_factory))


def parse_topic_partitions(values):
    """["t", "u:0,2"] -> {topic: None (every partition) or [partitions]}."""
    out = {}
    for v in values:
        topic, sep, parts = v.partition(":")
        if not topic:
            raise UsageError(f"--topic {v!r}: no topic name")
        if not sep:
            out[topic] = None
            continue
        try:
            ps = sorted({int(p) for p in parts.split(",")})
        except ValueError:
            raise UsageError(f"--topic {v!r}: partitions must be numbers, e.g. {topic}:0,1") from None
        if any(p < 0 for p in ps):
            raise UsageError(f"--topic {v!r}: partitions are >= 0")
        out[topic] = ps
    return out


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as kafka-consumer-groups takes it (PnDTnHnMnS) in ms."""
    m = _DURATION.match(text or "")
    if not m or text in ("P", "PT") or text.endswith("T"):
        raise UsageError(f"--by-duration {text!r}: not a duration of the form PnDTnHnMnS (e.g. PT30M, P1DT2H)")
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def parse_datetime_ms(text: str) -> int:
    """ISO date-time in ms since the epoch; without a zone, local time (as Kafka's tool)."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise UsageError(f"--to-datetime {text!r}: not an ISO date-time such as 2026-01-31T12:00:00") from None


def groups_list(args, admin_factory) -> int:
    with admin_factory(args) as admin:
        listings = admin.list_groups(types=args.type, states=args.state)
        # The state of classic and consumer groups as list_consumer_groups
        # finds it (it asks DescribeGroups where ListGroups says "Unknown").
        states = {g.group_id: g.state for g in admin.list_consumer_groups()} if listings else {}
    print("GROUP\tTYPE\tSTATE")
    for g in sorted(listings, key=lambda g: g.group_id):
        state = states.get(g.group_id) or g.state or "-"
        print(f"{g.group_id}\t{g.type or g.protocol_type or '-'}\t{state}")
    return EXIT_OK


def _partitions(admin, args, group):
    """The TopicPartitions the command is about."""
    if getattr(args, "all_topics", False):
        tps = sorted(admin.list_consumer_group_offsets(group))
        if not tps:
            raise UsageError(f"group {group!r} has no committed offsets: name the topics with --topic")
        return tps
    wanted = parse_topic_partitions(args.topic)
    whole = [t for t, ps in wanted.items() if ps is None]
    described = admin.describe_topics(whole) if whole else {}
    tps = []
    for t, ps in wanted.items():
        counts = [p.partition for p in described[t].partitions] if ps is None else ps
        tps += [TopicPartition(t, p) for p in counts]
    return sorted(tps)


def _new_offsets(admin, args, tps):
    """{tp: new offset} for the reset scenario, kept within each log (as Kafka's tool)."""
    earliest = {tp: r.offset for tp, r in admin.list_offsets({tp: "earliest" for tp in tps}).items()}
    latest = {tp: r.offset for tp, r in admin.list_offsets({tp: "latest" for tp in tps}).items()}
    if args.to_earliest:
        target = dict(earliest)
    elif args.to_latest:
        target = dict(latest)
    elif args.to_offset is not None:
        target = {tp: args.to_offset for tp in tps}
    elif args.shift_by is not None:
        committed = admin.list_consumer_group_offsets(args.group, tps)
        missing = [f"{tp.topic}-{tp.partition}" for tp in tps if tp not in committed]
        if missing:
            raise UsageError(f"cannot shift the offsets of {', '.join(missing)}: group {args.group!r} "
                             f"has no committed offset there")
        target = {tp: committed[tp].offset + args.shift_by for tp in tps}
    else:
        ts = (parse_datetime_ms(args.to_datetime) if args.to_datetime
              else int(time.time() * 1000) - parse_duration_ms(args.by_duration))
        found = admin.list_offsets({tp: ts for tp in tps})
        # no record that recent: the end of the log
        target = {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp] for tp in tps}
    return {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in target.items()}


def groups_reset_offsets(args, admin_factory) -> int:
    if args.execute and args.dry_run:
        raise UsageError("--execute and --dry-run: choose one")
    if args.by_duration:
        parse_duration_ms(args.by_duration)              # a bad duration fails before any request
    if args.to_datetime:
        parse_datetime_ms(args.to_datetime)
    group = args.group
    with admin_factory(args) as admin:
        state = _group_state(admin, group)
        if state.lower() not in _INACTIVE:
            print(f"kio groups reset-offsets: error: assignments can only be reset if the group {group!r} "
                  f"is inactive, but the current state is {state}", file=sys.stderr)
            return EXIT_ERROR
        tps = _partitions(admin, args, group)
        new = _new_offsets(admin, args, tps)
        if args.execute:
            admin.alter_consumer_group_offsets(group, new)
    print("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET")
    for tp, o in sorted(new.items()):
        print(f"{group}\t{tp.topic}\t{tp.partition}\t{o}")
    if not args.execute:
        print("dry run: no offset was changed; add --execute to apply these", file=sys.stderr)
    return EXIT_OK


def _group_state(admin, group) -> str:
    """The group's state; Dead for a group that does not exist (as Kafka's tool sees it)."""
    from kproto.error_codes import GroupIdNotFoundError
    try:
        return admin.describe_consumer_groups([group])[group].state or "Unknown"
    except GroupIdNotFoundError:
        return "Dead"


def groups_delete_offsets(args, admin_factory) -> int:
    with admin_factory(args) as admin:
        tps = _partitions(admin, args, args.group)
        handle = admin.delete_consumer_group_offsets(args.group, tps, raise_errors=False)
    errors = handle.errors()
    if errors and len(errors) == len(tps) and len({id(e) for e in errors.values()}) == 1:
        raise next(iter(errors.values()))       # the group's error (unknown group...): one line
    print("TOPIC\tPARTITION\tSTATUS")
    for tp in tps:
        err = errors.get(tp)
        print(f"{tp.topic}\t{tp.partition}\t{'Successful' if err is None else f'Error: {type(err).__name__}: {err}'}")
    return EXIT_ERROR if errors else EXIT_OK
