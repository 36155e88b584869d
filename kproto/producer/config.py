"""The producer's settings (Kafka's names and defaults) and their cross-checks."""
from __future__ import annotations

from kproto import compression as _compression
from kproto.errors import UnsupportedCodecError
from kproto.config import (
    ANY, BOOL, COMMON, INT, STR, ConfigDef, ConfigError, Setting, callable_or_none, in_range,
    check_security, require_bootstrap,
)

__all__ = ["PRODUCER_CONFIG", "parse_producer_config"]


def _acks(v):
    if isinstance(v, str):
        v = v.strip().lower()
        if v == "all":
            return -1
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v not in (-1, 0, 1):
        raise ValueError("must be 0, 1, 'all' or -1")
    return v


def _codec(v):
    if v is None:
        return 0
    if isinstance(v, str) and v.strip().lower() in ("none", ""):
        return 0
    try:
        return _compression.check_codec(v.strip().lower() if isinstance(v, str) else v)
    except UnsupportedCodecError as e:
        raise ValueError(str(e)) from None


def _partitioner(v):
    if callable(v):
        return v
    if isinstance(v, str) and v in ("default", "sticky", "murmur2_random", "murmur2"):
        return v
    raise ValueError("must be 'default' (murmur2 for keys, sticky otherwise; alias "
                     "'murmur2_random', 'murmur2', 'sticky') or a callable "
                     "(key_bytes, num_partitions, available_partitions) -> partition")


def _check_idempotence(values, explicit):
    """Java 3.x: idempotence is on by default and silently turned off when the
    user explicitly sets something it cannot live with; explicitly asking
    for both is an error."""
    txn = values["transactional.id"] is not None
    conflicts = []
    if values["acks"] != -1:
        conflicts.append(f"acks={values['acks']} (needs all/-1)")
    if values["retries"] <= 0:
        conflicts.append(f"retries={values['retries']} (needs > 0)")
    if values["max.in.flight.requests.per.connection"] > 5:
        conflicts.append(f"max.in.flight.requests.per.connection="
                         f"{values['max.in.flight.requests.per.connection']} (needs <= 5)")
    if "enable.idempotence" in explicit:
        if values["enable.idempotence"] and conflicts:
            raise ConfigError("enable.idempotence=true conflicts with " + ", ".join(conflicts)
                              + "; change those settings or set enable.idempotence=false")
        if txn and not values["enable.idempotence"]:
            raise ConfigError("transactional.id requires enable.idempotence=true")
    elif conflicts:
        if txn:
            raise ConfigError("transactional.id requires idempotence, which conflicts with "
                              + ", ".join(conflicts))
        values["enable.idempotence"] = False


def _check_timeouts(values, explicit):
    need = values["linger.ms"] + values["request.timeout.ms"]
    if values["delivery.timeout.ms"] < need:
        if "delivery.timeout.ms" in explicit:
            raise ConfigError(
                f"delivery.timeout.ms ({values['delivery.timeout.ms']}) must be at least linger.ms + "
                f"request.timeout.ms ({need})")
        values["delivery.timeout.ms"] = need


PRODUCER_CONFIG = ConfigDef(COMMON + [
    Setting("acks", ANY, -1, convert=_acks, doc="0, 1 or all (-1)"),
    Setting("enable.idempotence", BOOL, True, doc="exactly-once per partition (needs acks=all)"),
    Setting("retries", INT, 2147483647, in_range(0), "retries of a failed batch (bounded by delivery.timeout.ms)"),
    Setting("max.in.flight.requests.per.connection", INT, 5, in_range(1), "unanswered requests per broker"),
    # 256 KiB, not Java's 16 KiB: see "Producer defaults" in the README (a batch
    # opens at 16 KiB of buffer.memory and grows only while records keep coming).
    Setting("batch.size", INT, 262144, in_range(1), "largest batch per partition, in bytes"),
    Setting("linger.ms", INT, 5, in_range(0), "how long a batch waits for more records"),
    Setting("buffer.memory", INT, 32 * 1024 * 1024, in_range(1), "bytes of records waiting to be sent"),
    Setting("max.block.ms", INT, 60000, in_range(0), "how long send() may block for metadata or memory"),
    Setting("max.request.size", INT, 1048576, in_range(1), "largest Produce request (and record)"),
    Setting("compression.type", ANY, 0, convert=_codec, doc="none, gzip, snappy, lz4 or zstd"),
    Setting("compression.level", INT, None, doc="codec level (None: codec default)"),
    Setting("delivery.timeout.ms", INT, 120000, in_range(1), "whole life of a record until acknowledged"),
    Setting("key.serializer", ANY, None, convert=callable_or_none("key.serializer"),
            doc="callable turning a key into bytes"),
    Setting("value.serializer", ANY, None, convert=callable_or_none("value.serializer"),
            doc="callable turning a value into bytes"),
    Setting("partitioner", ANY, "default", convert=_partitioner, doc="'default' or a callable"),
    Setting("transactional.id", STR, None, doc="enables transactions"),
    Setting("transaction.timeout.ms", INT, 60000, in_range(1), "transaction timeout told to the coordinator"),
    Setting("metadata.max.idle.ms", INT, 300000, in_range(5000),
            "forget topics that had no records for this long"),
    Setting("allow.auto.create.topics", BOOL, True, doc="let Metadata requests create topics"),
], checks=[require_bootstrap, check_security, _check_idempotence, _check_timeouts])


def parse_producer_config(conf=None, **kwargs):
    return PRODUCER_CONFIG.parse(conf, **kwargs)
