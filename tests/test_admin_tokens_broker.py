"""Delegation tokens against Apache Kafka 4.4 (the ``secured_kafka`` fixture:
SCRAM users, an authorizer, ``delegation.token.secret.key`` set): a token
made by ``alice`` (SCRAM) is described, authenticates producers and
consumers (threading and asyncio) as alice, is renewed and expired, after
which new connections with it fail clearly; a token-authenticated
connection may not ask for tokens; a cluster without the secret key says
tokens are disabled. Java's kafka-delegation-tokens (DelegationTokenCommand)
describes the token kio made, and ``kio delegation-tokens`` runs the four
operations as a user would.

confluent-kafka's Python AdminClient has no delegation-token API, so there
is no comparison with it. Tansu has none of these APIs: kio's
UnsupportedVersionError names them.

The controller issues, renews and expires tokens; the broker a request
goes to learns of the change through the metadata log a moment later
(over a second here), so a token is used once ``describe`` lists it, as
Kafka's own tests wait for it.
"""
import asyncio
import subprocess
import time
import uuid

import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio.testing.kafka_broker import java_binary, tools_classpath
from kproto import error_codes
from kproto.errors import UnsupportedVersionError

try:
    from test_cli import kio as kio_cli, ok
    from test_cli_security import _as, until
except ImportError:  # tests/ as a package
    from tests.test_cli import kio as kio_cli, ok
    from tests.test_cli_security import _as, until

MINUTE = 60_000


def _config(secured_kafka, user="alice", mechanism="SCRAM-SHA-512", listener="SASL_PLAINTEXT"):
    return secured_kafka.client_config(user, mechanism, listener)


def _token_config(secured_kafka, token, mechanism="SCRAM-SHA-512", listener="SASL_PLAINTEXT"):
    """Client settings authenticating with ``token`` (as Java's: sasl.jaas.config with tokenauth="true")."""
    cfg = _config(secured_kafka, "alice", mechanism, listener)
    del cfg["sasl_username"], cfg["sasl_password"]
    cfg["sasl_jaas_config"] = token.jaas_config()
    return cfg


def _visible(admin, token, present=True):
    """Wait until the broker's token cache has (or no longer has) ``token``."""
    ids = until(lambda: [t.token_id for t in admin.describe_delegation_token()],
                lambda v: (token.token_id in v) is present, 15)
    assert (token.token_id in ids) is present, f"token {token.token_id} present={not present} after 15 s"


@pytest.fixture(scope="module")
def alice_token(secured_kafka):
    """A token of alice's, usable (listed by the broker) for the module's tests."""
    with kio.Admin(**_config(secured_kafka)) as admin:
        token = admin.create_delegation_token(max_lifetime_ms=60 * MINUTE)
        _visible(admin, token)
        yield token
        try:
            admin.expire_delegation_token(token)
        except error_codes.DelegationTokenNotFoundError:
            pass


def _round_trip_threading(cfg, topic):
    with kio.Producer(**cfg, max_block_ms=15000) as p:
        md = p.send(topic, b"by token", partition=0).result(20)
    with kio.Consumer(**cfg, auto_offset_reset="earliest") as c:
        c.assign([kio.TopicPartition(topic, 0)])
        records = until(lambda: c.poll(0.2), bool, 15)
    return md.offset, [r.value for r in records]


def test_create_as_a_scram_user_and_describe(secured_kafka):
    before = int(time.time() * 1000)
    with kio.Admin(**_config(secured_kafka)) as admin:
        token = admin.create_delegation_token(renewers=["User:bob"], max_lifetime_ms=30 * MINUTE)
        info = token.token_info
        assert (info.owner, info.token_requester, info.renewers) == ("User:alice", "User:alice", ("User:bob",))
        assert before - 5000 <= info.issue_timestamp <= info.expiry_timestamp <= info.max_timestamp
        assert info.max_timestamp - info.issue_timestamp == 30 * MINUTE
        assert len(token.hmac) == 64                       # HmacSHA512
        _visible(admin, token)
        [described] = [t for t in admin.describe_delegation_token(["User:alice"]) if t.token_id == token.token_id]
        assert described == token
        assert admin.describe_delegation_token(["User:nobody"]) == []
        with kio.Admin(**secured_kafka.client_config()) as su:     # the super user sees every token
            assert token in su.describe_delegation_token()
        admin.expire_delegation_token(token.hmac)
        _visible(admin, token, present=False)


