"""The share consumer's settings: the Java KafkaShareConsumer's names and defaults."""
from __future__ import annotations

from kproto.config import (
    ANY, BOOL, COMMON, INT, STR, ConfigDef, ConfigError, Setting, callable_or_none, check_security, in_range,
    one_of, require_bootstrap,
)

__all__ = ["SHARE_CONSUMER_CONFIG", "parse_share_consumer_config"]


def _check(values, explicit):
    if not values["group.id"]:
        raise ConfigError("a share consumer needs group.id (the share group it joins)")
    if values["fetch.max.wait.ms"] >= values["request.timeout.ms"]:
        raise ConfigError(f"request.timeout.ms ({values['request.timeout.ms']}) must be greater than "
                          f"fetch.max.wait.ms ({values['fetch.max.wait.ms']})")


SHARE_CONSUMER_CONFIG = ConfigDef(COMMON + [
    Setting("group.id", STR, None, doc="the share group to join (required)"),
    Setting("share.acknowledgement.mode", STR, "implicit", one_of("implicit", "explicit"),
            "implicit: the records of a poll are accepted by the next poll or commit; explicit: "
            "every record must be acknowledged with acknowledge() before the next poll"),
    Setting("fetch.min.bytes", INT, 1, in_range(0), "bytes the broker waits for before answering a share fetch"),
    Setting("fetch.max.wait.ms", INT, 500, in_range(0), "how long the broker may hold a share fetch"),
    Setting("fetch.max.bytes", INT, 52428800, in_range(0), "bytes per share fetch response"),
    Setting("max.poll.records", INT, 500, in_range(1),
            "records one poll() returns at most (also the records one share fetch acquires)"),
    Setting("share.acquire.mode", STR, "batch_optimized", one_of("batch_optimized", "record_limit"),
            "batch_optimized: a share fetch may acquire whole batches beyond max.poll.records; "
            "record_limit: never more than max.poll.records (KIP-1206; ShareFetch v2)"),
    Setting("check.crcs", BOOL, True, doc="verify the CRC-32C of fetched batches"),
    Setting("default.api.timeout.ms", INT, 60000, in_range(0), "timeout of commit_sync and close"),
    Setting("client.rack", STR, "", doc="rack id sent in heartbeats"),
    Setting("key.deserializer", ANY, None, convert=callable_or_none("key.deserializer"),
            doc="callable turning key bytes into a key"),
    Setting("value.deserializer", ANY, None, convert=callable_or_none("value.deserializer"),
            doc="callable turning value bytes into a value"),
], checks=[require_bootstrap, check_security, _check])


def parse_share_consumer_config(conf=None, **kwargs):
    return SHARE_CONSUMER_CONFIG.parse(conf, **kwargs)
