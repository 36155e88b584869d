"""Error code table: classes, lookup helpers, categories (verified against Kafka's Errors.java)."""
import pickle

import pytest

from kproto import error_codes, errors
from kproto.error_codes import ERROR_TABLE, ERRORS_BY_CODE, ERRORS_BY_NAME, error_for_code, raise_for_code


def test_every_code_has_a_broker_error_class():
    assert len(ERRORS_BY_CODE) == len(ERROR_TABLE) == len(ERRORS_BY_NAME)
    for code, name, retriable, flags, message in ERROR_TABLE:
        cls = ERRORS_BY_CODE[code]
        assert ERRORS_BY_NAME[name] is cls
        assert issubclass(cls, errors.BrokerError) and issubclass(cls, errors.KafkaError)
        assert (cls.code, cls.name, cls.retriable) == (code, name, retriable)
        assert cls.invalid_metadata == ("M" in flags)
        assert cls.__name__.endswith("Error") and cls.__name__[0].isupper()
        assert getattr(error_codes, cls.__name__) is cls
        assert message and cls.default_message == message


def test_codes_cover_minus_one_to_the_newest_without_gaps():
    codes = sorted(ERRORS_BY_CODE)
    assert codes[0] == -1 and 0 not in ERRORS_BY_CODE
    assert codes[1:] == list(range(1, codes[-1] + 1))
    assert codes[-1] >= 128


@pytest.mark.parametrize("cls_name,code,retriable", [
    ("NotLeaderOrFollowerError", 6, True),
    ("UnknownTopicOrPartitionError", 3, True),
    ("CoordinatorNotAvailableError", 15, True),
    ("OutOfOrderSequenceNumberError", 45, False),
    ("DuplicateSequenceNumberError", 46, False),
    ("UnknownServerError", -1, False),
    ("InvalidTopicError", 17, False),
    ("NetworkError", 13, True),
    ("KafkaStorageError", 56, True),
    ("TopicAuthorizationFailedError", 29, False),
    ("ProducerFencedError", 90, False),
    ("ConcurrentTransactionsError", 51, True),
])
def test_well_known_classes(cls_name, code, retriable):
    cls = getattr(error_codes, cls_name)
    assert cls.code == code and cls.retriable is retriable


def test_str_and_attributes():
    e = error_for_code(6)
    assert isinstance(e, error_codes.NotLeaderOrFollowerError)
    assert str(e).startswith("NOT_LEADER_OR_FOLLOWER (code 6): ")
    assert e.retriable and e.invalid_metadata and e.code == 6 and e.name == "NOT_LEADER_OR_FOLLOWER"
    e = error_for_code(36, "Topic 'x' already exists.")
    assert str(e) == "TOPIC_ALREADY_EXISTS (code 36): Topic 'x' already exists."
    e = error_for_code(29, context="Produce to orders")
    assert str(e) == f"TOPIC_AUTHORIZATION_FAILED (code 29): Produce to orders: {e.default_message}"
    assert e.context == "Produce to orders"
    assert "TOPIC_AUTHORIZATION_FAILED" in repr(e)


def test_none_code_and_raise_for_code():
    assert error_for_code(0) is None
    assert error_codes.error_class(0) is None
    raise_for_code(0)
    with pytest.raises(error_codes.RebalanceInProgressError, match=r"REBALANCE_IN_PROGRESS \(code 27\): join: x"):
        raise_for_code(27, "x", context="join")


def test_unknown_code():
    e = error_for_code(9999, context="Metadata")
    assert isinstance(e, errors.UnknownBrokerError) and isinstance(e, errors.BrokerError)
    assert e.code == 9999 and not e.retriable
    assert "(code 9999)" in str(e) and "Metadata" in str(e)
    assert error_codes.error_class(9999) is errors.UnknownBrokerError
    with pytest.raises(errors.UnknownBrokerError):
        raise_for_code(-77)


def test_categories_and_client_side_clashes():
    assert issubclass(error_codes.TopicAuthorizationFailedError, errors.AuthorizationError)
    assert issubclass(error_codes.SaslAuthenticationFailedError, errors.AuthenticationError)
    assert issubclass(error_codes.UnsupportedSaslMechanismError, errors.AuthenticationError)
    # Broker-side REQUEST_TIMED_OUT / UNSUPPORTED_VERSION are also caught as the client-side errors.
    assert issubclass(error_codes.BrokerRequestTimedOutError, errors.RequestTimedOutError)
    assert issubclass(error_codes.BrokerUnsupportedVersionError, errors.UnsupportedVersionError)
    assert ERRORS_BY_NAME["REQUEST_TIMED_OUT"] is error_codes.BrokerRequestTimedOutError
    assert error_for_code(7).retriable and not error_for_code(35).retriable


def test_pickle_round_trip():
    for e in (error_for_code(6, "m", context="c"), error_for_code(4242), error_for_code(7)):
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e) and str(e2) == str(e) and e2.code == e.code
