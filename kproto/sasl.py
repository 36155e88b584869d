"""SASL mechanisms for the connection's authentication step.

PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) and
OAUTHBEARER (RFC 7628, token from a callback), delegation tokens (SCRAM with
the ``tokenauth=true`` extension, from a ScramLoginModule ``sasl.jaas.config``
with ``tokenauth="true"``, as Java's) and GSSAPI (Kerberos V5,
RFC 4752, with the optional ``gssapi`` binding; tickets: :mod:`kproto.kerberos_login`),
at the token level of
:class:`kproto.connection.SaslMechanism`. :func:`authenticator_for` builds
the connection authenticator from a client config (``security.protocol``
SASL_PLAINTEXT, ``sasl.mechanism``, ``sasl.username`` / ``sasl.password``
or ``sasl.jaas.config``, ``sasl.oauthbearer.token.provider`` or the OIDC
client-credentials settings of :mod:`kproto.oauth`); each connection attempt
and each KIP-368 re-authentication gets a fresh mechanism.

Credentials never appear in reprs, logs or error texts: mechanisms keep them
in private attributes, and failures name the mechanism and the user only.
"""
from __future__ import annotations

import base64
import os
import re
import unicodedata
from typing import Callable, Optional

from kproto.connection import SaslAuthenticator, SaslMechanism
from kproto.errors import AuthenticationError, ConfigError

__all__ = ["PlainMechanism", "ScramMechanism", "OAuthBearerMechanism", "GssapiMechanism", "OidcAuthenticatorFactory",
           "authenticator_for", "parse_jaas_config", "parse_security_layers", "no_security_layer_reply", "MECHANISMS"]

MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class PlainMechanism(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str):
        self.username = username
        self._password = password

    def initial_response(self) -> bytes:
        self.complete = True
        return b"\0" + self.username.encode() + b"\0" + self._password.encode()

    def evaluate_challenge(self, challenge):
        return None

    def __repr__(self):
        return f"<PlainMechanism user={self.username!r}>"


def _saslname(name: str) -> str:
    # RFC 5802 5.1: ',' and '=' in the user name are escaped.
    return name.replace("=", "=3D").replace(",", "=2C")


def _saslprep(s: str) -> str:
    # The common part of SASLprep (RFC 4013): map non-ASCII spaces to a space,
    # drop commonly-mapped-to-nothing characters, NFKC normalise.
    s = "".join(" " if unicodedata.category(c) == "Zs" else c for c in s
                if c not in "\u00ad\u180b\u180c\u180d\u200b\u2060\ufe00\ufe0f\u034f")
    return unicodedata.normalize("NFKC", s)


