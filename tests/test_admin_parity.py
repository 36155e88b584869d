"""The same admin scenarios under the three drivers - kio.Admin (blocking),
kio.aio.Admin, kio.trio.Admin - must tell the same story (issue 16 point 3):
the operations are written once (:mod:`kio._shared.admin_ops`), and this test
catches a driver whose ``_call`` drifts anyway (another exception type, a
lost timeout, a call that works - or hangs - after close).

Run against both brokers: each transcript is compared across the drivers
of one broker, so Tansu's own answers (it deviates from Kafka here and
there) are fine as long as every driver reports them alike; the threading
transcript is then checked against what Kafka answers.
"""
import logging
import time
import uuid

import pytest

from kio.admin import ConfigResource, NewTopic

try:
    from parity import all_the_same, call, module, nowhere, opened, outcome, sleep
except ImportError:  # tests/ as a package
    from tests.parity import all_the_same, call, module, nowhere, opened, outcome, sleep


def _error_names(handle, role_of):
    return {role_of[k]: type(e).__name__ for k, e in handle.errors().items()}


async def topics_scenario(kind, bootstrap):
    names = {role: f"par-{kind}-{role}-{uuid.uuid4().hex[:6]}" for role in ("a", "b", "c", "missing")}
    a, b, c, missing = (names[r] for r in ("a", "b", "c", "missing"))
    role_of = {name: role for role, name in names.items()}
    out = []
    async with opened(module(kind).Admin(bootstrap_servers=bootstrap)) as admin:
        ids = await call(admin.create_topics([a, NewTopic(b, 3, 1, {"retention.ms": "3600000"})],
                                             num_partitions=2))
        out.append(("create", sorted(role_of[t] for t in ids), sorted({type(v).__name__ for v in ids.values()})))
        out.append(("create again", await outcome(admin.create_topics, [a])))
        h = await call(admin.create_topics([a, c], raise_errors=False))
        out.append(("create, raise_errors=False", type(h).__name__, _error_names(h, role_of),
                    sorted(role_of[t] for t in h.values())))
        # A created topic can take a moment to reach every broker's metadata (as for Java's Admin).
        end = time.monotonic() + 15
        while True:
            described = await outcome(admin.describe_topics, [a, b, c])
            if described[0] == "ok" or time.monotonic() > end:
                break
            await sleep(0.1)
        out.append(("partitions", described[0], described[0] == "ok" and sorted(
            (role_of[t], len(d.partitions)) for t, d in described[1].items())))
        listed = await call(admin.list_topics())
        out.append(("listed", sorted(role_of[t] for t in listed if t in role_of)))
        out.append(("describe a missing topic", await outcome(admin.describe_topics, [missing])))
        h = await call(admin.describe_topics([a, missing], raise_errors=False))
        out.append(("describe, raise_errors=False", _error_names(h, role_of), sorted(role_of[t] for t in h.values())))
        resource = ConfigResource.topic(b)
        configs = await call(admin.describe_configs([resource]))
        out.append(("retention.ms", configs[resource]["retention.ms"].value))
        altered = await outcome(admin.incremental_alter_configs, {resource: {"retention.ms": "7200000"}})
        out.append(("alter", altered[0], altered[1] == {resource: None} if altered[0] == "ok" else altered[1]))
        # Kafka applies the change through its metadata log: describe may show the old value a moment
        end = time.monotonic() + 15
        while True:
            value = (await call(admin.describe_configs([resource])))[resource]["retention.ms"].value
            if value == "7200000" or time.monotonic() > end:
                break
            await sleep(0.1)
        out.append(("retention.ms altered", value))
        out.append(("cluster has nodes", bool((await call(admin.describe_cluster())).nodes)))
        start = time.monotonic()
        listed = await call(admin.list_topics(timeout=10.0, list_internal=True))
        out.append(("list with a timeout, internal too", sorted(role_of[t] for t in listed if t in role_of),
                    time.monotonic() - start < 10))
        deleted = await call(admin.delete_topics([a, b, c]))
        out.append(("delete", sorted(role_of[t] for t in deleted)))
        out.append(("delete a missing topic", await outcome(admin.delete_topics, [missing])))
        h = await call(admin.delete_topics([missing], raise_errors=False))
        out.append(("delete, raise_errors=False", _error_names(h, role_of)))
    out.append(("close again", await outcome(admin.close)))
    for name, args in [("list_topics", ()), ("create_topics", ([a],)), ("describe_topics", ([a],)),
                       ("describe_cluster", ()), ("describe_configs", ([resource],))]:
        out.append((name + " after close", await outcome(getattr(admin, name), *args)))
    return out


