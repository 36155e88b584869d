"""kio: I/O drivers for the kproto sans-IO Kafka core."""

from kio.producer import InOrderAcker, KafkaTimeoutError, Producer, RecordMetadata  # noqa: E402

__all__ = ["Producer", "RecordMetadata", "KafkaTimeoutError", "InOrderAcker"]
