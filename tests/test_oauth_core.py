"""OIDC client credentials (KIP-768) without a network: the request, the
answer's checks, Java's refresh timing and retry schedule, the settings."""
import base64
import json
import random
import urllib.parse

import pytest

from kproto.config import ConfigError
from kproto.oauth import (
    AccessToken, OAuthSettings, OAuthTokenError, RetriableOAuthError, parse_token_response, refresh_at_ms,
    retry_delays_ms, token_request,
)
from kproto.oauth_login import OAuthBearerLogin, fetch_token
from kproto.producer.config import parse_producer_config

URL = "https://idp.example/oauth2/token"
SETTINGS = OAuthSettings(URL, "my app", "s3cr:t&", "kafka.produce")
HOUR_MS = 3600_000


def b64url(doc):
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def jwt(**claims):
    """An unsigned-looking JWT: the client does not check signatures (the broker does)."""
    return f"{b64url({'alg': 'RS256'})}.{b64url(claims)}.c2lnbmF0dXJl"


def answer(token, status=200):
    return status, json.dumps({"access_token": token, "token_type": "Bearer"}).encode()


def test_the_client_credentials_request():
    req = token_request(SETTINGS)
    assert (req.method, req.url) == ("POST", URL)
    assert urllib.parse.parse_qs(req.body.decode()) == {"grant_type": ["client_credentials"],
                                                        "scope": ["kafka.produce"]}
    user, secret = base64.b64decode(req.headers["Authorization"].split()[1]).decode().split(":")
    # URL-encoded before base64, as Java sends them (RFC 6749 2.3.1)
    assert (urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(secret)) == ("my app", "s3cr:t&")
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert "scope" not in token_request(SETTINGS._replace(scope=None)).body.decode()


def test_a_token_answer_is_checked_like_javas_client_validator():
    token = parse_token_response(*answer(jwt(sub="my app", exp=2_000_000_000, iat=1_999_996_400)), SETTINGS)
    assert token.principal == "my app" and token.expires_at_ms == 2_000_000_000_000
    assert token.issued_at_ms == 1_999_996_400_000
    with pytest.raises(OAuthTokenError, match="no numeric 'exp' claim"):
        parse_token_response(*answer(jwt(sub="a")), SETTINGS)
    with pytest.raises(OAuthTokenError, match="no 'sub' claim"):
        parse_token_response(*answer(jwt(exp=2_000_000_000)), SETTINGS)
    with pytest.raises(OAuthTokenError, match="not a JWT"):
        parse_token_response(*answer("opaque-token"), SETTINGS)
    with pytest.raises(OAuthTokenError, match="without an access_token"):
        parse_token_response(200, b'{"token_type": "Bearer"}', SETTINGS)


def test_refusals_are_fatal_and_server_errors_retriable():
    body = b'{"error": "invalid_client", "error_description": "bad secret"}'
    with pytest.raises(OAuthTokenError) as e:
        parse_token_response(401, body, SETTINGS)
    assert "HTTP 401 (invalid_client: bad secret)" in str(e.value) and "'my app'" in str(e.value)
    assert "s3cr" not in str(e.value)           # the secret never shows
    with pytest.raises(RetriableOAuthError, match="HTTP 503"):
        parse_token_response(503, b"busy", SETTINGS)


def token(lifetime_ms, issued_at=0):
    return AccessToken("t", issued_at + lifetime_ms, issued_at, "app")


class Fixed:
    def __init__(self, value):
        self.value = value

    def random(self):
        return self.value


def test_refresh_time_is_javas():
    # An hour-long token: 80% of its lifetime (+ jitter up to 5%).
    assert refresh_at_ms(token(HOUR_MS), 0, SETTINGS, Fixed(0)) == 0.8 * HOUR_MS
    assert refresh_at_ms(token(HOUR_MS), 0, SETTINGS, Fixed(1)) == int(0.85 * HOUR_MS)
    # No later than buffer.seconds (300 s) before exp: a 20-minute token refreshes at 15 min.
    assert refresh_at_ms(token(1200_000), 0, SETTINGS, Fixed(0)) == 900_000
    # No sooner than min.period.seconds (60 s) from now (a token issued long ago).
    old = AccessToken("t", 2 * HOUR_MS, -20 * HOUR_MS, "app")
    assert refresh_at_ms(old, 0, SETTINGS, Fixed(0)) == 60_000
    # A token shorter than both buffers: they are ignored, 80% of what is left.
    assert refresh_at_ms(token(10_000), 0, SETTINGS, Fixed(0)) == 8_000
    # Expired: at once.
    assert refresh_at_ms(token(10_000), 20_000, SETTINGS, Fixed(0)) == 20_000


