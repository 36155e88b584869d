"""kio: I/O drivers for the kproto sans-IO Kafka core."""

from kio.admin import Admin, AdminClosedError  # noqa: E402
from kio.producer import InOrderAcker, KafkaTimeoutError, Producer, RecordMetadata  # noqa: E402
from kio.share_consumer import AcknowledgeType, ShareConsumer, ShareRecord, ShareStateError  # noqa: E402
from kio.consumer import (  # noqa: E402
    Consumer, ConsumerClosedError, ConsumerThreadError, OffsetAndMetadata, OffsetAndTimestamp,
    PartitionBatch, TopicPartition, WakeupError,
)

__all__ = ["Admin", "AdminClosedError", "Producer", "RecordMetadata", "KafkaTimeoutError", "InOrderAcker",
           "Consumer", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionBatch",
           "ConsumerThreadError", "ConsumerClosedError", "WakeupError",
           "ShareConsumer", "AcknowledgeType", "ShareRecord", "ShareStateError"]
