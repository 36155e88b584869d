"""The Kafka producer as a sans-IO core (see :mod:`kproto.producer.core`)."""
from kproto.producer.core import (
    AppendBlocked, BatchResult, BufferExhausted, BulkResult, BulkDelivery, DeliveryHandle, DeliveryTimeoutError,
    InvalidPartitionError, MetadataPending, ProducerClosedError, ProducerCore, RecordMetadata,
    RecordTooLargeError, SerializationError, TransactionAbortedError, TransactionStateError, TxnResult,
    attached_result, complete_results,
)
from kproto.producer.config import PRODUCER_CONFIG, parse_producer_config
from kproto.producer.inorder import InOrderAcks

__all__ = ["ProducerCore", "DeliveryHandle", "BulkDelivery", "RecordMetadata", "BatchResult",
           "MetadataPending", "BufferExhausted", "RecordTooLargeError", "SerializationError",
           "InvalidPartitionError", "DeliveryTimeoutError", "ProducerClosedError",
           "complete_results", "TxnResult", "TransactionStateError", "TransactionAbortedError",
           "PRODUCER_CONFIG", "parse_producer_config", "InOrderAcks", "AppendBlocked", "BulkResult",
           "attached_result"]
