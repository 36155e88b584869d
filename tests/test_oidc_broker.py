"""OAUTHBEARER with OIDC (KIP-768) against a real issuer and a real broker.

The ``reauth_kafka`` fixture's issuer (tests/oidc_issuer.py) hands out RS256
JWTs by the client-credentials grant; the broker validates them against its
JWKS (``OAuthBearerValidatorCallbackHandler``) and cuts sessions after 2 s
unless the client re-authenticates (KIP-368), capping a session at the
token's ``exp``. So a client that did not refresh its token before ``exp``,
or re-authenticated with the old one, loses its connection."""
import asyncio
import time
import uuid

import pytest
import trio

import kio
import kio.aio
import kio.trio
from kio.admin import NewTopic
from kio.errors import OAuthTokenError

try:
    from conftest import OIDC_CLIENTS
    from parity import nowhere
except ImportError:  # tests/ as a package
    from tests.conftest import OIDC_CLIENTS
    from tests.parity import nowhere

CLIENT_ID, SECRET = next(iter(OIDC_CLIENTS.items()))
TOKEN_LIFETIME_S = 8
RUN_S = 20.0


def oidc_config(broker, token_url, secret=SECRET, **extra):
    return {"bootstrap_servers": f"{broker.host}:{broker.sasl_ssl_port}", "security_protocol": "SASL_SSL",
            "ssl_cafile": broker.certs.ca, "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauthbearer_token_endpoint_url": token_url, "sasl_oauthbearer_scope": "kafka",
            "sasl_oauthbearer_client_credentials_client_id": CLIENT_ID,
            "sasl_oauthbearer_client_credentials_client_secret": secret, **extra}


@pytest.fixture
def short_tokens(reauth_kafka):
    """The issuer's tokens live TOKEN_LIFETIME_S for this test."""
    _, issuer = reauth_kafka
    before, issuer.lifetime_s = issuer.lifetime_s, TOKEN_LIFETIME_S
    yield
    issuer.lifetime_s = before


def test_tokens_are_refreshed_before_exp_and_reauthentication_presents_the_new_one(reauth_kafka, short_tokens):
    broker, issuer = reauth_kafka
    topic = f"ok-oidc-{uuid.uuid4().hex[:6]}"
    with kio.Admin(**broker.client_config()) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    issued_before = len(issuer.issued)
    # Refresh at 80-85% of the 8 s lifetime: the buffers (Java's defaults
    # 60 s and 300 s) would be ignored for so short a token anyway.
    cfg = oidc_config(broker, issuer.token_url, sasl_login_refresh_min_period_seconds=0,
                      sasl_login_refresh_buffer_seconds=0)
    handles = []
    with kio.Producer(**cfg, linger_ms=5) as producer:
        login = producer._core.client.authenticator_factory.login
        first = login.current
        start = time.monotonic()
        while time.monotonic() - start < RUN_S:
            handles.append(producer.send(topic, b"x", partition=0))
            time.sleep(0.01)
        producer.flush(30)
        conns = {node: (c.sessions_started, c.reauthentications)
                 for node, c in producer._core.client.connections.items()}
        last = login.current
    assert not login._thread.is_alive()                         # closing the client stopped the refresher
    assert all(h.result(1) is not None for h in handles)       # nothing lost
    tokens = issuer.issued[issued_before:]
    print(f"{len(tokens)} tokens issued in {RUN_S:.0f} s; {login.refreshes} refreshes; "
          f"(sockets opened, re-authentications) per node: {conns}")
    assert all(sub == CLIENT_ID for sub, _ in tokens) and tokens[0][1]["scope"] == "kafka"
    # about one token per 0.8-0.85 of 8 s, each fetched before the previous expired
    assert login.refreshes >= int(RUN_S / TOKEN_LIFETIME_S) and len(tokens) == login.refreshes + 1
    assert last.value != first.value and last.expires_at_ms > first.expires_at_ms
    # The broker caps each session at the token's exp: a re-authentication
    # with an expired token would have been refused and the socket cut.
    assert all(opened == 1 for opened, _ in conns.values()), conns
    assert max(reauths for _, reauths in conns.values()) >= 4, conns


def _build(kind, cfg):
    """Build a producer under driver ``kind`` (the token is fetched when the client is built)."""
    mod = {"thread": kio, "asyncio": kio.aio, "trio": kio.trio}[kind]
    if kind == "thread":
        return mod.Producer(**cfg)

    async def build():
        async with mod.Producer(**cfg):
            pass
    return asyncio.run(build()) if kind == "asyncio" else trio.run(build)


@pytest.mark.parametrize("kind", ["thread", "asyncio", "trio"])
def test_a_wrong_client_secret_fails_at_once(reauth_kafka, kind):
    broker, issuer = reauth_kafka
    refused = issuer.refused
    start = time.monotonic()
    with pytest.raises(OAuthTokenError) as e:
        _build(kind, oidc_config(broker, issuer.token_url, secret="not-the-secret"))
    assert time.monotonic() - start < 2
    assert "HTTP 401 (invalid_client: client authentication failed)" in str(e.value)
    assert f"check the client id {CLIENT_ID!r}" in str(e.value) and "not-the-secret" not in str(e.value)
    assert issuer.refused == refused + 1               # refused once, not retried


def test_an_issuer_that_is_down_is_a_clear_error(reauth_kafka):
    broker, _ = reauth_kafka
    dead = f"http://{nowhere()}/token"
    start = time.monotonic()
    with pytest.raises(OAuthTokenError) as e:
        kio.Producer(**oidc_config(broker, dead, sasl_login_retry_backoff_max_ms=1000))
    took = time.monotonic() - start
    assert 0.9 < took < 3, took                         # retried for retry.backoff.max.ms, then told
    assert f"the OAuth token endpoint {dead} cannot be reached" in str(e.value)
    assert "Connection refused" in str(e.value) and "retry.backoff.max.ms=1000" in str(e.value)
