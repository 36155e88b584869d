"""The token fetch and refresh of OAUTHBEARER with OIDC: the one I/O helper
the drivers share.

Why a helper with its own thread rather than an event the drivers fulfil:
the token is not per connection but per client, it is needed before the
first connection and refreshed on its own clock (the JWT's ``exp``), and a
failed fetch must fail the client at once - all as Java does it, whose
``ExpiringCredentialRefreshingLogin`` fetches the first token when the
client is built (a wrong secret fails the constructor) and refreshes in a
thread of its own, away from the network thread. So here:

* :class:`OAuthBearerLogin` ``.login()`` fetches the first token (blocking,
  with the retry schedule of :func:`kproto.oauth.retry_delays_ms`) when the
  client is built - from :func:`kproto.sasl.authenticator_for`, under every
  driver alike. A 4xx (wrong client secret) raises
  :class:`kproto.oauth.OAuthTokenError` at once; an issuer that cannot be
  reached raises it once ``sasl.login.retry.backoff.max.ms`` has passed;
* a daemon thread fetches the next token at :func:`kproto.oauth.refresh_at_ms`
  and swaps it in; :meth:`OAuthBearerLogin.token` (what the OAUTHBEARER
  mechanism calls for each authentication and KIP-368 re-authentication)
  only reads the current token, so the connection state machine, the
  drivers' event loops and the network thread never wait on HTTP;
* :meth:`OAuthBearerLogin.close` stops the thread (the NetworkClient's
  ``close`` calls it).

Everything the exchange decides (request, response, JWT, timing) is
:mod:`kproto.oauth`; this module only moves bytes with urllib and sleeps.
"""
from __future__ import annotations

import logging
import random
import socket
import threading
import urllib.error
import urllib.request
from typing import Callable, Optional

from kproto.oauth import (
    AccessToken, OAuthSettings, OAuthTokenError, RetriableOAuthError, now_ms, parse_token_response,
    refresh_at_ms, retry_delays_ms, token_request,
)

__all__ = ["OAuthBearerLogin", "fetch_token"]

log = logging.getLogger("kproto.oauth")

#: After a failed refresh, try again this much later (Java's
#: DELAY_SECONDS_BEFORE_NEXT_RETRY_WHEN_RELOGIN_FAILS), or sooner if the token expires first.
RELOGIN_RETRY_MS = 10_000


def _post(settings: OAuthSettings) -> tuple:
    """(status, body) of one client-credentials POST; RetriableOAuthError if
    the endpoint cannot be reached."""
    req = token_request(settings)
    http = urllib.request.Request(req.url, data=req.body, headers=req.headers, method=req.method)
    # urllib has one timeout for connect and each read: the larger of the two
    # settings, so neither fires early.
    timeout = max(settings.connect_timeout_ms, settings.read_timeout_ms) / 1000
    try:
        with urllib.request.urlopen(http, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError, socket.timeout) as e:
        reason = getattr(e, "reason", e)
        raise RetriableOAuthError(f"the OAuth token endpoint {settings.token_endpoint_url} cannot be "
                                  f"reached: {reason}") from None


def fetch_token(settings: OAuthSettings, sleep: Callable[[float], object] = None,
                post: Callable = _post) -> AccessToken:
    """A new token from the endpoint, retried as Java's ``Retry`` does;
    OAuthTokenError when refused or when retrying ran out of time."""
    sleep = sleep or (lambda ms: threading.Event().wait(ms / 1000))
    delays = retry_delays_ms(settings)
    while True:
        try:
            status, body = post(settings)
            return parse_token_response(status, body, settings)
        except RetriableOAuthError as e:
            delay = next(delays, None)
            if delay is None:
                raise OAuthTokenError(f"{e} (gave up after sasl.login.retry.backoff.max.ms="
                                      f"{settings.retry_backoff_max_ms})") from None
            log.debug("token request failed, retrying in %.0f ms: %s", delay, e)
            sleep(delay)


class OAuthBearerLogin:
    """The current OIDC token of one client, refreshed in the background."""

    def __init__(self, settings: OAuthSettings, rng=None, fetch: Callable = fetch_token):
        self.settings = settings
        self._rng = rng or random.Random()
        self._fetch = fetch
        self._token: Optional[AccessToken] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.refreshes = 0          # tokens fetched after the first one

    def login(self) -> "OAuthBearerLogin":
        """Fetch the first token (raises OAuthTokenError) and start refreshing."""
        self._token = self._fetch(self.settings)
        self._thread = threading.Thread(target=self._refresh_loop, daemon=True,
                                        name=f"kio-oauth-refresh | {self.settings.client_id}")
        self._thread.start()
        return self

    def token(self) -> str:
        """The current token (what OAUTHBEARER presents)."""
        if self._token is None:
            raise OAuthTokenError("OAUTHBEARER: no token yet (login() was not called)")
        return self._token.value

    @property
    def current(self) -> Optional[AccessToken]:
        return self._token

    def _refresh_loop(self) -> None:
        due = refresh_at_ms(self._token, now_ms(), self.settings, self._rng)
        while not self._stop.wait(max(0.0, due - now_ms()) / 1000):
            try:
                self._token = self._fetch(self.settings, sleep=lambda ms: self._stop.wait(ms / 1000))
                self.refreshes += 1
                due = refresh_at_ms(self._token, now_ms(), self.settings, self._rng)
                log.debug("OAuth token refreshed; it expires at %d, next refresh at %d",
                          self._token.expires_at_ms, due)
            except OAuthTokenError as e:
                if self._stop.is_set():
                    return
                log.warning("OAuth token refresh failed (the current token expires at %d ms): %s",
                            self._token.expires_at_ms, e)
                now = now_ms()
                due = now + min(RELOGIN_RETRY_MS, max(0, (self._token.expires_at_ms - now) / 2))

    def close(self) -> None:
        """Stop refreshing (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
