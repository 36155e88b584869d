"""The threading share consumer: :class:`ShareConsumer`, a thin driver around
:class:`kproto.share.core.ShareConsumerCore` (KIP-932 share groups).

As with :class:`kio.Consumer`, a background thread (``kio-share-consumer-network-thread
| <client_id>``) owns the sockets and runs the core, so heartbeats and the
next share fetch go on while the application processes records. The
consumer is used from one thread (a second thread gets
:class:`~kio.consumer.ConsumerThreadError`); acknowledgement commit callbacks
run on that thread inside ``poll``, ``commit_sync``, ``commit_async`` and
``close``. The method bodies are :class:`kio._shared.share_ops.ShareConsumerOps`',
shared with ``kio.aio.ShareConsumer`` and ``kio.trio.ShareConsumer``.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, Iterator, List, Optional

from kio._shared.share_ops import AcknowledgementCallback, ShareConsumerOps, ack_callback_calls
from kio._threaded.driver import PolledThreadDriver
from kproto.cluster import TopicPartition
from kproto.config import Config
from kproto.errors import KafkaError
from kproto.share import AcknowledgeType, ShareRecord, ShareStateError
from kproto.share.core import ShareConsumerCore

__all__ = ["ShareConsumer", "AcknowledgeType", "ShareRecord", "ShareStateError", "AcknowledgementCallback",
           "ack_callback_calls"]


class ShareConsumer(PolledThreadDriver, ShareConsumerOps):
    """``ShareConsumer(bootstrap_servers=..., group_id="jobs")``; Java's
    KafkaShareConsumer: ``subscribe``, ``poll``, ``acknowledge`` (explicit
    mode), ``commit_sync``, ``commit_async``, ``close``.

    ``share_acknowledgement_mode="implicit"`` (the default) accepts the
    records of a poll at the next poll or commit; ``"explicit"`` wants
    ``acknowledge(record, AcknowledgeType.ACCEPT | RELEASE | REJECT)`` for
    every record before the next poll."""

    config: Config
    """The parsed settings."""
    _client_name = "kio.ShareConsumer"
    _refuse_awaitable = (
        "kio.ShareConsumer runs the acknowledgement commit callback on the polling thread and cannot "
        "await what it returned ({step!r}); use kio.aio or kio.trio for a coroutine function")

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._init_ops(ShareConsumerCore(config, **kwargs))
        self.config = self._core.config
        self._start_network(self._core, f"kio-share-consumer-network-thread | {self.config.client_id}", 1 << 20)

    def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[ShareRecord]:
        """Records acquired for this member (each with ``delivery_count``),
        waiting up to ``timeout`` seconds for some (None: until there are).
        First settles the last poll's records: implicit mode accepts them;
        explicit mode raises :class:`ShareStateError` if one is unacknowledged
        (as it does without a subscription)."""
        return self._run(self._poll_records_steps(timeout, max_records))

    def __iter__(self) -> Iterator[ShareRecord]:
        """Every record, as it arrives (``poll(1.0)`` in a loop), until closed."""
        while not self._closed:
            yield from self.poll(1.0)

    def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[KafkaError]]:
        """Send the acknowledgements made so far (implicit mode: accepts the
        last poll's records) and wait for the leaders: {TopicPartition: None
        (committed) or the error}. ``timeout`` defaults to default.api.timeout.ms."""
        return self._run(self._commit_sync_steps(timeout))

    def client_instance_id(self, timeout: Optional[float] = None) -> uuid.UUID:
        """The client instance id (KIP-714), as :meth:`kio.Consumer.client_instance_id`."""
        return self._run(self._client_instance_id_steps(timeout))

    def commit_async(self) -> None:
        """Send the acknowledgements made so far without waiting; the
        acknowledgement commit callback hears the outcome."""
        self._run(self._commit_async_steps())

    def close(self, timeout: Optional[float] = None) -> None:
        """Send the acknowledgements made so far, close the share sessions -
        the leaders release whatever this member still holds - and leave the
        group. As Java's close(), it accepts nothing by itself: in implicit
        mode call commit_sync() first to accept the last poll's records, or
        they are delivered again. ``timeout`` bounds it (default
        default.api.timeout.ms)."""
        self._close_client(timeout)
