"""Choosing a partition: Kafka's murmur2 for keys, sticky for keyless records.

Keyed records must land where every other Kafka client puts them (Java's
``BuiltInPartitioner``/``Utils.murmur2``, librdkafka's ``murmur2_random``), so
``murmur2`` is a bit-exact port: ``toPositive(murmur2(key)) % numPartitions``.
Keyless records stick to one partition until a batch for it is sent (KIP-480
as in Java 2.4-3.2), so batches fill up instead of spreading one record per
partition; ``on_new_batch`` moves the sticky choice.
"""
from __future__ import annotations

import random

from kproto.errors import KafkaError

__all__ = ["murmur2", "to_positive", "murmur2_partition", "StickyPartitioner", "InvalidPartitionError"]

_M = 0x5bd1e995
_MASK = 0xFFFFFFFF


class InvalidPartitionError(KafkaError, ValueError):
    """An explicit partition outside [0, partition count)."""


def murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2`` (seed 0x9747b28c) as a signed int32."""
    length = len(data)
    h = (0x9747b28c ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java ``Utils.toPositive``: clear the sign bit (not abs())."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """The default partitioner: murmur2 for keys, a sticky partition otherwise.

    ``partition(topic, key, num_partitions, available)`` where ``available`` is
    the list of partitions with a known leader (may be empty)."""

    def __init__(self, rng=None):
        self._sticky: dict[str, int] = {}
        self._rng = rng or random.Random()

    def partition(self, topic, key, num_partitions, available=None):
        if key is not None:
            return murmur2_partition(key, num_partitions)
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._pick(num_partitions, available, None)
            self._sticky[topic] = p
        return p

    def current(self, topic, num_partitions):
        """The sticky partition of a topic, or None when one must be picked."""
        p = self._sticky.get(topic)
        return p if p is not None and p < num_partitions else None

    def _pick(self, num_partitions, available, previous):
        choices = list(available) if available else list(range(num_partitions))
        if len(choices) > 1 and previous in choices:
            choices.remove(previous)
        return self._rng.choice(choices)

    def on_new_batch(self, topic, num_partitions, previous, available=None):
        """A batch of the sticky partition ``previous`` was closed: move on
        (only if ``previous`` is still the sticky one: another thread may have
        moved it already)."""
        if self._sticky.get(topic) == previous:
            self._sticky[topic] = self._pick(num_partitions, available, previous)
