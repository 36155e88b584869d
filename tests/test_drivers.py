"""The same producer/consumer/admin scenarios under the three drivers -
threading (kio), asyncio (kio.aio) and trio (kio.trio) - against the real
broker, plus cancellation under asyncio and trio."""
import asyncio
import concurrent.futures
import inspect
import uuid

import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio import TopicPartition as TP

try:
    from parity import opened
except ImportError:  # tests/ as a package
    from tests.parity import opened

DRIVERS = ["thread", "asyncio", "trio"]
GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}   # Tansu: join in ~3 s, Kafka: at once


def classes(kind):
    mod = {"thread": kio, "asyncio": kio.aio, "trio": kio.trio}[kind]
    return mod.Producer, mod.Consumer, mod.Admin


def run(kind, scenario, *args):
    if kind == "trio":
        return trio.run(scenario, kind, *args)
    return asyncio.run(scenario(kind, *args))


async def call(value):
    """A driver call's result: awaited for the async drivers."""
    return (await value) if inspect.isawaitable(value) else value


async def settle(handle):
    """A delivery handle's outcome: a concurrent Future (threads) or an awaitable."""
    if isinstance(handle, concurrent.futures.Future):
        return handle.result(30)
    return await handle


async def sleep(kind, seconds):
    if kind == "trio":
        await trio.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


def topic_name():
    return f"drv-{uuid.uuid4().hex[:8]}"


async def poll_until(consumer, count, max_polls=200, batch=False):
    out = []
    for _ in range(max_polls):
        if batch:
            for b in await call(consumer.poll_batch(timeout=0.2)):
                out.extend(zip([b.partition] * len(b), b.offsets, b.keys, b.values))
        else:
            out.extend(await call(consumer.poll(timeout=0.2)))
        if len(out) >= count:
            break
    return out


# -- scenarios -----------------------------------------------------------------------------------

async def round_trip(kind, bootstrap):
    Producer, Consumer, Admin = classes(kind)
    topic = topic_name()
    async with opened(Admin(bootstrap_servers=bootstrap)) as admin:
        await call(admin.create_topics([topic], num_partitions=2))
        # Kafka answers CreateTopics once the controller has the topic; the broker's
        # metadata can lag a moment (seen under load; Java's Admin sees the same)
        for _ in range(150):
            described = await call(admin.describe_topics([topic], raise_errors=False))
            if topic in described.values():
                break
            await sleep(kind, 0.1)
        assert len(described.values()[topic].partitions) == 2
    delivered = []
    async with opened(Producer(bootstrap_servers=bootstrap, linger_ms=2)) as p:
        handles = [await call(p.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i)],
                                     on_delivery=lambda err, md: delivered.append((err, md))))
                   for i in range(200)]
        bulk = await call(p.send_many(topic, [b"b%d" % i for i in range(300)], partition=1))
        assert await call(p.flush()) == 0
        mds = [await settle(h) for h in handles]
        assert (await settle(bulk)).count == 300
    assert len(delivered) == 200 and all(err is None for err, _ in delivered)
    assert sorted((md.partition, md.offset) for md in mds) == sorted((md.partition, md.offset)
                                                                      for _, md in delivered)
    async with opened(Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False)) as c:
        c.assign([TP(topic, 0), TP(topic, 1)])
        c.seek_to_beginning()
        records = await poll_until(c, 500)
        keyed = {r.key: (r.value, r.headers) for r in records if r.key}
        assert keyed == {b"k%d" % i: (b"v%d" % i, [("i", b"%d" % i)]) for i in range(200)}
        assert sorted(r.value for r in records if r.key is None) == sorted(b"b%d" % i for i in range(300))
        for md in mds[:3]:                                 # the offsets the handles reported are real
            assert any(r.partition == md.partition and r.offset == md.offset for r in records)
        c.seek(TP(topic, 1), 0)
        again = await poll_until(c, 1, batch=True)
        assert again and all(p == 1 for p, *_ in again)


async def group_rebalance_and_commits(kind, bootstrap, group_settings=None):
    """Two members rebalance and commit; ``group_settings`` (default GROUP,
    the classic protocol) also runs it with group.protocol=consumer."""
    settings = GROUP if group_settings is None else group_settings
    Producer, Consumer, Admin = classes(kind)
    topic = topic_name()
    group = f"g-{topic}"
    async with opened(Admin(bootstrap_servers=bootstrap)) as admin:
        await call(admin.create_topics([topic], num_partitions=3))
    async with opened(Producer(bootstrap_servers=bootstrap)) as p:
        for i in range(60):
            await settle(await call(p.send(topic, b"m%d" % i, partition=i % 3)))
    events = {"c1": [], "c2": []}
    c1 = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, **settings)
    c2 = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=True, **settings)
    async with opened(c1), opened(c2):
        c1.subscribe([topic], on_assign=lambda ps: events["c1"].append(("assign", ps)),
                     on_revoke=lambda ps: events["c1"].append(("revoke", ps)))
        got = await poll_until(c1, 60)
        assert len(got) >= 60
        committed = await call(c1.commit())
        assert sum(om.offset for om in committed.values()) == 60
        c2.subscribe([topic], on_assign=lambda ps: events["c2"].append(("assign", ps)))
        for _ in range(150):                               # both poll while the group rebalances
            await call(c1.poll(timeout=0.1))
            await call(c2.poll(timeout=0.1))
            if c1.assignment() and c2.assignment() and len(c1.assignment() | c2.assignment()) == 3:
                break
        assert c1.assignment() and c2.assignment()
        assert not c1.assignment() & c2.assignment()
        # what c2 got, c1 gave up first (all of it with the classic EAGER
        # assignor, only what moves with the consumer protocol)
        revoked = set().union(*(set(ps) for k, ps in events["c1"] if k == "revoke"))
        assert c2.assignment() <= revoked, (events["c1"], c2.assignment())
        done = []
        await call(c1.commit(asynchronous=True, callback=lambda offs, err: done.append(err)))
        for _ in range(50):
            await call(c1.poll(timeout=0.1))
            if done:
                break
        assert done == [None]
        seen = await call(c1.committed([TP(topic, p) for p in range(3)]))
        assert sum(om.offset for om in seen.values() if om is not None) == 60


