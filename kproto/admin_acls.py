"""ACL administration, as operations of :class:`kproto.admin.AdminCore`
(mixed in): ``create_acls``, ``describe_acls`` and ``delete_acls``, with
Java's types (``AclBinding`` = ``ResourcePattern`` + ``AccessControlEntry``,
``AclBindingFilter`` = ``ResourcePatternFilter`` + ``AccessControlEntryFilter``)
and Java's filter semantics, implemented here too (``matches``) so callers
and tests can apply a filter to bindings they hold:

* ``ResourceType.ANY``, ``AclOperation.ANY``, ``AclPermissionType.ANY`` and a
  ``None`` name, principal or host match everything;
* ``PatternType.ANY`` matches a binding of any pattern type whose name
  equals the filter's name exactly;
* ``PatternType.MATCH`` matches every binding that *applies* to the named
  resource: the LITERAL one with that name, the LITERAL wildcard ``*``, and
  every PREFIXED one whose prefix starts the name.

The broker does the filtering (DescribeAcls / DeleteAcls); all three go to
any broker, which forwards writes to the controller.
"""
from __future__ import annotations

import enum
from typing import FrozenSet, Iterable, List, NamedTuple, Optional

from kproto import error_codes
from kproto._admin_mixin import AdminMixin
from kproto.errors import KafkaError

__all__ = ["AclAdmin", "ResourceType", "PatternType", "AclOperation", "AclPermissionType",
           "ResourcePattern", "AccessControlEntry", "AclBinding", "ResourcePatternFilter",
           "AccessControlEntryFilter", "AclBindingFilter", "WILDCARD_RESOURCE",
           "AUTHORIZED_OPERATIONS_OMITTED", "authorized_operations"]

#: The resource name of a LITERAL pattern that applies to every resource of its type.
WILDCARD_RESOURCE = "*"


class ResourceType(enum.IntEnum):
    """Java's ``org.apache.kafka.common.resource.ResourceType`` (wire codes)."""
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Java's ``PatternType``: LITERAL and PREFIXED are bindings' types; ANY and
    MATCH exist only in filters."""
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Java's ``AclOperation`` (wire codes)."""
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


#: The ``authorized_operations`` bit field of an answer that was not asked for
#: them (Java's ``MetadataResponse.AUTHORIZED_OPERATIONS_OMITTED``: Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -2 ** 31

# The codes a bit field may name that are no operation one can be granted (Java leaves them out too).
_NOT_GRANTABLE = frozenset({AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL})
_GRANTABLE = tuple(op for op in AclOperation if op not in _NOT_GRANTABLE)


def authorized_operations(bits: Optional[int]) -> Optional[FrozenSet[AclOperation]]:
    """The operations a describe answer's ``*authorized_operations`` bit field
    grants (bit i set: the caller may do AclOperation code i), as Java's
    ``validAclOperations``: None when the field says "not asked"
    (:data:`AUTHORIZED_OPERATIONS_OMITTED`) or is missing; UNKNOWN, ANY and
    ALL, and bits of codes this client does not know, are left out."""
    if bits is None or bits == AUTHORIZED_OPERATIONS_OMITTED:
        return None
    return frozenset(op for op in _GRANTABLE if bits >> op & 1)


class AclPermissionType(enum.IntEnum):
    """Java's ``AclPermissionType``."""
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(cls, value, what):
    """``value`` (a member, its code or its name, any case) as a member of ``cls``."""
    try:
        if isinstance(value, str):
            return cls[value.upper()]
        return cls(value)
    except (KeyError, ValueError):
        raise ValueError(f"{what}: {value!r} is not a {cls.__name__} "
                         f"({', '.join(m.name for m in cls)})") from None


class ResourcePattern(NamedTuple):
    """A binding's resource: type, name and how the name applies (LITERAL or PREFIXED)."""
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    @classmethod
    def of(cls, resource_type, name: str, pattern_type=PatternType.LITERAL) -> "ResourcePattern":
        """Build one from members, codes or names ("topic", "prefixed")."""
        return cls(_enum(ResourceType, resource_type, "resource type"), name,
                   _enum(PatternType, pattern_type, "pattern type"))

    def to_filter(self) -> "ResourcePatternFilter":
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)


