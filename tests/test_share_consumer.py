"""kio.ShareConsumer (KIP-932 share groups) against Apache Kafka 4.4, with
confluent-kafka's ShareConsumer and Kafka's own Java one (kafka-tools'
VerifiableShareConsumer) in the same share groups.

Kafka only: Tansu has no share groups (no ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge). Each test makes its own topic and share group, and sets
the group's ``share.auto.offset.reset`` to earliest (Kafka's default,
latest, would skip what was produced before the group first read).
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import kio
from kio import AcknowledgeType, Admin, Producer, ShareConsumer, ShareStateError
from kio.admin import ConfigResource
from test_admin_authorized_operations import GROUP_OPERATIONS

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

def share_group(bootstrap, **configs):
    """A new share group id with these group configs (underscores for dots),
    set with Admin.incremental_alter_configs on the group's config resource."""
    group = "sg-" + uuid.uuid4().hex[:10]
    configs = {"share.auto.offset.reset": "earliest",
               **{k.replace("_", "."): v for k, v in configs.items()}}
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert admin.incremental_alter_configs({ConfigResource.group(group): configs}) == \
            {ConfigResource.group(group): None}
    return group


def produce(bootstrap, topic, n, chunk=None):
    """n records; with ``chunk``, in batches of that many (a share fetch
    acquires whole batches in Kafka's default batch-optimized mode)."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(n):
            p.send(topic, b"%d" % i)
            if chunk and (i + 1) % chunk == 0:
                p.flush()
        p.flush()


def share_lag(bootstrap, group, topic):
    """{partition: records not yet acknowledged} (DescribeShareGroupOffsets v1).

    The lag, not the share-partition start offset: Kafka 4.4 moves the
    persisted start offset lazily - acknowledging the records at the end of
    the log leaves it where it was (lag 0) until more records come."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        return {tp.partition: o.lag for tp, o in admin.list_share_group_offsets(group).items()
                if tp.topic == topic}


def poll_until(consumer, done, timeout, on_records=None):
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        records = consumer.poll(0.5)
        if on_records is not None:
            on_records(records)
    return done()


def test_several_members_share_one_partition_and_process_every_record_once(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    total = 600
    produce(bootstrap, topic, total, chunk=10)
    seen = {}                       # offset -> member index
    dup = []
    lock = threading.Lock()
    errors = []

    def member(i):
        try:
            with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=20) as c:
                c.subscribe([topic])
                end = time.monotonic() + 60
                while time.monotonic() < end:
                    with lock:
                        if len(seen) >= total:
                            break
                    for r in c.poll(0.5):
                        assert r.topic == topic and r.partition == 0 and r.delivery_count == 1
                        with lock:
                            if r.offset in seen:
                                dup.append(r.offset)
                            seen[r.offset] = i
                    time.sleep(0.02)            # "processing": lets the others acquire their share
                c.commit_sync()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert sorted(seen) == list(range(total)) and not dup
    # more members than partitions, and the partition's records were shared out
    assert len(set(seen.values())) >= 2, {i: list(seen.values()).count(i) for i in range(3)}
    # every record accepted: nothing left to deliver
    assert share_lag(bootstrap, group, topic) == {0: 0}


def test_explicit_reject_is_archived_and_release_is_redelivered(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 10)
    deliveries = []
    acked = set()
    results = []
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group,
                       share_acknowledgement_mode="explicit") as c:
        assert c.acquisition_lock_timeout_ms is None
        c.set_acknowledgement_commit_callback(lambda offsets, err: results.append((offsets, err)))
        c.subscribe(topic)

        def handle(records):
            for r in records:
                deliveries.append((r.offset, r.delivery_count))
                if r.offset == 2:
                    c.acknowledge(r, AcknowledgeType.REJECT)
                elif r.offset == 5 and r.delivery_count == 1:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                else:
                    c.acknowledge(r)                      # ACCEPT
                    acked.add(r.offset)

        assert poll_until(c, lambda: acked == set(range(10)) - {2}, 30, handle), deliveries
        # the released record came back once, one delivery later; the rejected one never
        assert (5, 1) in deliveries and (5, 2) in deliveries
        assert c.acquisition_lock_timeout_ms == 30000                 # the broker's default
        poll_until(c, lambda: False, 2, handle)          # nothing more may come
        assert [d for d in deliveries if d[0] == 2] == [(2, 1)]
        assert sorted(o for o, _ in deliveries) == sorted(list(range(10)) + [5])
        assert c.commit_sync() is not None
    # every record is settled (accepted or archived)
    assert share_lag(bootstrap, group, topic) == {0: 0}
    # the commit callback heard about the acknowledgements, without errors
    assert results and all(err is None for _, err in results)
    assert {o for offs, _ in results for os_ in offs.values() for o in os_} >= set(range(10))


