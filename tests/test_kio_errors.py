"""kio.errors: every exception of kio and kproto from one module, and one
base for every timeout (issue 15, point 8)."""
import importlib
import inspect
import pickle
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kio
import kio.errors
import kproto
from kproto import errors as kerrors

ROOT = Path(__file__).resolve().parent.parent

# Raised between a core and its driver, never to the application (the driver
# waits and retries), or private to a module.
INTERNAL = {
    "kproto.producer.accumulator.BufferExhausted",
    "kproto.producer.core.MetadataPending",
    "kio.cli.common.UsageError",           # the command line's own usage message
}


def _public_modules():
    for pkg in (kproto, kio):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            try:
                yield importlib.import_module(info.name)
            except ModuleNotFoundError as e:     # an optional extra (pyspark) is not installed
                if e.name.split(".")[0] in ("kio", "kproto"):
                    raise


def _exception_classes():
    found = {}
    for mod in _public_modules():
        for name, value in vars(mod).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")
                    and value.__module__.split(".")[0] in ("kio", "kproto")):
                found.setdefault(value, f"{mod.__name__}.{name}")
    return found


def test_every_exception_is_importable_from_kio_errors():
    classes = _exception_classes()
    assert len(classes) > 150          # the error-code classes and the clients' own
    missing = []
    for cls, where in classes.items():
        if f"{cls.__module__}.{cls.__qualname__}" in INTERNAL:
            continue
        if getattr(kio.errors, cls.__name__, None) is not cls:
            missing.append(where)
        elif cls.__name__ not in kio.errors.__all__:
            missing.append(f"{where} (not in __all__)")
    assert not missing, missing


def test_kio_errors_all_names_exist_and_are_unique():
    assert len(kio.errors.__all__) == len(set(kio.errors.__all__))
    for name in kio.errors.__all__:
        assert hasattr(kio.errors, name), name
    ns = {}
    exec("from kio.errors import *", ns)
    assert "NotLeaderOrFollowerError" in ns and "KafkaTimeoutError" in ns and "AdminClosedError" in ns


def test_one_class_per_name():
    """A name means one class wherever it is imported from (the consumer's
    OffsetOutOfRangeError and InvalidGroupIdError are the error-code classes,
    as in Java)."""
    by_name = {}
    for cls in _exception_classes():
        by_name.setdefault(cls.__name__, set()).add(cls)
    assert {n: c for n, c in by_name.items() if len(c) > 1} == {}
    from kproto.consumer.core import InvalidGroupIdError
    from kproto.consumer.positions import OffsetOutOfRangeError
    assert InvalidGroupIdError is kio.errors.InvalidGroupIdError and InvalidGroupIdError.code == 24
    assert OffsetOutOfRangeError is kio.errors.OffsetOutOfRangeError and OffsetOutOfRangeError.code == 1


TIMEOUTS = ["RequestTimedOutError", "BrokerRequestTimedOutError", "DeliveryTimeoutError", "AdminTimeoutError",
            "CommitTimeoutError", "OffsetsTimeoutError", "ShareCommitTimeoutError"]


def test_every_timeout_shares_one_base():
    base = kio.errors.KafkaTimeoutError
    assert base is kerrors.KafkaTimeoutError is kio.KafkaTimeoutError
    assert issubclass(base, kerrors.KafkaError) and issubclass(base, TimeoutError)
    names = {n for n in kio.errors.__all__ if n.endswith(("TimeoutError", "TimedOutError"))}
    # a name ending in TimeoutError that is not a timeout: a broker error code
    not_timeouts = {"InvalidSessionTimeoutError", "InvalidTransactionTimeoutError"}
    assert names - not_timeouts - {"KafkaTimeoutError"} == set(TIMEOUTS)
    for name in TIMEOUTS:
        cls = getattr(kio.errors, name)
        assert issubclass(cls, base) and issubclass(cls, TimeoutError), name
        assert cls.retriable, name


@pytest.mark.parametrize("name", ["KafkaTimeoutError"] + TIMEOUTS)
def test_one_except_catches_every_timeout(name):
    cls = getattr(kio.errors, name)
    try:
        raise cls("something took too long")
    except kio.errors.KafkaTimeoutError as e:
        caught = e
    assert "something took too long" in str(caught)
    back = pickle.loads(pickle.dumps(caught))
    assert type(back) is cls and str(back) == str(caught)


def test_the_old_import_paths_still_work():
    from kio.consumer import KafkaTimeoutError as from_consumer
    from kio.producer import KafkaTimeoutError as from_producer
    from kproto.admin import AdminTimeoutError
    from kproto.consumer import CommitTimeoutError
    from kproto.producer import DeliveryTimeoutError
    assert from_consumer is from_producer is kio.errors.KafkaTimeoutError
    assert (AdminTimeoutError, CommitTimeoutError, DeliveryTimeoutError) == (
        kio.errors.AdminTimeoutError, kio.errors.CommitTimeoutError, kio.errors.DeliveryTimeoutError)


def test_error_code_stub_is_up_to_date():
    """kproto/error_codes.pyi declares the classes built at import, for type checkers."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_error_stubs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
