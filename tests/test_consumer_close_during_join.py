"""close() and Ctrl-C do not wait for a pending group join (issue 15, point 3).

A coordinator holds a JoinGroup until the rebalance completes - with default
settings many seconds (Tansu: half the session timeout, ~23 s; Kafka: the
initial rebalance delay, or up to the rebalance timeout while other members
rejoin) - and a broker answers the requests of one connection in order. A
LeaveGroup queued behind the held JoinGroup made ``close()`` (and so Ctrl-C
in ``with Consumer(...)``) wait for the whole join. The member must leave at
once, as Java's close does within its timeout.

The broker here is scripted (tests/scripted_broker.py, on a real socket): it
hands out a member id, then never answers the JoinGroup that carries it.
And ``kio consume --group`` picks settings that get the first records within
seconds from the suite's brokers.
"""
import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

try:
    from scripted_broker import NO_RESPONSE, ScriptedBroker, ScriptedServer
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE, ScriptedBroker, ScriptedServer

from kio.consumer import Consumer

MEMBER = "member-1"


def group_broker():
    """A one-node cluster whose coordinator never completes a join."""
    broker = ScriptedBroker(node_id=0)
    server = ScriptedServer(broker)
    node = {"node_id": 0, "host": "127.0.0.1", "port": server.port}
    broker.on("Metadata", lambda req: {
        "brokers": [{**node, "rack": None}], "cluster_id": "scripted", "controller_id": 0,
        "topics": [{"name": t["name"], "error_code": 0, "partitions": [
            {"partition_index": 0, "leader_id": 0, "error_code": 0, "replica_nodes": [0],
             "isr_nodes": [0]}]} for t in req.body["topics"] or ()]})
    broker.on("FindCoordinator", lambda req: {
        "error_code": 0, **node, "coordinators": [{"key": req.body["key"], **node, "error_code": 0}]})
    # KIP-394: the first JoinGroup gets a member id (MEMBER_ID_REQUIRED); the
    # one that carries it is held, as a coordinator holds it during a rebalance.
    broker.on("JoinGroup", lambda req: NO_RESPONSE if req.body["member_id"] else
              {"error_code": 79, "member_id": MEMBER, "generation_id": -1, "members": []})
    broker.on("LeaveGroup", lambda req: {"error_code": 0, "members": [
        {"member_id": MEMBER, "group_instance_id": None, "error_code": 0}]})
    return broker, server


def join_is_pending(broker):
    return any(r.body["member_id"] == MEMBER for r in broker.requests_of("JoinGroup"))


def left(broker):
    return [r.body for r in broker.requests_of("LeaveGroup")]


def wait_for_pending_join(consumer, broker):
    end = time.monotonic() + 10
    while not join_is_pending(broker):
        assert time.monotonic() < end, "the consumer did not get to the JoinGroup with its member id"
        consumer.poll(0.05)


# default.api.timeout.ms bounds close(): 5 s keeps a failure of these tests short.
CONF = dict(group_id="g", default_api_timeout_ms=5000)


def test_close_during_a_pending_join_leaves_at_once():
    broker, server = group_broker()
    with server:
        consumer = Consumer(bootstrap_servers=server.bootstrap, **CONF)
        consumer.subscribe(["t"])
        wait_for_pending_join(consumer, broker)
        t0 = time.monotonic()
        consumer.close()
        took = time.monotonic() - t0
    assert took < 1.5, f"close() took {took:.1f} s: it waited for the pending join"
    # ... and it left the group (the member would otherwise hold up the
    # group's next rebalance until its session times out).
    assert [b["member_id"] or b["members"][0]["member_id"] for b in left(broker)] == [MEMBER]


def test_ctrl_c_in_poll_during_a_pending_join_exits_at_once():
    broker, server = group_broker()
    main = threading.main_thread().ident
    with server:
        with pytest.raises(KeyboardInterrupt):
            with Consumer(bootstrap_servers=server.bootstrap, **CONF) as consumer:
                consumer.subscribe(["t"])
                wait_for_pending_join(consumer, broker)
                # SIGINT to the main thread while it waits in poll(), as Ctrl-C does
                threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()
                t0 = time.monotonic()
                consumer.poll(30)
        took = time.monotonic() - t0
    assert 0.15 < took < 1.5, f"Ctrl-C took {took:.1f} s to leave the consumer"
    assert len(left(broker)) == 1


@pytest.mark.parametrize("framework", ["asyncio", "trio"])
def test_async_close_during_a_pending_join_leaves_at_once(framework):
    broker, server = group_broker()

    async def run(mod):
        consumer = mod.Consumer(bootstrap_servers=server.bootstrap, **CONF, **nursery_kw)
        consumer.subscribe(["t"])
        end = time.monotonic() + 10
        while not join_is_pending(broker):
            assert time.monotonic() < end
            await consumer.poll(0.05)
        t0 = time.monotonic()
        await consumer.close()
        return time.monotonic() - t0

    with server:
        if framework == "asyncio":
            import kio.aio
            nursery_kw = {}
            took = asyncio.run(run(kio.aio))
        else:
            trio = pytest.importorskip("trio")
            import kio.trio

            async def main():
                nonlocal nursery_kw
                async with trio.open_nursery() as nursery:
                    nursery_kw = {"nursery": nursery}
                    return await run(kio.trio)
            nursery_kw = {}
            took = trio.run(main)
    assert took < 1.5, f"close() took {took:.1f} s: it waited for the pending join"
    assert len(left(broker)) == 1


# == kio consume --group ============================================================================

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def test_kio_consume_group_exits_at_once_on_ctrl_c_during_a_pending_join():
    broker, server = group_broker()
    with server:
        proc = subprocess.Popen([sys.executable, "-m", "kio", "consume", "--bootstrap-server",
                                 server.bootstrap, "--topic", "t", "--group", "g"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        try:
            end = time.monotonic() + 30
            while not join_is_pending(broker):
                assert time.monotonic() < end and proc.poll() is None, "kio consume did not join"
                time.sleep(0.02)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=10)
            took = time.monotonic() - t0
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert took < 2.5, f"kio consume took {took:.1f} s to exit after Ctrl-C"
    assert len(left(broker)) == 1


def test_kio_consume_group_prints_the_first_record_within_seconds(bootstrap):
    # Tansu holds a JoinGroup for half the session timeout: 23 s with the
    # consumer's default (45 s) - the CLI picks 6 s. Kafka (in the suite,
    # group.initial.rebalance.delay.ms=0) answers at once.
    topic, group = f"cli-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    run = dict(capture_output=True, env=ENV, timeout=60)
    res = subprocess.run([sys.executable, "-m", "kio", "produce", "--bootstrap-server", bootstrap,
                          "--topic", topic], input=b"first\n", **run)
    assert res.returncode == 0, res.stderr.decode()
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "kio", "consume", "--bootstrap-server", bootstrap,
                          "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "1"],
                         **run)
    took = time.monotonic() - t0
    assert res.returncode == 0 and res.stdout == b"first\n", res.stderr.decode()
    assert took < 8, f"kio consume --group took {took:.1f} s for its first record"