def test_explicit_mode_rules(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 5)
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group,
                       share_acknowledgement_mode="explicit") as c:
        c.subscribe([topic])
        records = []
        poll_until(c, lambda: records, 30, records.extend)
        assert records
        with pytest.raises(ShareStateError, match="not acknowledged"):
            c.poll(0.1)
        c.acknowledge(records[0], AcknowledgeType.ACCEPT)
        with pytest.raises(ShareStateError, match="acknowledged already"):
            c.acknowledge(records[0], AcknowledgeType.ACCEPT)
        with pytest.raises(ValueError, match="ACCEPT, RELEASE, REJECT or RENEW"):
            c.acknowledge(records[1], 7)
        for r in records[1:]:
            c.acknowledge(r, AcknowledgeType.RELEASE)
        c.poll(0.1)                                         # all acknowledged: allowed again
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:   # implicit
        c.subscribe([topic])
        got = []
        poll_until(c, lambda: got, 30, got.extend)
        with pytest.raises(ShareStateError, match="explicit"):
            c.acknowledge(got[0], AcknowledgeType.ACCEPT)
        # the released records came back, each delivery counted (the first
        # member may have fetched them again before it closed: then 3)
        assert all(r.delivery_count >= 2 for r in got if r.offset != records[0].offset)


_STOPPED_MEMBER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {root!r})
    from kio import ShareConsumer
    c = ShareConsumer(bootstrap_servers={bootstrap!r}, group_id={group!r},
                      share_acknowledgement_mode="explicit", max_poll_records=50)
    c.subscribe([{topic!r}])
    end = time.monotonic() + 30
    while time.monotonic() < end:
        records = c.poll(0.5)
        if records:
            print(" ".join(str(r.offset) for r in records), flush=True)
            os.kill(os.getpid(), {sig})     # stops (or dies) holding them: no ack, no leave
    sys.exit(3)
""")


def _member_that_stops(bootstrap, group, topic, sig):
    """A share consumer in a process of its own that takes records and then
    gets ``sig`` without acknowledging them: (process, offsets it held)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", _STOPPED_MEMBER.format(
        root=root, bootstrap=bootstrap, group=group, topic=topic, sig=int(sig))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode()[-2000:]
    return proc, {int(o) for o in line.split()}


def _take_all(bootstrap, group, topic, total, timeout, since):
    got = {}
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.subscribe([topic])

        def take(records):
            for r in records:
                got[r.offset] = (r.delivery_count, time.monotonic() - since)

        assert poll_until(c, lambda: len(got) == total, timeout, take), sorted(set(range(total)) - set(got))
        c.commit_sync()              # accept the last poll (close alone would release it, as Java's)
    return got


