"""Offset specifications of the ``kio-kafka`` data source, as Spark's Kafka
source accepts them, resolved against the cluster on the driver.

``startingOffsets``: "earliest" (default), "latest", or JSON
``{"topic": {"0": 23, "1": -2}}`` where -2 is earliest and -1 latest.
``endingOffsets``: "latest" (default), or JSON where -1 is latest.
Topics are chosen by exactly one of ``subscribe`` ("t1,t2"),
``subscribePattern`` (a regex matched against the whole name) and
``assign`` (JSON ``{"topic": [0, 1]}``).

Streams (``readStream``) take ``startingOffsets`` ("latest" by default),
``maxOffsetsPerTrigger`` and ``failOnDataLoss`` (true by default), as
Spark's Kafka source does; their offsets are checkpointed by Spark.
"""
from __future__ import annotations

import json
import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from kproto.cluster import TopicPartition
from kproto.errors import ConfigError, KafkaError

__all__ = ["OffsetRange", "plan_ranges", "consumer_config", "normalize", "option", "EARLIEST", "LATEST",
           "offsets_to_json", "offsets_from_json", "stream_options", "stream_initial", "stream_latest",
           "stream_ranges", "DataLossError", "topic_partitions"]

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


def topic_partitions(options: dict, list_topics) -> List[TopicPartition]:
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


def _resolve(spec, tp, default, first, last):
    """The offset ``spec`` ("earliest", "latest" or {tp: offset, -2/-1 for
    earliest/latest}) names for ``tp``; ``default`` for a tp it leaves out."""
    if isinstance(spec, str):
        return first[tp] if spec == "earliest" else last[tp]
    off = spec.get(tp, default)
    return first[tp] if off == EARLIEST else last[tp] if off == LATEST else off


def plan_ranges(options: dict, list_topics, beginning_offsets, end_offsets) -> List[OffsetRange]:
    """The offset ranges to read: one per topic-partition with records.

    ``options`` as :func:`normalize` returns them; ``beginning_offsets(tps)``
    / ``end_offsets(tps)`` -> {tp: offset}."""
    tps = topic_partitions(options, list_topics)
    start_spec = _spec(options, "startingOffsets", "earliest", ("earliest", "latest"))
    end_spec = _spec(options, "endingOffsets", "latest", ("latest",))
    if start_spec == "latest" and end_spec == "latest":
        return []
    first = beginning_offsets(tps)
    last = end_offsets(tps)
    ranges = []
    for tp in tps:
        start = _resolve(start_spec, tp, EARLIEST, first, last)
        end = _resolve(end_spec, tp, LATEST, first, last)
        if start is None or end is None:
            continue
        if start > end:
            raise ConfigError(f"{tp.topic}-{tp.partition}: starting offset {start} is after the "
                              f"ending offset {end}")
        if start < end:
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges



# -- streaming (readStream) ----------------------------------------------------------------
# A stream's offsets are what Spark checkpoints: JSON {"topic": {"0": 42}},
# the next offset to read per partition, as Spark's own Kafka source writes.

def offsets_to_json(positions: Dict[TopicPartition, int]) -> dict:
    out: dict = {}
    for tp in sorted(positions):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return out


def offsets_from_json(spec: dict) -> Dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(off) for t, parts in spec.items() for p, off in parts.items()}


