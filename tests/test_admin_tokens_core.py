"""Delegation tokens without a network: the four admin operations' requests
and answers against scripted brokers (kproto.admin_tokens), their errors'
advice, and token authentication - SCRAM with the ``tokenauth=true``
extension - checked by an independent SCRAM server side that signs the
client-first message with its extension, as Kafka's ScramSaslServer does."""
import base64

import pytest

try:
    from test_admin_core import FakeCluster, Sim
    from test_connection import of
    from test_sasl import ScramServer, connect_with, sasl_broker
except ImportError:  # tests/ as a package
    from tests.test_admin_core import FakeCluster, Sim
    from tests.test_connection import of
    from tests.test_sasl import ScramServer, connect_with, sasl_broker

from kproto import error_codes
from kproto.admin_tokens import DelegationToken, TokenInformation
from kproto.config import ConfigError
from kproto.connection import ConnectionClosed, ConnectionReady
from kproto.errors import UnsupportedVersionError
from kproto.sasl import ScramMechanism, authenticator_for
from kproto.producer import parse_producer_config

HMAC = bytes(range(64))


def _created(req):
    b = req.body
    return {"error_code": 0, "principal_type": b.get("owner_principal_type") or "User",
            "principal_name": b.get("owner_principal_name") or "alice",
            "token_requester_principal_type": "User", "token_requester_principal_name": "alice",
            "issue_timestamp_ms": 1000, "expiry_timestamp_ms": 5000, "max_timestamp_ms": 9000,
            "token_id": "tok-1", "hmac": HMAC}


def test_create_sends_owner_renewers_and_lifetime_and_builds_the_token():
    fc = FakeCluster(nodes=(1, 2))
    fc.on_all("CreateDelegationToken", _created)
    sim = Sim(fc)
    token = sim.run(sim.core.create_delegation_token("User:bob", ["User:carol", "Group:ops"], 60000,
                                                     now=0)).result()
    [(_, req)] = sim.requests("CreateDelegationToken")
    assert req.version == 3
    assert (req.body["owner_principal_type"], req.body["owner_principal_name"]) == ("User", "bob")
    assert req.body["renewers"] == [{"principal_type": "User", "principal_name": "carol"},
                                    {"principal_type": "Group", "principal_name": "ops"}]
    assert req.body["max_lifetime_ms"] == 60000
    assert token == DelegationToken(TokenInformation("tok-1", "User:bob", "User:alice", ("User:carol", "Group:ops"),
                                                     1000, 5000, 9000), HMAC)
    assert token.hmac_base64 == base64.b64encode(HMAC).decode()
    assert token.jaas_config() == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                   f'username="tok-1" password="{token.hmac_base64}" tokenauth="true";')
    assert token.token_info.owner_or_renewer("User:carol") and not token.token_info.owner_or_renewer("User:eve")
    assert token.hmac_base64 not in repr(token) and "64 bytes" in repr(token)


def test_create_for_the_caller_sends_no_owner():
    fc = FakeCluster()
    fc.on_all("CreateDelegationToken", _created)
    sim = Sim(fc)
    token = sim.run(sim.core.create_delegation_token(now=0)).result()
    [(_, req)] = sim.requests("CreateDelegationToken")
    # The fields' default, as Java's Admin leaves them: the broker reads "" as "the requester".
    assert req.body["owner_principal_type"] == "" and req.body["owner_principal_name"] == ""
    assert req.body["renewers"] == [] and req.body["max_lifetime_ms"] == -1
    assert token.token_info.owner == "User:alice" and token.token_info.renewers == ()


