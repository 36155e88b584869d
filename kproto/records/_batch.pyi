"""Types of the Cython module kproto/records/_batch.pyx for type checkers.

:class:`Record` (what a consumer's ``poll`` returns) is declared in full; the
batch builder and readers, used inside kproto, are left open (``Any``).
"""
from typing import Any, List, Optional, Tuple

RECORD_BATCH_OVERHEAD: int
DEFAULT_MAX_DECOMPRESSED_SIZE: int
TIMESTAMP_CREATE_TIME: int
TIMESTAMP_LOG_APPEND_TIME: int
NO_TIMESTAMP: int
CONTROL_ABORT: int
CONTROL_COMMIT: int


class Record:
    """One record: offset, timestamp, timestamp_type, key, value, headers;
    ``topic`` and ``partition`` where it was fetched from. ``key`` and
    ``value`` are bytes (or None), or what the consumer's deserializers made
    of them."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def key(self) -> Any: ...
    @property
    def value(self) -> Any: ...
    @property
    def headers(self) -> List[Tuple[str, Optional[bytes]]]: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def delivery_count(self) -> Optional[int]:
        """How many times a share group delivered the record; None for a Consumer's records."""
    def _set_delivery_count(self, count: int) -> None: ...

    def __init__(self, offset: int, timestamp: int, timestamp_type: int, key: Any, value: Any,
                 headers: Optional[List[Tuple[str, Optional[bytes]]]] = None, topic: Optional[str] = None,
                 partition: int = -1) -> None: ...


class BatchBuilder:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    @staticmethod
    def estimate_size_in_bytes(*args: Any, **kwargs: Any) -> int: ...
    def __getattr__(self, name: str) -> Any: ...


class RecordBatch:
    def __getattr__(self, name: str) -> Any: ...


class ColumnBuffers:
    def __getattr__(self, name: str) -> Any: ...


def build_control_batch(*args: Any, **kwargs: Any) -> Any: ...
def parse_batches(*args: Any, **kwargs: Any) -> Any: ...
def read_batches(*args: Any, **kwargs: Any) -> Any: ...
def __getattr__(name: str) -> Any: ...