class ScramMechanism(SaslMechanism):
    """SCRAM-SHA-256 / SCRAM-SHA-512 client. ``nonce`` may be given (tests,
    RFC vectors); otherwise 24 random bytes, base64.

    ``token_auth``: authenticate with a delegation token (KIP-48): the user
    name is the token id, the password the token's HMAC in base64, and the
    client-first message carries the extension ``tokenauth=true`` (RFC 5802
    allows extensions after the nonce; Kafka's ScramSaslServer then looks
    the credential up among the tokens, not the users)."""

    def __init__(self, username: str, password: str, hash_name: str = "sha256", nonce: Optional[str] = None,
                 token_auth: bool = False):
        if hash_name not in ("sha256", "sha512"):
            raise ConfigError(f"SCRAM hash must be sha256 or sha512, not {hash_name!r}")
        self.name = f"SCRAM-SHA-{hash_name[3:]}"
        self.username = username
        self.token_auth = token_auth
        self._password = _saslprep(password).encode()
        self._hash = hash_name
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._first_bare = None
        self._server_signature = None
        self._step = 0

    def __repr__(self):
        token = " tokenauth" if self.token_auth else ""
        return f"<ScramMechanism {self.name} user={self.username!r}{token}>"

    @property
    def failure_advice(self) -> str:
        if not self.token_auth:
            return ""
        return (f"the delegation token {self.username!r} is unknown to the cluster: it expired, was expired, "
                f"or the HMAC (the password) is wrong; create a new token with the owner's own credentials")

    @property
    def _who(self) -> str:
        # Failures name the user, or the token id (never the password/HMAC).
        return f"delegation token {self.username!r}" if self.token_auth else repr(self.username)

    def _hmac(self, key, msg):
        import hmac   # SCRAM's hashes load OpenSSL's libcrypto: only a SCRAM client pays for it
        return hmac.new(key, msg, self._hash).digest()

    def initial_response(self) -> bytes:
        # The extension is part of client-first-message-bare, so of the
        # AuthMessage both sides sign (as Java's ScramMessages.ClientFirstMessage).
        extensions = ",tokenauth=true" if self.token_auth else ""
        self._first_bare = f"n={_saslname(self.username)},r={self._nonce}{extensions}"
        self._step = 1
        return ("n,," + self._first_bare).encode()

    def evaluate_challenge(self, challenge):
        text = bytes(challenge).decode("utf-8", "replace")
        if self._step == 1:
            return self._client_final(text)
        if self._step == 2:
            self._verify_server_final(text)
            return None
        raise AuthenticationError(f"{self.name}: unexpected challenge after the exchange ended")

    def _client_final(self, server_first: str) -> bytes:
        fields = dict(kv.split("=", 1) for kv in server_first.split(",") if "=" in kv)
        if "e" in fields:
            raise AuthenticationError(f"{self.name} authentication of {self._who} failed: {fields['e']}")
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError) as e:
            raise AuthenticationError(f"{self.name}: malformed server-first-message ({e!r})") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationError(f"{self.name}: the server nonce does not extend the client's")
        if iterations < 4096:
            raise AuthenticationError(f"{self.name}: the server asked for {iterations} iterations, "
                                      f"fewer than the minimum 4096")
        import hashlib   # see _hmac
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._step = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: str) -> None:
        fields = dict(kv.split("=", 1) for kv in server_final.split(",") if "=" in kv)
        if "e" in fields:
            raise AuthenticationError(f"{self.name} authentication of {self._who} failed: {fields['e']}")
        try:
            given = base64.b64decode(fields["v"])
        except (KeyError, ValueError):
            raise AuthenticationError(f"{self.name}: malformed server-final-message") from None
        import hmac   # see _hmac
        if not hmac.compare_digest(given, self._server_signature):
            raise AuthenticationError(f"{self.name}: the server signature is wrong - the server does "
                                      f"not know the password; not trusting it")
        self.complete = True
        self._step = 3


class OAuthBearerMechanism(SaslMechanism):
    """RFC 7628 initial client response with a token from ``token_provider()``
    (a string, or (token, extensions dict))."""
    name = "OAUTHBEARER"

    def __init__(self, token_provider: Callable):
        self._provider = token_provider

    def initial_response(self) -> bytes:
        got = self._provider()
        token, extensions = (got if isinstance(got, tuple) else (got, {}))
        if not token:
            raise AuthenticationError("OAUTHBEARER: the token provider returned no token")
        ext = "".join(f"{k}={v}\x01" for k, v in sorted((extensions or {}).items()))
        return f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()

    def evaluate_challenge(self, challenge):
        if challenge:
            # RFC 7628 3.2.2: an error JSON; the client answers with a lone 0x01.
            self.error_details = bytes(challenge).decode("utf-8", "replace")
            return b"\x01"
        self.complete = True
        return None

    def __repr__(self):
        return "<OAuthBearerMechanism>"


def import_gssapi():
    """The ``gssapi`` binding (python-gssapi), imported on first use: GSSAPI
    is the only mechanism that needs it, so it is an optional extra."""
    try:
        import gssapi
    except ImportError as e:
        raise ConfigError("sasl.mechanism=GSSAPI needs the gssapi package (Kerberos): "
                          "pip install kproto-kio[gssapi] (it builds against MIT krb5, "
                          "Debian's libkrb5-dev)") from e
    return gssapi


