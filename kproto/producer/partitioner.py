"""Choosing a partition: Kafka's murmur2 for keys, sticky for keyless records.

Keyed records must land where every other Kafka client puts them (Java's
``BuiltInPartitioner``/``Utils.murmur2``, librdkafka's ``murmur2_random``), so
``murmur2`` is a bit-exact port (in C, :mod:`kproto.producer._murmur2`):
``toPositive(murmur2(key)) % numPartitions``.
Keyless records stick to one partition until a batch for it is sent (KIP-480
as in Java 2.4-3.2), so batches fill up instead of spreading one record per
partition; ``on_new_batch`` moves the sticky choice.
"""
from __future__ import annotations

import random

from kproto.errors import KafkaError
from kproto.producer._murmur2 import (  # noqa: F401 (re-exported)
    all_bytes_or_none, first_row_over, group_by_partition, murmur2, murmur2_partition,
)

__all__ = ["murmur2", "to_positive", "murmur2_partition", "group_by_partition", "StickyPartitioner",
           "InvalidPartitionError"]

class InvalidPartitionError(KafkaError, ValueError):
    """An explicit partition outside [0, partition count)."""


def to_positive(n: int) -> int:
    """Java ``Utils.toPositive``: clear the sign bit (not abs())."""
    return n & 0x7FFFFFFF


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

    def current_of(self, topic, cluster):
        """:meth:`current` with the partition count from ``cluster`` (a
        ClusterMetadata), looked up only when the topic has a sticky choice:
        the sender asks once per topic of every request, and records sent
        with a key or a partition never make one."""
        p = self._sticky.get(topic)
        if p is None:
            return None
        n = cluster.partition_count(topic)
        return p if n and p < n else None

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
