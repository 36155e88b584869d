"""Type aliases of the public API (annotations only: nothing here runs per record)."""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.producer.core import RecordMetadata

__all__ = ["HeaderValue", "Headers", "DeliveryCallback", "BulkCallback", "RebalanceListener",
           "AsyncRebalanceListener", "CommitCallback", "AsyncCommitCallback", "Offsets", "Partitions"]

#: a header's value: bytes (a str is sent UTF-8 encoded) or None
HeaderValue = Union[bytes, bytearray, memoryview, str, None]
#: a record's headers: (key, value) pairs, or a dict
Headers = Union[Sequence[Tuple[str, HeaderValue]], Mapping[str, HeaderValue]]
#: ``on_delivery(error, metadata)``: error None and metadata set, or the reverse
DeliveryCallback = Callable[[Optional[Exception], Optional[RecordMetadata]], Any]
#: ``on_delivery(error, result)`` of ``send_many``: result is a BulkResult
BulkCallback = Callable[[Optional[Exception], Any], Any]
#: a rebalance listener, called with the partitions assigned, revoked or lost
RebalanceListener = Callable[[List[TopicPartition]], Any]
#: the async clients' listeners may also be coroutine functions
AsyncRebalanceListener = Callable[[List[TopicPartition]], Union[Awaitable[Any], Any]]
#: ``callback(offsets, error)`` of an asynchronous commit
CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], Optional[Exception]], Any]
AsyncCommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], Optional[Exception]],
                               Union[Awaitable[Any], Any]]
#: offsets to commit: {partition: next offset to consume, or OffsetAndMetadata}
Offsets = Mapping[TopicPartition, Union[int, OffsetAndMetadata]]
#: partitions as TopicPartition or (topic, partition) tuples
Partitions = Iterable[Tuple[str, int]]
