"""SASL GSSAPI (Kerberos V5, RFC 4752) against a real KDC and a real Apache Kafka.

The suite runs its own MIT KDC (kio.testing.kerberos.KerberosKdc, realm KIO.TEST on
a free loopback port) and, for the broker tests, a SecuredKafkaBroker on
``localhost`` whose SASL listeners also take GSSAPI (Java's Krb5LoginModule
with the keytab of ``kafka/localhost@KIO.TEST``) and cut sessions after
REAUTH_MS unless the client re-authenticates (KIP-368). The client
``kclient@KIO.TEST`` logs in from its keytab; Kafka sees ``User:kclient``.

The RFC 4752 exchange is also checked without a broker: the client
mechanism against a gssapi acceptor context with the service's keytab.
"""
import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio.admin import NewTopic
from kio.errors import AuthenticationError, ConfigError

try:
    from conftest import broker_kinds
except ImportError:  # tests/ as a package
    from tests.conftest import broker_kinds

gssapi = pytest.importorskip("gssapi", reason="the gssapi extra (pip install kproto-kio[gssapi])")

from kio.testing.kerberos import KerberosKdc                                      # noqa: E402
from kproto.producer.config import PRODUCER_CONFIG                     # noqa: E402
from kproto.kerberos_login import GssapiAuthenticatorFactory, KerberosLogin  # noqa: E402
from kproto.sasl import GssapiMechanism, no_security_layer_reply, parse_security_layers  # noqa: E402

CLIENT = "kclient"
REAUTH_MS = 2000