def test_create_for_another_owner_needs_v3():
    fc = FakeCluster(broker_kwargs={1: {"api_versions": {"CreateDelegationToken": (1, 2)}}})
    fc.on_all("CreateDelegationToken", _created)
    sim = Sim(fc)
    h = sim.run(sim.core.create_delegation_token("User:bob", now=0))
    with pytest.raises(UnsupportedVersionError, match=r"another owner \(User:bob\) needs CreateDelegationToken v3"):
        h.result()
    assert sim.requests("CreateDelegationToken") == []
    # For the caller, v2 is enough (no owner field).
    token = sim.run(sim.core.create_delegation_token(now=sim.now)).result()
    assert token.token_info.token_requester is None       # v2 answers have no requester


@pytest.mark.parametrize("call,message", [
    (lambda c: c.create_delegation_token("bob", now=0), "'bob' is not a principal: write it Type:name"),
    (lambda c: c.create_delegation_token(renewers=["User:"], now=0), "'User:' is not a principal"),
    (lambda c: c.describe_delegation_token([":x"], now=0), "':x' is not a principal"),
    (lambda c: c.renew_delegation_token("not base64!", now=0), "the HMAC text is not base64"),
    (lambda c: c.expire_delegation_token(b"", now=0), "the HMAC is empty"),
])
def test_bad_input_is_refused_at_the_call(call, message):
    with pytest.raises(ValueError, match=message):
        call(Sim(FakeCluster()).core)
    with pytest.raises(TypeError, match="the HMAC is bytes, its base64 text or a DelegationToken"):
        Sim(FakeCluster()).core.renew_delegation_token(42, now=0)


@pytest.mark.parametrize("op,api,field", [("renew_delegation_token", "RenewDelegationToken", "renew_period_ms"),
                                          ("expire_delegation_token", "ExpireDelegationToken",
                                           "expiry_time_period_ms")])
def test_renew_and_expire_take_bytes_base64_or_the_token(op, api, field):
    fc = FakeCluster()
    fc.on_all(api, lambda req: {"error_code": 0, "expiry_timestamp_ms": 7000 + req.body[field]})
    sim = Sim(fc)
    token = DelegationToken(TokenInformation("t", "User:a", "User:a", (), 0, 0, 0), HMAC)
    for given in (HMAC, base64.b64encode(HMAC).decode(), token):
        assert sim.run(getattr(sim.core, op)(given, 500, now=sim.now)).result() == 7500
    assert {r.body["hmac"] for _, r in sim.requests(api)} == {HMAC}
    assert sim.run(getattr(sim.core, op)(HMAC, now=sim.now)).result() == 6999     # -1: the broker's default


def test_describe_sends_owners_or_null_and_sorts_by_issue_time():
    fc = FakeCluster()

    def answer(req):
        def tok(tid, issued):
            return {"principal_type": "User", "principal_name": "alice", "token_requester_principal_type": "User",
                    "token_requester_principal_name": "admin", "issue_timestamp": issued, "expiry_timestamp": 2,
                    "max_timestamp": 3, "token_id": tid, "hmac": tid.encode(),
                    "renewers": [{"principal_type": "User", "principal_name": "bob"}]}
        return {"error_code": 0, "tokens": [tok("late", 20), tok("early", 10)]}
    fc.on_all("DescribeDelegationToken", answer)
    sim = Sim(fc)
    tokens = sim.run(sim.core.describe_delegation_token(now=0)).result()
    assert [t.token_id for t in tokens] == ["early", "late"]
    assert tokens[0].token_info == TokenInformation("early", "User:alice", "User:admin", ("User:bob",), 10, 2, 3)
    sim.run(sim.core.describe_delegation_token(["User:alice"], now=sim.now))
    owners = [r.body["owners"] for _, r in sim.requests("DescribeDelegationToken")]
    assert owners == [None, [{"principal_type": "User", "principal_name": "alice"}]]


