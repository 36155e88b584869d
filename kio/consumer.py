"""The threading consumer: :class:`Consumer`, a thin driver around ConsumerCore.

A background thread, ``kio-consumer-network-thread | <client_id>``, runs the
core over the sockets (:class:`kio._threaded.network.SocketLoop`) while the
application is busy between polls: fetches, heartbeats, commits and
rebalances progress meanwhile - the job of the Java client's heartbeat
thread, with the fetch of the next records already in flight (prefetch).
While the application keeps polling, ``poll()`` waits on the sockets itself
and that thread stands by (see :class:`kio._threaded.driver.PolledThreadDriver`).

Threading contract (as in Java, the consumer is NOT thread-safe):

* one thread uses the consumer: the first thread that calls one of its
  methods owns it; a call from any other thread raises
  :class:`ConsumerThreadError` (only :meth:`Consumer.wakeup` may be called
  from anywhere);
* ``poll`` hands over records the network thread fetched; rebalance
  listeners (``on_assign``/``on_revoke``/``on_lost``, each called with a list
  of TopicPartition) and ``commit(asynchronous=True)`` callbacks run on the
  caller's thread inside ``poll``/``commit``/``close``, as in Java. A
  revocation holds the rebalance until the listener returned, so the
  listener can still commit;
* ``close()`` commits the consumed positions (with auto-commit), runs the
  revocation listener and leaves the group.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Pattern, Set, Tuple, Union

from kio._shared.consumer_ops import ConsumerOps, PartitionBatch, WakeupError, arrow_partition_batch
from kio._threaded.driver import ConsumerThreadError, PolledThreadDriver
from kio._shared.types import CommitCallback, Offsets, Partitions, RebalanceListener
from kproto.cluster import TopicPartition
from kproto.consumer import OffsetAndMetadata
from kproto.config import Config
from kproto.consumer.core import ConsumerClosedError, ConsumerCore, OffsetAndTimestamp
from kproto.errors import KafkaTimeoutError
from kproto.records import Record

__all__ = ["Consumer", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionBatch",
           "ConsumerThreadError", "ConsumerClosedError", "KafkaTimeoutError", "WakeupError"]

log = logging.getLogger("kio.consumer")


class Consumer(PolledThreadDriver, ConsumerOps):
    """``Consumer(bootstrap_servers=..., group_id="g", auto_offset_reset="earliest")``
    or ``Consumer({"bootstrap.servers": ...})``; see the module docstring.

    The method bodies are :class:`kio._shared.consumer_ops.ConsumerOps`', shared with
    the asyncio and trio consumers; this class only runs their waits on a
    Condition the network thread notifies (:class:`kio._threaded.driver.PolledThreadDriver`)."""

    config: Config
    """The parsed settings (``consumer.config.group_id``)."""
    _client_name = "kio.Consumer"
    _refuse_awaitable = (
        "kio.Consumer runs listeners and commit callbacks on the polling thread and cannot await what "
        "one returned ({step!r}); use kio.aio or kio.trio for coroutine functions")

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._init_ops(ConsumerCore(config, **kwargs))
        self.config = self._core.config
        # Fetch responses run to max.partition.fetch.bytes (1 MiB) and more:
        # reading them in 1 MiB chunks halves the network thread's wake-ups
        # (and its CPU per record) compared with 256 KiB.
        self._start_network(self._core, f"kio-consumer-network-thread | {self.config.client_id}", 1 << 20)

    # == subscriptions ========================================================================
    def subscribe(self, topics: Union[str, Iterable[str], Pattern[str]],
                  on_assign: Optional[RebalanceListener] = None, on_revoke: Optional[RebalanceListener] = None,
                  on_lost: Optional[RebalanceListener] = None) -> None:
        """Join the group for ``topics``: a list of names, one name, a compiled
        regex or a string starting with ``^`` (a pattern). Listeners are
        called with a list of TopicPartition; ``on_lost`` defaults to
        ``on_revoke`` (as Java's onPartitionsLost)."""
        self._subscribe(topics, (on_assign, on_revoke, on_lost))

    def unsubscribe(self) -> None:
        """Leave the group (the revocation listener runs) or drop the manual
        assignment; records buffered for the partitions are dropped.
        subscribe() or assign() again to consume."""
        self._run(self._unsubscribe_steps())

    # == records ===================================================================================
    def poll(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None) -> List[Record]:
        """Records fetched so far (up to ``max_records``, default
        max.poll.records), waiting up to ``timeout`` seconds for some
        (None: until there are). Rebalance listeners and commit callbacks
        run inside poll, on this thread.

        A dead or unreachable cluster is no error here: poll returns ``[]``
        and the client keeps reconnecting (Java's poll does the same); the
        ``error_cb`` setting hears ``AllBrokersDownError`` and a WARNING is
        logged per failed connection. Authentication and TLS failures raise."""
        if self.poll_fast:
            return self._poll_now(timeout, self._core.drain, max_records)  # type: ignore[no-any-return]
        return self._run(self._poll_records_steps(timeout, max_records))

    def poll_batch(self, timeout: Optional[float] = 1.0, max_records: Optional[int] = None,
                   arrow: bool = False, headers: bool = False) -> List[PartitionBatch]:
        """Columnar poll: a list of :class:`PartitionBatch` (offsets,
        timestamps, keys, values as lists). With ``arrow=True`` they are
        pyarrow arrays built straight from the fetched bytes (int64, int64,
        binary, binary, and the int32 timestamp types; deserializers do not
        apply), plus the headers with ``headers=True`` (Arrow only; else use
        poll()). ``max_records`` defaults to everything buffered."""
        if self.poll_fast:
            self._enter()                 # another thread is refused before bad arguments are
            take, limit = self._batch_take(max_records, arrow, headers)
            return self._batches(self._poll_now(timeout, take, limit), arrow, headers)
        return self._run(self._poll_batch_steps(timeout, max_records, arrow, headers))

    def __iter__(self) -> Iterator[Record]:
        """Every record, as it arrives (``poll(1.0)`` in a loop), until the consumer is closed."""
        while not self._closed:
            yield from self.poll(1.0)

    # == commits ==================================================================================
    def commit(self, offsets: Optional[Offsets] = None, asynchronous: bool = False,
               callback: Optional[CommitCallback] = None,
               timeout: Optional[float] = None) -> Optional[Dict[TopicPartition, OffsetAndMetadata]]:
        """Commit ``offsets`` ({tp: next offset to consume, or OffsetAndMetadata};
        default: the positions of everything consumed). Synchronous by default
        (returns the committed offsets, raises on failure); with
        ``asynchronous=True`` it returns at once and ``callback(offsets, error)``
        runs on this thread in a later poll/commit/close (then commit returns
        None). ``timeout`` bounds a synchronous commit (default
        default.api.timeout.ms; then :class:`CommitTimeoutError`)."""
        return self._run(self._commit_steps(offsets, asynchronous, callback, timeout))

    def committed(self, partitions: Partitions,
                  timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndMetadata]]:
        """The group's committed offsets of these partitions: {tp:
        OffsetAndMetadata, or None (nothing committed)}."""
        return self._run(self._committed_steps(partitions, timeout))

    # == KIP-714 ==================================================================================
    def client_instance_id(self, timeout: Optional[float] = None) -> uuid.UUID:
        """The client instance id (KIP-714) the broker assigned in
        GetTelemetrySubscriptions, waiting up to ``timeout`` seconds (default
        default.api.timeout.ms; then KafkaTimeoutError) for its answer.
        IllegalStateError when there is none to wait for: ``enable.metrics.push``
        is off, or the broker has no telemetry APIs (or refused them)."""
        return self._run(self._client_instance_id_steps(timeout))

    # == positions ==================================================================================
    def position(self, partition: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The offset of the next record poll() returns for this partition;
        waits (up to ``timeout``, default default.api.timeout.ms) while it is
        being looked up (committed offset or auto.offset.reset)."""
        return self._run(self._position_steps(partition, timeout))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """For {tp: timestamp in ms}: {tp: OffsetAndTimestamp of the first
        record at or after the timestamp, or None (there is none)}."""
        return self._run(self._offsets_for_times_steps(timestamps, timeout))

    def beginning_offsets(self, partitions: Partitions,
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the first offset in the log} (ListOffsets earliest; waits up to
        ``timeout``, default default.api.timeout.ms)."""
        return self._run(self._beginning_offsets_steps(partitions, timeout))

    def end_offsets(self, partitions: Partitions,
                    timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[int]]:
        """{tp: the offset the next record written will get} (ListOffsets
        latest: the high watermark, or the last stable offset under
        read_committed; waits up to ``timeout``, default default.api.timeout.ms)."""
        return self._run(self._end_offsets_steps(partitions, timeout))

    # == closing ====================================================================================
    def close(self, timeout: Optional[float] = None) -> None:
        """Commit consumed positions (auto-commit), run the revocation
        listener, leave the group, close the connections. ``timeout`` bounds
        the commit and the LeaveGroup (default default.api.timeout.ms)."""
        self._close_client(timeout)
