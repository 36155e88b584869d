"""Offset specifications of the ``kio-kafka`` data source, as Spark's Kafka
source accepts them, resolved against the cluster on the driver.

``startingOffsets``: "earliest" (default), "latest", or JSON
``{"topic": {"0": 23, "1": -2}}`` where -2 is earliest and -1 latest.
``endingOffsets``: "latest" (default), or JSON where -1 is latest.
Topics are chosen by exactly one of ``subscribe`` ("t1,t2"),
``subscribePattern`` (a regex matched against the whole name) and
``assign`` (JSON ``{"topic": [0, 1]}``).

As in Spark's Kafka source, a batch read refuses to start at "latest" or
end at "earliest" (-1 in startingOffsets, -2 in endingOffsets), and JSON
offsets for subscribed topics must name every partition of them.

Streams (``readStream``) take ``startingOffsets`` ("latest" by default),
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay``
and ``failOnDataLoss`` (true by default), as Spark's Kafka source does;
their offsets are checkpointed by Spark.

``kafka.*`` options go to the kio consumer, less those Spark's source
refuses too (auto.offset.reset, key/value.deserializer, enable.auto.commit,
interceptor.classes); a setting kio does not know is a ConfigError where
the Java client would only log a warning.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from kproto.cluster import TopicPartition
from kproto.errors import ConfigError, KafkaError

__all__ = ["OffsetRange", "plan_ranges", "consumer_config", "normalize", "option", "EARLIEST", "LATEST",
           "offsets_to_json", "offsets_from_json", "stream_options", "stream_initial", "stream_latest",
           "stream_ranges", "DataLossError", "topic_partitions", "StreamOptions", "include_headers",
           "delay_batch", "parse_duration_ms", "fail_on_data_loss", "data_lost"]

EARLIEST, LATEST = -2, -1

_log = logging.getLogger("kio.spark")


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


#: kafka.* settings Spark's Kafka source refuses, and why (the same here).
_REFUSED_CONSUMER_SETTINGS = {
    "auto.offset.reset": "set the source option startingOffsets to 'earliest' or 'latest' instead: the "
                         "source, not the consumer, decides where reading starts",
    "key.deserializer": "keys are read as bytes; use DataFrame operations to deserialize them",
    "value.deserializer": "values are read as bytes; use DataFrame operations to deserialize them",
    "enable.auto.commit": "the source commits nothing to Kafka (Spark checkpoints the offsets)",
    "interceptor.classes": "interceptors could change the records",
}


def consumer_config(options: dict) -> dict:
    """``kafka.*`` options (Spark's convention) -> kio consumer config."""
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ConfigError("the kio-kafka source needs option kafka.bootstrap.servers")
    for key in conf:
        why = _REFUSED_CONSUMER_SETTINGS.get(key.replace("_", "."))
        if why is not None:
            raise ConfigError(f"Kafka option 'kafka.{key}' is not supported (as in Spark's Kafka source): {why}")
    conf["enable.auto.commit"] = "false"
    # The source decides where reading starts and never lets the consumer
    # jump: a position outside the log raises OffsetOutOfRangeError, which the
    # reader turns into failOnDataLoss's choice (kio's default, latest,
    # would silently skip to the end of the partition).
    conf["auto.offset.reset"] = "none"
    return conf


def fail_on_data_loss(options: dict) -> bool:
    """Option failOnDataLoss (true by default, as in Spark's source), for
    batch and streaming reads alike."""
    fail = str(option(options, "failOnDataLoss", "true")).strip().lower()
    if fail not in ("true", "false"):
        raise ConfigError(f"option failOnDataLoss must be true or false, not {fail!r}")
    return fail == "true"


def data_lost(tp: TopicPartition, start: int, log_start: int, fail: bool, end: Optional[int] = None) -> int:
    """Records [start, log_start) of ``tp`` are gone (retention, DeleteRecords,
    a topic deleted and made again). With ``fail`` (failOnDataLoss=true,
    Spark's default) that fails the query with DataLossError; otherwise a
    WARNING says how many records were skipped and reading goes on from
    ``log_start``, which is returned. ``end`` bounds the count: records at or
    past it were not to be read anyway."""
    skipped = (log_start if end is None else min(log_start, end)) - start
    if fail:
        raise DataLossError(
            f"{tp.topic}-{tp.partition}: offset {start} is no longer in Kafka (the partition's log starts at "
            f"{log_start}): some data may have been lost because they are not available in Kafka any more; "
            f"either the data was aged out by Kafka or the topic may have been deleted before all the data in "
            f"the topic was processed. Set the source option failOnDataLoss=false to go on from what is left")
    _log.warning("kio-kafka: %s-%d: offsets [%d, %d) are no longer in Kafka (the log starts at %d); "
                 "skipping %d record(s) (failOnDataLoss=false)", tp.topic, tp.partition, start, log_start,
                 log_start, skipped)
    return log_start


def include_headers(options: dict) -> bool:
    """Option includeHeaders (false by default, as in Spark's source)."""
    raw = str(option(options, "includeHeaders", "false")).strip().lower()
    if raw not in ("true", "false"):
        raise ConfigError(f"option includeHeaders must be true or false, not {raw!r}")
    return raw == "true"


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
            assigned = sorted({TopicPartition(t, int(p)) for t, ps in spec.items() for p in ps})
        except (TypeError, ValueError, AttributeError):
            raise ConfigError(f'option assign must be JSON like {{"topic": [0, 1]}}, '
                              f"not {option(options, 'assign')!r}") from None
        # As Spark's connector (AssignStrategy keeps the assigned partitions
        # the cluster has): read those that exist, say which do not.
        counts = list_topics()
        present = [tp for tp in assigned if 0 <= tp.partition < counts.get(tp.topic, 0)]
        if len(present) < len(assigned):
            missing = [f"{tp.topic}-{tp.partition}" for tp in assigned if tp not in present]
            _log.warning("kio-kafka: option assign names %d partition(s) the cluster does not have, not read: "
                         "%s", len(missing), ", ".join(missing))
        return present
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


def batch_specs(options: dict):
    """(startingOffsets, endingOffsets) of a batch read, refusing what Spark's
    Kafka source refuses: a start at latest, an end at earliest."""
    start_spec = _spec(options, "startingOffsets", "earliest", ("earliest", "latest"))
    end_spec = _spec(options, "endingOffsets", "latest", ("earliest", "latest"))
    if start_spec == "latest":
        raise ConfigError("option startingOffsets can't be latest for batch queries on Kafka (a batch "
                          "would read nothing); use a stream, or earliest or JSON offsets")
    if end_spec == "earliest":
        raise ConfigError("option endingOffsets can't be earliest for batch queries on Kafka")
    for name, spec, bad, word in (("startingOffsets", start_spec, LATEST, "latest (-1)"),
                                  ("endingOffsets", end_spec, EARLIEST, "earliest (-2)")):
        if isinstance(spec, dict):
            wrong = sorted(tp for tp, off in spec.items() if off == bad)
            if wrong:
                raise ConfigError(f"option {name}: the offset for {wrong[0].topic}-{wrong[0].partition} "
                                  f"can't be {word} for batch queries on Kafka")
    for name, spec in (("startingOffsets", start_spec), ("endingOffsets", end_spec)):
        if isinstance(spec, dict):
            bad_off = sorted(tp for tp, off in spec.items() if off < EARLIEST)
            if bad_off:
                raise ConfigError(f"option {name}: offset {spec[bad_off[0]]} for {bad_off[0].topic}-"
                                  f"{bad_off[0].partition} is not an offset (-2 earliest, -1 latest)")
    return start_spec, end_spec


def _check_names_all_partitions(name: str, spec, tps) -> None:
    """JSON offsets with subscribe/subscribePattern must name exactly the
    partitions read (Spark's rule: a partition left out would be read from
    an offset nobody chose)."""
    if not isinstance(spec, dict):
        return
    if set(spec) != set(tps):
        given = sorted(f"{tp.topic}-{tp.partition}" for tp in spec)
        read = sorted(f"{tp.topic}-{tp.partition}" for tp in tps)
        raise ConfigError(f"option {name}: JSON offsets must name every partition of the subscribed topics "
                          f"(use -2 for earliest, -1 for latest); given {given}, read {read}")


def plan_ranges(options: dict, list_topics, beginning_offsets, end_offsets) -> List[OffsetRange]:
    """The offset ranges to read: one per topic-partition with records.

    ``options`` as :func:`normalize` returns them; ``beginning_offsets(tps)``
    / ``end_offsets(tps)`` -> {tp: offset}."""
    start_spec, end_spec = batch_specs(options)
    fail = fail_on_data_loss(options)
    tps = topic_partitions(options, list_topics)
    if option(options, "assign") is None:
        for name, spec in (("startingOffsets", start_spec), ("endingOffsets", end_spec)):
            _check_names_all_partitions(name, spec, tps)
    first = beginning_offsets(tps)
    last = end_offsets(tps)
    ranges = []
    for tp in tps:
        start = _resolve(start_spec, tp, EARLIEST, first, last)
        end = _resolve(end_spec, tp, LATEST, first, last)
        if start is None or end is None:
            continue
        if start < first[tp]:                  # an explicit offset below the log start
            start = data_lost(tp, start, first[tp], fail, end)
            end = max(end, start)
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


class StreamOptions(NamedTuple):
    """The options of a streaming read (see :func:`stream_options`)."""
    max_rows: Optional[int]            # maxOffsetsPerTrigger
    fail_on_data_loss: bool
    min_rows: Optional[int] = None     # minOffsetsPerTrigger
    max_trigger_delay_ms: int = 15 * 60 * 1000


_DURATION_UNITS = {"us": 1e-3, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(raw: str, name: str) -> int:
    """A duration as Spark writes them ("15m", "30s", "500ms"; a bare number is ms)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(raw).lower())
    if m is None or m.group(2) not in ("", *_DURATION_UNITS):
        raise ConfigError(f"option {name} must be a duration like 30s, 15m or 500ms, not {raw!r}")
    return int(int(m.group(1)) * _DURATION_UNITS.get(m.group(2) or "ms", 1))


def _positive(options: dict, name: str) -> Optional[int]:
    raw = option(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise ConfigError(f"option {name} must be a positive integer, not {raw!r}")
    return value


def stream_options(options: dict) -> StreamOptions:
    """The options of a streaming read; options only a batch read takes are
    refused, as Spark's Kafka source does."""
    if option(options, "endingOffsets") is not None:
        raise ConfigError("option endingOffsets is for batch reads; a stream reads on as records arrive")
    max_rows = _positive(options, "maxOffsetsPerTrigger")
    min_rows = _positive(options, "minOffsetsPerTrigger")
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise ConfigError(f"option minOffsetsPerTrigger ({min_rows}) is above maxOffsetsPerTrigger ({max_rows})")
    delay = option(options, "maxTriggerDelay")
    if delay is not None and min_rows is None:
        raise ConfigError("option maxTriggerDelay bounds the wait of minOffsetsPerTrigger: set that too")
    delay_ms = parse_duration_ms(delay, "maxTriggerDelay") if delay is not None else 15 * 60 * 1000
    return StreamOptions(max_rows, fail_on_data_loss(options), min_rows, delay_ms)


def delay_batch(min_rows: Optional[int], max_delay_ms: int, start: Dict[TopicPartition, int],
                end: Dict[TopicPartition, int], now_ms: float, last_trigger_ms: Optional[float]) -> bool:
    """Spark's minOffsetsPerTrigger rule: skip this trigger (no micro-batch)
    while fewer than ``min_rows`` new records are there, unless
    ``max_delay_ms`` passed since the last micro-batch (``last_trigger_ms``;
    None: the stream's first trigger, which counts as the clock's start). Partitions
    not in ``start`` (new since) are not counted."""
    if min_rows is None:
        return False
    if last_trigger_ms is not None and now_ms - last_trigger_ms >= max_delay_ms:
        return False
    new = sum(max(0, off - start.get(tp, off)) for tp, off in end.items())
    return new < min_rows


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
        if hi < lo:                            # the partition's offsets went back
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp.topic}-{tp.partition}: the stream was at offset {lo} but the partition now ends at "
                    f"{hi} (was the topic deleted and made again?): some data may have been lost. Set the "
                    f"source option failOnDataLoss=false to go on from what is there")
            _log.warning("kio-kafka: %s-%d: the stream was at offset %d, the partition now ends at %d; "
                         "reading it from %d (failOnDataLoss=false)", tp.topic, tp.partition, lo, hi, first[tp])
            lo = first[tp]
        elif lo < first[tp]:
            lo = data_lost(tp, lo, first[tp], fail_on_data_loss, hi)
        if lo < hi:
            ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
    return ranges


class DataLossError(KafkaError):
    """A stream's next records are no longer in Kafka (failOnDataLoss)."""
