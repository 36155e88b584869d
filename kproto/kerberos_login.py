"""The client's Kerberos login for SASL GSSAPI (Java's ``KerberosLogin``).

:class:`KerberosLogin` gets the client's credentials once, when the client is
built - so a missing keytab, an unknown principal or an empty ticket cache
fails the constructor with an :class:`~kproto.errors.AuthenticationError`
instead of a connection that never authenticates:

* from a keytab (``sasl.kerberos.keytab``, librdkafka's name, or
  ``keyTab="..."`` in a ``Krb5LoginModule`` ``sasl.jaas.config``): a ticket
  for ``sasl.kerberos.principal`` is asked for now and kept in a private
  in-memory credential cache of this client;
* otherwise from the default credential cache (``KRB5CCNAME``, filled by
  ``kinit``).

Renewal follows Java's settings: once ``sasl.kerberos.ticket.renew.window.factor``
(plus up to ``.jitter``) of the ticket's lifetime has passed, and at least
``sasl.kerberos.min.time.before.relogin`` after the last login, the next
connection or KIP-368 re-authentication first logs in again: from the keytab
(a fresh cache), or by running ``sasl.kerberos.kinit.cmd -R`` on the
default cache as Java does. Java renews in a thread of its own; here the
check runs when a ticket is about to be used, which is the only time it
matters. A failed renewal is logged and the old ticket kept while it lasts.

:class:`GssapiAuthenticatorFactory` makes one SASL authenticator per
connection; each authentication and re-authentication gets a fresh
:class:`kproto.sasl.GssapiMechanism` (a new security context) for
``sasl.kerberos.service.name`` at the broker's host name as the client
knows it (bootstrap or metadata), like Java.
"""
from __future__ import annotations

import logging
import os
import random
import subprocess
import time
import uuid
from typing import Callable, Optional

from kproto.connection import SaslAuthenticator
from kproto.errors import AuthenticationError, ConfigError
from kproto.sasl import GssapiMechanism, gss_error, import_gssapi, parse_jaas_config

__all__ = ["KerberosLogin", "GssapiAuthenticatorFactory", "GssapiAuthenticator"]

log = logging.getLogger("kproto.kerberos")

_NO_SERVICE_NAME = ("sasl.mechanism=GSSAPI needs sasl.kerberos.service.name: the first part of the "
                    "brokers' Kerberos principal (kafka for kafka/<host>@REALM)")


