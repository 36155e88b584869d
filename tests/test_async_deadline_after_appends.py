"""The async drivers' wake-ups for a new batch ask the core only for the
accumulator's due time (issue 27, branch psend).

At a low rate every record opens a batch, and send() wakes the engine's
main task for it without asking for a round (``Engine.kick(round=False)``):
the main task only sleeps again towards the core's new deadline. That
deadline is the one planned at the last round lowered to the batch's linger
time (``ProducerCore.next_deadline_after_appends``), as the threading
driver takes it: asking the full ``next_deadline`` again walked the network
client's timers (metadata, telemetry, connections) once more per batch.

Against a scripted broker on a real socket (asyncio and trio): each paced
record opens a batch and wakes the engine; the network client's
``next_deadline`` is asked once per round and never for those wake-ups,
and every record is still acknowledged.
"""
import asyncio

import pytest

try:
    from scripted_broker import ScriptedBroker, ScriptedServer
except ImportError:  # pragma: no cover
    from tests.scripted_broker import ScriptedBroker, ScriptedServer

import kio.aio
import kio.trio
from call_counter import Calls, PatchableNetworkClient, patchable_network_clients

RECORDS = 12
PAUSE_S = 0.03          # well above linger.ms and the round trip: each record opens a batch


def one_partition_broker():
    """A scripted one-node cluster with topic ``t`` (one partition) that acknowledges every Produce."""
    broker = ScriptedBroker(node_id=0)
    server = ScriptedServer(broker)
    offsets = {"next": 0}

    def produce(req):
        responses = []
        for t in req.body["topic_data"]:
            parts = []
            for pd in t["partition_data"]:
                parts.append({"index": pd["index"], "error_code": 0, "base_offset": offsets["next"],
                              "log_append_time_ms": -1, "log_start_offset": 0})
                offsets["next"] += 1
            responses.append({"name": t.get("name", ""), "topic_id": t.get("topic_id"),
                              "partition_responses": parts})
        return {"responses": responses}

    broker.on("Metadata", lambda req: {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": server.port, "rack": None}],
        "cluster_id": "scripted", "controller_id": 0,
        "topics": [{"name": "t", "error_code": 0, "partitions": [
            {"partition_index": 0, "leader_id": 0, "error_code": 0, "replica_nodes": [0], "isr_nodes": [0]}]}]})
    broker.on("InitProducerId", lambda req: {"error_code": 0, "producer_id": 7, "producer_epoch": 0})
    broker.on("Produce", produce)
    return broker, server


async def paced_sends(mod, sleep, bootstrap):
    """Send RECORDS records one at a time, PAUSE_S apart, after a first one
    settled the connection; returns the counts over the paced span."""
    async with mod.Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        await (await p.send("t", b"first", partition=0))
        core = p._core
        engine = p._engine
        assert type(core.client) is PatchableNetworkClient     # it takes Calls (see the test)
        assert engine.deadline_after_kick == core.next_deadline_after_appends
        rounds = Calls(core, "poll")
        full = Calls(core.client, "next_deadline")
        after = Calls(engine, "deadline_after_kick")
        kicks = Calls(p, "_kick_deadline")
        handles = []
        for i in range(RECORDS):
            handles.append(await p.send("t", b"v%d" % i, partition=0))
            await sleep(PAUSE_S)
        offsets = [(await h).offset for h in handles]
        return {"rounds": rounds.n, "full": full.n, "after": after.n, "kicks": kicks.n, "offsets": offsets}


@pytest.mark.parametrize("driver", ["asyncio", "trio"])
def test_a_new_batch_wakes_the_async_engine_for_its_deadline_only(driver, monkeypatch):
    patchable_network_clients(monkeypatch)      # compiled, a NetworkClient instance takes no Calls
    broker, server = one_partition_broker()
    with server:
        if driver == "asyncio":
            got = asyncio.run(paced_sends(kio.aio, asyncio.sleep, server.bootstrap))
        else:
            import trio
            got = trio.run(paced_sends, kio.trio, trio.sleep, server.bootstrap)
    assert got["offsets"] == list(range(1, RECORDS + 1))
    # every paced record opened a batch and woke the engine without a round
    assert got["kicks"] == RECORDS
    # those wake-ups took the deadline after appends (a kick that came while
    # the main task was not waiting is covered by its next round instead) ...
    assert 1 <= got["after"] <= got["kicks"]
    # ... and only rounds asked the network client for its deadline
    assert got["full"] == got["rounds"]