@pytest.mark.parametrize("code,cls,advice", [
    (61, error_codes.DelegationTokenAuthDisabledError, "set it (the same value) on every broker and controller"),
    (62, error_codes.DelegationTokenNotFoundError, "it expired, was expired, or belongs to another cluster"),
    (63, error_codes.DelegationTokenOwnerMismatchError, "only the token's owner or one of its renewers"),
    (64, error_codes.DelegationTokenRequestNotAllowedError, "not one authenticated with a delegation token"),
    (65, error_codes.DelegationTokenAuthorizationFailedError, "CREATE_TOKENS ACL"),
    (66, error_codes.DelegationTokenExpiredError, "renewing only works before the expiry"),
])
def test_errors_are_typed_and_say_what_to_do(code, cls, advice):
    fc = FakeCluster()
    fc.on_all("RenewDelegationToken", lambda req: {"error_code": code, "expiry_timestamp_ms": -1})
    fc.on_all("CreateDelegationToken", lambda req: {**_created(req), "error_code": code})
    sim = Sim(fc)
    for h in (sim.core.renew_delegation_token(HMAC, now=0), sim.core.create_delegation_token(now=0)):
        sim.run(h)
        with pytest.raises(cls) as e:
            h.result()
        assert advice in str(e.value) and h.operation in str(e.value)
    assert len(sim.requests("RenewDelegationToken")) == 1      # not retried


# -- token authentication -----------------------------------------------------------------------

def _token_jaas(token_id, hmac_b64, tokenauth='"true"'):
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{token_id}" '
            f'password="{hmac_b64}" tokenauth={tokenauth};')


def test_tokenauth_puts_the_extension_in_the_signed_client_first_message():
    m = ScramMechanism("tok-1", "hmac", "sha512", nonce="abc", token_auth=True)
    assert m.initial_response() == b"n,,n=tok-1,r=abc,tokenauth=true"
    assert ScramMechanism("tok-1", "hmac", nonce="abc").initial_response() == b"n,,n=tok-1,r=abc"


@pytest.mark.parametrize("mechanism,hash_name", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_token_authentication_against_an_independent_server(mechanism, hash_name):
    hmac_b64 = base64.b64encode(HMAC).decode()
    firsts = []

    def token_server(tokens):
        server = ScramServer(hash_name, tokens)

        def step(token):
            if token.startswith(b"n,,"):
                firsts.append(token)
            return server.step(token)
        return step

    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
              "sasl.jaas.config": _token_jaas("tok-1", hmac_b64)}
    events, conn = connect_with(config, sasl_broker(mechanism, token_server({"tok-1": hmac_b64})))
    assert of(events, ConnectionReady) and conn.is_ready
    assert firsts[0].startswith(b"n,,n=tok-1,r=") and firsts[0].endswith(b",tokenauth=true")
    # An expired token: the server no longer knows it; the error says so, without the HMAC.
    events, conn = connect_with(config, sasl_broker(mechanism, token_server({})))
    (closed,) = of(events, ConnectionClosed)
    assert isinstance(closed.error, error_codes.SaslAuthenticationFailedError)
    text = str(closed.error)
    assert "delegation token 'tok-1' is unknown to the cluster: it expired, was expired" in text
    assert hmac_b64 not in text


def test_tokenauth_option_is_checked():
    def mechanism(jaas, mech="SCRAM-SHA-512"):
        """The SASL mechanism a connection of this config would use."""
        cfg = parse_producer_config({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT",
                                     "sasl.mechanism": mech, "sasl.jaas.config": jaas})
        return authenticator_for(cfg)()._factory()
    assert mechanism(_token_jaas("t", "h", '"TRUE"')).token_auth is True        # Java: any case
    assert mechanism(_token_jaas("t", "h", '"false"')).token_auth is False
    assert "tokenauth" in repr(mechanism(_token_jaas("t", "h")))
    with pytest.raises(ConfigError, match='tokenauth must be "true" or "false", not \'yes\''):
        mechanism(_token_jaas("t", "h", '"yes"'))
    with pytest.raises(ConfigError, match="needs sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512, not PLAIN"):
        mechanism(_token_jaas("t", "h"), "PLAIN")
