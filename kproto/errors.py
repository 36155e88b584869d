"""Exceptions of the sans-IO core.

Every error the project raises derives from :class:`KafkaError`. Errors that
come from the broker as an error code are :class:`BrokerError` subclasses, one
per Kafka error code (see :mod:`kproto.error_codes`), carrying the code, its
Kafka name, whether a retry can succeed, and a message.
"""


class KafkaError(Exception):
    """Base of every exception raised by kproto and kio."""

    retriable = False


class DecodeError(KafkaError, ValueError):
    """Bytes from the network (or a caller) are truncated or malformed.

    Every decoder in kproto raises this, and only this, on bad input: never
    IndexError, struct.error or a hang.
    """


class FrameError(DecodeError):
    """A size prefix is negative or larger than the configured maximum,
    as happens when the peer is not a Kafka broker."""


class CorruptRecordError(DecodeError):
    """A record batch failed its CRC check or is otherwise corrupt."""


class UnsupportedVersionError(KafkaError):
    """The broker and this client share no version of an API."""


class UnsupportedCodecError(KafkaError):
    """A compression codec is unknown, or its optional package is not installed."""


class ProtocolError(KafkaError):
    """The broker broke the protocol (e.g. a correlation id mismatch).

    The connection that saw it must be closed."""


class ConnectionClosedError(KafkaError):
    """The connection was closed while a request was in flight."""

    retriable = True


class RequestTimedOutError(KafkaError):
    """No response arrived within request.timeout.ms."""

    retriable = True


class ConfigError(KafkaError, ValueError):
    """A configuration key or value is wrong."""


class EncodeError(KafkaError, ValueError):
    """A value cannot be encoded into the field it was given for
    (wrong type, out of range, null where the version forbids it)."""
