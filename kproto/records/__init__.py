"""Kafka record batches: the v2 RecordBatch builder/reader (Cython) and the
legacy v0/v1 message-set reader.

``read_batches`` takes the records bytes of a fetch response (any buffer;
parsed in place) and returns the complete batches, v2 or legacy, dispatching on
the magic byte; a partial batch at the end is left for the next fetch.
"""
from kproto.records._batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchBuilder,
    ColumnBuffers,
    Record,
    RecordBatch,
    build_control_batch,
    parse_batches,
    read_batches,
)
from kproto.records.legacy import LegacyBatch, LegacyBatchBuilder

estimate_size_in_bytes = BatchBuilder.estimate_size_in_bytes

__all__ = [
    "BatchBuilder",
    "ColumnBuffers",
    "RecordBatch",
    "Record",
    "LegacyBatch",
    "LegacyBatchBuilder",
    "read_batches",
    "parse_batches",
    "build_control_batch",
    "estimate_size_in_bytes",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
]
