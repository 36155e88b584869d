"""The async share consumer: ``kio.aio.ShareConsumer`` and
``kio.trio.ShareConsumer`` bind :class:`AsyncShareConsumer` to their backend.

The method bodies are :class:`kio._shared.share_ops.ShareConsumerOps`', shared with
the threading :class:`kio.ShareConsumer`; this class only awaits their
waits on the engine (:meth:`kio._async.clients._Client._run`; closing:
:class:`kio._async.clients.PolledClient`) and types the awaitable surface.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, AsyncIterator, Dict, List, Optional

from kio._async.clients import PolledClient
from kio._shared.share_ops import ShareConsumerOps
from kproto.cluster import TopicPartition
from kproto.errors import KafkaError
from kproto.share import ShareRecord
from kproto.share.core import ShareConsumerCore

__all__ = ["AsyncShareConsumer"]


class AsyncShareConsumer(PolledClient, ShareConsumerOps):
    """``records = await share_consumer.poll(1.0)``; ``async for record in
    share_consumer``: the threading :class:`kio.ShareConsumer`, awaitable
    (KIP-932 share groups). The acknowledgement commit callback may be a
    plain or a coroutine function; it runs in the task that polls, commits
    or closes."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, nursery: Any = None, **kwargs: Any) -> None:
        core = ShareConsumerCore(config, **kwargs)
        self._init_ops(core)
        self._setup(core, nursery, 1 << 20)
        self._lock = nullcontext()          # one task runs the core and the application's calls

    async def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[ShareRecord]:
        """Acquired records (ShareRecord, with ``delivery_count``), waiting up
        to ``timeout`` seconds (None: until there are); settles the last
        poll's records first (implicit: accepts them; explicit: raises
        ShareStateError if one is unacknowledged)."""
        return await self._run(self._poll_records_steps(timeout, max_records))  # type: ignore[no-any-return]

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        """Every record, as it arrives, until the share consumer is closed."""
        return self._records()

    async def _records(self) -> AsyncIterator[ShareRecord]:
        while not self._closed:
            for record in await self.poll(1.0):
                yield record

    async def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[KafkaError]]:
        """Send the acknowledgements made so far (implicit mode: accepts the
        last poll's records) and wait for the leaders: {TopicPartition: None
        or the error}. ``timeout`` defaults to default.api.timeout.ms."""
        return await self._run(self._commit_sync_steps(timeout))  # type: ignore[no-any-return]

    async def commit_async(self) -> None:
        """Send the acknowledgements made so far without waiting for the
        answer; the acknowledgement commit callback hears the outcome."""
        await self._run(self._commit_async_steps())
