"""A small configuration framework shared by the producer, consumer and admin.

Why: every Kafka client takes the same kind of settings - Kafka's dotted names
(``linger.ms``), typed values, defaults, validity checks - and users deserve the
same clear errors everywhere: an unknown key names the closest known one
("did you mean 'linger.ms'?"), a bad value names the key, the value and what
was expected. Like Java's ``ConfigDef``, a :class:`ConfigDef` is a table of
:class:`Setting` definitions; ``parse`` turns user input into a
:class:`Config` (an attribute-style view with snake_case names) and remembers
which keys the user set explicitly, which checks of conflicting settings need
(e.g. idempotence vs acks).

Names may be given with dots or underscores (``linger.ms`` == ``linger_ms``);
both spellings of the same key in one input is an error.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, Optional

from kproto.errors import ConfigError

__all__ = ["Setting", "ConfigDef", "Config", "normalize_name", "ConfigError",
           "in_range", "one_of", "BOOL", "INT", "FLOAT", "STR", "LIST", "ANY"]


def normalize_name(name: str) -> str:
    """The canonical (dotted, lower-case) form of a setting name."""
    if not isinstance(name, str):
        raise ConfigError(f"configuration keys must be strings, not {type(name).__name__} ({name!r})")
    return name.strip().lower().replace("_", ".").replace("-", ".")


def attr_name(name: str) -> str:
    return name.replace(".", "_")


# --- value types: each converts user input or raises ValueError/TypeError ------

def _to_bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError("expected true or false")


def _to_int(v):
    if isinstance(v, bool):
        raise ValueError("expected an integer, not a bool")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError("expected an integer")


def _to_float(v):
    if isinstance(v, bool):
        raise ValueError("expected a number, not a bool")
    return float(v)


def _to_str(v):
    if isinstance(v, str):
        return v
    raise ValueError("expected a string")


def _to_list(v):
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    if isinstance(v, (list, tuple)):
        return list(v)
    raise ValueError("expected a comma-separated string or a list")


BOOL, INT, FLOAT, STR, LIST = "bool", "int", "float", "str", "list"
ANY = "any"
_CONVERTERS = {BOOL: _to_bool, INT: _to_int, FLOAT: _to_float, STR: _to_str, LIST: _to_list,
               ANY: lambda v: v}


# --- validators: callables (value) -> None, raising ValueError with a reason ----

def in_range(lo=None, hi=None):
    def check(v):
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            lo_s = "-inf" if lo is None else lo
            hi_s = "+inf" if hi is None else hi
            raise ValueError(f"must be in [{lo_s}, {hi_s}]")
    check.__doc__ = f"in [{lo}, {hi}]"
    return check


def one_of(*choices):
    def check(v):
        if v not in choices:
            raise ValueError("must be one of " + ", ".join(repr(c) for c in choices))
    return check


class Setting:
    """One definition: name (dotted), type, default, validator, doc.

    ``convert`` (optional) replaces the type's converter (e.g. acks "all" -> -1);
    ``nullable`` allows None."""

    __slots__ = ("name", "type", "default", "validator", "doc", "convert", "nullable", "sensitive")

    def __init__(self, name, type=ANY, default=None, validator=None, doc="", convert=None,
                 nullable=False, sensitive=False):
        self.name = normalize_name(name)
        self.type = type
        self.default = default
        self.validator = validator
        self.doc = doc
        self.convert = convert
        self.nullable = nullable or default is None
        self.sensitive = sensitive          # a secret: never shown in reprs or error texts

    def parse(self, value):
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{self.name} must not be None ({self.doc or self.type})")
        try:
            v = (self.convert or _CONVERTERS[self.type])(value)
            if self.validator is not None:
                self.validator(v)
        except (ValueError, TypeError) as e:
            shown = "(hidden)" if self.sensitive else repr(value)
            raise ConfigError(f"invalid value {shown} for {self.name}: {e}"
                              + (f" ({self.doc})" if self.doc else "")) from None
        return v


class Config:
    """Parsed settings: ``cfg.linger_ms``, ``cfg["linger.ms"]``; ``cfg.explicit``
    is the set of dotted names the user gave."""

    def __init__(self, values: dict, explicit: set, definition: "ConfigDef"):
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "explicit", frozenset(explicit))
        object.__setattr__(self, "definition", definition)

    def __getattr__(self, attr: str) -> Any:
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def __setattr__(self, key, value):
        raise AttributeError("Config is read-only; build a new one with ConfigDef.parse")

    def __getitem__(self, name: str) -> Any:
        return self._values[normalize_name(name)]

    def is_set(self, name: str) -> bool:
        """Whether the user gave this setting (rather than its default)."""
        return normalize_name(name) in self.explicit

    def as_dict(self) -> Dict[str, Any]:
        """{dotted name: value} of every setting."""
        return dict(self._values)

    def __repr__(self):
        settings = self.definition.settings

        def shown(k, v):
            s = settings.get(k)
            return "'(hidden)'" if s is not None and s.sensitive and v is not None else repr(v)
        return "Config(%s)" % ", ".join(f"{k}={shown(k, v)}" for k, v in sorted(self._values.items()))


class ConfigDef:
    """A table of settings plus checks across settings.

    ``checks`` are callables ``(values: dict, explicit: set) -> None`` that may
    adjust ``values`` in place (derived defaults) or raise ConfigError;
    ``ignored`` names are accepted and dropped (e.g. Java-only settings)."""

    def __init__(self, settings: Iterable[Setting], checks: Iterable[Callable] = (),
                 ignored: Iterable[str] = ()):
        self.settings = {s.name: s for s in settings}
        self.checks = list(checks)
        self.ignored = {normalize_name(n) for n in ignored}

    def extend(self, settings=(), checks=()) -> "ConfigDef":
        """A new definition with more settings/checks (consumer = common + its own)."""
        d = ConfigDef(list(self.settings.values()) + list(settings), self.checks + list(checks),
                      self.ignored)
        return d

    def suggest(self, name: str) -> Optional[str]:
        close = difflib.get_close_matches(name, list(self.settings), n=1, cutoff=0.75)
        return close[0] if close else None

    def parse(self, conf: Optional[dict] = None, **kwargs) -> Config:
        raw: dict[str, Any] = {}
        given: dict[str, str] = {}
        for source in (conf or {}), kwargs:
            for key, value in source.items():
                name = normalize_name(key)
                if name in self.ignored:
                    continue
                if name not in self.settings:
                    hint = self.suggest(name)
                    raise ConfigError(f"unknown configuration key {key!r}"
                                      + (f"; did you mean {hint!r}?" if hint else ""))
                if name in given:
                    raise ConfigError(f"{key!r} and {given[name]!r} name the same setting {name!r}; "
                                      f"give it once")
                given[name] = key
                raw[name] = value
        values = {}
        for name, s in self.settings.items():
            values[name] = s.parse(raw[name]) if name in raw else s.default
        explicit = set(raw)
        for check in self.checks:
            check(values, explicit)
        return Config(values, explicit, self)

    def doc(self) -> str:
        """A plain-text table of the settings (for --help style output)."""
        return "\n".join(f"{s.name} ({s.type}, default {s.default!r}): {s.doc}"
                         for s in sorted(self.settings.values(), key=lambda s: s.name))


#: Settings every client (producer, consumer, admin) shares.
def callable_or_none(what):
    """A converter for settings that take a callable (serializers,
    partitioners): None or anything callable."""
    def conv(v):
        if v is not None and not callable(v):
            raise ValueError(f"{what} must be a callable (or None), not {type(v).__name__}")
        return v
    return conv


COMMON = [
    Setting("bootstrap.servers", LIST, None, doc="host:port list of brokers to bootstrap from"),
    Setting("client.id", STR, "kio", doc="sent in every request header"),
    Setting("request.timeout.ms", INT, 30000, in_range(1), "how long one request may wait for its response"),
    Setting("retry.backoff.ms", INT, 100, in_range(0), "initial backoff before retrying a failed request"),
    Setting("retry.backoff.max.ms", INT, 1000, in_range(0), "maximum retry backoff (exponential growth)"),
    Setting("reconnect.backoff.ms", INT, 50, in_range(0), "initial backoff before reconnecting"),
    Setting("reconnect.backoff.max.ms", INT, 1000, in_range(0), "maximum reconnect backoff"),
    Setting("metadata.max.age.ms", INT, 300000, in_range(0), "refresh metadata at least this often"),
    # KIP-899 / KIP-1102 (Java 4.x defaults).
    Setting("metadata.recovery.strategy", STR, "rebootstrap", one_of("none", "rebootstrap"),
            "what to do when no known broker can be reached or the metadata stays stale: "
            "'rebootstrap' goes back to bootstrap.servers (the cluster may have moved), "
            "'none' keeps trying the brokers it knows"),
    Setting("metadata.recovery.rebootstrap.trigger.ms", INT, 300000, in_range(0),
            "rebootstrap when metadata could not be refreshed for this long "
            "(metadata.recovery.strategy=rebootstrap)"),
    Setting("enable.metrics.push", BOOL, True,
            doc="push client metrics to the cluster when it subscribes to them (KIP-714 client telemetry)"),
    Setting("connections.max.idle.ms", INT, 540000, in_range(-1), "close idle connections after this"),
    Setting("socket.connection.setup.timeout.ms", INT, 10000, in_range(1), "how long a connect may take"),
    Setting("security.protocol", STR, "PLAINTEXT", one_of("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"),
            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    Setting("ssl.cafile", STR, None, doc="PEM file of the CAs to trust (default: the system's)"),
    Setting("ssl.certfile", STR, None, doc="PEM client certificate (chain), for brokers that require one"),
    Setting("ssl.keyfile", STR, None, doc="PEM private key of ssl.certfile (default: inside ssl.certfile)"),
    Setting("ssl.key.password", STR, None, doc="password of ssl.keyfile", sensitive=True),
    Setting("ssl.endpoint.identification.algorithm", STR, "https", one_of("https", ""),
            "'https' checks the broker's host name against its certificate; '' turns that off"),
    Setting("sasl.mechanism", STR, "GSSAPI",
            one_of("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
            "GSSAPI (Kerberos, needs the gssapi extra), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"),
    # GSSAPI (Kerberos): Java's names, plus librdkafka's keytab/principal
    # (Java names them inside sasl.jaas.config's Krb5LoginModule, also read).
    Setting("sasl.kerberos.service.name", STR, None,
            doc="GSSAPI: the Kerberos service name of the brokers (their principal is "
                "<service>/<broker host>@REALM, e.g. kafka); required for GSSAPI"),
    Setting("sasl.kerberos.keytab", STR, None,
            doc="GSSAPI: keytab file to get the client's tickets from (default: the credential cache "
                "KRB5CCNAME, e.g. filled by kinit)"),
    Setting("sasl.kerberos.principal", STR, None,
            doc="GSSAPI: the client's principal (user@REALM) in sasl.kerberos.keytab or the cache"),
    Setting("sasl.kerberos.kinit.cmd", STR, "/usr/bin/kinit",
            doc="GSSAPI without a keytab: the kinit run with -R to renew the cache's ticket"),
    Setting("sasl.kerberos.min.time.before.relogin", INT, 60000, in_range(0),
            "GSSAPI: least time (ms) between two ticket renewals"),
    Setting("sasl.kerberos.ticket.renew.window.factor", FLOAT, 0.8, in_range(0.5, 1.0),
            "GSSAPI: renew the ticket once this fraction of its lifetime has passed"),
    Setting("sasl.kerberos.ticket.renew.jitter", FLOAT, 0.05, in_range(0.0, 0.25),
            "GSSAPI: random fraction of the lifetime added to the renewal time"),
    Setting("sasl.username", STR, None, doc="SASL user (PLAIN, SCRAM)"),
    Setting("sasl.password", STR, None, doc="SASL password (PLAIN, SCRAM)", sensitive=True),
    Setting("sasl.jaas.config", STR, None, doc="Java form of the credentials: "
            "...PlainLoginModule required username=\"u\" password=\"p\";", sensitive=True),
    Setting("error.cb", ANY, None, convert=callable_or_none("error_cb"),
            doc="callable (error) told what the client cannot fix by retrying or cannot reach: "
                "kproto.errors.AllBrokersDownError when every known broker failed to connect, "
                "authentication / TLS failures, fatal errors (librdkafka's error_cb). It runs on the "
                "driver's side: the network thread (threading), the network task (asyncio, trio: a "
                "coroutine function is awaited); what it raises is logged"),
    Setting("sasl.oauthbearer.token.provider", ANY, None, convert=callable_or_none("the token provider"),
            doc="OAUTHBEARER: a callable returning the token (or (token, extensions))"),
    # OAUTHBEARER with OIDC (KIP-768): the client-credentials grant, built in
    # (kproto.oauth). Java 4.x names; the client id/secret and scope may also
    # come from sasl.jaas.config (clientId="..." clientSecret="..." scope="...").
    Setting("sasl.oauthbearer.token.endpoint.url", STR, None,
            doc="OAUTHBEARER: the OAuth/OIDC token endpoint (http:// or https://) to get tokens from "
                "with the client-credentials grant"),
    Setting("sasl.oauthbearer.client.credentials.client.id", STR, None,
            doc="OAUTHBEARER: client id for the client-credentials grant"),
    Setting("sasl.oauthbearer.client.credentials.client.secret", STR, None, sensitive=True,
            doc="OAUTHBEARER: client secret for the client-credentials grant"),
    Setting("sasl.oauthbearer.scope", STR, None, doc="OAUTHBEARER: the scope asked for (optional)"),
    Setting("sasl.oauthbearer.scope.claim.name", STR, "scope", doc="OAUTHBEARER: the JWT claim of the scope"),
    Setting("sasl.oauthbearer.sub.claim.name", STR, "sub", doc="OAUTHBEARER: the JWT claim of the principal"),
    Setting("sasl.login.refresh.window.factor", FLOAT, 0.8, in_range(0.5, 1.0),
            "refresh the token once this fraction of its lifetime has passed"),
    Setting("sasl.login.refresh.window.jitter", FLOAT, 0.05, in_range(0.0, 0.25),
            "random fraction of the lifetime added to the refresh time"),
    Setting("sasl.login.refresh.min.period.seconds", INT, 60, in_range(0, 900),
            "least time between two token refreshes"),
    Setting("sasl.login.refresh.buffer.seconds", INT, 300, in_range(0, 3600),
            "refresh at least this long before the token expires"),
    Setting("sasl.login.connect.timeout.ms", INT, 10000, in_range(1),
            "connect timeout of the token endpoint request"),
    Setting("sasl.login.read.timeout.ms", INT, 10000, in_range(1),
            "read timeout of the token endpoint request"),
    Setting("sasl.login.retry.backoff.ms", INT, 100, in_range(0),
            "first wait before retrying a failed token request (doubles each time)"),
    Setting("sasl.login.retry.backoff.max.ms", INT, 10000, in_range(0),
            "how long token requests are retried in all before the failure is reported"),
]


def check_security(values, explicit):
    tls = values.get("security.protocol") in ("SSL", "SASL_SSL")
    given = [k for k in ("ssl.cafile", "ssl.certfile", "ssl.keyfile") if values.get(k)]
    if given and not tls:
        raise ConfigError(f"{given[0]} is set but security.protocol is {values.get('security.protocol')}: "
                          f"use SSL or SASL_SSL")
    if values.get("ssl.keyfile") and not values.get("ssl.certfile"):
        raise ConfigError("ssl.keyfile needs ssl.certfile")


def require_bootstrap(values, explicit):
    if not values.get("bootstrap.servers"):
        raise ConfigError("bootstrap.servers is required (e.g. '127.0.0.1:9092')")
