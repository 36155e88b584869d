"""OAUTHBEARER with OIDC (KIP-768): the client-credentials grant, sans-IO.

What Java's ``OAuthBearerLoginCallbackHandler`` with
``ClientCredentialsJwtRetriever`` and its ``ExpiringCredentialRefreshingLogin``
decide, without doing any I/O:

* :class:`OAuthSettings`: the settings (``sasl.oauthbearer.token.endpoint.url``,
  ``sasl.oauthbearer.client.credentials.client.id`` / ``.client.secret``,
  ``sasl.oauthbearer.scope``, ``sasl.login.refresh.*``, ``sasl.login.*timeout*``,
  ``sasl.login.retry.backoff.*``), from a client config; the client id,
  secret and scope may also come from ``sasl.jaas.config``
  (``clientId="..." clientSecret="..." scope="..."``, the Java 3.x form);
* :func:`token_request`: the HTTP POST to send (form body
  ``grant_type=client_credentials[&scope=...]``, HTTP basic authentication
  with the URL-encoded id and secret, as Java sends it);
* :func:`parse_token_response`: the answer's ``access_token``, checked as a
  JWT the way Java's ``ClientJwtValidator`` does (three parts, a payload
  with ``exp`` and the subject claim; the signature is the broker's to
  check), or an error: :class:`OAuthTokenError` (fatal, an authentication
  failure: a 4xx such as a wrong client secret) or
  :class:`RetriableOAuthError` (a 5xx, an issuer that cannot be reached);
* :func:`refresh_at_ms`: when to fetch the next token, Java's algorithm:
  ``window.factor`` (+ random ``window.jitter``) of the lifetime, no later
  than ``buffer.seconds`` before ``exp``, no sooner than ``min.period.seconds``
  from now, both buffers ignored when the token lives shorter than their sum;
* :func:`retry_delays_ms`: the retry schedule of a failed token request.

The HTTP request itself is done by :mod:`kproto.oauth_login`, the one
helper every driver shares (see there why).
"""
from __future__ import annotations

import base64
import json
import time
import urllib.parse
from typing import Iterator, NamedTuple, Optional

from kproto.errors import AuthenticationError, ConfigError, KafkaError

__all__ = ["OAuthSettings", "AccessToken", "OAuthTokenError", "RetriableOAuthError", "token_request",
           "parse_token_response", "refresh_at_ms", "retry_delays_ms"]


class OAuthTokenError(AuthenticationError):
    """The token endpoint refused the request (a wrong client id or secret,
    an unknown scope: an HTTP 4xx) or answered something that is no usable
    token. Retrying cannot fix it."""
    name = "OAUTH_TOKEN_FAILED"     # no broker code: the token endpoint refused, not the broker

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class RetriableOAuthError(KafkaError):
    """The token endpoint could not be reached or failed (connection refused,
    timeout, HTTP 5xx): retried with backoff; once
    ``sasl.login.retry.backoff.max.ms`` has passed it is reported as an
    :class:`OAuthTokenError`."""


class OAuthSettings(NamedTuple):
    token_endpoint_url: str
    client_id: str
    client_secret: str
    scope: Optional[str]
    sub_claim_name: str = "sub"
    refresh_window_factor: float = 0.8
    refresh_window_jitter: float = 0.05
    refresh_min_period_seconds: int = 60
    refresh_buffer_seconds: int = 300
    connect_timeout_ms: int = 10000
    read_timeout_ms: int = 10000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10000

    @classmethod
    def from_config(cls, cfg) -> Optional["OAuthSettings"]:
        """The settings of ``cfg`` (a kproto Config), or None when no token
        endpoint is configured. ConfigError names what is missing."""
        url = cfg.sasl_oauthbearer_token_endpoint_url
        if not url:
            return None
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise ConfigError(f"sasl.oauthbearer.token.endpoint.url must be an http:// or https:// URL, "
                              f"not {url!r}")
        client_id = cfg.sasl_oauthbearer_client_credentials_client_id
        secret = cfg.sasl_oauthbearer_client_credentials_client_secret
        scope = cfg.sasl_oauthbearer_scope
        if cfg.sasl_jaas_config:
            from kproto.sasl import parse_jaas_config
            options = parse_jaas_config(cfg.sasl_jaas_config)
            client_id = client_id or options.get("clientId")
            secret = secret or options.get("clientSecret")
            scope = scope or options.get("scope")
        if not client_id or not secret:
            raise ConfigError("sasl.oauthbearer.token.endpoint.url needs "
                              "sasl.oauthbearer.client.credentials.client.id and "
                              "sasl.oauthbearer.client.credentials.client.secret "
                              "(or clientId/clientSecret in sasl.jaas.config)")
        return cls(url, client_id, secret, scope or None,
                   sub_claim_name=cfg.sasl_oauthbearer_sub_claim_name,
                   refresh_window_factor=cfg.sasl_login_refresh_window_factor,
                   refresh_window_jitter=cfg.sasl_login_refresh_window_jitter,
                   refresh_min_period_seconds=cfg.sasl_login_refresh_min_period_seconds,
                   refresh_buffer_seconds=cfg.sasl_login_refresh_buffer_seconds,
                   connect_timeout_ms=cfg.sasl_login_connect_timeout_ms,
                   read_timeout_ms=cfg.sasl_login_read_timeout_ms,
                   retry_backoff_ms=cfg.sasl_login_retry_backoff_ms,
                   retry_backoff_max_ms=cfg.sasl_login_retry_backoff_max_ms)

    def __repr__(self):   # the secret never shows
        return f"OAuthSettings(url={self.token_endpoint_url!r}, client_id={self.client_id!r}, scope={self.scope!r})"


