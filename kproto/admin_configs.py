"""Config and quota administration, as operations of
:class:`kproto.admin.AdminCore` (mixed in):

* :class:`AlterConfigOp` (Java's ``AlterConfigOp``): one change of a setting
  for ``incremental_alter_configs`` - SET, DELETE, or APPEND / SUBTRACT
  values of a list-valued setting (``cleanup.policy``, ``*.listeners``);
* ``alter_configs``: the legacy AlterConfigs (Java's deprecated
  ``Admin.alterConfigs``) - each resource's dynamic settings are *replaced*
  by the ones given; the others return to their defaults;
* ``describe_client_quotas`` / ``alter_client_quotas`` (KIP-546): quotas of
  users, client ids and IPs, with Java's ``ClientQuotaFilter``;
* ``list_config_resources`` (ListConfigResources v1, KIP-1142) and
  ``list_client_metrics_resources`` (the same API at v0, where it is
  ListClientMetricsResources).

A broker resource (BROKER, BROKER_LOGGER) with an id goes to that broker;
one with an empty name (the cluster-wide default) and every other resource
go to any broker, as in Java.
"""
from __future__ import annotations

import enum
from typing import Any, Dict, Iterable, Mapping, NamedTuple, Optional, Tuple, Union

from kproto import error_codes
from kproto._admin_mixin import AdminMixin
from kproto.errors import ConfigError, UnsupportedVersionError

__all__ = ["ConfigAdmin", "AlterConfigOp", "OpType", "ClientQuotaEntity", "ClientQuotaFilterComponent", "ClientQuotaFilter",
           "ClientQuotaAlteration", "ConfigResourceListing"]

#: DescribeClientQuotas match types
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_ANY = 0, 1, 2
#: ConfigResource.CLIENT_METRICS: the v0 request (ListClientMetricsResources) lists only these.
_CLIENT_METRICS = 16


class OpType(enum.IntEnum):
    """Java's ``AlterConfigOp.OpType``, the wire's config_operation."""
    SET = 0
    DELETE = 1          #: back to the default (or the inherited value)
    APPEND = 2          #: add values to a list-valued setting (one already there stays once)
    SUBTRACT = 3        #: remove values from a list-valued setting


class AlterConfigOp(NamedTuple):
    """One change of one setting in ``incremental_alter_configs`` (Java's
    ``AlterConfigOp(ConfigEntry, OpType)``)::

        {ConfigResource.topic("t"): {"cleanup.policy": AlterConfigOp.append("compact"),
                                     "retention.ms": 60000,            # SET
                                     "segment.ms": None}}              # DELETE

    ``value`` is the setting's text; for APPEND and SUBTRACT the values of
    the list (a list or tuple is joined with commas); None for DELETE."""
    op_type: OpType
    value: Optional[str] = None

    OpType = OpType

    @classmethod
    def set(cls, value: Any) -> "AlterConfigOp":
        """Give the setting this value."""
        return cls(OpType.SET, _config_text(value))

    @classmethod
    def delete(cls) -> "AlterConfigOp":
        """Return the setting to its default."""
        return cls(OpType.DELETE)

    @classmethod
    def append(cls, values: Union[str, Iterable[str]]) -> "AlterConfigOp":
        """Add ``values`` to a list-valued setting."""
        return cls(OpType.APPEND, _config_text(values))

    @classmethod
    def subtract(cls, values: Union[str, Iterable[str]]) -> "AlterConfigOp":
        """Remove ``values`` from a list-valued setting."""
        return cls(OpType.SUBTRACT, _config_text(values))