def test_retry_schedule_doubles_until_the_maximum_has_passed():
    s = SETTINGS._replace(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    assert list(retry_delays_ms(s)) == [100, 200, 400, 300]
    assert list(retry_delays_ms(s._replace(retry_backoff_max_ms=0))) == []


def test_fetch_retries_an_unreachable_endpoint_then_gives_up_clearly():
    slept, calls = [], []

    def post(settings):
        calls.append(1)
        if len(calls) < 3:
            raise RetriableOAuthError("cannot be reached: refused")
        return answer(jwt(sub="app", exp=2_000_000_000))

    s = SETTINGS._replace(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    assert fetch_token(s, sleep=slept.append, post=post).principal == "app"
    assert slept == [100, 200]

    def down(settings):
        raise RetriableOAuthError("cannot be reached: refused")
    with pytest.raises(OAuthTokenError, match="cannot be reached: refused.*gave up after "
                                              "sasl.login.retry.backoff.max.ms=1000"):
        fetch_token(s, sleep=lambda ms: None, post=down)

    def refused(settings):
        calls.append(1)
        return 401, b'{"error": "invalid_client"}'
    calls.clear()
    with pytest.raises(OAuthTokenError, match="HTTP 401"):
        fetch_token(s, sleep=slept.append, post=refused)
    assert len(calls) == 1          # a refusal is not retried


def test_login_keeps_the_current_token_and_stops_on_close():
    tokens = iter(range(100))

    def fetch(settings, sleep=None):
        return AccessToken(f"t{next(tokens)}", 4_000_000_000_000, None, "app")

    login = OAuthBearerLogin(SETTINGS, rng=random.Random(1), fetch=fetch).login()
    assert login.token() == "t0"
    login.close()
    assert not login._thread.is_alive()


def test_settings_java_names_and_jaas_form():
    base = {"bootstrap.servers": "h:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": URL}
    s = OAuthSettings.from_config(parse_producer_config({
        **base, "sasl.oauthbearer.client.credentials.client.id": "app",
        "sasl.oauthbearer.client.credentials.client.secret": "pw", "sasl.oauthbearer.scope": "s1",
        "sasl.login.refresh.window.factor": 0.9, "sasl.login.refresh.buffer.seconds": 10,
        "sasl.login.retry.backoff.max.ms": 500}))
    assert (s.client_id, s.client_secret, s.scope, s.refresh_window_factor) == ("app", "pw", "s1", 0.9)
    assert (s.refresh_buffer_seconds, s.retry_backoff_max_ms, s.refresh_window_jitter) == (10, 500, 0.05)
    assert "pw" not in repr(s)
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'clientId="app2" clientSecret="pw2" scope="s2";')
    s = OAuthSettings.from_config(parse_producer_config({**base, "sasl.jaas.config": jaas}))
    assert (s.client_id, s.client_secret, s.scope) == ("app2", "pw2", "s2")
    with pytest.raises(ConfigError, match="client.credentials.client.secret"):
        OAuthSettings.from_config(parse_producer_config({**base, "sasl.oauthbearer.client.credentials.client.id": "a"}))
    with pytest.raises(ConfigError, match="http:// or https://"):
        OAuthSettings.from_config(parse_producer_config({**base, "sasl.oauthbearer.token.endpoint.url": "file:///x",
                                                         "sasl.oauthbearer.client.credentials.client.id": "a",
                                                         "sasl.oauthbearer.client.credentials.client.secret": "b"}))
    with pytest.raises(ConfigError, match="window.factor"):
        parse_producer_config({**base, "sasl.login.refresh.window.factor": 0.2})
