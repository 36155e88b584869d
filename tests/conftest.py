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


@pytest.fixture
def make_topic(bootstrap):
    """make_topic(partitions=1, prefix="t") -> the name of a new topic on the broker."""
    import uuid

    from kio.blocking import BlockingClient
    from kproto.error_codes import raise_for_code

    def make(partitions=1, prefix="t"):
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        with BlockingClient(bootstrap) as client:
            r = client.request("CreateTopics", {"topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": 1,
                "assignments": [], "configs": []}], "timeout_ms": 10000})
        raise_for_code(r["topics"][0]["error_code"], r["topics"][0].get("error_message"))
        return name
    return make


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