#: RFC 4752 3.3: the security-layer bit masks of the final exchange.
NO_SECURITY_LAYER = 1
INTEGRITY_LAYER = 2
CONFIDENTIALITY_LAYER = 4


def parse_security_layers(message: bytes) -> tuple:
    """(layer bit mask, max message size) of the server's unwrapped final
    GSSAPI challenge (RFC 4752 3.1: one byte of layers, three bytes of size)."""
    message = bytes(message)
    if len(message) != 4:
        raise AuthenticationError(f"GSSAPI: the server's security-layer message has {len(message)} bytes, "
                                  f"not 4 (RFC 4752 3.1)")
    return message[0], int.from_bytes(message[1:], "big")


def no_security_layer_reply(layers: int, authzid: str = "") -> bytes:
    """The client's answer to the server's offer ``layers``: no security
    layer (Kafka's connections rely on TLS, or nothing, for that), maximum
    size 0, then the authorization id (RFC 4752 3.1); not yet wrapped."""
    if not layers & NO_SECURITY_LAYER:
        raise AuthenticationError(f"GSSAPI: the server insists on a security layer (offered mask "
                                  f"{layers:#04x}); Kafka clients only use 'no security layer'")
    return bytes([NO_SECURITY_LAYER, 0, 0, 0]) + authzid.encode("utf-8")


def gss_error(what: str, error: Exception) -> AuthenticationError:
    """SaslAuthenticationFailedError (an AuthenticationError, as Java's
    SaslAuthenticationException) naming ``what`` failed, with the GSS-API's
    own major/minor messages (e.g. 'Client not found in Kerberos database')."""
    from kproto.error_codes import SaslAuthenticationFailedError
    describe = getattr(error, "gen_message", None)
    text = describe() if describe is not None else str(error)
    return SaslAuthenticationFailedError(f"GSSAPI: {what} failed: {' '.join(text.split())}")


class GssapiMechanism(SaslMechanism):
    """Kerberos V5 through the GSS-API (RFC 4752), as Java's GssKrb5Client.

    Sans-IO at the SASL level: the context's tokens go through the Kafka
    connection. (The gssapi library itself asks the KDC for a service ticket
    the first time it meets a broker; tickets then come from the cache.)
    ``credentials`` are gssapi ``Credentials`` (None: the default credential
    cache, KRB5CCNAME); the broker's principal is the host-based service
    ``service_name@host``; ``authzid`` is sent as the authorization id
    (Java sends the client's principal).

    Steps: the context's initial token; the context's answers to the
    server's tokens until it is established (an empty token when it has
    nothing more to say); then the server's wrapped security-layer offer,
    answered by :func:`no_security_layer_reply`, wrapped.
    """
    name = "GSSAPI"

    def __init__(self, service_name: str, host: str, credentials=None, authzid: str = ""):
        gssapi = import_gssapi()
        self.service_name = service_name
        self.host = host
        self.authzid = authzid
        target = gssapi.Name(f"{service_name}@{host}", gssapi.NameType.hostbased_service)
        flags = [gssapi.RequirementFlag.mutual_authentication, gssapi.RequirementFlag.integrity,
                 gssapi.RequirementFlag.out_of_sequence_detection]
        self._context = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate", flags=flags)
        self._gss_error = gssapi.exceptions.GSSError
        self.server_max_size = None

    def __repr__(self):
        return f"<GssapiMechanism {self.service_name}@{self.host}>"

    def _step(self, token):
        try:
            return self._context.step(token)
        except self._gss_error as e:
            raise gss_error(f"the security context with {self.service_name}@{self.host}", e) from None

    def initial_response(self) -> bytes:
        return self._step(None) or b""

    def evaluate_challenge(self, challenge):
        if self.complete:
            raise AuthenticationError("GSSAPI: unexpected challenge after the exchange ended")
        if not self._context.complete:
            token = self._step(bytes(challenge))
            # Established with nothing more to send: an empty token asks the
            # server for its security-layer offer (as Java does).
            return token if token is not None else b""
        try:
            offer = self._context.unwrap(bytes(challenge))
            layers, self.server_max_size = parse_security_layers(offer.message)
            reply = self._context.wrap(no_security_layer_reply(layers, self.authzid), False).message
        except self._gss_error as e:
            raise gss_error("the security-layer negotiation", e) from None
        self.complete = True
        return reply


