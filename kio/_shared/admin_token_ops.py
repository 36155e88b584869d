"""The delegation-token operations of the admin clients (:class:`kio.Admin`,
``kio.aio.Admin``, ``kio.trio.Admin``), written once as the other
``kio._shared.admin_*`` mixins: each method returns ``self._call(name, ...)``,
the driver running the :class:`kproto.admin.AdminCore` operation (see
:mod:`kproto.admin_tokens`) to its end. ``tools/gen_async_admin_stub.py``
writes the async view of these methods too.
"""
from __future__ import annotations

from typing import Any, Iterable, List, Literal, Optional, overload

from kproto.admin import AdminHandle
from kproto.admin_tokens import DelegationToken, Hmac

__all__ = ["AdminTokenOps"]


class AdminTokenOps:
    """create, renew, expire and describe delegation tokens (KIP-48)."""

    def _call(self, name: str, *args: Any, timeout: Optional[float], raise_errors: bool, **kwargs: Any) -> Any:
        raise NotImplementedError

    @overload
    def create_delegation_token(self, owner: Optional[str] = ..., renewers: Iterable[str] = ...,
                                max_lifetime_ms: int = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> DelegationToken: ...

    @overload
    def create_delegation_token(self, owner: Optional[str] = ..., renewers: Iterable[str] = ...,
                                max_lifetime_ms: int = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def create_delegation_token(self, owner: Optional[str] = None, renewers: Iterable[str] = (),
                                max_lifetime_ms: int = -1, *, timeout: Optional[float] = None,
                                raise_errors: bool = True) -> Any:
        """A new DelegationToken (token_info: id, owner, requester, renewers,
        timestamps; hmac) for ``owner`` ("User:alice"; None: the caller),
        renewable by ``renewers``, living at most ``max_lifetime_ms`` (-1:
        the broker's delegation.token.max.lifetime.ms). Authenticate with it
        through ``sasl.jaas.config=token.jaas_config()`` (SCRAM). A
        connection that authenticated with a token, or without SASL, gets
        DelegationTokenRequestNotAllowedError; a cluster without
        delegation.token.secret.key DelegationTokenAuthDisabledError."""
        return self._call("create_delegation_token", owner, list(renewers), max_lifetime_ms, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def renew_delegation_token(self, hmac: Hmac, renew_time_period_ms: int = ..., *,
                               timeout: Optional[float] = ..., raise_errors: Literal[True] = ...) -> int: ...

    @overload
    def renew_delegation_token(self, hmac: Hmac, renew_time_period_ms: int = ..., *,
                               timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def renew_delegation_token(self, hmac: Hmac, renew_time_period_ms: int = -1, *,
                               timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Renew the token with this HMAC for ``renew_time_period_ms`` (-1: the
        broker's delegation.token.expiry.time.ms), never past its max
        timestamp; returns the new expiry timestamp (ms). Only the owner or a
        renewer may (DelegationTokenOwnerMismatchError); an expired token
        fails with DelegationTokenExpiredError or DelegationTokenNotFoundError."""
        return self._call("renew_delegation_token", hmac, renew_time_period_ms, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def expire_delegation_token(self, hmac: Hmac, expiry_time_period_ms: int = ..., *,
                                timeout: Optional[float] = ..., raise_errors: Literal[True] = ...) -> int: ...

    @overload
    def expire_delegation_token(self, hmac: Hmac, expiry_time_period_ms: int = ..., *,
                                timeout: Optional[float] = ..., raise_errors: Literal[False]) -> AdminHandle: ...

    def expire_delegation_token(self, hmac: Hmac, expiry_time_period_ms: int = -1, *,
                                timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """Make the token with this HMAC expire ``expiry_time_period_ms`` from
        now (negative, the default: at once; connections that authenticated
        with it stay up, new ones fail); returns the expiry timestamp (ms)."""
        return self._call("expire_delegation_token", hmac, expiry_time_period_ms, timeout=timeout,
                          raise_errors=raise_errors)

    @overload
    def describe_delegation_token(self, owners: Optional[Iterable[str]] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[True] = ...) -> List[DelegationToken]: ...

    @overload
    def describe_delegation_token(self, owners: Optional[Iterable[str]] = ..., *, timeout: Optional[float] = ...,
            raise_errors: Literal[False]) -> AdminHandle: ...

    def describe_delegation_token(self, owners: Optional[Iterable[str]] = None, *,
                                  timeout: Optional[float] = None, raise_errors: bool = True) -> Any:
        """The live tokens of ``owners`` ("User:alice"; None: all the caller
        may see - its own, those it renews, every one with DESCRIBE_TOKENS),
        by issue time, HMACs included."""
        return self._call("describe_delegation_token", None if owners is None else list(owners), timeout=timeout,
                          raise_errors=raise_errors)