class AccessControlEntry(NamedTuple):
    """Who (``principal``, e.g. "User:alice", from ``host``, "*" for any) may
    (ALLOW) or may not (DENY) do ``operation``."""
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(cls, principal: str, operation, permission_type=AclPermissionType.ALLOW,
           host: str = "*") -> "AccessControlEntry":
        return cls(principal, host, _enum(AclOperation, operation, "operation"),
                   _enum(AclPermissionType, permission_type, "permission type"))

    def to_filter(self) -> "AccessControlEntryFilter":
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)


class AclBinding(NamedTuple):
    """One ACL: a resource pattern and an access control entry (Java's AclBinding)."""
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_filter(self) -> "AclBindingFilter":
        """The filter that matches exactly this binding."""
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def check_definite(self) -> None:
        """Raise ValueError unless every field is concrete (what create_acls needs)."""
        p, e = self.pattern, self.entry
        for value, name in ((p.resource_type, "resource type"), (p.pattern_type, "pattern type"),
                            (e.operation, "operation"), (e.permission_type, "permission type")):
            if value.name in ("ANY", "UNKNOWN", "MATCH"):
                raise ValueError(f"create_acls: {self}: the {name} must be concrete, not {value.name} "
                                 f"(ANY and MATCH are for filters)")
        if not p.name or not e.principal or not e.host:
            raise ValueError(f"create_acls: {self}: the resource name, principal and host must be given")