class KerberosLogin:
    """The client's Kerberos credentials (see the module).

    ``keytab`` None means the default credential cache; ``principal`` None
    means the keytab's (or cache's) own. ``clock`` and ``rng`` are for tests.
    """

    def __init__(self, keytab: Optional[str] = None, principal: Optional[str] = None,
                 kinit_cmd: str = "/usr/bin/kinit", min_time_before_relogin_ms: int = 60000,
                 renew_window_factor: float = 0.8, renew_jitter: float = 0.05,
                 clock: Callable[[], float] = time.time, rng: Optional[random.Random] = None):
        if keytab is not None and not os.path.isfile(keytab):
            raise ConfigError(f"sasl.kerberos.keytab {keytab!r} is not a file: name the keytab holding "
                              f"the client's key (kadmin ktadd / ktutil)")
        self.keytab = keytab
        self.principal = principal
        self.kinit_cmd = kinit_cmd
        self.min_time_before_relogin = min_time_before_relogin_ms / 1000.0
        self.renew_window_factor = renew_window_factor
        self.renew_jitter = renew_jitter
        self._clock = clock
        self._rng = rng or random.Random()
        self._gssapi = import_gssapi()
        self._credentials = None
        self.logged_in_at = None
        self.renew_at = None
        self.logins = 0

    def __repr__(self):
        source = f"keytab {self.keytab}" if self.keytab else "the default ticket cache"
        return f"<KerberosLogin {self.principal or '(default principal)'} from {source}>"

    # -- login -------------------------------------------------------------------------------------
    def login(self) -> "KerberosLogin":
        """Get the credentials now; AuthenticationError if the KDC or the
        cache says no (unknown principal, wrong key, no ticket)."""
        gssapi = self._gssapi
        name = None if self.principal is None else gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
        where = f"the keytab {self.keytab}" if self.keytab else "the default ticket cache (KRB5CCNAME)"
        try:
            if self.keytab is not None:
                # A private memory cache per login: the ticket from the
                # keytab lands there, never in the user's own cache.
                store = {"client_keytab": self.keytab, "ccache": f"MEMORY:kio-{uuid.uuid4().hex}"}
                creds = gssapi.Credentials(name=name, usage="initiate", store=store)
            else:
                creds = gssapi.Credentials(name=name, usage="initiate")
            # Acquiring from a keytab is lazy in MIT krb5: asking for the
            # lifetime makes it get the ticket now, so a bad keytab or an
            # unknown principal fails here.
            lifetime = creds.lifetime
        except self._gssapi.exceptions.GSSError as e:
            error = gss_error(f"Kerberos login of {self.principal or 'the default principal'} from {where}", e)
            if self.keytab is not None:
                # MIT's text for a principal absent from the keytab is "No credentials cache found".
                error.message += f" (klist -kt {self.keytab} lists the principals and key versions it holds)"
            raise error from None
        if lifetime is not None and lifetime <= 0:
            raise AuthenticationError(f"GSSAPI: the ticket of {creds.name} in {where} has expired: renew it (kinit)")
        self._credentials = creds
        if self.principal is None:
            self.principal = str(creds.name)
        now = self._clock()
        self.logged_in_at = now
        self.logins += 1
        self.renew_at = None if lifetime is None else now + lifetime * (
            self.renew_window_factor + self.renew_jitter * self._rng.random())
        return self

    def _renewal_due(self, now: float) -> bool:
        return (self.renew_at is not None and now >= self.renew_at
                and now - self.logged_in_at >= self.min_time_before_relogin)

    def credentials(self):
        """The gssapi Credentials to authenticate with, renewed first when due."""
        if self._credentials is None:
            self.login()
        elif self._renewal_due(self._clock()):
            self._renew()
        return self._credentials

    def _renew(self) -> None:
        try:
            if self.keytab is None and self.kinit_cmd:
                # Java's KerberosLogin does the same for a ticket cache.
                subprocess.run([self.kinit_cmd, "-R"], check=True, capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.login()
        except (AuthenticationError, OSError, subprocess.SubprocessError) as e:
            log.warning("Kerberos ticket renewal of %s failed (%s); keeping the current ticket", self.principal, e)
            # Try again no sooner than min.time.before.relogin.
            self.logged_in_at = self._clock()


class GssapiAuthenticator(SaslAuthenticator):
    """A connection's SASL GSSAPI authenticator: each (re-)authentication
    starts a new security context for the broker host of the connection."""

    def __init__(self, factory: "GssapiAuthenticatorFactory"):
        super().__init__(lambda: None)
        self._gss_factory = factory

    def start(self, conn):
        host = conn.host
        self._factory = lambda: self._gss_factory.mechanism(host)
        return super().start(conn)


class GssapiAuthenticatorFactory:
    """Connection authenticators for SASL GSSAPI, sharing one :class:`KerberosLogin`."""

    def __init__(self, service_name: str, login: KerberosLogin):
        if not service_name:
            raise ConfigError(_NO_SERVICE_NAME)
        self.service_name = service_name
        self.login = login
        self.contexts = 0           # security contexts started (authentications + re-authentications)

    @classmethod
    def from_config(cls, cfg) -> "GssapiAuthenticatorFactory":
        """From the client config: sasl.kerberos.* (and a Krb5LoginModule
        ``sasl.jaas.config``'s keyTab/principal/serviceName); logs in now."""
        keytab, principal, service = cfg.sasl_kerberos_keytab, cfg.sasl_kerberos_principal, \
            cfg.sasl_kerberos_service_name
        if cfg.sasl_jaas_config:
            options = parse_jaas_config(cfg.sasl_jaas_config)
            keytab = keytab or options.get("keyTab")
            principal = principal or options.get("principal")
            service = service or options.get("serviceName")
        if not service:
            hint = ""
            if cfg.sasl_username is not None and not cfg.is_set("sasl.mechanism"):
                # A user name but no mechanism: GSSAPI is only the default.
                hint = ("; sasl.mechanism defaults to GSSAPI as in Java: for sasl.username/sasl.password "
                        "set sasl.mechanism to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
            raise ConfigError(_NO_SERVICE_NAME + hint)
        login = KerberosLogin(keytab, principal, kinit_cmd=cfg.sasl_kerberos_kinit_cmd,
                              min_time_before_relogin_ms=cfg.sasl_kerberos_min_time_before_relogin,
                              renew_window_factor=cfg.sasl_kerberos_ticket_renew_window_factor,
                              renew_jitter=cfg.sasl_kerberos_ticket_renew_jitter)
        return cls(service, login.login())

    def mechanism(self, host: str) -> GssapiMechanism:
        """A fresh GSSAPI mechanism for the broker at ``host``."""
        self.contexts += 1
        return GssapiMechanism(self.service_name, host, self.login.credentials(), authzid=self.login.principal)

    def __call__(self) -> GssapiAuthenticator:
        return GssapiAuthenticator(self)
