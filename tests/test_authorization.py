"""Authorization failures against a secured Apache Kafka (SASL_SSL, ACLs
through StandardAuthorizer: the ``secured_kafka`` fixture of conftest.py)
surface as Java's do: at once, as the specific ``*AuthorizationFailedError``
naming the resource, not as a timeout or a silent empty poll.

``alice`` may do everything on topics and groups named ``ok-*``, only
DESCRIBE topics named ``see-*`` (metadata answers; Produce and Fetch are
refused) and nothing on ``deny-*`` (metadata answers TOPIC_AUTHORIZATION_FAILED).
The driver parity tests run the same scenarios under the threading, asyncio
and trio drivers and compare what they saw."""
import time
import uuid

import pytest

import kio
from kio import TopicPartition as TP
from kio.admin import ConfigResource, NewTopic
from kproto.error_codes import (
    GroupAuthorizationFailedError, TopicAuthorizationFailedError, TransactionalIdAuthorizationFailedError,
)

try:
    from parity import all_the_same, call, module, opened, resolved, text
except ImportError:  # tests/ as a package
    from tests.parity import all_the_same, call, module, opened, resolved, text

#: An authorization error must come in about a second; this much leaves room for a busy machine.
FAST_S = 4.0
#: The producer's wait for metadata: a failure that waits it out (the bug) ends the test in time.
MAX_BLOCK_MS = 8000
#: The parity scenario waits at most this in each of its three runs.
PARITY_MAX_BLOCK_MS = 3000


def alice(broker, **extra):
    return {**broker.client_config("alice", "SCRAM-SHA-512", "SASL_SSL"), **extra}


@pytest.fixture(scope="module")
def topics(secured_kafka):
    """ok / see / deny topics (one partition, one record each), made by the super user."""
    u = uuid.uuid4().hex[:8]
    names = {kind: f"{kind}-{u}" for kind in ("ok", "see", "deny")}
    admin_cfg = secured_kafka.client_config()
    with kio.Admin(**admin_cfg) as a:
        a.create_topics([NewTopic(n, 1, 1) for n in names.values()])
    with kio.Producer(**admin_cfg) as p:
        for n in names.values():
            p.send(n, b"record", partition=0).result(20)
    names["u"] = u
    return names


def raises_fast(exc_type, fn, *args, **kwargs):
    """The exception ``fn`` raises (it must be ``exc_type``, within FAST_S)."""
    start = time.monotonic()
    with pytest.raises(exc_type) as e:
        fn(*args, **kwargs)
    assert time.monotonic() - start < FAST_S, f"{exc_type.__name__} after {time.monotonic() - start:.1f} s"
    assert not e.value.retriable
    return e.value


