"""``kio acls list|add|remove``, ``kio configs describe|alter`` and ``kio users
list|set-password|delete``: what kafka-acls, kafka-configs and kafka-configs'
SCRAM options do, on kio.Admin.

Output is one line per item, tab-separated, for scripts:
``acls list``: resource type, pattern type, name, principal, host, operation,
permission; ``configs describe``: name=value (the dynamic settings - what
``configs alter`` sets - unless ``--all``); ``users list``: user, mechanism, iterations."""
from __future__ import annotations

import re

from kio.cli.admin import _admin
from kio.cli.common import EXIT_OK, UsageError

ENTITY_TYPES = {"topics": 2, "brokers": 4, "broker-loggers": 8, "client-metrics": 16, "groups": 32}
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: The ConfigSource of the settings a resource has of its own (what ``configs
#: alter`` sets), by resource type: a topic's (1), a broker's (2; the cluster
#: default's is 3), a broker logger's (6), client metrics' (7), a group's (8).
OWN_SOURCE = {2: 1, 4: 2, 8: 6, 16: 7, 32: 8}
CLUSTER_DEFAULT_SOURCE = 3


def add_parsers(sub, common):
    acls = sub.add_parser("acls", help="list, add and remove ACLs (as kafka-acls)")
    asub = acls.add_subparsers(dest="action", required=True)
    for action, func in (("list", acls_list), ("add", acls_add), ("remove", acls_remove)):
        p = asub.add_parser(action, parents=[common])
        _resource_options(p, adding=action == "add")
        p.set_defaults(func=func)

    configs = sub.add_parser("configs", help="describe and alter topic, broker, group and client-metrics "
                                             "configs (as kafka-configs)")
    csub = configs.add_subparsers(dest="action", required=True)
    for action, func in (("describe", configs_describe), ("alter", configs_alter)):
        p = csub.add_parser(action, parents=[common])
        p.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES))
        who = p.add_mutually_exclusive_group(required=True)
        who.add_argument("--entity-name", help="the topic, broker id, group or client-metrics name")
        who.add_argument("--entity-default", action="store_true", help="brokers: the cluster-wide default")
        if action == "describe":
            p.add_argument("--all", action="store_true", help="every setting, not only the dynamic ones")
        else:
            p.add_argument("--add-config", action="append", metavar="K=V[,K=V...]",
                           help="settings to set; a value with commas goes in brackets: k=[a,b]")
            p.add_argument("--delete-config", action="append", metavar="K[,K...]",
                           help="settings to return to their defaults")
        p.set_defaults(func=func)

    users = sub.add_parser("users", help="list, set and delete SCRAM credentials")
    usub = users.add_subparsers(dest="action", required=True)
    p = usub.add_parser("list", parents=[common])
    p.add_argument("--user", action="append", help="repeatable; default: every user with a credential")
    p.set_defaults(func=users_list)
    p = usub.add_parser("set-password", parents=[common])
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, help="repeatable; default SCRAM-SHA-512")
    p.add_argument("--iterations", type=int, default=4096)
    p.set_defaults(func=users_set_password)
    p = usub.add_parser("delete", parents=[common])
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, help="repeatable; default: every one")
    p.set_defaults(func=users_delete)


# -- ACLs ----------------------------------------------------------------------------------------

def _resource_options(p, adding):
    kind = p.add_mutually_exclusive_group(required=adding)
    kind.add_argument("--topic")
    kind.add_argument("--group")
    kind.add_argument("--transactional-id")
    kind.add_argument("--cluster", action="store_true")
    patterns = ["literal", "prefixed"] if adding else ["any", "match", "literal", "prefixed"]
    p.add_argument("--resource-pattern-type", choices=patterns, default="literal" if adding else None,
                   help="default: literal (add), any (list, remove)")
    who = p.add_mutually_exclusive_group(required=adding)
    who.add_argument("--allow-principal", metavar="PRINCIPAL", help="e.g. User:alice")
    who.add_argument("--deny-principal", metavar="PRINCIPAL")
    if not adding:
        who.add_argument("--principal", help="ALLOW and DENY entries of this principal")
    p.add_argument("--host", default="*" if adding else None, help="default: * (add), any (list, remove)")
    p.add_argument("--operation", action="append", type=str.upper, required=adding,
                   help="READ, WRITE, DESCRIBE, ALL... (repeatable)")


def _resource(args):
    from kio.admin import ResourceType
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, "kafka-cluster"
    return ResourceType.ANY, None


def _principal(args):
    from kio.admin import AclPermissionType
    if args.allow_principal:
        return args.allow_principal, AclPermissionType.ALLOW
    if args.deny_principal:
        return args.deny_principal, AclPermissionType.DENY
    return getattr(args, "principal", None), AclPermissionType.ANY