class ResourcePatternFilter(NamedTuple):
    """Which resource patterns a filter selects; ``name`` None: any name."""
    resource_type: ResourceType = ResourceType.ANY
    name: Optional[str] = None
    pattern_type: PatternType = PatternType.ANY

    @classmethod
    def of(cls, resource_type=ResourceType.ANY, name: Optional[str] = None,
           pattern_type=PatternType.ANY) -> "ResourcePatternFilter":
        return cls(_enum(ResourceType, resource_type, "resource type"), name,
                   _enum(PatternType, pattern_type, "pattern type"))

    def matches(self, pattern: ResourcePattern) -> bool:
        """Java's ``ResourcePatternFilter.matches`` (see the module)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and \
                self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:       # the filter is MATCH
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


class AccessControlEntryFilter(NamedTuple):
    """Which entries a filter selects; ``principal``/``host`` None: any."""
    principal: Optional[str] = None
    host: Optional[str] = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))


class AclBindingFilter(NamedTuple):
    """A filter over ACL bindings (Java's AclBindingFilter); ``AclBindingFilter()``
    (also ``AclBindingFilter.ANY``) selects every binding."""
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def check_known(self, what: str) -> None:
        """Raise ValueError for an UNKNOWN field (the broker could not read it)."""
        for value in (self.pattern.resource_type, self.pattern.pattern_type, self.entry.operation,
                      self.entry.permission_type):
            if value.name == "UNKNOWN":
                raise ValueError(f"{what}: {self} has an UNKNOWN {type(value).__name__}")


#: Java's ``AclBindingFilter.ANY``: every binding (the same as ``AclBindingFilter()``).
AclBindingFilter.ANY = AclBindingFilter()  # type: ignore[attr-defined]


def _filter_body(f: AclBindingFilter) -> dict:
    """A filter in the DescribeAcls request / DeleteAcls filter layout."""
    return {"resource_type_filter": int(f.pattern.resource_type), "resource_name_filter": f.pattern.name,
            "pattern_type_filter": int(f.pattern.pattern_type), "principal_filter": f.entry.principal,
            "host_filter": f.entry.host, "operation": int(f.entry.operation),
            "permission_type": int(f.entry.permission_type)}


def _binding(resource: dict, acl: dict) -> AclBinding:
    """An AclBinding from a response's resource (or matching ACL) and ACL fields."""
    return AclBinding(
        ResourcePattern(_enum(ResourceType, resource["resource_type"], "resource type"),
                        resource["resource_name"],
                        _enum(PatternType, resource.get("pattern_type", 3), "pattern type")),
        AccessControlEntry(acl["principal"], acl["host"], _enum(AclOperation, acl["operation"], "operation"),
                           _enum(AclPermissionType, acl["permission_type"], "permission type")))


def _as_filter(f) -> AclBindingFilter:
    if isinstance(f, AclBinding):
        return f.to_filter()
    if not isinstance(f, AclBindingFilter):
        raise TypeError(f"expected an AclBindingFilter (or an AclBinding), not {f!r}")
    return f


class AclAdmin(AdminMixin):
    """The ACL operations of AdminCore (a mixin: it uses the core's ``_op``,
    ``_submit``, ``_complete``... machinery)."""

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms=None, now):
        """Create ACLs (CreateAcls); one item per AclBinding (value None).
        Every field must be concrete: ANY, MATCH or UNKNOWN raise ValueError."""
        from kproto.admin import _no_dups, _SelfCall
        bindings = list(bindings)
        for b in bindings:
            if not isinstance(b, AclBinding):
                raise TypeError(f"create_acls: expected AclBinding values, not {b!r}")
            b.check_definite()
        _no_dups(bindings, "create_acls")
        op = self._op("create_acls", bindings, now, timeout_ms)

        def build(node, call=None):
            return {"creations": [{
                "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                "host": b.entry.host, "operation": int(b.entry.operation),
                "permission_type": int(b.entry.permission_type)} for b in call.keys]}

        def handle(call, body, now):
            results = body.get("results") or []
            if len(results) != len(call.keys):       # answers come in the order of the creations
                self._fail_call(call, KafkaError(f"create_acls: {len(results)} CreateAcls results for "
                                                 f"{len(call.keys)} creations"))
                return
            for b, r in zip(call.keys, results):
                code = r.get("error_code", 0)
                self._complete(op, b, error=error_codes.error_for_code(
                    code, r.get("error_message"), f"create ACL {b}") if code else None)

        if bindings:
            self._submit(_SelfCall(op, "CreateAcls", bindings, build, handle))
        return op

    def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter(), *, timeout_ms=None, now):
        """[AclBinding] matching ``acl_filter`` (DescribeAcls; Java's filter
        semantics, see the module), sorted."""
        from kproto.admin import _SelfCall
        acl_filter = _as_filter(acl_filter)
        acl_filter.check_known("describe_acls")
        op = self._op("describe_acls", ["acls"], now, timeout_ms, single=True)

        def build(node, call=None):
            return _filter_body(acl_filter)

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._fail_call(call, error_codes.error_for_code(code, body.get("error_message"),
                                                                 "describe ACLs"))
                return
            found = [_binding(r, a) for r in body.get("resources") or [] for a in r.get("acls") or []]
            self._complete(op, "acls", value=sorted(found))

        self._submit(_SelfCall(op, "DescribeAcls", op.items, build, handle))
        return op

    def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout_ms=None, now):
        """Delete every ACL matching each filter (DeleteAcls); one item per
        filter, its value the [AclBinding] it deleted. A binding one filter
        deleted but failed to delete fails that filter's item."""
        from kproto.admin import _no_dups, _SelfCall
        filters = [_as_filter(f) for f in filters]
        for f in filters:
            f.check_known("delete_acls")
        _no_dups(filters, "delete_acls")
        op = self._op("delete_acls", filters, now, timeout_ms)

        def build(node, call=None):
            return {"filters": [_filter_body(f) for f in call.keys]}

        def handle(call, body, now):
            results = body.get("filter_results") or []
            if len(results) != len(call.keys):
                self._fail_call(call, KafkaError(f"delete_acls: {len(results)} DeleteAcls results for "
                                                 f"{len(call.keys)} filters"))
                return
            for f, r in zip(call.keys, results):
                code = r.get("error_code", 0)
                if code:
                    self._complete(op, f, error=error_codes.error_for_code(
                        code, r.get("error_message"), f"delete ACLs matching {f}"))
                    continue
                deleted: List[AclBinding] = []
                error = None
                for m in r.get("matching_acls") or []:
                    if m.get("error_code", 0) and error is None:
                        error = error_codes.error_for_code(m["error_code"], m.get("error_message"),
                                                           f"delete ACL {_binding(m, m)}")
                    deleted.append(_binding(m, m))
                self._complete(op, f, value=None if error else sorted(deleted), error=error)

        if filters:
            self._submit(_SelfCall(op, "DeleteAcls", filters, build, handle))
        return op
