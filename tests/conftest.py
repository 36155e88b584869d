"""Shared fixtures: the real broker (Tansu) started by the suite itself.

One broker per test session on a free loopback port, memory storage. Its log is
attached to the report of every failing test that used it.
"""
import os

import pytest

from kio.broker import LocalBroker


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    log_path = str(tmp_path_factory.mktemp("broker") / "tansu.log")
    b = LocalBroker(log_path=log_path).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def bootstrap(broker):
    return broker.bootstrap_servers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "broker" in getattr(item, "fixturenames", ()):
        b = item.funcargs.get("broker")
        if b is not None:
            report.sections.append(("broker log (tail)", b.log_tail()))


def pytest_collection_modifyitems(config, items):
    # Tests that use the real broker get the `broker` marker, so `-m "not broker"`
    # selects the pure sans-IO unit tests.
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()) or "bootstrap" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)
