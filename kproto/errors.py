"""Exceptions of the sans-IO core.

Every error the project raises derives from :class:`KafkaError`. Errors that
come from the broker as an error code are :class:`BrokerError` subclasses, one
per Kafka error code (see :mod:`kproto.error_codes`), carrying the code, its
Kafka name, whether a retry can succeed, and a message.
"""
from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar

_E = TypeVar("_E", bound="BrokerError")


class KafkaError(Exception):
    """Base of every exception raised by kproto and kio."""

    retriable: bool = False


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


class AllBrokersDownError(KafkaError):
    """Every known broker failed to connect (librdkafka's ``_ALL_BROKERS_DOWN``):
    told to ``error_cb``; the client keeps reconnecting."""

    retriable = True


class KafkaTimeoutError(KafkaError, TimeoutError):
    """Something did not complete in time: the one base of every timeout.

    Also a built-in :class:`TimeoutError`. Its subclasses say which bound ran
    out: :class:`RequestTimedOutError` (request.timeout.ms, one request),
    ``kproto.producer.DeliveryTimeoutError`` (delivery.timeout.ms),
    ``kproto.admin.AdminTimeoutError`` (default.api.timeout.ms of an admin
    call), ``kproto.consumer.CommitTimeoutError`` and
    ``kproto.consumer.core.OffsetsTimeoutError`` (a commit or an offsets
    lookup). Raised as itself when ``max.block.ms`` or a ``timeout`` argument
    of a kio call runs out. ``except KafkaTimeoutError`` catches them all
    (every one is importable from :mod:`kio.errors`). Retriable, as Java's
    TimeoutException: trying again may succeed.
    """

    retriable = True


class RequestTimedOutError(KafkaTimeoutError):
    """No response arrived within request.timeout.ms."""

    retriable = True


class ConfigError(KafkaError, ValueError):
    """A configuration key or value is wrong."""


class EncodeError(KafkaError, ValueError):
    """A value cannot be encoded into the field it was given for
    (wrong type, out of range, null where the version forbids it)."""


class BrokerError(KafkaError):
    """An error code returned by the broker in a response.

    One subclass per Kafka error code lives in :mod:`kproto.error_codes`
    (build instances with ``error_codes.error_for_code``). Class attributes:
    ``code`` (int), ``name`` (Kafka's UPPER_SNAKE name), ``retriable`` (a retry
    may succeed), ``invalid_metadata`` (refresh metadata before retrying);
    instance attributes ``message`` and ``context`` (what was being done).
    ``str()`` is ``"NAME (code N): message"``.
    """

    code: Optional[int] = None
    name: str = "UNKNOWN"
    retriable = False
    invalid_metadata: bool = False
    default_message: str = "the broker reported an error"
    message: str
    context: str

    def __init__(self, message: Optional[str] = None, *, context: str = "") -> None:
        msg = message or self.default_message
        if context:
            msg = f"{context}: {msg}"
        self.message = msg
        self.context = context
        super().__init__(msg)

    def __str__(self) -> str:
        return f"{self.name} (code {self.code}): {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> Tuple[Callable[..., Any], Tuple[Any, ...]]:
        # The subclasses take different constructor arguments; rebuild from state.
        return (_restore_broker_error, (type(self), self.__dict__.copy(), self.args))


def _restore_broker_error(cls: Type[_E], state: Dict[str, Any], args: Tuple[Any, ...]) -> _E:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class AuthorizationError(BrokerError):
    """The broker refused the operation for lack of an ACL (a ``*_AUTHORIZATION_FAILED`` code)."""


class AuthenticationError(BrokerError):
    """SASL authentication failed or was done wrong (codes 33, 34, 58)."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the server's certificate did not verify, the
    host name did not match, or the server refused our certificate."""
    name = "SSL_AUTHENTICATION_FAILED"


class UnknownBrokerError(BrokerError):
    """An error code this client does not know (newer broker than our table).

    Not retriable, like Java's mapping of unknown codes to UNKNOWN_SERVER_ERROR,
    but it keeps the real code so logs show what the broker said."""

    name = "UNKNOWN_ERROR_CODE"

    code: int

    def __init__(self, code: int, message: Optional[str] = None, *, context: str = "") -> None:
        self.code = code
        super().__init__(message or f"the broker returned error code {code}, which this client does not know",
                         context=context)


class NotReadyError(KafkaError):
    """A connection was asked to do something its state does not allow
    (send before READY or past max_in_flight, connect while connected).

    A caller bug or a race with a disconnect: check ``can_send()`` first."""

    retriable = True


class IllegalStateError(KafkaError):
    """A call the client's configuration or state does not allow (Java's
    IllegalStateException): ``client_instance_id()`` with
    ``enable.metrics.push`` off, or after the brokers turned telemetry off."""


class IllegalStateTransitionError(KafkaError):
    """A state machine of the core was asked to move between two states its
    transition table does not connect (see :mod:`kproto.statemachine`).

    An internal invariant is broken - a bug in kproto, or a machine driven
    against its contract - so the move is refused loudly instead of leaving
    the machine in a state nothing expects. Never retriable."""
