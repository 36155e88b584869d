"""``kio topics create|list|describe|delete`` and ``kio groups describe`` (the
other group commands are kio/cli/groups.py's): consumer groups with their
lag, streams groups (KIP-1071) with their lag and each member's tasks."""
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
        # A streams group is described with its tasks (StreamsGroupDescribe);
        # ListGroups says which groups are (no type: a broker before KIP-1043).
        types = {g.group_id: g.type for g in admin.list_groups()}
        streams = [g for g in args.group if types.get(g) == "streams"]
        consumer = [g for g in args.group if g not in streams]
        descriptions = admin.describe_consumer_groups(consumer) if consumer else {}
        descriptions.update(admin.describe_streams_groups(streams) if streams else {})
        lags = {g: admin.consumer_group_lag(g) for g in args.group}
    for g in args.group:
        d = descriptions[g]
        if d is None:
            raise UsageError(f"group {g!r} not found")
        if g in streams:
            _print_streams_group(d, lags[g])
            continue
        print(f"Group: {g}\tState: {d.state or 'unknown'}\tMembers: {len(d.members)}\t"
              f"Assignor: {d.assignor or '-'}")
        owner = {}
        for m in d.members:
            for tp in m.assignment.partitions:
                owner[(tp.topic, tp.partition)] = m.client_id or m.member_id
        _print_lag(g, lags[g], owner, "CONSUMER")
    return EXIT_OK


def _print_lag(group, lags, owner, owner_title) -> None:
    print(f"GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\t{owner_title}")
    for tp, lag in sorted(lags.items()):
        print(f"{group}\t{tp.topic}\t{tp.partition}\t{lag.committed}\t{lag.end_offset}\t{lag.lag}\t"
              f"{owner.get((tp.topic, tp.partition), '-')}")


def _tasks_text(tasks) -> str:
    """Tasks as kafka-streams-groups shows them: subtopology:[partitions], or -."""
    return " ".join(f"{t.subtopology_id}:[{','.join(map(str, t.partitions))}]" for t in tasks) or "-"


def _print_streams_group(d, lag) -> None:
    """A streams group: its epochs, its offsets with their lag (the member
    whose active task reads the partition), and each member's tasks."""
    print(f"Group: {d.group_id}\tType: streams\tState: {d.group_state or 'unknown'}\tMembers: {len(d.members)}\t"
          f"GroupEpoch: {d.group_epoch}\tTargetAssignmentEpoch: {d.target_assignment_epoch}\t"
          f"TopologyEpoch: {d.topology_epoch}\tAssignor: {d.assignor_name or '-'}")
    sources = {s.subtopology_id: s.source_topics for s in d.subtopologies}
    owner = {}
    for m in d.members:
        for t in m.assignment.active_tasks:
            for topic in sources.get(t.subtopology_id, ()):
                for p in t.partitions:
                    owner[(topic, p)] = m.member_id
    _print_lag(d.group_id, lag, owner, "MEMBER")
    print("MEMBER\tPROCESS\tCLIENT-ID\tMEMBER-EPOCH\tACTIVE-TASKS\tSTANDBY-TASKS\tWARMUP-TASKS")
    for m in sorted(d.members, key=lambda m: m.member_id):
        a = m.assignment
        print(f"{m.member_id}\t{m.process_id or '-'}\t{m.client_id or '-'}\t{m.member_epoch}\t"
              f"{_tasks_text(a.active_tasks)}\t{_tasks_text(a.standby_tasks)}\t{_tasks_text(a.warmup_tasks)}")
