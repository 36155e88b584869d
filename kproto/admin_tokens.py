"""Delegation tokens (KIP-48), as operations of :class:`kproto.admin.AdminCore`
(mixed in): ``create_delegation_token``, ``renew_delegation_token``,
``expire_delegation_token`` and ``describe_delegation_token``, with Java's
Admin semantics.

A delegation token is a shared secret the cluster issues to a principal
authenticated some other way (SCRAM, GSSAPI, mutual TLS...): its id and its
HMAC are then a SCRAM user name and password for that principal (the
``tokenauth=true`` extension of :mod:`kproto.sasl`), so that short-lived
workers need not hold the principal's own credentials. The HMAC names the
token to renew or expire it; its base64 form is the SCRAM password
(:attr:`DelegationToken.hmac_base64`, :meth:`DelegationToken.jaas_config`).

Every request goes to any broker (least loaded; KRaft brokers forward
create, renew and expire to the controller). The broker refuses token
requests on connections that authenticated with a token or not with SASL
(PLAINTEXT, one-way TLS) - DelegationTokenRequestNotAllowedError - and a
cluster without ``delegation.token.secret.key`` refuses them all -
DelegationTokenAuthDisabledError. The errors carry a sentence on what to do.
"""
from __future__ import annotations

import base64
from typing import Iterable, NamedTuple, Optional, Tuple, Union

from kproto import error_codes
from kproto._admin_mixin import AdminMixin
from kproto.errors import UnsupportedVersionError

__all__ = ["TokenAdmin", "DelegationToken", "TokenInformation", "Hmac", "principal_parts", "token_error"]

#: What to do about each delegation-token error code (appended to the broker's text).
_ADVICE = {
    33: "enable SCRAM-SHA-256 or SCRAM-SHA-512 on the listener (sasl.enabled.mechanisms): tokens "
        "authenticate through SCRAM",
    61: "the cluster has no delegation.token.secret.key: set it (the same value) on every broker and "
        "controller to enable delegation tokens",
    62: "no live token has this HMAC: it expired, was expired, or belongs to another cluster; create a "
        "new one",
    63: "only the token's owner or one of its renewers may renew or expire it",
    64: "token requests need a connection authenticated with the principal's own credentials (SASL "
        "SCRAM, GSSAPI, PLAIN or OAUTHBEARER, or mutual TLS); not one authenticated with a delegation "
        "token, nor a PLAINTEXT or one-way TLS one",
    65: "creating a token for another owner needs the CREATE_TOKENS ACL on that user; describing "
        "others' tokens needs DESCRIBE_TOKENS",
    66: "the token has expired: create a new one (renewing only works before the expiry)",
    67: "principals are written Type:name, e.g. User:alice",
}


def token_error(code: int, message: Optional[str], what: str):
    """The exception for a token request's error ``code``, its text extended
    with what to do about it (``what``: the operation that failed)."""
    cls = error_codes.ERRORS_BY_CODE.get(code)
    advice = _ADVICE.get(code)
    if cls is not None and advice:
        message = f"{message or cls.default_message}: {advice}"
    return error_codes.error_for_code(code, message, what)


def principal_parts(principal: str, what: str) -> Tuple[str, str]:
    """("User", "alice") for "User:alice" (Java's ``KafkaPrincipal`` text);
    ValueError naming ``what`` for anything else."""
    if not isinstance(principal, str):
        raise TypeError(f"{what}: a principal is a string such as 'User:alice', not {principal!r}")
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"{what}: {principal!r} is not a principal: write it Type:name, e.g. User:alice")
    return kind, name


def _principal(kind: Optional[str], name: Optional[str]) -> Optional[str]:
    return None if not kind and not name else f"{kind}:{name}"