def _filters(args):
    """One AclBindingFilter per --operation (or one for any operation)."""
    from kio.admin import AccessControlEntryFilter, AclBindingFilter, AclOperation, ResourcePatternFilter
    rtype, name = _resource(args)
    principal, permission = _principal(args)
    pattern = ResourcePatternFilter.of(rtype, name, args.resource_pattern_type or "any")
    try:
        ops = [AclOperation[o] for o in args.operation] if args.operation else [AclOperation.ANY]
    except KeyError as e:
        raise UsageError(f"--operation {e.args[0]}: expected one of "
                         f"{', '.join(o.name for o in AclOperation if o > AclOperation.ANY)}") from None
    return [AclBindingFilter(pattern, AccessControlEntryFilter(principal, args.host, op, permission)) for op in ops]


def _print_bindings(bindings):
    for b in bindings:
        print("\t".join((b.pattern.resource_type.name, b.pattern.pattern_type.name, b.pattern.name,
                         b.entry.principal, b.entry.host, b.entry.operation.name, b.entry.permission_type.name)))


def acls_list(args) -> int:
    with _admin(args) as admin:
        found = sorted({b for f in _filters(args) for b in admin.describe_acls(f)})
    _print_bindings(found)
    return EXIT_OK


def acls_add(args) -> int:
    from kio.admin import AccessControlEntry, AclBinding, ResourcePattern
    rtype, name = _resource(args)
    principal, permission = _principal(args)
    try:
        bindings = [AclBinding(ResourcePattern.of(rtype, name, args.resource_pattern_type),
                               AccessControlEntry.of(principal, op, permission, args.host)) for op in args.operation]
    except ValueError as e:
        raise UsageError(str(e)) from None
    with _admin(args) as admin:
        admin.create_acls(bindings)
    _print_bindings(bindings)
    return EXIT_OK


def acls_remove(args) -> int:
    with _admin(args) as admin:
        deleted = admin.delete_acls(_filters(args))
    _print_bindings(sorted({b for found in deleted.values() for b in found}))
    return EXIT_OK


# -- configs -------------------------------------------------------------------------------------

def _config_resource(args):
    from kio.admin import ConfigResource
    rtype = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        if rtype != ConfigResource.BROKER:
            raise UsageError("--entity-default: only brokers have a cluster-wide default")
        return ConfigResource(rtype, "")
    return ConfigResource(rtype, args.entity_name)


def _split_settings(values):
    """'a=1,b=[x,y]' -> [('a', '1'), ('b', 'x,y')] (kafka-configs' syntax)."""
    out = []
    for text in values or ():
        for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"--add-config {part!r}: expected key=value")
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out.append((key.strip(), value))
    return out


def configs_describe(args) -> int:
    resource = _config_resource(args)
    with _admin(args) as admin:
        entries = admin.describe_configs([resource])[resource]
    own = CLUSTER_DEFAULT_SOURCE if resource.name == "" else OWN_SOURCE[resource.type]
    for name, e in sorted(entries.items()):
        if args.all or e.source == own:
            print(f"{name}={'<sensitive>' if e.is_sensitive else e.value}")
    return EXIT_OK


def configs_alter(args) -> int:
    resource = _config_resource(args)
    changes = dict(_split_settings(args.add_config))
    for text in args.delete_config or ():
        changes.update({k.strip(): None for k in text.split(",") if k.strip()})
    if not changes:
        raise UsageError("configs alter: give --add-config and/or --delete-config")
    with _admin(args) as admin:
        admin.incremental_alter_configs({resource: changes})
    print(f"altered {args.entity_type} {resource.name or '<default>'}: " +
          ", ".join(f"{k}={'<deleted>' if v is None else v}" for k, v in changes.items()))
    return EXIT_OK


# -- SCRAM users ----------------------------------------------------------------------------------

def users_list(args) -> int:
    with _admin(args) as admin:
        described = admin.describe_user_scram_credentials(args.user)
    for user, d in sorted(described.items()):
        for info in d.credential_infos:
            print(f"{user}\t{info.mechanism.mechanism_name}\t{info.iterations}")
    return EXIT_OK


def users_set_password(args) -> int:
    from kio.admin import UserScramCredentialUpsertion
    # One request per mechanism: Kafka takes one alteration per user in a request.
    with _admin(args) as admin:
        for mech in args.mechanism or ["SCRAM-SHA-512"]:
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(args.user, mech, args.password,
                                                                             args.iterations)])
            print(f"set {mech} credential of {args.user}")
    return EXIT_OK


def users_delete(args) -> int:
    from kio.admin import UserScramCredentialDeletion
    with _admin(args) as admin:
        mechs = args.mechanism or [i.mechanism.mechanism_name for i in
                                   admin.describe_user_scram_credentials([args.user])[args.user].credential_infos]
        for mech in mechs:
            admin.alter_user_scram_credentials([UserScramCredentialDeletion(args.user, mech)])
            print(f"deleted {mech} credential of {args.user}")
    return EXIT_OK
