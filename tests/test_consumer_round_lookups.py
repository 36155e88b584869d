"""A consumer's round per Fetch answer takes no slow attribute lookup.

On Python 3.11 an ``Enum`` member looked up on its class
(``ConnectionState.READY``) goes through ``EnumMeta.__getattr__``'s generic
hook, and a ``Config`` setting (``cfg.request_timeout_ms``) is a failed
lookup plus a ``__getattr__`` call: ~4,000 instructions each, compiled or
not. A quiet consumer paid ~12 of them per Fetch answer (42k of its 446k
instructions, bench/RESULTS.md, branch cround): the connection's states
are module constants now, and the core reads its settings once.

Deterministic: the scripted broker of the core's tests, simulated time, one
record per answer; both kinds of lookup are counted (the compiled modules'
too: a class attribute lookup from C goes through the same type slot).
"""
import collections
import enum

import pytest

from kproto import config as kconfig
from kproto.cluster import TopicPartition
from kproto.consumer.core import ConsumerCore

from test_consumer_core import FakeKafka, Sim


@pytest.fixture
def lookups(monkeypatch):
    """Counts Enum class attribute lookups and Config settings read, by name,
    while ``counting[0]`` is true."""
    seen = collections.Counter()
    counting = [False]
    type_getattribute = type.__getattribute__
    config_getattr = kconfig.Config.__getattr__

    def enum_lookup(cls, name):
        if counting[0] and not name.startswith("_"):
            seen[f"{cls.__name__}.{name}"] += 1
        return type_getattribute(cls, name)

    def setting(cfg, name):
        if counting[0]:
            seen[f"config.{name}"] += 1
        return config_getattr(cfg, name)

    monkeypatch.setattr(enum.EnumMeta, "__getattribute__", enum_lookup, raising=False)
    monkeypatch.setattr(kconfig.Config, "__getattr__", setting)
    return seen, counting


def test_a_fetch_answer_round_looks_up_no_enum_member_and_no_setting(lookups):
    seen, counting = lookups
    kafka = FakeKafka(partitions={"t": 1})
    core = ConsumerCore({"bootstrap.servers": "b1:9092", "enable.auto.commit": False})
    sim = Sim(kafka, core)
    tp = TopicPartition("t", 0)
    core.assign([tp], 0)
    core.seek(tp, 0)
    got = []
    for _ in range(60):
        if len(got) == 10:
            counting[0] = True               # connected, positioned, fetching: the steady state
        kafka.produce("t", 0, 1)             # one record per answer, as a quiet topic gives
        sim.step()
        sim.now += 1
        core.poll_called(sim.now)
        core.next_deadline(sim.now)
        got.extend(core.drain(500))
    counting[0] = False
    assert [r.offset for r in got] == list(range(len(got))) and len(got) >= 50
    assert kafka.count("Fetch") >= 50        # one answer after another: the round under test ran
    assert not seen, f"slow lookups in the steady state: {dict(seen)}"
    # the public enum is unchanged for users
    from kproto.connection import ConnectionState
    assert all(c.state is ConnectionState.READY for c in core.client.connections.values())