def test_records_of_a_hung_member_come_back_after_the_lock_times_out(bootstrap, make_topic):
    # A member that stops (SIGSTOP: its connections stay open, it never
    # acknowledges, heartbeats or leaves) holds its records until the
    # acquisition lock runs out; then another member gets them.
    topic = make_topic(1)
    lock_ms = 6000                     # kio.testing's Kafka allows 5000..60000 (Kafka's default floor: 15000)
    group = share_group(bootstrap, share_record_lock_duration_ms=lock_ms)
    produce(bootstrap, topic, 100)
    proc, held = _member_that_stops(bootstrap, group, topic, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        got = _take_all(bootstrap, group, topic, 100, lock_ms / 1000 + 30, stopped_at)
    finally:
        proc.kill()
        proc.wait()
    # What it held (the records it was handed, and what its fetch acquired
    # beyond them) was delivered a second time, and only once the lock ran out.
    again = {o for o, (count, _) in got.items() if count == 2}
    assert held <= again
    for off in again:
        assert got[off][1] >= lock_ms / 1000 - 1.5, (off, got[off])
    assert all(got[o][0] == 1 for o in set(range(100)) - again)
    assert share_lag(bootstrap, group, topic) == {0: 0}


def test_records_of_a_killed_member_come_back_at_once(bootstrap, make_topic):
    # SIGKILL closes the member's sockets: Kafka drops its share session with
    # the connection and releases what it held without waiting for the lock.
    topic = make_topic(1)
    group = share_group(bootstrap)           # the default 30 s lock
    produce(bootstrap, topic, 100)
    proc, held = _member_that_stops(bootstrap, group, topic, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    killed_at = time.monotonic()
    got = _take_all(bootstrap, group, topic, 100, 30, killed_at)
    assert all(got[o][0] == 2 and got[o][1] < 20 for o in held), {o: got[o] for o in held}
    assert share_lag(bootstrap, group, topic) == {0: 0}


def test_close_releases_what_was_not_acknowledged(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 20)
    c = ShareConsumer(bootstrap_servers=bootstrap, group_id=group, share_acknowledgement_mode="explicit")
    c.subscribe([topic])
    first = []
    poll_until(c, lambda: first, 30, first.extend)
    c.close()                                    # nothing acknowledged: the leader releases it all
    t0 = time.monotonic()
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c2:
        c2.subscribe([topic])
        got = {}
        poll_until(c2, lambda: len(got) == 20, 30, lambda rs: got.update((r.offset, r) for r in rs))
    assert sorted(got) == list(range(20))
    assert time.monotonic() - t0 < 12            # released at close, not after the 30 s lock
    assert {got[r.offset].delivery_count for r in first} == {2}


def test_interop_with_confluent_kafka_share_consumer(bootstrap, make_topic):
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "ShareConsumer"):
        pytest.skip("this confluent-kafka has no ShareConsumer")
    topic = make_topic(1)
    group = share_group(bootstrap)
    total = 400
    seen = {}
    dup = []
    lock = threading.Lock()
    errors = []

    def record(offset, who):
        with lock:
            if offset in seen:
                dup.append((offset, seen[offset], who))
            seen[offset] = who

    def done():
        with lock:
            return len(seen) >= total

    def kio_member():
        try:
            with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=10,
                               share_acquire_mode="record_limit") as c:
                c.subscribe([topic])
                end = time.monotonic() + 60
                while not done() and time.monotonic() < end:
                    for r in c.poll(0.5):
                        record(r.offset, "kio")
                    time.sleep(0.02)
                c.commit_sync()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def confluent_member():
        try:
            c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "max.poll.records": 10})
            try:
                c.subscribe([topic])
                end = time.monotonic() + 60
                while not done() and time.monotonic() < end:
                    for m in c.poll(0.5):  # noqa: B007
                        if m.error() is None:
                            record(m.offset(), "confluent")
                    time.sleep(0.02)
                # Accept the last poll's records before leaving: librdkafka's
                # close() alone releases them (they would come back to the others).
                c.commit_sync()
            finally:
                c.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=kio_member), threading.Thread(target=confluent_member),
               threading.Thread(target=kio_member)]
    for t in threads:
        t.start()
    time.sleep(5)                      # every member joined (librdkafka takes a few seconds)
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        for i in range(total):         # a trickle: each member gets its share as records come
            p.send(topic, b"%d" % i)
            if i % 10 == 9:
                p.flush()
                time.sleep(0.05)
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert sorted(seen) == list(range(total)) and not dup, dup
    assert set(seen.values()) == {"kio", "confluent"}, {w: list(seen.values()).count(w) for w in ("kio", "confluent")}


async def _async_members(module, bootstrap, group, topic, total):
    """Two share consumers of ``module`` (kio.aio / kio.trio) on one
    partition, explicit mode: every record accepted, offset 0 released once
    first (it must come back with delivery_count 2)."""
    seen = {}
    deliveries = []

    async def member(c):
        c.subscribe([topic])
        for _ in range(120):
            if len(seen) >= total:
                break
            for r in await c.poll(0.5):
                deliveries.append((r.offset, r.delivery_count))
                if r.offset == 0 and r.delivery_count == 1:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                    continue
                seen[r.offset] = r.delivery_count
                c.acknowledge(r)
        assert await c.commit_sync() is not None

    async with module.ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=10,
                                    share_acquire_mode="record_limit",
                                    share_acknowledgement_mode="explicit") as a, \
            module.ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=10,
                                 share_acquire_mode="record_limit",
                                 share_acknowledgement_mode="explicit") as b:
        if module.__name__ == "kio.trio":
            import trio
            async with trio.open_nursery() as n:
                n.start_soon(member, a)
                n.start_soon(member, b)
        else:
            import asyncio
            await asyncio.gather(member(a), member(b))
    return seen, deliveries