def test_topics_configs_and_errors_the_same_under_every_driver(bootstrap, broker_kind):
    out = dict((row[0], row[1:]) for row in all_the_same(topics_scenario, bootstrap))
    # The same calls, with errors raised or handed back, under every driver (above); what the
    # threading driver heard, the same from both brokers:
    assert out["create"] == (["a", "b"], ["UUID"])
    assert out["create again"] == (("raised", "TopicAlreadyExistsError"),)
    assert out["create, raise_errors=False"] == ("AdminHandle", {"a": "TopicAlreadyExistsError"}, ["c"])
    # c has the broker's default partition count: Kafka's num.partitions (1 here), Tansu's 3
    assert out["partitions"] == ("ok", [("a", 2), ("b", 3), ("c", 1 if broker_kind == "kafka" else 3)])
    assert out["listed"] == (["a", "b", "c"],)
    assert out["describe a missing topic"] == (("raised", "UnknownTopicOrPartitionError"),)
    assert out["describe, raise_errors=False"] == ({"missing": "UnknownTopicOrPartitionError"}, ["a"])
    assert out["retention.ms"] == ("3600000",)
    assert out["alter"] == ("ok", True)
    assert out["retention.ms altered"] == ("7200000",)
    assert out["cluster has nodes"] == (True,)
    assert out["list with a timeout, internal too"] == (["a", "b", "c"], True)
    assert out["delete"] == (["a", "b", "c"],)
    assert out["delete a missing topic"] == (("raised", "UnknownTopicOrPartitionError"),)
    assert out["delete, raise_errors=False"] == ({"missing": "UnknownTopicOrPartitionError"},)
    assert out["close again"] == (("ok", None),)
    for name in ("list_topics", "create_topics", "describe_topics", "describe_cluster", "describe_configs"):
        # the async drivers used to raise the closed core's KafkaError here, not AdminClosedError
        assert out[name + " after close"] == (("raised", "AdminClosedError"),), name


async def no_broker_scenario(kind, bootstrap):
    out = []
    async with opened(module(kind).Admin(bootstrap_servers=bootstrap, reconnect_backoff_ms=50,
                                         reconnect_backoff_max_ms=100)) as admin:
        for name, args in [("list_topics", ()), ("create_topics", (["t"],)), ("describe_cluster", ())]:
            start = time.monotonic()
            out.append((name, await outcome(getattr(admin, name), *args, timeout=0.5), time.monotonic() - start < 3))
        h = await call(admin.describe_topics(["t"], timeout=0.5, raise_errors=False))
        out.append(("describe_topics, raise_errors=False", {k: type(e).__name__ for k, e in h.errors().items()}))
    return out


def test_timeouts_without_a_broker_the_same_under_every_driver():
    out = all_the_same(no_broker_scenario, nowhere())
    assert out == [("list_topics", ("raised", "AdminTimeoutError"), True),
                   ("create_topics", ("raised", "AdminTimeoutError"), True),
                   ("describe_cluster", ("raised", "AdminTimeoutError"), True),
                   ("describe_topics, raise_errors=False", {"t": "AdminTimeoutError"})]


async def failed_network_scenario(kind, bootstrap):
    """The admin's network side fails (its core raises): the call waiting for
    it and every later one raise AdminClosedError, under every driver - the
    async ones used to wait forever once their network task had died."""
    out = []
    admin = module(kind).Admin(bootstrap_servers=bootstrap)
    async with opened(admin):

        def broken_poll(now):
            raise RuntimeError("the core broke")
        admin._core.poll = broken_poll           # the next round of the network side fails
        start = time.monotonic()
        out.append(("list_topics", await outcome(admin.list_topics, timeout=5.0), time.monotonic() - start < 4))
        for name, args in [("list_topics", ()), ("describe_cluster", ()), ("create_topics", (["t"],))]:
            out.append((name + " again", await outcome(getattr(admin, name), *args)))
        out.append(("close", await outcome(admin.close)))
    out.append(("list_topics after close", await outcome(admin.list_topics)))
    return out


def test_a_failed_network_side_raises_the_same_error_under_every_driver(caplog):
    caplog.set_level(logging.CRITICAL, logger="kio")          # the failure is logged; expected here
    caplog.set_level(logging.CRITICAL, logger="kio.async")
    caplog.set_level(logging.CRITICAL, logger="kio.admin")
    out = all_the_same(failed_network_scenario, nowhere())
    assert out == [("list_topics", ("raised", "AdminClosedError"), True),
                   ("list_topics again", ("raised", "AdminClosedError")),
                   ("describe_cluster again", ("raised", "AdminClosedError")),
                   ("create_topics again", ("raised", "AdminClosedError")),
                   ("close", ("ok", None)),
                   ("list_topics after close", ("raised", "AdminClosedError"))]
