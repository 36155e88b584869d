"""A secured Apache Kafka broker for tests: TLS, SASL and ACLs.

:class:`SecuredKafkaBroker` is :class:`kio.testing.kafka_broker.KafkaBroker` (one
KRaft node on loopback) with the listeners a secured cluster has:

* ``SASL_SSL`` (:attr:`~SecuredKafkaBroker.sasl_ssl_port`): PLAIN,
  SCRAM-SHA-256 and SCRAM-SHA-512 over TLS;
* ``SSL`` with ``ssl.client.auth=required`` (:attr:`~SecuredKafkaBroker.ssl_port`):
  mutual TLS, the principal is the client certificate's CN
  (``ssl.principal.mapping.rules``);
* ``SASL_PLAINTEXT`` (:attr:`~SecuredKafkaBroker.port`, the bootstrap the
  readiness probe and the admin use): the same mechanisms without TLS; it
  is also the inter-broker listener;
* the controller listener, SASL_PLAINTEXT with PLAIN.

Options: ``reauth_ms`` sets ``connections.max.reauth.ms`` (KIP-368: the
broker cuts a connection whose session ran out unless the client
re-authenticated); ``oauth_jwks_url`` also enables OAUTHBEARER on the
``SASL_SSL`` listener, validated by Kafka's
``OAuthBearerValidatorCallbackHandler`` against that JWKS (an OIDC issuer's;
``iss`` must be ``oauth_issuer``, ``aud`` ``oauth_audience``), with Kafka 4.x's
``org.apache.kafka.sasl.oauthbearer.allowed.urls`` system property allowing it.

``kerberos`` (a :class:`kio.testing.kerberos.KerberosKdc`, started) also enables
GSSAPI on the ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners: the broker's
principal ``kafka/<host>@REALM`` is added to that KDC, its keytab read by
Java's ``Krb5LoginModule``, and the JVM pointed at the KDC's ``krb5.conf``.
Use ``host="localhost"`` with it: clients ask for the service ticket of the
host name they connect to, so broker address and principal must agree.
A Kerberos client ``name@REALM`` is the Kafka principal ``User:name``.

Delegation tokens (KIP-48) are enabled: ``delegation.token.secret.key`` is
``delegation_token_secret`` (None turns them off: token requests then fail
with DELEGATION_TOKEN_AUTH_DISABLED); a token authenticates through SCRAM on
the ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners.

Kafka's ``StandardAuthorizer`` checks every request; ``admin`` (PLAIN) is the
super user the broker itself, its controller and a test's admin connect as.
The other users (``users``) get SCRAM-SHA-256 and SCRAM-SHA-512 credentials
at format time (``kafka-storage format --add-scram``) and a PLAIN password in
the listeners' JAAS configs; they can do nothing until ACLs say so
(:meth:`SecuredKafkaBroker.allow`).

The certificates come from :func:`make_certificates` (openssl): a CA, the
broker's certificate for ``localhost``/``127.0.0.1``, a client certificate
(CN ``client``) and one for a wrong host name.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from kio.testing.broker import free_port
from kio.testing.kafka_broker import KafkaBroker

__all__ = ["SecuredKafkaBroker", "Certificates", "make_certificates", "certificate",
           "ADMIN_USER", "ADMIN_PASSWORD", "RESOURCE_TYPES", "OPERATIONS"]

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Kafka's AclResourceType and AclOperation codes (CreateAcls).
RESOURCE_TYPES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
OPERATIONS = {"ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
              "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}
_PATTERNS = {"LITERAL": 3, "PREFIXED": 4}
_ALLOW = 3


# -- certificates ---------------------------------------------------------------------------------

def _openssl(*args, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificate(folder, name: str, san: str, client: bool = False) -> tuple[str, str]:
    """(certificate, key) PEM files ``name.pem``/``name.key`` in ``folder``,
    signed by the CA there (``ca.pem``/``ca.key``), for ``san``
    (``subjectAltName``, e.g. ``DNS:localhost,IP:127.0.0.1``); subject ``CN=name``."""
    d = str(folder)
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\n" + ("extendedKeyUsage=clientAuth\n" if client else ""))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", ext, cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


class Certificates(NamedTuple):
    ca: str                   #: the CA's certificate (PEM): what clients pass as ssl.cafile
    server: tuple             #: (cert, key) for localhost / 127.0.0.1
    client: tuple             #: (cert, key), CN=client, for mutual TLS
    wrong_host: tuple         #: (cert, key) for wrong.example only


def make_certificates(folder) -> Certificates:
    """A test CA and the certificates signed by it, made by openssl in ``folder``
    (keys unencrypted PKCS#8, valid for two days)."""
    d = str(folder)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=kio test CA", cwd=d)
    return Certificates(ca=os.path.join(d, "ca.pem"),
                        server=certificate(d, "server", "DNS:localhost,IP:127.0.0.1"),
                        client=certificate(d, "client", "DNS:client", client=True),
                        wrong_host=certificate(d, "wrong", "DNS:wrong.example"))


# -- the broker -----------------------------------------------------------------------------------

def _jaas_plain(users: dict) -> str:
    creds = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}" {creds};')