@pytest.mark.parametrize("framework", ["asyncio", "trio"])
def test_async_share_consumers(bootstrap, make_topic, framework):
    topic = make_topic(1)
    group = share_group(bootstrap)
    total = 100
    produce(bootstrap, topic, total)
    if framework == "trio":
        import trio

        import kio.trio
        seen, deliveries = trio.run(_async_members, kio.trio, bootstrap, group, topic, total)
    else:
        import asyncio

        import kio.aio
        seen, deliveries = asyncio.run(_async_members(kio.aio, bootstrap, group, topic, total))
    assert sorted(seen) == list(range(total))
    assert (0, 1) in deliveries and seen[0] == 2
    assert sum(1 for o, _ in deliveries if o != 0) == total - 1       # nothing else twice
    assert share_lag(bootstrap, group, topic) == {0: 0}


def test_admin_lists_and_describes_share_groups_and_their_offsets(bootstrap, make_topic):
    from kproto.error_codes import GroupIdNotFoundError, InvalidConfigError
    topic = make_topic(2)
    group = share_group(bootstrap)
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(30):
            p.send(topic, b"%d" % i, partition=i % 2)
    with Admin(bootstrap_servers=bootstrap) as admin:
        # the broker checks group settings: its answer, named
        bad = admin.incremental_alter_configs(
            {ConfigResource.group(group): {"share.record.lock.duration.ms": 1000}}, raise_errors=False)
        err = bad.errors()[ConfigResource.group(group)]
        # (the range's floor is kio.testing's group.share.min.record.lock.duration.ms)
        assert isinstance(err, InvalidConfigError) and "5000 to 60000" in str(err)
        with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="share-admin-test") as a, \
                ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as b:
            a.subscribe([topic])
            b.subscribe([topic])
            got = []
            end = time.monotonic() + 30
            while len(got) < 30 and time.monotonic() < end:
                got += a.poll(0.2) + b.poll(0.2)
            assert sorted((r.partition, r.offset) for r in got) == sorted(
                (p, o) for p in (0, 1) for o in range(sum(1 for r in got if r.partition == p)))
            a.commit_sync()
            b.commit_sync()
            listed = {g.group_id: g for g in admin.list_share_groups()}
            assert listed[group].state == "Stable"
            assert all(g.group_id != group for g in admin.list_consumer_groups())   # not a consumer group
            desc = admin.describe_share_groups([group])[group]
            assert desc.state == "Stable" and desc.assignor and desc.coordinator is not None
            assert desc.authorized_operations is None                 # not asked
            asked = admin.describe_share_groups([group], include_authorized_operations=True)[group]
            # Kafka without an authorizer: every group operation.
            assert asked.authorized_operations == GROUP_OPERATIONS
            members = {m.member_id: m for m in desc.members}
            assert set(members) == {a.member_id, b.member_id}
            assert members[a.member_id].client_id == "share-admin-test"
            assert all(m.subscription == (topic,) for m in members.values())
            # two members, two partitions: all of them assigned between them
            assert {tp for m in members.values() for tp in m.assignment} == {(topic, 0), (topic, 1)}
        offsets = admin.list_share_group_offsets(group)
        assert set(offsets) == {(topic, 0), (topic, 1)}
        assert all(o.lag == 0 and o.start_offset >= 0 for o in offsets.values()), offsets
        assert admin.list_share_group_offsets(group, [(topic, 1)]).keys() == {(topic, 1)}
        gone = admin.describe_share_groups(["no-such-" + group], raise_errors=False)
        assert isinstance(gone.errors()["no-such-" + group], GroupIdNotFoundError)
        assert "no-such-" + group not in {g.group_id for g in admin.list_share_groups()}
        assert group in {g.group_id for g in admin.list_share_groups(states=["Empty"])}


def test_async_admin_share_groups(bootstrap, make_topic):
    import asyncio

    import kio.aio
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 5)

    async def main():
        async with kio.aio.Admin(bootstrap_servers=bootstrap) as admin:
            async with kio.aio.ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
                c.subscribe([topic])
                got = []
                for _ in range(60):
                    got += await c.poll(0.5)
                    if len(got) == 5:
                        break
                await c.commit_sync()
                desc = (await admin.describe_share_groups([group]))[group]
                assert [m.member_id for m in desc.members] == [c.member_id]
            assert group in {g.group_id for g in await admin.list_share_groups()}
            offsets = await admin.list_share_group_offsets(group)
            assert offsets[(topic, 0)].lag == 0
            await admin.incremental_alter_configs({ConfigResource.group(group): {"share.auto.offset.reset": None}})
        return got

    assert sorted(r.offset for r in asyncio.run(main())) == list(range(5))


