"""The pytest plugin of :mod:`kio.testing` (registered as entry point
``pytest11``, so installing kio is enough).

Fixtures:

* ``kafka_broker`` (session) — a running broker (:class:`kio.testing.broker.BrokerProcess`:
  ``bootstrap_servers``, ``kind``, ``log_tail()``), started on first use and
  stopped at the end of the session;
* ``kafka_bootstrap`` — its ``host:port``;
* ``kafka_topic`` — ``kafka_topic(partitions=1, prefix="t", configs=None)``
  creates a topic with a fresh name and returns the name.

Option ``--kio-broker=auto|kafka|tansu`` (ini: ``kio_broker``; default auto:
Apache Kafka where Java and Maven are installed, else Tansu). A failing test
that used the broker gets the tail of its log in the report.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

CHOICES = ("auto", "kafka", "tansu")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kio", "a real Kafka broker for tests (kio.testing)")
    group.addoption("--kio-broker", choices=CHOICES, default=None,
                    help="the broker the kafka_broker fixture starts: auto (Apache Kafka where Java "
                         "and Maven are installed, else Tansu), kafka or tansu")
    parser.addini("kio_broker", "default of --kio-broker", default="auto")


def pytest_configure(config: pytest.Config) -> None:
    _kind(config)                     # a wrong choice stops the run before any test


def _kind(config: pytest.Config) -> str:
    from kio.testing import default_broker_kind

    kind = config.getoption("--kio-broker") or config.getini("kio_broker") or "auto"
    if kind not in CHOICES:
        raise pytest.UsageError(f"kio_broker = {kind!r}: choose from {', '.join(CHOICES)}")
    return default_broker_kind() if kind == "auto" else kind


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker for the whole session (see the module's doc)."""
    from kio.testing import start_broker

    kind = _kind(request.config)
    log_path = str(tmp_path_factory.mktemp(f"kio-{kind}") / f"{kind}.log")
    broker = start_broker(kind, log_path=log_path)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_bootstrap(kafka_broker: Any) -> str:
    """The session broker's bootstrap address, ``host:port``."""
    return str(kafka_broker.bootstrap_servers)


@pytest.fixture
def kafka_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """``kafka_topic(partitions=1, prefix="t", configs=None) -> name``: a new topic."""
    from kio.testing import new_topic

    def make(partitions: int = 1, prefix: str = "t", configs: Any = None) -> str:
        return new_topic(kafka_bootstrap, partitions, prefix=prefix, configs=configs)
    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed and "kafka_broker" in getattr(item, "fixturenames", ()):
        broker = getattr(item, "funcargs", {}).get("kafka_broker")
        if broker is not None:
            report.sections.append((f"{broker.kind} broker log (tail)", broker.log_tail()))
