"""A minimal OTLP metrics encoder: the protobuf bytes of an OpenTelemetry
``MetricsData`` message, written by hand (KIP-714 pushes them to the broker).

Only what client telemetry needs is here: ResourceMetrics, ScopeMetrics,
Metric with a Gauge or a Sum, NumberDataPoint with attributes, and string /
int / double attribute values - no protobuf dependency. Field numbers are
those of opentelemetry/proto/metrics/v1/metrics.proto and common.proto.
"""
from __future__ import annotations

import struct
from typing import Iterable, NamedTuple, Optional, Union

__all__ = ["MetricPoint", "encode_metrics_data", "DELTA", "CUMULATIVE"]

#: AggregationTemporality values of a Sum
DELTA = 1
CUMULATIVE = 2

# protobuf wire types
_VARINT, _I64, _LEN = 0, 1, 2

AttrValue = Union[str, int, float, bool]


class MetricPoint(NamedTuple):
    """One value of one metric: ``sum`` True for a monotonic cumulative total
    (an OTLP Sum), False for a gauge; ``start_ns`` is when the sum started
    counting (or the last push, with delta temporality)."""
    name: str
    value: Union[int, float]
    sum: bool = False
    attributes: tuple = ()          # ((key, value), ...)
    start_ns: int = 0


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64        # protobuf writes negative int64 as ten bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _str_field(field: int, s: str) -> bytes:
    return _len_field(field, s.encode("utf-8"))


def _any_value(v: AttrValue) -> bytes:
    """AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4."""
    if isinstance(v, bool):
        return _key(2, _VARINT) + _varint(int(v))
    if isinstance(v, int):
        return _key(3, _VARINT) + _varint(v)
    if isinstance(v, float):
        return _key(4, _I64) + struct.pack("<d", v)
    if isinstance(v, str):
        return _str_field(1, v)
    raise TypeError(f"an OTLP attribute value must be str, int, float or bool, not {type(v).__name__}")


def _key_value(field: int, key: str, value: AttrValue) -> bytes:
    """KeyValue: key 1, value 2 (AnyValue)."""
    return _len_field(field, _str_field(1, key) + _len_field(2, _any_value(value)))


def _data_point(p: MetricPoint, time_ns: int) -> bytes:
    """NumberDataPoint: start_time_unix_nano 2, time_unix_nano 3 (fixed64),
    as_double 4 or as_int 6, attributes 7."""
    out = bytearray()
    if p.start_ns:
        out += _key(2, _I64) + struct.pack("<Q", p.start_ns)
    out += _key(3, _I64) + struct.pack("<Q", time_ns)
    if isinstance(p.value, float):
        out += _key(4, _I64) + struct.pack("<d", p.value)
    else:
        out += _key(6, _I64) + struct.pack("<q", int(p.value))
    for k, v in p.attributes:
        out += _key_value(7, k, v)
    return bytes(out)


def _metric(p: MetricPoint, time_ns: int, temporality: int) -> bytes:
    """Metric: name 1, gauge 5 (data_points 1) or sum 7 (data_points 1,
    aggregation_temporality 2, is_monotonic 3)."""
    point = _len_field(1, _data_point(p, time_ns))
    if p.sum:
        body = _len_field(7, point + _key(2, _VARINT) + _varint(temporality) + _key(3, _VARINT) + b"\x01")
    else:
        body = _len_field(5, point)
    return _str_field(1, p.name) + body


def encode_metrics_data(points: Iterable[MetricPoint], *, time_ns: int,
                        resource: Iterable[tuple] = (), scope: str = "kio",
                        scope_version: Optional[str] = None, temporality: int = CUMULATIVE) -> bytes:
    """The bytes of a ``MetricsData`` with one ResourceMetrics (``resource``
    attributes), one ScopeMetrics (``scope`` name and version) and a Metric
    per point; ``temporality`` (DELTA or CUMULATIVE) is that of every Sum."""
    metrics = b"".join(_len_field(2, _metric(p, time_ns, temporality)) for p in points)
    scope_msg = _str_field(1, scope) + (_str_field(2, scope_version) if scope_version else b"")
    scope_metrics = _len_field(1, scope_msg) + metrics
    res = b"".join(_key_value(1, k, v) for k, v in resource)
    resource_metrics = _len_field(1, res) + _len_field(2, scope_metrics)
    return _len_field(1, resource_metrics)