@pytest.fixture(scope="module")
def kdc():
    """A started KDC; this process's krb5 library is pointed at it (KRB5_CONFIG)."""
    k = KerberosKdc(host="127.0.0.1").start()
    saved = {name: os.environ.get(name) for name in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME")}
    os.environ.update(k.environ())
    # No stray default cache: clients here log in from keytabs unless a test kinits.
    os.environ["KRB5CCNAME"] = f"FILE:{k.folder / 'default-ccache'}"
    try:
        k.client_keytab = k.add_principal(CLIENT)
        k.service_keytab = k.add_principal("kafka/localhost")
        yield k
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        k.stop()


@pytest.fixture(scope="module")
def gssapi_kafka(kdc, tmp_path_factory):
    """Apache Kafka on localhost with GSSAPI on its SASL listeners and
    connections.max.reauth.ms = REAUTH_MS; User:kclient may use ok-* topics and groups."""
    if "kafka" not in broker_kinds():
        pytest.skip("the Kerberos broker is Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.secured_kafka import SecuredKafkaBroker, make_certificates

    folder = tmp_path_factory.mktemp("gssapi-kafka")
    b = SecuredKafkaBroker(host="localhost", certs=make_certificates(folder), log_path=str(folder / "kafka.log"),
                           kerberos=kdc, reauth_ms=REAUTH_MS)
    try:
        b.start()
        b.allow(f"User:{CLIENT}", "TOPIC", "ok-", ["ALL"], "PREFIXED")
        b.allow(f"User:{CLIENT}", "GROUP", "ok-", ["ALL"], "PREFIXED")
        yield b
    finally:
        b.stop()


def new_topic(broker):
    name = f"ok-gss-{uuid.uuid4().hex[:8]}"
    with kio.Admin(**broker.client_config()) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return name


def client_config(broker, kdc, listener="SASL_PLAINTEXT", **extra):
    return {**broker.gssapi_client_config(CLIENT, kdc.client_keytab, listener), **extra}


# -- RFC 4752 without a broker -------------------------------------------------------------------

def test_security_layer_offer_is_parsed_and_answered_with_no_layer():
    assert parse_security_layers(b"\x07\x00\x10\x00") == (7, 4096)
    assert no_security_layer_reply(7, "kclient@KIO.TEST") == b"\x01\x00\x00\x00kclient@KIO.TEST"
    assert no_security_layer_reply(1) == b"\x01\x00\x00\x00"


def test_a_server_without_the_no_layer_option_or_a_malformed_offer_is_refused():
    with pytest.raises(AuthenticationError, match="insists on a security layer"):
        no_security_layer_reply(4)
    with pytest.raises(AuthenticationError, match="has 3 bytes, not 4"):
        parse_security_layers(b"\x01\x00\x00")


class Rfc4752Server:
    """The server side of RFC 4752 with a real gssapi acceptor context (what
    the broker's Java SaslServer does): accept tokens until established,
    offer the security layers, check the client's wrapped choice."""

    def __init__(self, keytab, offer=b"\x01\xff\xff\xff"):
        creds = gssapi.Credentials(usage="accept", store={"keytab": keytab})
        self.context = gssapi.SecurityContext(creds=creds, usage="accept")
        self.offer = offer
        self.choice = None

    def answer(self, token):
        if not self.context.complete:
            return self.context.step(token)     # once established: the AP-REP (mutual authentication)
        if self.choice is None and token == b"":
            return self.context.wrap(self.offer, False).message
        self.choice = self.context.unwrap(token).message
        return None


def run_exchange(mechanism, server):
    """Tokens back and forth as SaslAuthenticate would carry them; the count of round trips."""
    token, trips = mechanism.initial_response(), 0
    while True:
        trips += 1
        challenge = server.answer(token)
        if challenge is None:
            return trips
        token = mechanism.evaluate_challenge(challenge)
        if token is None:
            return trips


def test_the_mechanism_completes_rfc4752_with_a_real_acceptor(kdc):
    login = KerberosLogin(kdc.client_keytab, kdc.principal(CLIENT)).login()
    mechanism = GssapiMechanism("kafka", "localhost", login.credentials(), authzid=login.principal)
    server = Rfc4752Server(kdc.service_keytab, offer=b"\x07\x00\x40\x00")
    run_exchange(mechanism, server)
    assert mechanism.complete and mechanism.server_max_size == 0x4000
    assert str(server.context.initiator_name) == f"{CLIENT}@KIO.TEST"
    assert server.choice == b"\x01\x00\x00\x00" + f"{CLIENT}@KIO.TEST".encode()


def test_a_server_demanding_a_security_layer_is_refused_by_the_mechanism(kdc):
    login = KerberosLogin(kdc.client_keytab, kdc.principal(CLIENT)).login()
    mechanism = GssapiMechanism("kafka", "localhost", login.credentials())
    with pytest.raises(AuthenticationError, match=r"insists on a security layer \(offered mask 0x04\)"):
        run_exchange(mechanism, Rfc4752Server(kdc.service_keytab, offer=b"\x04\x00\x40\x00"))


def test_an_unknown_service_fails_in_the_first_step(kdc):
    login = KerberosLogin(kdc.client_keytab, kdc.principal(CLIENT)).login()
    with pytest.raises(AuthenticationError, match="Server .* not found in Kerberos database"):
        GssapiMechanism("nokafka", "localhost", login.credentials()).initial_response()


# -- configuration and login ----------------------------------------------------------------------

def test_gssapi_needs_the_service_name(kdc):
    with pytest.raises(ConfigError, match="needs sasl.kerberos.service.name"):
        kio.Producer(bootstrap_servers="localhost:9", security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism="GSSAPI", sasl_kerberos_keytab=kdc.client_keytab)


def test_an_absent_keytab_is_a_config_error(kdc):
    with pytest.raises(ConfigError, match="sasl.kerberos.keytab '/nonexistent.keytab' is not a file"):
        kio.Producer(bootstrap_servers="localhost:9", security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism="GSSAPI", sasl_kerberos_service_name="kafka",
                     sasl_kerberos_keytab="/nonexistent.keytab")


def test_without_the_gssapi_package_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gssapi", None)     # import gssapi raises ImportError
    with pytest.raises(ConfigError, match=r"pip install kproto-kio\[gssapi\]"):
        GssapiMechanism("kafka", "localhost")


def test_a_deleted_principal_fails_the_login_at_once(kdc):
    keytab = kdc.add_principal("gone")
    kdc.delete_principal("gone")
    start = time.monotonic()
    with pytest.raises(AuthenticationError, match="Client .*gone@KIO.TEST.* not found in Kerberos database"):
        KerberosLogin(keytab, kdc.principal("gone")).login()
    assert time.monotonic() - start < 2


def test_a_stale_keytab_fails_the_login_at_once(kdc):
    stale = kdc.add_principal("rekeyed")
    kdc._kadmin(f"cpw -randkey {kdc.principal('rekeyed')}")       # the KDC's key changes, the keytab's not
    start = time.monotonic()
    with pytest.raises(AuthenticationError, match="Kerberos login of rekeyed@KIO.TEST from the keytab"):
        KerberosLogin(stale, kdc.principal("rekeyed")).login()
    assert time.monotonic() - start < 2


def test_a_principal_missing_from_the_keytab_fails_the_login(kdc):
    with pytest.raises(AuthenticationError, match="Kerberos login of someone@KIO.TEST"):
        KerberosLogin(kdc.client_keytab, kdc.principal("someone")).login()


def test_the_jaas_config_form_names_keytab_principal_and_service(kdc):
    jaas = (f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            f'keyTab="{kdc.client_keytab}" principal="{kdc.principal(CLIENT)}" serviceName="kafka";')
    factory = GssapiAuthenticatorFactory.from_config(PRODUCER_CONFIG.parse(
        {"bootstrap.servers": "localhost:9", "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "GSSAPI", "sasl.jaas.config": jaas}))
    assert factory.service_name == "kafka" and factory.login.keytab == kdc.client_keytab
    assert factory.login.principal == f"{CLIENT}@KIO.TEST" and factory.login.logins == 1


def test_renewal_comes_after_the_window_factor_and_not_before_min_time(kdc):
    now = [1000.0]
    login = KerberosLogin(kdc.client_keytab, kdc.principal(CLIENT), min_time_before_relogin_ms=60000,
                          renew_window_factor=0.8, renew_jitter=0.0, clock=lambda: now[0]).login()
    lifetime = login.renew_at - 1000.0          # 0.8 of the ticket's (1 h) lifetime
    assert 0.8 * 3500 < lifetime <= 0.8 * 3600
    login.credentials()
    assert login.logins == 1
    now[0] = login.renew_at + 1
    login.credentials()
    assert login.logins == 2 and login.logged_in_at == now[0]


def test_a_ticket_cache_filled_by_kinit_is_used_without_a_keytab(kdc, tmp_path):
    ccache = f"FILE:{tmp_path / 'cc'}"
    subprocess.run(["kinit", "-kt", kdc.client_keytab, kdc.principal(CLIENT)], check=True,
                   env={**os.environ, "KRB5CCNAME": ccache})
    os.environ["KRB5CCNAME"], before = ccache, os.environ["KRB5CCNAME"]
    try:
        login = KerberosLogin().login()
        assert login.principal == f"{CLIENT}@KIO.TEST"
        mechanism = GssapiMechanism("kafka", "localhost", login.credentials(), authzid=login.principal)
        server = Rfc4752Server(kdc.service_keytab)
        run_exchange(mechanism, server)
        assert mechanism.complete and server.choice.endswith(b"kclient@KIO.TEST")
    finally:
        os.environ["KRB5CCNAME"] = before


def test_an_empty_ticket_cache_fails_the_login(kdc, tmp_path):
    os.environ["KRB5CCNAME"], before = f"FILE:{tmp_path / 'none'}", os.environ["KRB5CCNAME"]
    try:
        with pytest.raises(AuthenticationError, match="the default ticket cache"):
            KerberosLogin().login()
    finally:
        os.environ["KRB5CCNAME"] = before


# -- against Apache Kafka -------------------------------------------------------------------------

def produce_and_consume_threading(cfg, topic, n):
    with kio.Producer(**cfg, linger_ms=5) as producer:
        for i in range(n):
            producer.send(topic, f"{i}".encode(), partition=0)
        producer.flush(30)
    got = []
    with kio.Consumer(**cfg, group_id=f"ok-g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(0.5))
    return got


async def produce_and_consume_async(mod, cfg, topic, n):
    async with mod.Producer(**cfg, linger_ms=5) as producer:
        for i in range(n):
            await producer.send(topic, f"{i}".encode(), partition=0)
        await producer.flush(30)
    got = []
    async with mod.Consumer(**cfg, group_id=f"ok-g-{uuid.uuid4().hex[:6]}",
                            auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got.extend(r.value for r in await consumer.poll(0.5))
    return got


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("kind", ["thread", "asyncio", "trio"])
def test_produce_and_consume_through_gssapi(gssapi_kafka, kdc, kind, listener):
    cfg = client_config(gssapi_kafka, kdc, listener)
    topic = new_topic(gssapi_kafka)
    n = 50
    if kind == "thread":
        got = produce_and_consume_threading(cfg, topic, n)
    elif kind == "asyncio":
        got = asyncio.run(produce_and_consume_async(kio.aio, cfg, topic, n))
    else:
        got = trio.run(produce_and_consume_async, kio.trio, cfg, topic, n)
    assert got == [f"{i}".encode() for i in range(n)]


def test_an_unknown_service_principal_fails_the_connection_at_once(gssapi_kafka, kdc):
    cfg = client_config(gssapi_kafka, kdc, sasl_kerberos_service_name="nokafka")
    got = []
    start = time.monotonic()
    with kio.Consumer(**cfg, group_id="ok-gss-bad", error_cb=got.append) as consumer:
        consumer.subscribe(["ok-gss-bad"])
        with pytest.raises(AuthenticationError, match="nokafka@localhost.*not found in Kerberos database"):
            while time.monotonic() - start < 10:
                consumer.poll(0.2)
    assert time.monotonic() - start < 3
    assert got and isinstance(got[0], AuthenticationError)


@pytest.mark.parametrize("kind", ["thread", "asyncio", "trio"])
def test_a_deleted_principal_fails_the_client_constructor(gssapi_kafka, kdc, kind):
    name = f"gone-{kind}"
    keytab = kdc.add_principal(name)
    kdc.delete_principal(name)
    cfg = gssapi_kafka.gssapi_client_config(name, keytab)
    mod = {"thread": kio, "asyncio": kio.aio, "trio": kio.trio}[kind]
    start = time.monotonic()
    with pytest.raises(AuthenticationError, match="not found in Kerberos database"):
        if kind == "thread":
            mod.Producer(**cfg)
        else:
            async def build():
                async with mod.Producer(**cfg):
                    pass
            asyncio.run(build()) if kind == "asyncio" else trio.run(build)
    assert time.monotonic() - start < 2


def test_connections_reauthenticate_with_a_new_context(gssapi_kafka, kdc):
    """KIP-368: the broker cuts a session after REAUTH_MS; each connection
    re-authenticates in place (a new GSSAPI security context each time)."""
    cfg = client_config(gssapi_kafka, kdc)
    topic = new_topic(gssapi_kafka)
    run_s, sent = 7.0, 0                    # 3.5 sessions: at least two re-authentications each
    with kio.Producer(**cfg, linger_ms=5) as producer:
        start = time.monotonic()
        while time.monotonic() - start < run_s:
            producer.send(topic, f"{sent}".encode(), partition=0)
            sent += 1
            time.sleep(0.01)
        producer.flush(30)
        client = producer._core.client
        conns = {node: (c.sessions_started, c.reauthentications) for node, c in client.connections.items()}
        mechanisms = {type(c.authenticator.mechanism).__name__ for c in client.connections.values()}
        contexts = client.authenticator_factory.contexts
    print(f"GSSAPI: {sent} records in {run_s:.0f} s; (sockets opened, re-authentications) per node: {conns}; "
          f"{contexts} security contexts")
    used = [s for s in conns.values() if s[0]]
    assert mechanisms == {"GssapiMechanism"}
    # one new context per authentication and per re-authentication
    assert contexts == sum(opened + reauths for opened, reauths in used), (contexts, conns)
    assert all(opened == 1 for opened, _ in used), conns
    assert max(reauths for _, reauths in used) >= int(run_s * 1000 / REAUTH_MS) - 1, conns
    with kio.Consumer(**cfg, group_id=f"ok-g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        got, deadline = [], time.monotonic() + 30
        while len(got) < sent and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(0.5))
    assert got == [f"{i}".encode() for i in range(sent)]


def test_confluent_kafka_with_gssapi(gssapi_kafka, kdc):
    """For the record: librdkafka's GSSAPI (Cyrus SASL, kinit through
    sasl.kerberos.kinit.cmd) with the same keytab. The PyPI wheel of
    confluent-kafka may be built without it: then the config is refused."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = new_topic(gssapi_kafka)
    conf = {"bootstrap.servers": f"localhost:{gssapi_kafka.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.keytab": kdc.client_keytab, "sasl.kerberos.principal": kdc.principal(CLIENT)}
    builtin = confluent_kafka.libversion()
    try:
        producer = confluent_kafka.Producer(conf)
    except confluent_kafka.KafkaException as e:
        print(f"confluent-kafka {builtin}: GSSAPI refused: {e}")
        assert "GSSAPI" in str(e) or "sasl" in str(e).lower()
        return
    errors = []
    producer = confluent_kafka.Producer({**conf, "error_cb": errors.append})
    for i in range(10):
        producer.produce(topic, f"{i}".encode(), partition=0)
    left = producer.flush(20)
    print(f"confluent-kafka {builtin}: GSSAPI produce left {left} unsent; errors: {errors}")
    assert left == 0, errors


def test_the_broker_sees_the_kerberos_principal(gssapi_kafka, kdc):
    """kclient@KIO.TEST is User:kclient to Kafka's authorizer: ok-* topics
    work (above), a topic outside its ACLs is refused by name."""
    from kio.errors import TopicAuthorizationFailedError
    denied = f"denied-{uuid.uuid4().hex[:6]}"
    with kio.Producer(**client_config(gssapi_kafka, kdc)) as producer:
        with pytest.raises(TopicAuthorizationFailedError, match=denied):
            producer.send(denied, b"v").result(10)


def test_a_ticket_cache_is_renewed_with_kinit_minus_r(kdc, tmp_path):
    """Without a keytab, renewal runs sasl.kerberos.kinit.cmd -R on the cache (as Java's KerberosLogin)."""
    ccache = f"FILE:{tmp_path / 'cc'}"
    os.environ["KRB5CCNAME"], before = ccache, os.environ["KRB5CCNAME"]
    try:
        subprocess.run(["kinit", "-r", "1d", "-kt", kdc.client_keytab, kdc.principal(CLIENT)], check=True)
        first = subprocess.run(["klist"], check=True, capture_output=True, text=True).stdout
        now = [time.time()]
        login = KerberosLogin(kinit_cmd=shutil.which("kinit"), min_time_before_relogin_ms=0,
                              clock=lambda: now[0]).login()
        time.sleep(1.1)                          # a renewed ticket starts a second later
        now[0] = login.renew_at + 1
        login.credentials()
        renewed = subprocess.run(["klist"], check=True, capture_output=True, text=True).stdout
    finally:
        os.environ["KRB5CCNAME"] = before
    assert login.logins == 2
    tgt = [line for line in first.splitlines() if "krbtgt/" in line]
    assert tgt and tgt[0] not in renewed, (first, renewed)    # the TGT's start time moved: kinit -R ran