_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_config(text: str) -> dict:
    """username/password (and other options) of a PlainLoginModule or
    ScramLoginModule ``sasl.jaas.config`` line, as the Java client reads it."""
    if "LoginModule" not in text:
        raise ConfigError("sasl.jaas.config must name a login module "
                          "(org.apache.kafka.common.security.plain.PlainLoginModule required ...)")
    return {k: v.replace('\\"', '"') for k, v in _JAAS.findall(text)}


def _token_auth_option(options: dict, mechanism: str) -> bool:
    """Whether a ScramLoginModule's ``tokenauth`` option asks for delegation-token
    authentication (Java: "true" in any case); a bad value or the option
    with another mechanism is a ConfigError rather than a silent password login."""
    value = options.get("tokenauth")
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise ConfigError(f'sasl.jaas.config: tokenauth must be "true" or "false", not {value!r}')
    if value.lower() == "true" and mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ConfigError(f'sasl.jaas.config: tokenauth="true" (a delegation token) needs sasl.mechanism '
                          f'SCRAM-SHA-256 or SCRAM-SHA-512, not {mechanism}')
    return value.lower() == "true"


class OidcAuthenticatorFactory:
    """Connection authenticators presenting the client's current OIDC token
    (:class:`kproto.oauth_login.OAuthBearerLogin`: the first token is fetched
    here, when the client is built, and refreshed in the background until
    :meth:`close`)."""

    def __init__(self, settings):
        from kproto.oauth_login import OAuthBearerLogin
        self.login = OAuthBearerLogin(settings).login()

    def __call__(self) -> SaslAuthenticator:
        return SaslAuthenticator(lambda: OAuthBearerMechanism(self.login.token))

    def close(self) -> None:
        self.login.close()


def authenticator_for(cfg) -> Optional[Callable]:
    """A factory of connection authenticators for this config, or None (no SASL)."""
    if cfg.security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    mech = cfg.sasl_mechanism
    if mech == "OAUTHBEARER":
        provider = cfg.sasl_oauthbearer_token_provider
        if provider is None:
            from kproto.oauth import OAuthSettings
            settings = OAuthSettings.from_config(cfg)
            if settings is None:
                raise ConfigError("sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url "
                                  "(OIDC client credentials) or sasl.oauthbearer.token.provider "
                                  "(a callable returning the token)")
            return OidcAuthenticatorFactory(settings)
        return lambda: SaslAuthenticator(lambda: OAuthBearerMechanism(provider))
    if mech == "GSSAPI":
        from kproto.kerberos_login import GssapiAuthenticatorFactory
        return GssapiAuthenticatorFactory.from_config(cfg)
    user, password = cfg.sasl_username, cfg.sasl_password
    token_auth = False
    if cfg.sasl_jaas_config:
        options = parse_jaas_config(cfg.sasl_jaas_config)
        user, password = options.get("username", user), options.get("password", password)
        token_auth = _token_auth_option(options, mech)
    if user is None or password is None:
        raise ConfigError(f"sasl.mechanism={mech} needs sasl.username and sasl.password "
                          f"(or sasl.jaas.config)")
    if mech == "PLAIN":
        return lambda: SaslAuthenticator(lambda: PlainMechanism(user, password))
    if mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        hash_name = "sha256" if mech == "SCRAM-SHA-256" else "sha512"
        return lambda: SaslAuthenticator(lambda: ScramMechanism(user, password, hash_name, token_auth=token_auth))
    raise ConfigError(f"sasl.mechanism={mech} is not supported: use one of {', '.join(MECHANISMS)}")