class AccessToken(NamedTuple):
    value: str
    expires_at_ms: int          #: the JWT's ``exp``
    issued_at_ms: Optional[int]  #: the JWT's ``iat`` (None if absent)
    principal: str              #: the subject claim


class HttpRequest(NamedTuple):
    method: str
    url: str
    headers: dict
    body: bytes


def token_request(settings: OAuthSettings) -> HttpRequest:
    """The client-credentials POST for ``settings`` (RFC 6749 4.4)."""
    quote = urllib.parse.quote_plus   # Java URL-encodes both before base64 (RFC 6749 2.3.1)
    basic = base64.b64encode(f"{quote(settings.client_id)}:{quote(settings.client_secret)}".encode()).decode()
    form = {"grant_type": "client_credentials"}
    if settings.scope:
        form["scope"] = settings.scope
    return HttpRequest("POST", settings.token_endpoint_url,
                       {"Authorization": f"Basic {basic}", "Accept": "application/json",
                        "Cache-Control": "no-cache",
                        "Content-Type": "application/x-www-form-urlencoded"},
                       urllib.parse.urlencode(form).encode())


def _b64url_json(part: str, what: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except ValueError as e:
        raise OAuthTokenError(f"the access token's {what} is not base64url JSON: {e}") from None
    if not isinstance(value, dict):
        raise OAuthTokenError(f"the access token's {what} is not a JSON object")
    return value


def parse_token_response(status: int, body: bytes, settings: OAuthSettings) -> AccessToken:
    """The token in the endpoint's answer (HTTP ``status``, ``body``)."""
    url = settings.token_endpoint_url
    text = bytes(body).decode("utf-8", "replace")
    if status >= 400:
        detail = text[:300]
        try:
            doc = json.loads(text)
            if isinstance(doc, dict) and "error" in doc:
                detail = doc["error"] + (f": {doc['error_description']}" if doc.get("error_description") else "")
        except ValueError:
            pass
        message = f"the OAuth token endpoint {url} answered HTTP {status} ({detail})"
        if status >= 500:
            raise RetriableOAuthError(message)
        if status in (400, 401):
            message += f": check the client id {settings.client_id!r} and its secret"
        raise OAuthTokenError(message)
    try:
        doc = json.loads(text)
        token = doc["access_token"]
    except (ValueError, KeyError, TypeError):
        raise OAuthTokenError(f"the OAuth token endpoint {url} answered HTTP {status} without an "
                              f"access_token: {text[:200]!r}") from None
    if not isinstance(token, str) or token.count(".") != 2:
        raise OAuthTokenError(f"the access token from {url} is not a JWT (header.payload.signature)")
    claims = _b64url_json(token.split(".")[1], "payload")
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)):
        raise OAuthTokenError(f"the access token from {url} has no numeric 'exp' claim")
    sub = claims.get(settings.sub_claim_name)
    if not isinstance(sub, str) or not sub:
        raise OAuthTokenError(f"the access token from {url} has no {settings.sub_claim_name!r} claim")
    iat = claims.get("iat")
    return AccessToken(token, int(exp * 1000), int(iat * 1000) if isinstance(iat, (int, float)) else None, sub)


def refresh_at_ms(token: AccessToken, now_ms: float, settings: OAuthSettings, rng) -> float:
    """When to fetch the token that replaces ``token`` (Java's
    ``ExpiringCredentialRefreshingLogin.refreshMs``)."""
    expires = token.expires_at_ms
    if now_ms >= expires:
        return now_ms
    pct = settings.refresh_window_factor + settings.refresh_window_jitter * rng.random()
    min_period_ms = 1000 * settings.refresh_min_period_seconds
    buffer_ms = 1000 * settings.refresh_buffer_seconds
    if now_ms + min_period_ms + buffer_ms > expires:
        # A token living shorter than both buffers: they are ignored.
        return now_ms + int((expires - now_ms) * pct)      # Java: (long) (... * pct)
    start = token.issued_at_ms if token.issued_at_ms is not None else now_ms
    proposed = start + int((expires - start) * pct)
    if proposed > expires - buffer_ms:
        return expires - buffer_ms
    if proposed < now_ms + min_period_ms:
        return now_ms + min_period_ms
    return proposed


def retry_delays_ms(settings: OAuthSettings) -> Iterator[float]:
    """Waits between attempts of a failing token request (Java's ``Retry``):
    ``retry.backoff.ms`` doubling, until ``retry.backoff.max.ms`` have
    passed in all; the iterator ends when it is time to give up."""
    waited = 0.0
    delay = float(settings.retry_backoff_ms)
    while waited < settings.retry_backoff_max_ms:
        step = min(delay, settings.retry_backoff_max_ms - waited)
        if step <= 0:
            return
        yield step
        waited += step
        delay *= 2


def now_ms() -> float:
    """Wall-clock milliseconds (a JWT's ``exp`` is wall-clock time)."""
    return time.time() * 1000