def _config_text(value: Any) -> str:
    """The wire text of a setting's value: booleans as Kafka spells them,
    lists joined with commas (Kafka's list syntax)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(_config_text(v) for v in value)
    return str(value)


def incremental_config(resource, name: Any, change: Any) -> dict:
    """The IncrementalAlterConfigs entry of one change: ``change`` an
    :class:`AlterConfigOp`, a value (SET) or None (DELETE). A change that
    cannot be one raises ConfigError naming the resource and the setting."""
    if not isinstance(name, str):
        raise ConfigError(f"incremental_alter_configs: {resource}: setting names are strings, not {name!r}")
    if change is None:
        change = AlterConfigOp.delete()
    elif not isinstance(change, AlterConfigOp):
        if not isinstance(change, (str, int, float, bool, list, tuple)):
            raise ConfigError(f"incremental_alter_configs: {resource}: {name!r} = {change!r} is not a value "
                              f"(str, number, bool, list), None or an AlterConfigOp")
        change = AlterConfigOp.set(change)
    try:
        op = OpType(change.op_type)
    except ValueError:
        raise ConfigError(f"incremental_alter_configs: {resource}: {name!r}: {change.op_type!r} is not an "
                          f"AlterConfigOp.OpType (SET, DELETE, APPEND, SUBTRACT)") from None
    if (op is OpType.DELETE) != (change.value is None):
        raise ConfigError(f"incremental_alter_configs: {resource}: {name!r}: "
                          + ("DELETE takes no value" if op is OpType.DELETE else f"{op.name} needs a value"))
    return {"name": name, "config_operation": int(op), "value": change.value}


#: Java's ClientQuotaEntity.USER, CLIENT_ID and IP: the entity types.
QUOTA_USER, QUOTA_CLIENT_ID, QUOTA_IP = "user", "client-id", "ip"


class ClientQuotaEntity(NamedTuple):
    """Whom a quota applies to: ``entries`` ((entity type, name), ...) sorted,
    the types "user", "client-id" and "ip"; a name None is the type's default
    entity. ``ClientQuotaEntity.of({"user": "alice"})``."""
    entries: Tuple[Tuple[str, Optional[str]], ...]

    @classmethod
    def of(cls, entries: Mapping[str, Optional[str]]) -> "ClientQuotaEntity":
        if not entries:
            raise ValueError("a client quota entity needs at least one (entity type, name) entry")
        return cls(tuple(sorted(entries.items())))

    def as_dict(self) -> Dict[str, Optional[str]]:
        return dict(self.entries)


class ClientQuotaFilterComponent(NamedTuple):
    """One constraint of a ClientQuotaFilter (Java's): ``of_entity`` (that
    name), ``of_default_entity`` (the default entity of the type) or
    ``of_entity_type`` (any entity of the type)."""
    entity_type: str
    match: Optional[str]
    match_type: int

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> "ClientQuotaFilterComponent":
        return cls(entity_type, name, _MATCH_EXACT)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> "ClientQuotaFilterComponent":
        return cls(entity_type, None, _MATCH_DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> "ClientQuotaFilterComponent":
        return cls(entity_type, None, _MATCH_ANY)


class ClientQuotaFilter(NamedTuple):
    """Which quota entities to describe: those matching every component;
    ``strict``: and naming no other entity type. ``ClientQuotaFilter.all()``
    selects every entity."""
    components: Tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> "ClientQuotaFilter":
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]) -> "ClientQuotaFilter":
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> "ClientQuotaFilter":
        return cls((), False)


class ClientQuotaAlteration(NamedTuple):
    """Quota changes for one entity: {quota key: value, or None to remove it},
    e.g. {"producer_byte_rate": 1048576}."""
    entity: ClientQuotaEntity
    ops: Mapping[str, Optional[float]]


class ConfigResourceListing(NamedTuple):
    """A config resource the broker has dynamic settings for (ListConfigResources)."""
    type: int                             # ConfigResource.TOPIC, BROKER, GROUP, CLIENT_METRICS...
    name: str


def config_target(resource):
    """(target, node) for a config request about ``resource``: a broker's own
    settings go to it; a cluster default (empty name) and the rest to any broker."""
    from kproto.admin import ANY, NODE, ConfigResource
    if resource.type in (ConfigResource.BROKER, ConfigResource.BROKER_LOGGER) and resource.name != "":
        try:
            return NODE, int(resource.name)
        except ValueError:
            raise ConfigError(f"broker resource name {resource.name!r} is not a broker id") from None
    return ANY, None


def _entity(raw) -> ClientQuotaEntity:
    return ClientQuotaEntity(tuple(sorted((e["entity_type"], e.get("entity_name")) for e in raw)))


class ConfigAdmin(AdminMixin):
    """The config and quota operations of AdminCore (a mixin)."""

    def _per_resource(self, op, api, resources, build, handle):
        """One ``api`` call per target: broker resources to their broker, the rest together."""
        from kproto.admin import ANY, _SelfCall
        together = []
        for r in resources:
            try:
                target, node = config_target(r)
            except ConfigError as e:
                self._complete(op, r, error=e)
                continue
            if target == ANY:
                together.append(r)
            else:
                self._submit(_SelfCall(op, api, [r], build, handle, target=target, node=node))
        if together:
            self._submit(_SelfCall(op, api, together, build, handle))

    def alter_configs(self, configs: Mapping, *, validate_only=False, timeout_ms=None, now):
        """Replace the dynamic settings of each resource (legacy AlterConfigs):
        ``{ConfigResource: {name: value}}`` - settings not named return to
        their defaults (Java's deprecated ``alterConfigs``; prefer
        ``incremental_alter_configs``). One item per resource."""
        from kproto.admin import ConfigResource, _no_dups
        resources = [r if isinstance(r, ConfigResource) else ConfigResource(*r) for r in configs]
        _no_dups(resources, "alter_configs")
        settings = {}
        for r, k in zip(resources, configs):
            kv = dict(configs[k])
            for name, value in kv.items():
                if not isinstance(name, str) or not (value is None or isinstance(value, (str, int, float, bool))):
                    raise ConfigError(f"alter_configs: {r}: {name!r} = {value!r} is not a setting name "
                                      f"and a value (str, number, bool or None)")
            settings[r] = {n: None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
                           for n, v in kv.items()}
        op = self._op("alter_configs", resources, now, timeout_ms)

        def build(node, call=None):
            return {"validate_only": validate_only, "resources": [{
                "resource_type": r.type, "resource_name": r.name,
                "configs": [{"name": n, "value": v} for n, v in settings[r].items()]} for r in call.keys]}

        def handle(call, body, now):
            for res in body.get("responses") or []:
                key = ConfigResource(res["resource_type"], res["resource_name"])
                if key not in call.keys:
                    continue
                code = res.get("error_code", 0)
                self._complete(op, key, error=error_codes.error_for_code(
                    code, res.get("error_message"), f"alter configs of {key}") if code else None)
            self._unanswered(call, op, "AlterConfigs")

        self._per_resource(op, "AlterConfigs", resources, build, handle)
        return op

    # -- client quotas ---------------------------------------------------------------------------
    def describe_client_quotas(self, quota_filter: ClientQuotaFilter = ClientQuotaFilter(), *,
                               timeout_ms=None, now):
        """{ClientQuotaEntity: {quota key: value}} of the entities matching
        ``quota_filter`` (DescribeClientQuotas)."""
        from kproto.admin import _SelfCall
        if not isinstance(quota_filter, ClientQuotaFilter):
            raise TypeError(f"describe_client_quotas: expected a ClientQuotaFilter, not {quota_filter!r}")
        op = self._op("describe_client_quotas", ["quotas"], now, timeout_ms, single=True)

        def build(node, call=None):
            return {"strict": quota_filter.strict, "components": [
                {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
                for c in quota_filter.components]}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._fail_call(call, error_codes.error_for_code(code, body.get("error_message"),
                                                                 "describe client quotas"))
                return
            out = {_entity(e["entity"]): {v["key"]: v["value"] for v in e.get("values") or []}
                   for e in body.get("entries") or []}
            self._complete(op, "quotas", value=dict(sorted(out.items(), key=lambda kv: str(kv[0]))))

        self._submit(_SelfCall(op, "DescribeClientQuotas", op.items, build, handle))
        return op

    def alter_client_quotas(self, entries: Iterable[ClientQuotaAlteration], *, validate_only=False,
                            timeout_ms=None, now):
        """Set or remove quotas (AlterClientQuotas); one item per entity (value None)."""
        from kproto.admin import _no_dups, _SelfCall
        entries = list(entries)
        for e in entries:
            if not isinstance(e, ClientQuotaAlteration) or not isinstance(e.entity, ClientQuotaEntity):
                raise TypeError(f"alter_client_quotas: expected ClientQuotaAlteration(ClientQuotaEntity, "
                                f"{{key: value}}) values, not {e!r}")
            for k, v in e.ops.items():
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise ValueError(f"alter_client_quotas: {k} = {v!r}: a quota is a number (None removes it)")
        _no_dups([e.entity for e in entries], "alter_client_quotas")
        by_entity = {e.entity: e for e in entries}
        op = self._op("alter_client_quotas", list(by_entity), now, timeout_ms)

        def build(node, call=None):
            return {"validate_only": validate_only, "entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in ent.entries],
                "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                        for k, v in by_entity[ent].ops.items()]} for ent in call.keys]}

        def handle(call, body, now):
            for r in body.get("entries") or []:
                ent = _entity(r.get("entity") or [])
                if ent not in op.items:
                    continue
                code = r.get("error_code", 0)
                self._complete(op, ent, error=error_codes.error_for_code(
                    code, r.get("error_message"), f"alter client quotas of {ent.as_dict()}") if code else None)
            self._unanswered(call, op, "AlterClientQuotas")

        if entries:
            self._submit(_SelfCall(op, "AlterClientQuotas", list(by_entity), build, handle))
        return op

    # -- config resources ----------------------------------------------------------------------
    def list_config_resources(self, resource_types: Iterable[int] = (), *, timeout_ms=None, now):
        """[ConfigResourceListing] of the resources with dynamic settings, of
        ``resource_types`` (ConfigResource.TOPIC, BROKER, GROUP, CLIENT_METRICS;
        empty: every type) - ListConfigResources v1. A broker with only v0
        (ListClientMetricsResources, Kafka 3.7-4.0) lists client-metrics
        resources only: asking it for other types fails with
        UnsupportedVersionError."""
        from kproto.admin import _SelfCall
        types = sorted({int(t) for t in resource_types})
        op = self._op("list_config_resources", ["resources"], now, timeout_ms, single=True)

        def build(node, call=None):
            v = self.client.api_version(node, "ListConfigResources")
            if v == 0 and types != [_CLIENT_METRICS]:
                raise UnsupportedVersionError(
                    f"node {node} has ListConfigResources v0 only (ListClientMetricsResources): it lists "
                    f"client-metrics resources, not types {types or 'all'}")
            return {"resource_types": types}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._fail_call(call, error_codes.error_for_code(code, None, "list config resources"))
                return
            v0 = call.request is not None and call.request.version == 0
            out = {ConfigResourceListing(_CLIENT_METRICS if v0 else r.get("resource_type", _CLIENT_METRICS),
                                         r["resource_name"]) for r in body.get("config_resources") or []}
            self._complete(op, "resources", value=sorted(out))

        self._submit(_SelfCall(op, "ListConfigResources", op.items, build, handle))
        return op

    def list_client_metrics_resources(self, *, timeout_ms=None, now):
        """[ConfigResourceListing] of the client-metrics resources (KIP-714
        subscriptions): ListConfigResources for that type (v0 on older brokers
        is ListClientMetricsResources)."""
        op = self.list_config_resources([_CLIENT_METRICS], timeout_ms=timeout_ms, now=now)
        op.operation = "list_client_metrics_resources"
        return op

