"""``kio topics create|list|describe|delete`` and ``kio groups describe`` (the
other group commands are kio/cli/groups.py's)."""
from __future__ import annotations

import sys

from kio.cli import groups as group_commands
from kio.cli.common import EXIT_OK, UsageError, properties, topic_name


def add_parsers(sub, common):
    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", parents=[common])
    p.add_argument("--topic", required=True, action="append", type=topic_name, help="repeatable")
    p.add_argument("--partitions", type=int, default=-1, help="default: the broker's")
    p.add_argument("--replication-factor", type=int, default=-1, help="default: the broker's")
    p.add_argument("--config", action="append", metavar="K=V", help="a topic config (repeatable)")
    p.set_defaults(func=topics_create)
    p = tsub.add_parser("list", parents=[common])
    p.set_defaults(func=topics_list)
    p = tsub.add_parser("describe", parents=[common])
    p.add_argument("--topic", action="append", help="repeatable; default: every topic")
    p.set_defaults(func=topics_describe)
    p = tsub.add_parser("delete", parents=[common])
    p.add_argument("--topic", required=True, action="append", help="repeatable")
    p.set_defaults(func=topics_delete)

    groups = sub.add_parser("groups", help="list groups, describe one with its lag, reset or delete its offsets")
    gsub = groups.add_subparsers(dest="action", required=True)
    group_commands.add_group_actions(gsub, common, _admin)
    p = gsub.add_parser("describe", parents=[common])
    p.add_argument("--group", required=True, action="append", help="repeatable")
    p.set_defaults(func=groups_describe)


def _admin(args):
    from kio.admin import Admin
    conf = {"bootstrap.servers": args.bootstrap_server, "default.api.timeout.ms": int(args.timeout * 1000)}
    conf.update(properties(args.property))
    return Admin(conf)


def topics_create(args) -> int:
    from kio.admin import NewTopic
    configs = properties(args.config, "--config")
    with _admin(args) as admin:
        admin.create_topics([NewTopic(t, args.partitions, args.replication_factor, configs)
                             for t in args.topic])
    for t in args.topic:
        print(f"created topic {t}")
    return EXIT_OK


def topics_list(args) -> int:
    with _admin(args) as admin:
        names = sorted(admin.list_topics())
    sys.stdout.write("".join(n + "\n" for n in names))
    return EXIT_OK


def topics_describe(args) -> int:
    with _admin(args) as admin:
        names = args.topic or sorted(admin.list_topics())
        found = admin.describe_topics(names) if names else {}
    for name in names:
        d = found[name]
        rf = len(d.partitions[0].replicas) if d.partitions else 0
        print(f"Topic: {name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
              f"ReplicationFactor: {rf}")
        for p in d.partitions:
            print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: "
                  f"{'none' if p.leader is None else p.leader}\t"
                  f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    return EXIT_OK


def topics_delete(args) -> int:
    with _admin(args) as admin:
        admin.delete_topics(args.topic)
    for t in args.topic:
        print(f"deleted topic {t}")
    return EXIT_OK


def groups_describe(args) -> int:
    with _admin(args) as admin:
        descriptions = admin.describe_consumer_groups(args.group)
        lags = {g: admin.consumer_group_lag(g) for g in args.group}
    for g in args.group:
        d = descriptions[g]
        if d is None:
            raise UsageError(f"group {g!r} not found")
        print(f"Group: {g}\tState: {d.state or 'unknown'}\tMembers: {len(d.members)}\t"
              f"Assignor: {d.assignor or '-'}")
        owner = {}
        for m in d.members:
            for tp in m.assignment.partitions:
                owner[(tp.topic, tp.partition)] = m.client_id or m.member_id
        print("GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER")
        for tp, lag in sorted(lags[g].items()):
            print(f"{g}\t{tp.topic}\t{tp.partition}\t{lag.committed}\t{lag.end_offset}\t{lag.lag}\t"
                  f"{owner.get((tp.topic, tp.partition), '-')}")
    return EXIT_OK
