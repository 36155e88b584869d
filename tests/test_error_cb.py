"""``error_cb`` (librdkafka's role, issue 23 point 6) under the threading,
asyncio and trio drivers, against the ``reauth_kafka`` secured Apache Kafka:

* an authentication failure (a wrong SCRAM password) reaches the producer's
  and the consumer's error_cb once, and their calls fail with the same error;
* a fatal error - a transactional producer fenced by a newer one with the
  same ``transactional.id`` - reaches the fenced producer's error_cb.

Each scenario records what it saw; the three drivers' transcripts must be
equal (tests/parity.py)."""
import time
import uuid

from kio.admin import NewTopic
from kio.errors import AuthenticationError, ProducerFencedError

try:
    from parity import all_the_same, call, module, opened, sleep
except ImportError:  # tests/ as a package
    from tests.parity import all_the_same, call, module, opened, sleep

WAIT_S = 10.0


async def wait_for(got, seconds=WAIT_S):
    """Until error_cb has been called (it runs on the network thread or task)."""
    deadline = time.monotonic() + seconds
    while not got and time.monotonic() < deadline:
        await sleep(0.05)


def names(errors):
    return [type(e).__name__ for e in errors]


async def authentication_scenario(kind, config, topic):
    mod = module(kind)
    seen = []
    got = []
    start = time.monotonic()
    async with opened(mod.Consumer(**config, group_id=f"ok-g-{uuid.uuid4().hex[:6]}", error_cb=got.append)) as c:
        c.subscribe([topic])
        raised = None
        while raised is None and time.monotonic() - start < WAIT_S:
            try:
                await call(c.poll(0.2))
            except AuthenticationError as e:
                raised = e
        await wait_for(got)
        seen.append(("consumer", type(raised).__name__, names(got), "invalid credentials" in str(got[0]),
                     time.monotonic() - start < 3))
    got = []
    start = time.monotonic()
    async with opened(mod.Producer(**config, error_cb=got.append, max_block_ms=5000)) as p:
        try:
            handle = await call(p.send(topic, b"x"))
            await call(handle if kind != "thread" else None)
            raised = None if kind != "thread" else handle.exception(WAIT_S)
        except AuthenticationError as e:
            raised = e
        await wait_for(got)
        seen.append(("producer", type(raised).__name__, names(got), time.monotonic() - start < 3))
    return seen


def test_an_authentication_failure_reaches_error_cb_under_every_driver(reauth_kafka):
    broker, _ = reauth_kafka
    config = dict(broker.client_config("alice", "SCRAM-SHA-512", "SASL_SSL"), sasl_password="wrong")
    transcript = all_the_same(authentication_scenario, config, "ok-error-cb")
    assert transcript == [
        ("consumer", "SaslAuthenticationFailedError", ["SaslAuthenticationFailedError"], True, True),
        ("producer", "SaslAuthenticationFailedError", ["SaslAuthenticationFailedError"], True),
    ]


async def fenced_scenario(kind, config, topic):
    mod = module(kind)
    tid = f"tx-{kind}-{uuid.uuid4().hex[:6]}"
    got = []
    async with opened(mod.Producer(**config, transactional_id=tid, error_cb=got.append)) as old:
        await call(old.init_transactions(30))
        await call(old.begin_transaction())
        await call(old.send(topic, b"before the fence", partition=0))
        # Written before the fence: the fenced request is then the EndTxn
        # (PRODUCER_FENCED), not a Produce racing the new producer
        # (INVALID_PRODUCER_EPOCH, which Java treats as abortable).
        assert await call(old.flush(30)) == 0
        async with opened(mod.Producer(**config, transactional_id=tid)) as new:
            await call(new.init_transactions(30))          # bumps the epoch: `old` is fenced
            try:
                await call(old.commit_transaction(30))
                raised = None
            except Exception as e:  # noqa: BLE001 - the type is what is compared
                raised = e
        await wait_for(got)
    return [type(raised).__name__, names(got), isinstance(got[0], ProducerFencedError) if got else None]


def test_a_fenced_transactional_producer_reaches_error_cb_under_every_driver(reauth_kafka):
    import kio
    broker, _ = reauth_kafka
    config = broker.client_config()          # the super user: transactions need no ACL set-up
    topic = f"ok-fenced-{uuid.uuid4().hex[:6]}"
    with kio.Admin(**config) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    transcript = all_the_same(fenced_scenario, config, topic)
    assert transcript == ["ProducerFencedError", ["ProducerFencedError"], True]