def test_unsubscribe_leaves_the_group_and_subscribe_joins_again(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 5)
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c, \
            Admin(bootstrap_servers=bootstrap) as admin:
        c.subscribe([topic])
        got = []
        poll_until(c, lambda: len(got) == 5, 30, got.extend)
        c.commit_sync()                                   # accepts those five
        c.unsubscribe()
        end = time.monotonic() + 15
        while admin.describe_share_groups([group])[group].members and time.monotonic() < end:
            time.sleep(0.1)
        assert admin.describe_share_groups([group])[group].members == ()
        assert c.assignment() == set()
        with pytest.raises(ShareStateError, match="not subscribed"):
            c.poll(0.2)
        produce(bootstrap, topic, 3)
        c.subscribe([topic])
        again = []
        poll_until(c, lambda: len(again) == 3, 30, again.extend)
        assert sorted(r.offset for r in again) == [5, 6, 7]           # the first five were accepted
        assert [m.member_id for m in admin.describe_share_groups([group])[group].members] == [c.member_id]


def _cpu():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def test_an_idle_share_consumer_does_not_spin(bootstrap, make_topic):
    # Two idle states: records in the application's hands, unacknowledged (a
    # prefetch the broker may not hold must not turn into a fetch loop), and
    # nothing to read at all (the broker holds each fetch fetch.max.wait.ms).
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 5)
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group,
                       share_acknowledgement_mode="explicit") as c:
        c.subscribe([topic])
        held = []
        poll_until(c, lambda: len(held) == 5, 30, held.extend)
        time.sleep(0.5)
        cpu0, t0 = _cpu(), time.monotonic()
        time.sleep(3)                                 # holding five records, not polling
        holding = (_cpu() - cpu0) / (time.monotonic() - t0)
        for r in held:
            c.acknowledge(r)
        c.commit_sync()
        cpu0, t0 = _cpu(), time.monotonic()
        assert c.poll(3) == []                        # nothing left to read
        empty = (_cpu() - cpu0) / (time.monotonic() - t0)
    assert holding < 0.05 and empty < 0.05, (holding, empty)       # share of one core


def test_interop_with_the_java_share_consumer(bootstrap, make_topic):
    # Kafka's own VerifiableShareConsumer (kafka-tools, the Java
    # KafkaShareConsumer, committing after every poll) and two kio members
    # in one share group on one partition.
    import json

    from kio.testing.kafka_broker import java_binary, tools_classpath
    topic = make_topic(1)
    group = share_group(bootstrap)
    total = 600
    seen = {}
    dup = []
    lock = threading.Lock()
    errors = []
    started = threading.Event()

    def record(offset, who):
        with lock:
            if offset in seen:
                dup.append((offset, seen[offset], who))
            seen[offset] = who

    def done():
        with lock:
            return len(seen) >= total

    java = subprocess.Popen(
        [java_binary(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", tools_classpath(),
         "org.apache.kafka.tools.VerifiableShareConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
         "--group-id", group, "--verbose", "--acknowledgement-mode", "sync"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def java_reader():
        for line in java.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue                   # the JVM's own log lines
            if ev.get("name") == "startup_complete":
                started.set()
            elif ev.get("name") == "record_data":
                record(ev["offset"], "java")

    def kio_member():
        try:
            with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=10,
                               share_acquire_mode="record_limit") as c:
                c.subscribe([topic])
                end = time.monotonic() + 90
                while not done() and time.monotonic() < end:
                    for r in c.poll(0.5):
                        record(r.offset, "kio")
                    time.sleep(0.02)
                c.commit_sync()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=java_reader, daemon=True)] + \
              [threading.Thread(target=kio_member) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        assert started.wait(60), "the Java share consumer did not start"
        time.sleep(2)                  # Java's first assignment comes with its second heartbeat (500 ms here)
        with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
            for i in range(total):
                p.send(topic, b"%d" % i)
                if i % 10 == 9:
                    p.flush()
                    time.sleep(0.05)
        for t in threads[1:]:
            t.join(120)
    finally:
        java.terminate()
        java.wait(30)
    assert not errors, errors
    assert sorted(seen) == list(range(total)) and not dup, dup
    assert set(seen.values()) == {"kio", "java"}, {w: list(seen.values()).count(w) for w in ("kio", "java")}
