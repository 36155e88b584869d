"""A small OIDC issuer for the suite: a client-credentials token endpoint and
a JWKS, on loopback, in a thread.

Tokens are RS256 JWTs signed with joserfc (a maintained JOSE library) by a
key made at start; the JWKS serves its public half, so a Kafka broker with
``OAuthBearerValidatorCallbackHandler`` validates them for real. The issuer
keeps what tests check: the tokens it issued and the failed requests.
"""
from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

AUDIENCE = "kafka"
KID = "kio-test-key"


class OidcIssuer:
    """``clients`` maps client ids to secrets; tokens live ``lifetime_s``."""

    def __init__(self, clients: dict, lifetime_s: int = 3600, host: str = "127.0.0.1"):
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.key = RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig", "alg": "RS256"})
        self.issued: list = []        # (client id, claims) of every token issued
        self.refused = 0
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self.issuer = f"http://{self.host}:{self.port}"
        self.token_url = f"{self.issuer}/token"
        self.jwks_url = f"{self.issuer}/jwks"
        self._thread = None

    def start(self) -> "OidcIssuer":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True, name="oidc-issuer")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def jwks(self) -> dict:
        return KeySet([self.key]).as_dict(private=False)

    def issue(self, client_id: str, scope: str | None) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": client_id, "aud": AUDIENCE, "iat": now,
                  "exp": now + self.lifetime_s, "jti": f"{client_id}-{len(self.issued)}"}
        if scope:
            claims["scope"] = scope
        self.issued.append((client_id, claims))
        return jwt.encode({"alg": "RS256", "kid": KID, "typ": "JWT"}, claims, self.key)

    def _client_of(self, header: str | None):
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        user, secret = urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(secret)
        return user if self.clients.get(user) == secret else None

    def _handler(self):
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):      # quiet
                pass

            def _reply(self, status, doc):
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/jwks":
                    self._reply(200, issuer.jwks())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                if self.path != "/token":
                    return self._reply(404, {"error": "not_found"})
                if form.get("grant_type") != ["client_credentials"]:
                    issuer.refused += 1
                    return self._reply(400, {"error": "unsupported_grant_type"})
                client = issuer._client_of(self.headers.get("Authorization"))
                if client is None:
                    issuer.refused += 1
                    return self._reply(401, {"error": "invalid_client",
                                             "error_description": "client authentication failed"})
                token = issuer.issue(client, (form.get("scope") or [None])[0])
                self._reply(200, {"access_token": token, "token_type": "Bearer",
                                  "expires_in": issuer.lifetime_s})

        return Handler
