"""KIP-932 share groups ("queues for Kafka") as a sans-IO core.

A share group lets any number of members read the same partitions: the
partition leader hands each member a set of *acquired* records, locked to
it for ``share.record.lock.duration.ms`` (the broker's acquisition lock),
and the member acknowledges each one (ACCEPT: processed; RELEASE: give it
to someone again; REJECT: never deliver it again). A record whose lock runs
out goes back to the pool with its delivery count raised; after
``share.delivery.count.limit`` deliveries it is archived.

The pieces, each a small machine with the consumer package's driver
contract (:mod:`kproto.consumer`: ``poll(now)`` -> requests,
``on_response``/``on_failure``, ``next_deadline``, ``events``):

* :mod:`kproto.share.membership` - ShareGroupHeartbeat: join with a
  client-made member id and epoch 0, heartbeat at the broker's interval,
  rejoin when fenced, leave with epoch -1;
* :mod:`kproto.share.fetcher` - one share session per partition leader:
  ShareFetch (records + acquired ranges, acknowledgements piggy-backed),
  ShareAcknowledge (commits, closing a session);
* :mod:`kproto.share.acks` - acknowledgements as the protocol's batches;
* :mod:`kproto.share.core` - :class:`ShareConsumerCore`, everything behind
  the driver contract every kio driver speaks.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from kproto._lazy import lazy_names
from kproto.errors import KafkaError, KafkaTimeoutError

if TYPE_CHECKING:
    from kproto.records import Record

__all__ = ["AcknowledgeType", "ShareRecord", "GAP", "ShareCommitTimeoutError",
           "ShareStateError"]

#: The protocol's acknowledge type for an acquired offset that holds no
#: record the application could see (a control record, a compacted gap).
GAP = 0


class AcknowledgeType(enum.IntEnum):
    """How a share consumer acknowledges a record (the protocol's values)."""
    ACCEPT = 1       #: processed: never delivered again
    RELEASE = 2      #: not processed: deliver it again (to any member), delivery count + 1
    REJECT = 3       #: unprocessable: archive it, never deliver it again
    #: still processing: extend this consumer's acquisition lock (KIP-1222,
    #: Kafka 4.2+; the group needs ``share.renew.acknowledge.enable=true``).
    #: The record comes back in a later poll once the leader renewed the
    #: lock, and must then be acknowledged again (or renewed once more).
    RENEW = 4


#: What a share consumer's poll returns: a :class:`~kproto.records.Record`
#: whose ``delivery_count`` is set (1 on the first delivery, 2 after one
#: release or lock time-out, ...). The same type as a Consumer's records, as
#: in Java (ConsumerRecord.deliveryCount()), where it is None.
#: (Loaded on first use: the admin client imports this package for its share
#: group operations, and needs no record batches - issue 27.)
if TYPE_CHECKING:
    ShareRecord = Record
__getattr__, __dir__ = lazy_names(globals(), {"ShareRecord": "kproto.records:Record"})


class ShareStateError(KafkaError, RuntimeError):
    """The share consumer was used against its acknowledgement rules (Java's
    IllegalStateException): acknowledge() in implicit mode, poll() in explicit
    mode with records of the previous poll unacknowledged, acknowledging a
    record twice or one this consumer did not deliver."""


class ShareCommitTimeoutError(KafkaTimeoutError):
    """commit_sync() did not hear from every leader within its timeout
    (default.api.timeout.ms); the acknowledgements may still arrive."""

    retriable = True
