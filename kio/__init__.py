"""kio: I/O drivers for the kproto sans-IO Kafka core.

The public names below are imported on first use (PEP 562 module
``__getattr__``), so ``import kio`` costs almost nothing and ``from kio import
Producer`` loads the producer's modules and not the admin client's, the share
consumer's or the consumer's. ``from kio import X`` and ``kio.X`` behave as
before; only the moment the module is loaded moved.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kproto._lazy import lazy_names

# public name -> the module that defines it
_LAZY = {
    "Admin": "kio.admin", "AdminClosedError": "kio.admin",
    "InOrderAcker": "kio.producer", "KafkaTimeoutError": "kio.producer", "Producer": "kio.producer",
    "RecordMetadata": "kio.producer",
    "AcknowledgeType": "kio.share_consumer", "ShareConsumer": "kio.share_consumer",
    "ShareRecord": "kio.share_consumer", "ShareStateError": "kio.share_consumer",
    "Consumer": "kio.consumer", "ConsumerClosedError": "kio.consumer", "ConsumerThreadError": "kio.consumer",
    "OffsetAndMetadata": "kio.consumer", "OffsetAndTimestamp": "kio.consumer", "PartitionBatch": "kio.consumer",
    "TopicPartition": "kio.consumer", "WakeupError": "kio.consumer",
}

__all__ = ["Admin", "AdminClosedError", "Producer", "RecordMetadata", "KafkaTimeoutError", "InOrderAcker",
           "Consumer", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionBatch",
           "ConsumerThreadError", "ConsumerClosedError", "WakeupError",
           "ShareConsumer", "AcknowledgeType", "ShareRecord", "ShareStateError"]

if TYPE_CHECKING:   # type checkers and IDEs see the names as ordinary imports
    from kio.admin import Admin, AdminClosedError
    from kio.consumer import (
        Consumer, ConsumerClosedError, ConsumerThreadError, OffsetAndMetadata, OffsetAndTimestamp,
        PartitionBatch, TopicPartition, WakeupError,
    )
    from kio.producer import InOrderAcker, KafkaTimeoutError, Producer, RecordMetadata
    from kio.share_consumer import AcknowledgeType, ShareConsumer, ShareRecord, ShareStateError


__getattr__, __dir__ = lazy_names(globals(), _LAZY)