class TokenInformation(NamedTuple):
    """Java's ``TokenInformation``: who the token is for and until when
    (timestamps in ms since the epoch)."""
    token_id: str
    owner: str                      #: "User:alice"
    token_requester: Optional[str]  #: who asked for it (None before CreateDelegationToken v3)
    renewers: Tuple[str, ...]
    issue_timestamp: int
    expiry_timestamp: int           #: the token stops working then unless renewed
    max_timestamp: int              #: no renewal goes past this

    def owner_or_renewer(self, principal: str) -> bool:
        """Whether ``principal`` may renew or expire this token (Java's ``ownerOrRenewer``)."""
        return principal == self.owner or principal == self.token_requester or principal in self.renewers


class DelegationToken(NamedTuple):
    """Java's ``DelegationToken``: the token's information and its HMAC (the secret)."""
    token_info: TokenInformation
    hmac: bytes

    @property
    def token_id(self) -> str:
        return self.token_info.token_id

    @property
    def hmac_base64(self) -> str:
        """The HMAC as the SCRAM password of token authentication (Java's ``hmacAsBase64String``)."""
        return base64.b64encode(self.hmac).decode()

    def jaas_config(self) -> str:
        """The ``sasl.jaas.config`` that authenticates as this token's owner
        (with ``sasl.mechanism`` SCRAM-SHA-256 or SCRAM-SHA-512)."""
        return (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{self.token_id}" password="{self.hmac_base64}" tokenauth="true";')

    def __repr__(self):
        # The HMAC is a password: never in reprs or logs.
        return f"DelegationToken(token_info={self.token_info!r}, hmac=<{len(self.hmac)} bytes>)"


#: An HMAC as the token operations take it: the bytes, their base64 text, or the token.
Hmac = Union[bytes, str, DelegationToken]


def _hmac_bytes(hmac: Hmac, what: str) -> bytes:
    """The HMAC as bytes: bytes as given, or its base64 text (as
    kafka-delegation-tokens prints it and takes it)."""
    if isinstance(hmac, (bytes, bytearray, memoryview)):
        out = bytes(hmac)
    elif isinstance(hmac, str):
        try:
            out = base64.b64decode(hmac, validate=True)
        except ValueError:
            raise ValueError(f"{what}: the HMAC text is not base64 (give the bytes, or the base64 "
                             f"text kafka-delegation-tokens prints)") from None
    elif isinstance(hmac, DelegationToken):
        out = hmac.hmac
    else:
        raise TypeError(f"{what}: the HMAC is bytes, its base64 text or a DelegationToken, not {hmac!r}")
    if not out:
        raise ValueError(f"{what}: the HMAC is empty")
    return out


class TokenAdmin(AdminMixin):
    """The delegation-token operations of AdminCore (a mixin)."""

    def create_delegation_token(self, owner: Optional[str] = None, renewers: Iterable[str] = (),
                                max_lifetime_ms: int = -1, *, timeout_ms=None, now):
        """A new :class:`DelegationToken` (item "token"), for ``owner``
        ("User:alice"; None: the requester; another principal needs the
        CREATE_TOKENS ACL on it and CreateDelegationToken v3), renewable by
        ``renewers``, living at most ``max_lifetime_ms`` (-1: the broker's
        ``delegation.token.max.lifetime.ms``)."""
        from kproto.admin import _SelfCall
        what = "create_delegation_token"
        owner_parts = None if owner is None else principal_parts(owner, what)
        renewer_parts = [principal_parts(r, what) for r in renewers]
        if not isinstance(max_lifetime_ms, int):
            raise TypeError(f"{what}: max_lifetime_ms is an int of milliseconds, not {max_lifetime_ms!r}")
        op = self._op(what, ["token"], now, timeout_ms, single=True)

        def build(node, call=None):
            if owner_parts is not None and (self.client.api_version(node, "CreateDelegationToken") or 0) < 3:
                raise UnsupportedVersionError(
                    f"a token for another owner ({owner}) needs CreateDelegationToken v3 (Kafka 3.3+); "
                    f"node {node} has v{self.client.api_version(node, 'CreateDelegationToken')}")
            body = {"renewers": [{"principal_type": k, "principal_name": n} for k, n in renewer_parts],
                    "max_lifetime_ms": max_lifetime_ms}
            if owner_parts is not None:
                body["owner_principal_type"], body["owner_principal_name"] = owner_parts
            return body

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._complete(op, "token", error=token_error(code, None, what))
                return
            info = TokenInformation(
                body["token_id"], _principal(body["principal_type"], body["principal_name"]),
                _principal(body.get("token_requester_principal_type"), body.get("token_requester_principal_name")),
                tuple(f"{k}:{n}" for k, n in renewer_parts), body["issue_timestamp_ms"],
                body["expiry_timestamp_ms"], body["max_timestamp_ms"])
            self._complete(op, "token", value=DelegationToken(info, bytes(body["hmac"])))

        self._submit(_SelfCall(op, "CreateDelegationToken", op.items, build, handle))
        return op

    def _token_timestamp_call(self, what: str, api: str, hmac, period_field: str, period_ms: int, now,
                              timeout_ms):
        """Renew or expire (one HMAC and a period): item "expiry_timestamp", the new expiry in ms."""
        from kproto.admin import _SelfCall
        secret = _hmac_bytes(hmac, what)
        if not isinstance(period_ms, int):
            raise TypeError(f"{what}: {period_field} is an int of milliseconds, not {period_ms!r}")
        op = self._op(what, ["expiry_timestamp"], now, timeout_ms, single=True)

        def build(node, call=None):
            return {"hmac": secret, period_field: period_ms}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            self._complete(op, "expiry_timestamp", value=None if code else body["expiry_timestamp_ms"],
                           error=token_error(code, None, what) if code else None)

        self._submit(_SelfCall(op, api, op.items, build, handle))
        return op

    def renew_delegation_token(self, hmac, renew_time_period_ms: int = -1, *, timeout_ms=None, now):
        """Push the token's expiry to now + ``renew_time_period_ms`` (-1: the
        broker's ``delegation.token.expiry.time.ms``), never past its max
        timestamp; item "expiry_timestamp". ``hmac``: bytes, base64 text or
        a DelegationToken."""
        return self._token_timestamp_call("renew_delegation_token", "RenewDelegationToken", hmac,
                                          "renew_period_ms", renew_time_period_ms, now, timeout_ms)

    def expire_delegation_token(self, hmac, expiry_time_period_ms: int = -1, *, timeout_ms=None, now):
        """Set the token's expiry to now + ``expiry_time_period_ms``; negative
        (the default, as Java's) expires it at once. Item "expiry_timestamp"."""
        return self._token_timestamp_call("expire_delegation_token", "ExpireDelegationToken", hmac,
                                          "expiry_time_period_ms", expiry_time_period_ms, now, timeout_ms)

    def describe_delegation_token(self, owners: Optional[Iterable[str]] = None, *, timeout_ms=None, now):
        """[DelegationToken] of ``owners`` ("User:alice"; None: every token
        the requester may see - its own, those it renews, and all with the
        DESCRIBE_TOKENS ACL), sorted by issue time; item "tokens"."""
        from kproto.admin import _SelfCall
        what = "describe_delegation_token"
        owner_parts = None if owners is None else [principal_parts(o, what) for o in owners]
        op = self._op(what, ["tokens"], now, timeout_ms, single=True)

        def build(node, call=None):
            return {"owners": None if owner_parts is None else
                    [{"principal_type": k, "principal_name": n} for k, n in owner_parts]}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._complete(op, "tokens", error=token_error(code, None, what))
                return
            tokens = [DelegationToken(TokenInformation(
                t["token_id"], _principal(t["principal_type"], t["principal_name"]),
                _principal(t.get("token_requester_principal_type"), t.get("token_requester_principal_name")),
                tuple(f"{r['principal_type']}:{r['principal_name']}" for r in t.get("renewers") or ()),
                t["issue_timestamp"], t["expiry_timestamp"], t["max_timestamp"]), bytes(t["hmac"]))
                for t in body.get("tokens") or ()]
            tokens.sort(key=lambda d: (d.token_info.issue_timestamp, d.token_id))
            self._complete(op, "tokens", value=tokens)

        self._submit(_SelfCall(op, "DescribeDelegationToken", op.items, build, handle))
        return op
