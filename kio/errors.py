"""Every exception kio and kproto raise, importable from this one module.

    from kio.errors import KafkaError, KafkaTimeoutError, NotLeaderOrFollowerError

* :class:`KafkaError` is the base of all of them.
* :class:`KafkaTimeoutError` (also a built-in :class:`TimeoutError`) is the
  base of every timeout: raised as itself when ``max.block.ms`` or a
  ``timeout`` argument runs out, and as :class:`RequestTimedOutError`
  (request.timeout.ms), :class:`DeliveryTimeoutError` (delivery.timeout.ms),
  :class:`AdminTimeoutError` (an admin call's deadline),
  :class:`CommitTimeoutError` and :class:`OffsetsTimeoutError`.
* Errors the broker returns as an error code are :class:`BrokerError`
  subclasses, one per code, named after it (``NOT_LEADER_OR_FOLLOWER`` is
  :class:`NotLeaderOrFollowerError`; codes 7 and 35 are
  ``BrokerRequestTimedOutError`` and ``BrokerUnsupportedVersionError``), with
  ``code``, ``name``, ``retriable`` and ``invalid_metadata``;
  :class:`AuthorizationError` and :class:`AuthenticationError` group the
  ``*_AUTHORIZATION_FAILED`` and SASL codes. ``error_for_code(code)`` builds
  one; the table is :data:`ERROR_TABLE` (see :mod:`kproto.error_codes`).
* The rest are the clients' own: a closed client, a record that cannot be
  serialized or is too large, a transaction in the wrong state, a consumer
  used from a second thread, ...

The classes are the ones the modules that raise them define (this module
only re-exports them), so ``except kio.errors.X`` and ``except
kproto.errors.X`` are the same thing.
"""
from kio.admin import AdminClosedError
from kio.testing.broker import BrokerStartError
from kio.testing.kerberos import KdcError
from kio.consumer import ConsumerThreadError, WakeupError
from kio.spark.connector import ConnectorUnavailable
from kio.spark.offsets import DataLossError
from kio.spark.sink import SparkWriteError
from kio.spark.workers import SparkWorkerError
from kproto import error_codes as _error_codes
from kproto.admin import AdminTimeoutError
from kproto.consumer.commits import CommitFailedError, CommitTimeoutError
from kproto.consumer.core import ConsumerClosedError, OffsetsTimeoutError
from kproto.consumer.fetcher import RecordTooLargeForFetchError
from kproto.consumer.positions import NoOffsetForPartitionError
from kproto.error_codes import *  # noqa: F401,F403 - one class per Kafka error code, and the helpers
from kproto.errors import (
    AuthenticationError, AuthorizationError, BrokerError, ConfigError, ConnectionClosedError,
    CorruptRecordError, DecodeError, EncodeError, FrameError, KafkaError, KafkaTimeoutError,
    NotReadyError, ProtocolError, RequestTimedOutError, SslAuthenticationError, UnknownBrokerError,
    UnsupportedCodecError, UnsupportedVersionError,
    AllBrokersDownError,            # every known broker failed to connect (told to error_cb)
    IllegalStateError,              # a call the client's settings do not allow (client_instance_id, telemetry off)
    IllegalStateTransitionError,    # a core state machine refused a move (a bug: see kproto.statemachine)
)
from kproto.oauth import OAuthTokenError, RetriableOAuthError
from kproto.producer.accumulator import RecordTooLargeError
from kproto.producer.core import ProducerClosedError, SerializationError
from kproto.producer.partitioner import InvalidPartitionError
from kproto.producer.sender import DeliveryTimeoutError
from kproto.producer.transactions import TransactionAbortedError, TransactionStateError
from kproto.share import ShareCommitTimeoutError, ShareStateError

# BrokerError, UnknownBrokerError, AuthorizationError and AuthenticationError
# are in kproto.error_codes.__all__, added below.
__all__ = [
    # kproto.errors: the base classes and the protocol-level errors
    "KafkaError", "KafkaTimeoutError", "RequestTimedOutError", "DecodeError", "FrameError",
    "CorruptRecordError", "EncodeError", "UnsupportedVersionError", "UnsupportedCodecError",
    "ProtocolError", "ConnectionClosedError", "ConfigError", "NotReadyError", "SslAuthenticationError",
    "IllegalStateError", "IllegalStateTransitionError", "AllBrokersDownError",
    # OAUTHBEARER with OIDC: the token endpoint refused or cannot be reached
    "OAuthTokenError", "RetriableOAuthError",
    # producer
    "ProducerClosedError", "SerializationError", "RecordTooLargeError", "InvalidPartitionError",
    "DeliveryTimeoutError", "TransactionStateError", "TransactionAbortedError",
    # consumer (OffsetOutOfRangeError and InvalidGroupIdError are the error-code classes)
    "ConsumerClosedError", "ConsumerThreadError", "WakeupError", "CommitFailedError",
    "CommitTimeoutError", "OffsetsTimeoutError", "NoOffsetForPartitionError",
    "RecordTooLargeForFetchError",
    # share consumer
    "ShareStateError", "ShareCommitTimeoutError",
    # admin
    "AdminClosedError", "AdminTimeoutError",
    # the local broker, Spark
    "BrokerStartError", "KdcError", "SparkWriteError", "SparkWorkerError", "DataLossError", "ConnectorUnavailable",
]
__all__ += _error_codes.__all__