_JAAS_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


class SecuredKafkaBroker(KafkaBroker):
    """Apache Kafka with SASL_SSL, mutual TLS, SASL_PLAINTEXT and ACLs (see the module).

    ``certs`` is a :class:`Certificates` (or None: made in the work folder);
    ``users`` maps user names to passwords (PLAIN and both SCRAMs).
    """

    kind = "kafka-secured"

    def __init__(self, users: Optional[dict] = None, certs: Optional[Certificates] = None,
                 host: str = "127.0.0.1", log_path: Optional[str] = None,
                 config: Optional[dict] = None, heap: str = "320m", reauth_ms: Optional[int] = None,
                 oauth_jwks_url: Optional[str] = None, oauth_issuer: Optional[str] = None,
                 oauth_audience: str = "kafka", kerberos=None,
                 delegation_token_secret: Optional[str] = "kio-test-delegation-token-secret"):
        super().__init__(host=host, log_path=log_path, config=config, heap=heap)
        self.users = dict(users or {})
        self.reauth_ms = reauth_ms
        self.oauth_jwks_url = oauth_jwks_url
        self.oauth_issuer = oauth_issuer
        self.oauth_audience = oauth_audience
        self.certs = certs
        self.kerberos = kerberos
        self.delegation_token_secret = delegation_token_secret
        self.sasl_ssl_port = free_port(host)
        self.ssl_port = free_port(host)

    def server_properties(self) -> dict:
        props = super().server_properties()
        assert self.workdir is not None and self.certs is not None
        h = self.host
        listeners = {"INTERNAL": ("SASL_PLAINTEXT", self.port), "SECURE": ("SASL_SSL", self.sasl_ssl_port),
                     "MTLS": ("SSL", self.ssl_port)}
        everyone = {ADMIN_USER: ADMIN_PASSWORD, **self.users}
        # Kafka reads a PEM key store from one file: the key, then the chain.
        keystore = self.workdir / "server-keystore.pem"
        cert, key = self.certs.server
        keystore.write_text(Path(key).read_text() + Path(cert).read_text())
        props.update({
            "listeners": ",".join(f"{n}://{h}:{p}" for n, (_, p) in listeners.items())
                         + f",CONTROLLER://{h}:{self.controller_port}",
            "advertised.listeners": ",".join(f"{n}://{h}:{p}" for n, (_, p) in listeners.items()),
            "listener.security.protocol.map": ",".join(f"{n}:{proto}" for n, (proto, _) in listeners.items())
                                              + ",CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas_plain({ADMIN_USER: ADMIN_PASSWORD}),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.certs.ca,
            "listener.name.mtls.ssl.client.auth": "required",
            # User:client for the certificate CN=client (the default is the whole DN).
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        })
        for listener in ("internal", "secure"):
            props[f"listener.name.{listener}.plain.sasl.jaas.config"] = _jaas_plain(everyone)
            for mech in MECHANISMS[1:]:
                props[f"listener.name.{listener}.{mech.lower()}.sasl.jaas.config"] = _JAAS_SCRAM
        if self.kerberos is not None:
            props.update(self._kerberos_properties())
        if self.delegation_token_secret is not None:
            # Broker and controller (one process here) share the key: the
            # controller issues the tokens, the broker checks them.
            props["delegation.token.secret.key"] = self.delegation_token_secret
        if self.reauth_ms is not None:
            props["connections.max.reauth.ms"] = self.reauth_ms
        if self.oauth_jwks_url is not None:
            oauth = "org.apache.kafka.common.security.oauthbearer"
            props.update({
                "listener.name.secure.sasl.enabled.mechanisms": f"{props['sasl.enabled.mechanisms']},OAUTHBEARER",
                "listener.name.secure.oauthbearer.sasl.jaas.config": f"{oauth}.OAuthBearerLoginModule required;",
                "listener.name.secure.oauthbearer.sasl.server.callback.handler.class":
                    f"{oauth}.OAuthBearerValidatorCallbackHandler",
                "sasl.oauthbearer.jwks.endpoint.url": self.oauth_jwks_url,
                "sasl.oauthbearer.expected.audience": self.oauth_audience,
                # Kafka 4.4 wants the issuer checked (or explicitly not).
                **({"sasl.oauthbearer.expected.issuer": self.oauth_issuer} if self.oauth_issuer
                   else {"sasl.oauthbearer.allow.unverified.issuer": "true"}),
            })
        props.update(self.extra_config)
        return props

    @property
    def kerberos_principal(self) -> str:
        """The broker's Kerberos principal (``kafka/<host>@REALM``)."""
        return self.kerberos.principal(f"kafka/{self.host}")

    def _kerberos_properties(self) -> dict:
        assert self.workdir is not None
        keytab = str(self.workdir / "kafka.keytab")
        if not os.path.exists(keytab):
            self.kerberos.add_principal(f"kafka/{self.host}", keytab)
        jaas = (f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
                f'keyTab="{keytab}" principal="{self.kerberos_principal}";')
        props = {"sasl.enabled.mechanisms": ",".join(MECHANISMS + ("GSSAPI",)),
                 "sasl.kerberos.service.name": "kafka"}
        for listener in ("internal", "secure"):
            props[f"listener.name.{listener}.gssapi.sasl.jaas.config"] = jaas
        return props

    def _jvm_options(self, heap: str) -> list[str]:
        options = super()._jvm_options(heap)
        if self.kerberos is not None:
            options.append(f"-Djava.security.krb5.conf={self.kerberos.krb5_conf}")
        if self.oauth_jwks_url is not None:
            # Kafka 4.x refuses OAuth URLs not listed here (CVE-2025-27817).
            options.append(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oauth_jwks_url}")
        return options

    def _prepare(self) -> None:
        if self.certs is None:
            folder = Path(self.log_path).parent / f"certs-{self.port}"
            folder.mkdir(exist_ok=True)
            self.certs = make_certificates(folder)
        super()._prepare()

    def _format_options(self) -> list[str]:
        return [f"--add-scram={mech}=[name={user},password={password}]"
                for user, password in self.users.items() for mech in MECHANISMS[1:]]

    # -- clients ---------------------------------------------------------------------------------
    def client_config(self, user: Optional[str] = None, mechanism: str = "SCRAM-SHA-512",
                      listener: str = "SASL_SSL", client_cert: bool = True) -> dict:
        """kio client settings (keyword form) for ``user`` on ``listener``
        ("SASL_SSL", "SASL_PLAINTEXT" or "SSL": mutual TLS with the client
        certificate, or without it when ``client_cert`` is false); ``user``
        None means the super user (PLAIN)."""
        if listener == "SSL":
            cfg = {"bootstrap_servers": f"{self.host}:{self.ssl_port}", "security_protocol": "SSL",
                   "ssl_cafile": self.certs.ca}
            if client_cert:
                cfg.update(ssl_certfile=self.certs.client[0], ssl_keyfile=self.certs.client[1])
            return cfg
        if user is None:
            user, mechanism = ADMIN_USER, "PLAIN"
        password = ADMIN_PASSWORD if user == ADMIN_USER else self.users[user]
        cfg = {"security_protocol": listener, "sasl_mechanism": mechanism,
               "sasl_username": user, "sasl_password": password}
        if listener == "SASL_SSL":
            cfg.update(bootstrap_servers=f"{self.host}:{self.sasl_ssl_port}", ssl_cafile=self.certs.ca)
        else:
            cfg.update(bootstrap_servers=f"{self.host}:{self.port}")
        return cfg

    def gssapi_client_config(self, principal: str, keytab: str, listener: str = "SASL_PLAINTEXT") -> dict:
        """kio client settings for the Kerberos client ``principal`` with its
        ``keytab`` on ``listener`` ("SASL_PLAINTEXT" or "SASL_SSL")."""
        port = self.port if listener == "SASL_PLAINTEXT" else self.sasl_ssl_port
        cfg = {"bootstrap_servers": f"{self.host}:{port}", "security_protocol": listener,
               "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka",
               "sasl_kerberos_keytab": keytab, "sasl_kerberos_principal": self.kerberos.principal(principal)}
        if listener == "SASL_SSL":
            cfg["ssl_cafile"] = self.certs.ca
        return cfg

    def allow(self, principal: str, resource_type: str, name: str, operations: Iterable[str],
              pattern: str = "LITERAL") -> None:
        """Add ALLOW ACLs: ``principal`` ("User:alice") may do ``operations``
        ("READ", "WRITE", "DESCRIBE"...) on the resource (``pattern``
        "LITERAL" or "PREFIXED"), from any host. Sent as the super user."""
        from kio.blocking import BlockingClient
        from kproto.connection import SaslAuthenticator
        from kproto.error_codes import raise_for_code
        from kproto.sasl import PlainMechanism

        creations = [{"resource_type": RESOURCE_TYPES[resource_type], "resource_name": name,
                      "resource_pattern_type": _PATTERNS[pattern], "principal": principal, "host": "*",
                      "operation": OPERATIONS[op], "permission_type": _ALLOW} for op in operations]
        auth = SaslAuthenticator(lambda: PlainMechanism(ADMIN_USER, ADMIN_PASSWORD))
        with BlockingClient(self.bootstrap_servers, authenticator=auth) as client:
            answer = client.request("CreateAcls", {"creations": creations})
        for result in answer["results"]:
            raise_for_code(result["error_code"], result.get("error_message"), context="CreateAcls")