def poll_error(consumer, seconds=FAST_S):
    """What ``poll`` raises within ``seconds`` (None: it raised nothing)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            consumer.poll(0.2)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            return e
    return None


def refused(err, *topics):
    """A TopicAuthorizationFailedError that names exactly ``topics`` (Java's unauthorizedTopics())."""
    assert isinstance(err, TopicAuthorizationFailedError), repr(err)
    assert err.unauthorized_topics == frozenset(topics), str(err)
    assert all(t in str(err) for t in topics)
    return True


# == producer ===========================================================================================

def test_send_partitions_for_and_send_many_to_a_topic_without_acl_fail_at_once(secured_kafka, topics):
    deny, see, ok = topics["deny"], topics["see"], topics["ok"]
    with kio.Producer(**alice(secured_kafka, max_block_ms=MAX_BLOCK_MS)) as p:
        # no DESCRIBE: the metadata answer refuses the topic (Java: TopicAuthorizationException, no wait)
        assert refused(raises_fast(TopicAuthorizationFailedError, p.send, deny, b"v"), deny)
        assert refused(raises_fast(TopicAuthorizationFailedError, p.partitions_for, deny), deny)
        assert refused(raises_fast(TopicAuthorizationFailedError, p.send_many, deny, [b"a", b"b"]), deny)
        # the producer stays usable for the topics it may write
        assert p.send(ok, b"v").result(10).topic == ok
        # each call asks again (an ACL may have come) and fails again
        assert refused(raises_fast(TopicAuthorizationFailedError, p.send, deny, b"v"), deny)
        # DESCRIBE without WRITE: the Produce answer fails the record
        err = raises_fast(TopicAuthorizationFailedError, p.send(see, b"v").result, 10)
        assert see in str(err)
        assert p.send(ok, b"v2").result(10).topic == ok


def test_a_transactional_id_without_acl_fails_init_transactions(secured_kafka, topics):
    tid = f"deny-tx-{topics['u']}"
    with kio.Producer(**alice(secured_kafka, transactional_id=tid, max_block_ms=MAX_BLOCK_MS)) as p:
        err = raises_fast(TransactionalIdAuthorizationFailedError, p.init_transactions)
        assert tid in str(err)


# == consumer ===========================================================================================

def test_consumer_poll_position_and_offsets_raise_for_an_assigned_topic_without_acl(secured_kafka, topics):
    deny, see, ok = topics["deny"], topics["see"], topics["ok"]
    with kio.Consumer(**alice(secured_kafka, auto_offset_reset="earliest")) as c:
        c.assign([TP(deny, 0)])
        start = time.monotonic()
        assert refused(poll_error(c), deny)
        assert time.monotonic() - start < FAST_S
        assert refused(poll_error(c), deny)                    # every poll after a metadata answer
        assert refused(raises_fast(TopicAuthorizationFailedError, c.position, TP(deny, 0), timeout=FAST_S), deny)
        assert refused(raises_fast(TopicAuthorizationFailedError, c.beginning_offsets, [TP(deny, 0)],
                                   timeout=FAST_S), deny)
        # DESCRIBE without READ: the Fetch answer refuses the partition
        c.assign([TP(see, 0)])
        err = poll_error(c)
        assert isinstance(err, TopicAuthorizationFailedError) and see in str(err)
        # the consumer stays usable
        c.assign([TP(ok, 0)])
        end = time.monotonic() + 10
        got = []
        while not got and time.monotonic() < end:
            got = c.poll(0.2)
        assert [r.value for r in got][:1] == [b"record"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_poll_raises_for_a_subscribed_topic_without_acl(secured_kafka, topics, protocol):
    deny, ok = topics["deny"], topics["ok"]
    with kio.Consumer(**alice(secured_kafka, group_id=f"ok-sub-{protocol}-{topics['u']}",
                             group_protocol=protocol, auto_offset_reset="earliest")) as c:
        c.subscribe([deny, ok])
        start = time.monotonic()
        assert refused(poll_error(c), deny)                    # the refused one only, not ok-*
        assert time.monotonic() - start < FAST_S


def test_commit_on_a_group_without_acl_raises(secured_kafka, topics):
    ok = topics["ok"]
    with kio.Consumer(**alice(secured_kafka, group_id=f"deny-group-{topics['u']}", enable_auto_commit=False)) as c:
        c.assign([TP(ok, 0)])
        err = raises_fast(GroupAuthorizationFailedError, c.commit, {TP(ok, 0): 1})
        assert f"deny-group-{topics['u']}" in str(err)


def test_poll_on_a_group_without_acl_raises(secured_kafka, topics):
    ok = topics["ok"]
    with kio.Consumer(**alice(secured_kafka, group_id=f"deny-poll-{topics['u']}")) as c:
        c.assign([TP(ok, 0)])
        err = poll_error(c)
        assert isinstance(err, GroupAuthorizationFailedError), repr(err)


# == an ACL added later ==================================================================================

def test_an_acl_added_later_lets_the_producer_and_the_consumer_in(secured_kafka, topics):
    """Not fatal, as in Java: the producer asks again on the next send, a
    consumer-protocol member keeps heartbeating and joins once allowed."""
    later = f"later-{topics['u']}"
    with kio.Admin(**secured_kafka.client_config()) as a:
        a.create_topics([NewTopic(later, 1, 1)])
    with kio.Producer(**alice(secured_kafka, max_block_ms=MAX_BLOCK_MS)) as p, \
            kio.Consumer(**alice(secured_kafka, group_id=f"ok-later-{topics['u']}", group_protocol="consumer",
                                 auto_offset_reset="earliest")) as c:
        assert refused(raises_fast(TopicAuthorizationFailedError, p.send, later, b"v"), later)
        c.subscribe([later])
        assert refused(poll_error(c), later)
        secured_kafka.allow("User:alice", "TOPIC", later, ["ALL"])
        end = time.monotonic() + 15
        while True:
            try:
                md = p.send(later, b"after the ACL").result(10)
                break
            except TopicAuthorizationFailedError:
                assert time.monotonic() < end, "the producer never saw the new ACL"
                time.sleep(0.2)
        assert md.topic == later
        got = []
        while not got:
            assert time.monotonic() < end, "the consumer never joined after the ACL came"
            try:
                got = c.poll(0.2)
            except TopicAuthorizationFailedError:
                pass                                           # told until the broker lets it in
        assert [r.value for r in got] == [b"after the ACL"]


# == admin ==============================================================================================

def test_admin_calls_on_resources_without_acl_raise_the_specific_error(secured_kafka, topics):
    deny, u = topics["deny"], topics["u"]
    group = f"deny-group-{u}"
    calls = [
        ("describe_topics", TopicAuthorizationFailedError, lambda a: a.describe_topics([deny])),
        ("create_topics", TopicAuthorizationFailedError, lambda a: a.create_topics([f"deny-new-{u}"])),
        ("delete_topics", TopicAuthorizationFailedError, lambda a: a.delete_topics([deny])),
        ("create_partitions", TopicAuthorizationFailedError, lambda a: a.create_partitions({deny: 2})),
        ("describe_configs", TopicAuthorizationFailedError,
         lambda a: a.describe_configs([ConfigResource.topic(deny)])),
        ("incremental_alter_configs", TopicAuthorizationFailedError,
         lambda a: a.incremental_alter_configs({ConfigResource.topic(deny): {"retention.ms": "1000"}})),
        ("list_offsets", TopicAuthorizationFailedError, lambda a: a.list_offsets({TP(deny, 0): "latest"})),
        ("delete_records", TopicAuthorizationFailedError, lambda a: a.delete_records({TP(deny, 0): 1})),
        ("list_consumer_group_offsets", GroupAuthorizationFailedError,
         lambda a: a.list_consumer_group_offsets(group)),
        ("describe_consumer_groups", GroupAuthorizationFailedError,
         lambda a: a.describe_consumer_groups([group])),
        ("delete_consumer_groups", GroupAuthorizationFailedError, lambda a: a.delete_consumer_groups([group])),
    ]
    with kio.Admin(**alice(secured_kafka)) as a:
        for name, exc_type, fn in calls:
            err = raises_fast(exc_type, fn, a)
            assert (deny in str(err) or f"deny-new-{u}" in str(err)) if exc_type is TopicAuthorizationFailedError \
                else group in str(err), (name, err)
        assert topics["ok"] in a.list_topics() and deny not in a.list_topics()   # filtered, as Kafka does


# == share consumer =====================================================================================

def test_share_consumer_poll_raises_for_a_topic_or_group_without_acl(secured_kafka, topics):
    deny, ok, u = topics["deny"], topics["ok"], topics["u"]
    with kio.ShareConsumer(**alice(secured_kafka, group_id=f"ok-share-{u}")) as c:
        c.subscribe([deny])
        start = time.monotonic()
        assert refused(poll_error(c), deny)
        assert time.monotonic() - start < FAST_S
    with kio.ShareConsumer(**alice(secured_kafka, group_id=f"deny-share-{u}")) as c:
        c.subscribe([ok])
        err = poll_error(c)
        assert isinstance(err, GroupAuthorizationFailedError) and f"deny-share-{u}" in str(err)


# == the same under every driver ========================================================================

async def fails_fast(fn, *args, names=()):
    """('raised', type, text, fast?) of a call that must fail, or ('ok', ...)."""
    start = time.monotonic()
    try:
        result = await call(fn(*args), 30.0)
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return ("raised",) + text(e, *names) + (time.monotonic() - start < FAST_S,)
    return ("ok", repr(result))


async def first_poll_error(c, names, seconds=FAST_S):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            await call(c.poll(0.2))
        except Exception as e:  # noqa: BLE001 - the type and text are what is compared
            return ("raised",) + text(e, *names)
    return ("nothing raised",)


async def producer_scenario(kind, cfg, topics):
    deny, see, ok = topics["deny"], topics["see"], topics["ok"]
    names = (deny, see, ok)
    out = []
    async with opened(module(kind).Producer(**cfg, max_block_ms=PARITY_MAX_BLOCK_MS, linger_ms=5)) as p:
        out.append(("send", await fails_fast(p.send, deny, b"v", names=names)))
        out.append(("partitions_for", await fails_fast(p.partitions_for, deny, names=names)))
        out.append(("send_many", await fails_fast(p.send_many, deny, [b"a", b"b"], names=names)))
        out.append(("send ok", (await resolved(await call(p.send(ok, b"v")), 10)).topic == ok))
        handle = await call(p.send(see, b"v"))
        out.append(("send see", await fails_fast(resolved, handle, names=names)))
    return out


def test_producer_authorization_errors_the_same_under_every_driver(secured_kafka, topics):
    transcript = all_the_same(producer_scenario, alice(secured_kafka), topics)
    refusal = ("raised", "TopicAuthorizationFailedError",
               "TOPIC_AUTHORIZATION_FAILED (code 29): not authorized to access topics: [<name0>]", True)
    assert transcript[:4] == [("send", refusal), ("partitions_for", refusal), ("send_many", refusal),
                              ("send ok", True)]
    assert transcript[4][1][:2] == ("raised", "TopicAuthorizationFailedError") and transcript[4][1][3]


async def consumer_scenario(kind, cfg, topics):
    deny, ok, u = topics["deny"], topics["ok"], topics["u"]
    names = (deny, ok, f"{kind}-{u}")
    mod = module(kind)
    out = []
    async with opened(mod.Consumer(**cfg)) as c:
        c.assign([TP(deny, 0)])
        out.append(("assign", await first_poll_error(c, names)))
    async with opened(mod.Consumer(**cfg, group_id=f"ok-parity-{kind}-{u}", group_protocol="consumer")) as c:
        c.subscribe([deny, ok])
        out.append(("subscribe", await first_poll_error(c, names)))
    async with opened(mod.ShareConsumer(**cfg, group_id=f"ok-parity-share-{kind}-{u}")) as c:
        c.subscribe([deny])
        out.append(("share", await first_poll_error(c, names)))
    return out


def test_consumer_authorization_errors_the_same_under_every_driver(secured_kafka, topics):
    transcript = all_the_same(consumer_scenario, alice(secured_kafka), topics)
    refusal = ("raised", "TopicAuthorizationFailedError",
               "TOPIC_AUTHORIZATION_FAILED (code 29): not authorized to access topics: [<name0>]")
    assert transcript == [("assign", refusal), ("subscribe", refusal), ("share", refusal)]
