"""The producer's backpressure as answers, not exceptions a driver decodes.

``ProducerCore.append_serialized`` (and ``append_many``, ``wait_for_partitions``)
answer with the handle when the record could be taken, or with an
:class:`AppendBlocked`: what the call waits for (the topic's metadata, or
buffer memory), ``until`` when it gives up (``now`` + ``max.block.ms``) and
how to try again. A driver only waits - until ``until`` or until its network
side changed something - and hands the answer back to
``ProducerCore.retry_append``, which returns the result, the same answer (wait
on), or raises the :class:`KafkaTimeoutError` built here. So the deadline, the
retry and the error text are the same under every driver.

An authentication failure ends a wait at once: waiting cannot fix wrong
credentials. ``max.block.ms=0`` fails at once as well (Java's behaviour).
"""
from __future__ import annotations

from typing import Any, Callable

from kproto.errors import KafkaTimeoutError

__all__ = ["AppendBlocked", "METADATA", "MEMORY", "block", "retry", "timeout_error"]

#: what an AppendBlocked waits for
METADATA = "metadata"
MEMORY = "buffer memory"


class AppendBlocked:
    """The record(s) could not be taken now: wait (until ``until``, a
    millisecond deadline of the core's clock, or an earlier change) and pass
    this to ``ProducerCore.retry_append``.

    ``waiting_for`` is :data:`METADATA` (the partitions of ``topic`` are not
    known yet) or :data:`MEMORY` (``buffer.memory`` is full until batches are
    acknowledged); ``operation`` names the call (for error messages).
    ``wants_poll``: the last retry asked the core for something its network
    side does not know about yet (a metadata refresh): the driver must wake
    it, or both wait for each other until ``until``."""
    __slots__ = ("waiting_for", "topic", "until", "wait_ms", "operation", "wants_poll", "_attempt")

    def __init__(self, waiting_for: str, topic: str, until: float, wait_ms: float, operation: str,
                 attempt: Callable[[float], Any]) -> None:
        self.waiting_for = waiting_for
        self.topic = topic
        self.until = until
        self.wait_ms = wait_ms
        self.operation = operation
        self.wants_poll = False
        self._attempt = attempt          # now -> the result, or another AppendBlocked

    def exception(self) -> Exception:
        """The exception the raising API (``ProducerCore.send``) raises for this answer."""
        from kproto.producer.accumulator import BufferExhausted
        from kproto.producer.core import MetadataPending
        if self.waiting_for == METADATA:
            return MetadataPending(f"partitions of topic {self.topic!r} are not known yet")
        return BufferExhausted(f"buffer.memory is full: {self.operation} waits for batches to be acknowledged")

    def __repr__(self) -> str:
        return f"<AppendBlocked {self.operation} topic={self.topic!r} waiting for {self.waiting_for} until={self.until:.0f}>"


def block(core: Any, waiting_for: str, topic: str, now: float, attempt: Callable[[float], Any],
          operation: str = "send()", wait_ms: Any = None) -> AppendBlocked:
    """The first blocked answer of a call (``wait_ms`` defaults to max.block.ms)."""
    auth = core.client.auth_error
    if auth is not None:
        raise auth                      # wrong credentials: waiting will not help
    if wait_ms is None:
        wait_ms = core.config.max_block_ms
    blocked = AppendBlocked(waiting_for, topic, now + wait_ms, wait_ms, operation, attempt)
    if wait_ms <= 0:
        raise timeout_error(core, blocked)
    return blocked


def retry(core: Any, blocked: AppendBlocked, now: float) -> Any:
    """Try ``blocked``'s call again: its result, ``blocked`` itself (still
    waiting; what it waits for may have changed), or raise the timeout."""
    asked = core.cluster.need_update
    answer = blocked._attempt(now)
    # A metadata answer without the topic clears need_update; the retry sets
    # it again, after the network side computed its next deadline without it.
    blocked.wants_poll = core.cluster.need_update and not asked
    if type(answer) is not AppendBlocked:
        return answer
    blocked.waiting_for = answer.waiting_for
    blocked._attempt = answer._attempt          # send_many resumes where it stopped
    if now >= blocked.until:
        raise timeout_error(core, blocked)
    return blocked


def timeout_error(core: Any, blocked: AppendBlocked) -> KafkaTimeoutError:
    """Java's texts: the topic never appeared in metadata (with the broker's
    last error for it, or why no broker answered), or no buffer memory came back."""
    ms = round(blocked.wait_ms)
    if blocked.waiting_for == METADATA:
        err = core.metadata_error(blocked.topic)
        trouble = core.client.connection_trouble()
        return KafkaTimeoutError(
            f"topic {blocked.topic!r} not present in metadata after {ms} ms"
            + (f" (last error: {err})" if err is not None else "")
            + (f" (no broker answered: {trouble})" if err is None and trouble else ""))
    return KafkaTimeoutError(f"failed to allocate memory within the configured max blocking time {ms} ms "
                             f"(buffer.memory={core.config.buffer_memory})")