def stream_options(options: dict) -> Tuple[Optional[int], bool]:
    """(maxOffsetsPerTrigger or None, failOnDataLoss) of a streaming read;
    options only a batch read takes are refused, as Spark's Kafka source does."""
    if option(options, "endingOffsets") is not None:
        raise ConfigError("option endingOffsets is for batch reads; a stream reads on as records arrive")
    for name in ("minOffsetsPerTrigger", "maxTriggerDelay"):
        if option(options, name) is not None:
            raise ConfigError(f"option {name} is not supported by kio-kafka (maxOffsetsPerTrigger is)")
    raw = option(options, "maxOffsetsPerTrigger")
    max_rows = None
    if raw is not None:
        try:
            max_rows = int(raw)
        except (TypeError, ValueError):
            max_rows = 0
        if max_rows <= 0:
            raise ConfigError(f"option maxOffsetsPerTrigger must be a positive integer, not {raw!r}")
    fail = str(option(options, "failOnDataLoss", "true")).lower()
    if fail not in ("true", "false"):
        raise ConfigError(f"option failOnDataLoss must be true or false, not {fail!r}")
    return max_rows, fail == "true"


def stream_initial(options: dict, tps, beginning_offsets, end_offsets) -> Dict[TopicPartition, int]:
    """Where a new streaming query starts: ``startingOffsets`` ("latest" by
    default for streams, as in Spark), resolved against the cluster."""
    spec = _spec(options, "startingOffsets", "latest", ("earliest", "latest"))
    first = beginning_offsets(tps)
    last = end_offsets(tps)
    return {tp: _resolve(spec, tp, EARLIEST, first, last) for tp in tps}


def stream_latest(start: Dict[TopicPartition, int], tps, beginning_offsets, end_offsets,
                  max_rows: Optional[int] = None,
                  target: Optional[Dict[TopicPartition, int]] = None) -> Dict[TopicPartition, int]:
    """The end offsets of the next micro-batch. Partitions not in ``start``
    (created since) are read from their beginning. ``max_rows`` caps the
    batch, shared out in proportion to each partition's backlog (every
    partition with a backlog moves on by at least one record, as in Spark).
    ``target`` (Trigger.AvailableNow) caps each partition at the offsets
    the trigger began with; partitions it does not know are left out."""
    if target is not None:
        tps = [tp for tp in tps if tp in target]
    known = [tp for tp in tps if tp in start]
    new = [tp for tp in tps if tp not in start]
    begin = dict((tp, start[tp]) for tp in known)
    begin.update(beginning_offsets(new) if new else {})
    latest = end_offsets(list(tps)) if tps else {}
    if target is not None:
        latest = {tp: min(off, target[tp]) for tp, off in latest.items()}
    # An end below the start (offsets went back) is kept: stream_ranges
    # reports it as data loss rather than the stream stalling silently.
    end = {tp: latest[tp] for tp in tps}
    backlog = {tp: max(0, end[tp] - begin[tp]) for tp in tps}
    total = sum(backlog.values())
    if max_rows is not None and total > max_rows:
        for tp in tps:
            if backlog[tp]:
                share = max_rows * backlog[tp] / total
                end[tp] = begin[tp] + min(backlog[tp], int(share) if share >= 1 else 1)
    # partitions the stream had but the cluster no longer lists keep their offsets
    for tp, off in start.items():
        end.setdefault(tp, off)
    return end


def stream_ranges(start: Dict[TopicPartition, int], end: Dict[TopicPartition, int], beginning_offsets,
                  fail_on_data_loss: bool = True) -> List[OffsetRange]:
    """The ranges of one micro-batch. Records that are gone (deleted by
    retention, or the partition's offsets went back: a topic recreated)
    fail the query with ``fail_on_data_loss`` (Spark's default), else the
    range starts at what is left."""
    tps = sorted(end)
    first = beginning_offsets(tps) if tps else {}
    ranges = []
    for tp in tps:
        lo, hi = start.get(tp, first[tp]), end[tp]
        if lo < first[tp] or hi < lo:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp.topic}-{tp.partition}: offsets [{lo}, {hi}) are no longer in Kafka (its log "
                    f"starts at {first[tp]}); some data may have been lost. Set option "
                    f"failOnDataLoss=false to go on from what is left")
            lo = first[tp]
        if lo < hi:
            ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
    return ranges


class DataLossError(KafkaError):
    """A stream's next records are no longer in Kafka (failOnDataLoss)."""