async def close_commits(kind, bootstrap):
    Producer, Consumer, Admin = classes(kind)
    topic = topic_name()
    group = f"g-{topic}"
    async with opened(Producer(bootstrap_servers=bootstrap)) as p:
        await call(p.send_many(topic, [b"x%d" % i for i in range(40)], partition=0))
    async with opened(Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                               **GROUP)) as c:
        c.subscribe([topic])
        assert len(await poll_until(c, 40)) == 40
    async with opened(Admin(bootstrap_servers=bootstrap)) as admin:
        offsets = await call(admin.list_consumer_group_offsets(group))
    assert offsets[TP(topic, 0)].offset == 40


@pytest.mark.parametrize("kind", DRIVERS)
def test_round_trip(kind, bootstrap):
    run(kind, round_trip, bootstrap)


@pytest.mark.parametrize("kind", DRIVERS)
def test_group_rebalance_and_commits(kind, bootstrap):
    run(kind, group_rebalance_and_commits, bootstrap)


@pytest.mark.parametrize("kind", DRIVERS)
def test_close_commits_the_consumed_positions(kind, bootstrap):
    run(kind, close_commits, bootstrap)


# -- cancellation ----------------------------------------------------------------------------------

def test_trio_cancelled_poll_send_commit_and_close_leave_the_client_consistent(bootstrap):
    topic = topic_name()

    async def main():
        async with kio.trio.Producer(bootstrap_servers=bootstrap) as p:
            with trio.move_on_after(0):                   # cancelled before it could wait
                await p.send(topic, b"never?", partition=0)
            first = await p.send(topic, b"a", partition=0)
            assert (await first).offset in (0, 1)
            with trio.CancelScope() as scope:            # close in a cancelled scope still delivers
                scope.cancel()
                last = await p.send(topic, b"b", partition=0)
                await p.close()
            assert (await last).offset >= 1 and p._closed
        async with kio.trio.Consumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     **GROUP) as c:
            c.subscribe([topic])
            early = []
            with trio.move_on_after(0.05):                # a cancelled poll takes nothing away
                early = await c.poll(timeout=5)           # (a fast broker may answer in time)
            values = [r.value for r in early]
            if len(values) < 2:
                values += [r.value for r in await poll_until(c, 2 - len(values))]
            assert values[-2:] == [b"a", b"b"]
            with trio.move_on_after(0):
                await c.commit()                          # cancelled: the commit still goes out
            committed = await c.commit()                  # and a later one works
            assert committed[TP(topic, 0)].offset == len(values)

    trio.run(main)


def test_asyncio_cancelled_poll_and_close_in_a_cancelled_task(bootstrap):
    topic = topic_name()

    async def main():
        p = kio.aio.Producer(bootstrap_servers=bootstrap)
        handle = await p.send(topic, b"z", partition=0)

        async def closer():
            await p.close()
        task = asyncio.ensure_future(closer())
        await asyncio.sleep(0)
        task.cancel()                                     # close is shielded: it finishes anyway
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if p._closed:
                break
            await asyncio.sleep(0.05)
        assert p._closed and (await handle).offset == 0
        async with kio.aio.Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as c:
            c.assign([TP(topic, 0)])
            c.seek_to_beginning()
            poll = asyncio.ensure_future(c.poll(timeout=5))
            await asyncio.sleep(0)
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            assert [r.value for r in await poll_until(c, 1)] == [b"z"]

    asyncio.run(main())


def test_trio_client_needs_a_nursery_and_takes_the_users(bootstrap):
    async def main():
        p = kio.trio.Producer(bootstrap_servers=bootstrap)
        with pytest.raises(RuntimeError, match="nursery"):
            await p.send("t", b"v")
        async with trio.open_nursery() as nursery:
            p = kio.trio.Producer(bootstrap_servers=bootstrap, nursery=nursery)
            md = await (await p.send(topic_name(), b"v"))
            assert md.offset == 0
            await p.close()                                # then the nursery can finish

    trio.run(main)