@pytest.mark.parametrize("mechanism,listener", [("SCRAM-SHA-512", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_SSL")])
def test_producer_and_consumer_authenticate_with_a_token(secured_kafka, alice_token, mechanism, listener):
    topic = f"ok-token-{uuid.uuid4().hex[:8]}"            # alice's ACLs: everything on ok-*
    offset, values = _round_trip_threading(_token_config(secured_kafka, alice_token, mechanism, listener), topic)
    assert offset == 0 and values == [b"by token"]


def test_asyncio_clients_and_the_trio_admin_with_a_token(secured_kafka, alice_token):
    cfg = _token_config(secured_kafka, alice_token)
    topic = f"ok-token-aio-{uuid.uuid4().hex[:8]}"

    async def round_trip():
        async with kio.aio.Producer(**cfg, max_block_ms=15000) as p:
            md = await (await p.send(topic, b"aio by token", partition=0))
        async with kio.aio.Consumer(**cfg, auto_offset_reset="earliest") as c:
            c.assign([kio.TopicPartition(topic, 0)])
            records = []
            end = time.monotonic() + 15
            while not records and time.monotonic() < end:
                records = await c.poll(0.2)
        return md.offset, [r.value for r in records]

    assert asyncio.run(round_trip()) == (0, [b"aio by token"])

    async def create_with_the_token():
        async with kio.trio.Admin(**cfg) as admin:
            with pytest.raises(error_codes.DelegationTokenRequestNotAllowedError,
                               match="authenticated with a delegation"):
                await admin.create_delegation_token()
            return await admin.list_topics()             # the connection itself is fine

    assert isinstance(trio.run(create_with_the_token), dict)


def test_a_token_authenticated_admin_may_not_ask_for_tokens(secured_kafka, alice_token):
    with kio.Admin(**_token_config(secured_kafka, alice_token)) as admin:
        assert admin.list_topics() is not None             # authenticated (as alice)
        for call in (admin.create_delegation_token, admin.describe_delegation_token,
                     lambda: admin.renew_delegation_token(alice_token)):
            with pytest.raises(error_codes.DelegationTokenRequestNotAllowedError,
                               match="not one authenticated with a delegation token"):
                call()


def test_renew_expire_and_then_the_token_no_longer_authenticates(secured_kafka):
    with kio.Admin(**_config(secured_kafka)) as admin:
        token = admin.create_delegation_token(max_lifetime_ms=30 * MINUTE)
        _visible(admin, token)
        asked = int(time.time() * 1000)
        expiry = admin.renew_delegation_token(token, 5 * MINUTE)
        assert asked - 5000 <= expiry - 5 * MINUTE <= int(time.time() * 1000) + 5000
        assert expiry <= token.token_info.max_timestamp
        renewed = until(lambda: [t for t in admin.describe_delegation_token() if t.token_id == token.token_id],
                        lambda v: v and v[0].token_info.expiry_timestamp == expiry)
        assert renewed[0].token_info.expiry_timestamp == expiry
        # Renewing past the max timestamp stops at it.
        assert admin.renew_delegation_token(token, 90 * MINUTE) == token.token_info.max_timestamp
        with kio.Admin(**secured_kafka.client_config()) as su:        # neither owner nor renewer
            with pytest.raises(error_codes.DelegationTokenOwnerMismatchError, match="owner or one of its renewers"):
                su.expire_delegation_token(token)
        expired_at = admin.expire_delegation_token(token.hmac_base64)
        assert expired_at <= int(time.time() * 1000) + 1000
        _visible(admin, token, present=False)
        with pytest.raises((error_codes.DelegationTokenNotFoundError, error_codes.DelegationTokenExpiredError)):
            admin.renew_delegation_token(token)
    start = time.monotonic()
    with pytest.raises(error_codes.SaslAuthenticationFailedError,
                       match=f"delegation token '{token.token_id}' is unknown to the cluster: it expired"):
        with kio.Admin(**_token_config(secured_kafka, token)) as admin:
            admin.list_topics()
    assert time.monotonic() - start < 10                    # fails fast, not at default.api.timeout.ms


def test_the_super_user_creates_a_token_for_alice(secured_kafka):
    with kio.Admin(**secured_kafka.client_config()) as su:
        token = su.create_delegation_token("User:alice", max_lifetime_ms=10 * MINUTE)
    assert (token.token_info.owner, token.token_info.token_requester) == ("User:alice", "User:admin")
    with kio.Admin(**_config(secured_kafka)) as alice:
        _visible(alice, token)                               # the owner sees it
        with pytest.raises(error_codes.DelegationTokenAuthorizationFailedError, match="CREATE_TOKENS"):
            alice.create_delegation_token("User:admin")      # alice has no CREATE_TOKENS on admin
        assert alice.expire_delegation_token(token) <= int(time.time() * 1000) + 1000


def test_javas_kafka_delegation_tokens_describes_the_token_kio_made(secured_kafka, alice_token, tmp_path):
    cfg = _config(secured_kafka)
    props = tmp_path / "alice.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="alice" password="{cfg["sasl_password"]}";\n')
    r = subprocess.run([java_binary(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", tools_classpath(),
                        "org.apache.kafka.tools.DelegationTokenCommand", "--bootstrap-server",
                        cfg["bootstrap_servers"], "--command-config", str(props), "--describe",
                        # Without it the tool sends an empty owner list: no token at all.
                        "--owner-principal", "User:alice"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(alice_token.token_id)]
    assert len(rows) == 1, r.stdout
    [row] = rows
    assert row[:4] == [alice_token.token_id, alice_token.hmac_base64, "User:alice", "User:alice"]


def test_kio_delegation_tokens_cli(secured_kafka):
    conn = _as(secured_kafka, "alice")
    created = ok(kio_cli("delegation-tokens", "create", *conn, "--renewer-principal", "User:bob",
                         "--max-life-time-period", str(20 * MINUTE))).rstrip("\n").split("\t")
    token_id, hmac, owner, requester, renewers = created[:5]
    assert (owner, requester, renewers) == ("User:alice", "User:alice", "User:bob") and len(created) == 8
    described = until(lambda: ok(kio_cli("delegation-tokens", "describe", *conn, "--owner-principal",
                                         "User:alice")), lambda out: token_id in out)
    [line] = [line for line in described.splitlines() if line.startswith(token_id)]
    assert line.split("\t") == created
    renewed = ok(kio_cli("delegation-tokens", "renew", *conn, "--hmac", hmac, "--renew-time-period",
                         str(MINUTE))).strip()
    assert renewed.endswith("+00:00") and renewed <= created[7]
    ok(kio_cli("delegation-tokens", "expire", *conn, "--hmac", hmac))
    bad = kio_cli("delegation-tokens", "create", *conn, "--owner-principal", "alice")
    assert bad.returncode == 2 and b"'alice' is not a principal: write it Type:name" in bad.stderr


# -- clusters where tokens do not work --------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka_without_token_key(tmp_path_factory):
    """The secured broker without delegation.token.secret.key (512 MB: with 256 MB it once ran out of heap while starting on a loaded CI machine)."""
    from kio.testing.secured_kafka import SecuredKafkaBroker, make_certificates
    folder = tmp_path_factory.mktemp("no-token-key")
    b = SecuredKafkaBroker(users={"alice": "alice-secret"}, certs=make_certificates(folder),
                           log_path=str(folder / "kafka.log"), heap="512m", delegation_token_secret=None)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_a_cluster_without_the_secret_key_says_tokens_are_disabled(kafka_without_token_key):
    with kio.Admin(**_config(kafka_without_token_key)) as admin:
        for call in (admin.create_delegation_token, admin.describe_delegation_token):
            with pytest.raises(error_codes.DelegationTokenAuthDisabledError,
                               match="the cluster has no delegation.token.secret.key"):
                call()


def test_plain_broker(broker):
    """Kafka refuses token requests on a PLAINTEXT connection (no SASL: no
    owner to give a token to) before it looks at the secret key; Tansu has
    no token API at all."""
    with kio.Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        if broker.kind == "tansu":
            with pytest.raises(UnsupportedVersionError,
                               match="create_delegation_token: the broker does not support CreateDelegationToken"):
                admin.create_delegation_token()
            with pytest.raises(UnsupportedVersionError, match="does not support DescribeDelegationToken"):
                admin.describe_delegation_token()
        else:
            with pytest.raises(error_codes.DelegationTokenRequestNotAllowedError, match="nor a PLAINTEXT"):
                admin.create_delegation_token()
            with pytest.raises(error_codes.DelegationTokenRequestNotAllowedError, match="nor a PLAINTEXT"):
                admin.renew_delegation_token(b"\x01" * 64)
