"""The consumer's settings (the Java consumer's names and defaults) and their cross-checks."""
from __future__ import annotations

from kproto.config import (
    ANY, BOOL, COMMON, INT, STR, ConfigDef, ConfigError, Setting, callable_or_none, in_range, one_of,
    check_security, require_bootstrap,
)

__all__ = ["CONSUMER_CONFIG", "parse_consumer_config"]

_ASSIGNORS = {"range", "roundrobin", "cooperative-sticky"}
_JAVA_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}


def _strategies(v):
    items = [s.strip() for s in v.split(",")] if isinstance(v, str) else list(v)
    out = []
    for s in items:
        if not isinstance(s, str):
            raise ValueError(f"assignor names are strings, not {type(s).__name__}")
        name = _JAVA_ASSIGNORS.get(s.lower(), s.lower())
        if name not in _ASSIGNORS:
            raise ValueError(f"unknown assignor {s!r}; known: " + ", ".join(sorted(_ASSIGNORS)))
        out.append(name)
    if not out:
        raise ValueError("at least one assignor is needed")
    return tuple(out)


def _group_protocol(v):
    if not isinstance(v, str):
        raise ValueError(f"expected 'classic' or 'consumer', not {type(v).__name__}")
    name = v.strip().lower()          # Java: GroupProtocol.valueOf(value.toUpperCase(Locale.ROOT))
    if name not in ("classic", "consumer"):
        raise ValueError(f"must be 'classic' or 'consumer' (case-insensitive), not {v!r}")
    return name


#: Settings of one protocol that the other does not use: setting them is an
#: error (Java's ConsumerConfig throws ConfigException "X cannot be set when
#: group.protocol=Y") - with the consumer protocol the broker owns the
#: assignor, the session timeout and the heartbeat interval.
_CLASSIC_ONLY = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")
_CONSUMER_ONLY = ("group.remote.assignor",)


def _check_protocol(values, explicit):
    protocol = values["group.protocol"]
    wrong = _CLASSIC_ONLY if protocol == "consumer" else _CONSUMER_ONLY
    given = [k for k in wrong if k in explicit]
    if given:
        hint = ("the broker decides these with the consumer protocol (group.remote.assignor chooses "
                "its assignor; group.consumer.session.timeout.ms and "
                "group.consumer.heartbeat.interval.ms are broker/group settings)"
                if protocol == "consumer" else "it applies to group.protocol=consumer only")
        raise ConfigError(f"{', '.join(given)} cannot be set when group.protocol={protocol}: {hint}")


def _check_group(values, explicit):
    if values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
        raise ConfigError(f"heartbeat.interval.ms ({values['heartbeat.interval.ms']}) must be lower "
                          f"than session.timeout.ms ({values['session.timeout.ms']})")
    if values["group.instance.id"] is not None and values["group.id"] is None:
        raise ConfigError("group.instance.id needs group.id")
    if values["enable.auto.commit"] and values["group.id"] is None:
        if "enable.auto.commit" in explicit:
            raise ConfigError("enable.auto.commit=true needs group.id (auto-commit commits to a group)")
        values["enable.auto.commit"] = False      # Java: no group, no auto-commit
    if values["fetch.max.wait.ms"] >= values["request.timeout.ms"]:
        raise ConfigError(f"request.timeout.ms ({values['request.timeout.ms']}) must be greater than "
                          f"fetch.max.wait.ms ({values['fetch.max.wait.ms']})")


CONSUMER_CONFIG = ConfigDef(COMMON + [
    Setting("group.id", STR, None, doc="consumer group (needed for subscribe and commits)"),
    Setting("group.instance.id", STR, None, doc="static membership id"),
    Setting("group.protocol", STR, "classic", convert=_group_protocol,
            doc="group protocol: classic (JoinGroup/SyncGroup, client-side assignors) or consumer "
                "(KIP-848: ConsumerGroupHeartbeat, the broker assigns); case-insensitive"),
    Setting("group.remote.assignor", STR, None,
            doc="group.protocol=consumer: the broker-side assignor (uniform or range); "
                "unset: the broker's default"),
    Setting("auto.offset.reset", STR, "latest", one_of("earliest", "latest", "none"),
            "where to start without a committed offset: earliest, latest or none"),
    Setting("enable.auto.commit", BOOL, True, doc="commit consumed positions from poll()"),
    Setting("auto.commit.interval.ms", INT, 5000, in_range(0), "minimum interval between auto-commits"),
    Setting("fetch.min.bytes", INT, 1, in_range(0), "bytes the broker waits for before answering a fetch"),
    Setting("fetch.max.wait.ms", INT, 500, in_range(0), "how long the broker may hold a fetch"),
    Setting("fetch.max.bytes", INT, 52428800, in_range(0), "bytes per fetch response"),
    Setting("max.partition.fetch.bytes", INT, 1048576, in_range(0), "bytes per partition per fetch"),
    Setting("max.poll.records", INT, 500, in_range(1), "records one poll() returns at most"),
    Setting("max.poll.interval.ms", INT, 300000, in_range(1),
            "longest time between polls before the member leaves the group"),
    Setting("session.timeout.ms", INT, 45000, in_range(1), "group session timeout"),
    Setting("heartbeat.interval.ms", INT, 3000, in_range(1), "interval between heartbeats"),
    Setting("partition.assignment.strategy", ANY, ("range", "cooperative-sticky"), convert=_strategies,
            doc="assignors by preference: range, roundrobin, cooperative-sticky"),
    Setting("isolation.level", STR, "read_uncommitted", one_of("read_uncommitted", "read_committed"),
            "read_committed hides aborted transactional records"),
    Setting("check.crcs", BOOL, True, doc="verify the CRC-32C of fetched batches"),
    Setting("default.api.timeout.ms", INT, 60000, in_range(0),
            "timeout of blocking calls (commit, committed, offsets lookups, position)"),
    Setting("allow.auto.create.topics", BOOL, True,
            doc="let subscribe() create a missing topic (if the broker allows it); assign() never does"),
    Setting("client.rack", STR, "", doc="rack id sent in fetches and subscriptions"),
    Setting("key.deserializer", ANY, None, convert=callable_or_none("key.deserializer"),
            doc="callable turning key bytes into a key"),
    Setting("value.deserializer", ANY, None, convert=callable_or_none("value.deserializer"),
            doc="callable turning value bytes into a value"),
    Setting("exclude.internal.topics", BOOL, True, doc="pattern subscriptions skip internal topics"),
], checks=[require_bootstrap, check_security, _check_protocol, _check_group])




def parse_consumer_config(conf=None, **kwargs):
    return CONSUMER_CONFIG.parse(conf, **kwargs)
