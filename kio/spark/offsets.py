"""Offset specifications of the ``kio-kafka`` data source, as Spark's Kafka
source accepts them, resolved against the cluster on the driver.

``startingOffsets``: "earliest" (default), "latest", or JSON
``{"topic": {"0": 23, "1": -2}}`` where -2 is earliest and -1 latest.
``endingOffsets``: "latest" (default), or JSON where -1 is latest.
Topics are chosen by exactly one of ``subscribe`` ("t1,t2"),
``subscribePattern`` (a regex matched against the whole name) and
``assign`` (JSON ``{"topic": [0, 1]}``).
"""
from __future__ import annotations

import json
import re
from typing import List, NamedTuple

from kproto.cluster import TopicPartition
from kproto.errors import ConfigError

__all__ = ["OffsetRange", "plan_ranges", "consumer_config", "normalize", "option", "EARLIEST", "LATEST"]

EARLIEST, LATEST = -2, -1


class OffsetRange(NamedTuple):
    """One Spark input partition: records [start, end) of one topic-partition."""
    topic: str
    partition: int
    start: int
    end: int


def normalize(options) -> dict:
    """Spark hands data sources their options with lower-cased names; keep
    one spelling (lower case) whatever the caller passes."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def option(options: dict, name: str, default=None):
    """``options`` normalized; ``name`` as Spark documents it (startingOffsets)."""
    return options.get(name.lower(), default)


def consumer_config(options: dict) -> dict:
    """``kafka.*`` options (Spark's convention) -> kio consumer config."""
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ConfigError("the kio-kafka source needs option kafka.bootstrap.servers")
    conf.setdefault("enable.auto.commit", "false")
    return conf


def _spec(options: dict, name: str, default: str, allowed: tuple):
    raw = option(options, name, default)
    if raw in allowed:
        return raw
    try:
        spec = json.loads(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"option {name} must be {' or '.join(allowed)} or JSON like "
                          f'{{"topic": {{"0": 42}}}}, not {raw!r}') from None
    if not isinstance(spec, dict) or not all(isinstance(v, dict) for v in spec.values()):
        raise ConfigError(f"option {name}: JSON must map topic -> {{partition: offset}}, not {raw!r}")
    out = {}
    for topic, parts in spec.items():
        for p, off in parts.items():
            try:
                out[TopicPartition(topic, int(p))] = int(off)
            except (TypeError, ValueError):
                raise ConfigError(f"option {name}: bad partition/offset {p!r}: {off!r} for topic "
                                  f"{topic!r}") from None
    return out


def _topic_partitions(options: dict, list_topics) -> List[TopicPartition]:
    """``list_topics()`` -> {topic: partition count} of the cluster."""
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if option(options, k)]
    if len(chosen) != 1:
        raise ConfigError("give exactly one of the options subscribe, subscribePattern and assign"
                          + (f" (got {', '.join(chosen)})" if chosen else ""))
    how = chosen[0]
    if how == "assign":
        try:
            spec = json.loads(option(options, "assign"))
            return sorted(TopicPartition(t, int(p)) for t, ps in spec.items() for p in ps)
        except (TypeError, ValueError, AttributeError):
            raise ConfigError(f'option assign must be JSON like {{"topic": [0, 1]}}, '
                              f"not {option(options, 'assign')!r}") from None
    counts = list_topics()
    if how == "subscribe":
        names = [t.strip() for t in option(options, "subscribe").split(",") if t.strip()]
        missing = [t for t in names if t not in counts]
        if missing:
            raise ConfigError(f"subscribed topic(s) {missing} do not exist")
    else:
        rx = re.compile(option(options, "subscribePattern"))
        names = sorted(t for t in counts if rx.fullmatch(t))
    return [TopicPartition(t, p) for t in names for p in range(counts[t])]


def plan_ranges(options: dict, list_topics, beginning_offsets, end_offsets) -> List[OffsetRange]:
    """The offset ranges to read: one per topic-partition with records.

    ``options`` as :func:`normalize` returns them; ``beginning_offsets(tps)``
    / ``end_offsets(tps)`` -> {tp: offset}."""
    tps = _topic_partitions(options, list_topics)
    start_spec = _spec(options, "startingOffsets", "earliest", ("earliest", "latest"))
    end_spec = _spec(options, "endingOffsets", "latest", ("latest",))
    if start_spec == "latest" and end_spec == "latest":
        return []
    first = beginning_offsets(tps)
    last = end_offsets(tps)

    def resolve(spec, tp, default):
        if isinstance(spec, str):
            return first[tp] if spec == "earliest" else last[tp]
        off = spec.get(tp, default)
        return first[tp] if off == EARLIEST else last[tp] if off == LATEST else off

    ranges = []
    for tp in tps:
        start = resolve(start_spec, tp, EARLIEST)
        end = resolve(end_spec, tp, LATEST)
        if start is None or end is None:
            continue
        if start > end:
            raise ConfigError(f"{tp.topic}-{tp.partition}: starting offset {start} is after the "
                              f"ending offset {end}")
        if start < end:
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges

