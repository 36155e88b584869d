"""TLS for the drivers: the ssl.SSLContext a client config asks for, and
TLS failures as one clear error.

The core only carries the settings (``security.protocol`` SSL or SASL_SSL,
``ssl.cafile``, ``ssl.certfile``, ``ssl.keyfile``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``); sockets are the drivers'.
Verification is on by default against the system's CAs, with host name
checks, as in the Java client.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from kproto.errors import ConfigError, SslAuthenticationError

if TYPE_CHECKING:
    import ssl

# ``ssl`` is imported only by a client that uses TLS: loading it maps OpenSSL
# into the process (about 4 MB of resident memory), which a PLAINTEXT client
# never needs (tests/test_import_cost.py).

__all__ = ["context_for", "tls_error", "socket_errors"]


def context_for(cfg) -> Optional[ssl.SSLContext]:
    """The client's SSLContext, or None for PLAINTEXT / SASL_PLAINTEXT."""
    if cfg.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    import ssl
    try:
        ctx = ssl.create_default_context(cafile=cfg.ssl_cafile)
        if cfg.ssl_certfile:
            ctx.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile, cfg.ssl_key_password)
    except (OSError, ssl.SSLError) as e:
        # The message names the file, never the key password.
        raise ConfigError(f"TLS settings: {e.__class__.__name__}: {getattr(e, 'strerror', None) or e}"
                          + (f" ({e.filename})" if getattr(e, "filename", None) else "")) from None
    ctx.check_hostname = cfg.ssl_endpoint_identification_algorithm == "https"
    return ctx


# OpenSSL's X509_V_ERR_* codes (x509_vfy.h)
_HOST_MISMATCH = (62, 63, 64)           # HOSTNAME_MISMATCH, EMAIL_MISMATCH, IP_ADDRESS_MISMATCH
_UNKNOWN_CA = (2, 18, 19, 20, 21)       # no issuer / self-signed / self-signed in chain / no local issuer / leaf


def socket_errors(tls: Optional[ssl.SSLContext]) -> tuple[tuple, tuple]:
    """The exception classes a socket loop catches: (try again later, TLS failure).

    With TLS, ssl's want-read/want-write errors join BlockingIOError and
    InterruptedError, and ssl.SSLError is a TLS failure. Without it (``tls``
    None) ssl is not loaded and its errors cannot be raised, so the TLS tuple
    is empty: ``except ()`` matches nothing.
    """
    if tls is None:
        return (BlockingIOError, InterruptedError), ()
    import ssl
    return (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError), (ssl.SSLError,)


def tls_error(exc: ssl.SSLError, host, port) -> SslAuthenticationError:
    """What a failed TLS exchange with host:port means, in one line."""
    import ssl   # loaded already: exc is one of its errors
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in _HOST_MISMATCH:
            hint = (f" - the certificate is for another host: connect by a name it lists (not {host!r}), or "
                    f"turn the check off with ssl.endpoint.identification.algorithm=''")
        elif exc.verify_code in _UNKNOWN_CA:
            hint = " - unknown CA: is ssl.cafile the CA that signed the broker's certificate?"
        else:
            hint = ""
        return SslAuthenticationError(f"TLS with {host}:{port}: the broker's certificate did not verify: "
                                      f"{exc.verify_message}{hint}")
    reason = getattr(exc, "reason", None) or str(exc)
    if "CERTIFICATE_REQUIRED" in str(reason).upper():
        return SslAuthenticationError(f"TLS with {host}:{port}: the broker requires a client certificate "
                                      f"(set ssl.certfile and ssl.keyfile)")
    if "BAD_CERTIFICATE" in str(reason).upper():
        # Java's TLS answers a missing client certificate (ssl.client.auth=required)
        # with this alert too, not with certificate_required.
        return SslAuthenticationError(f"TLS with {host}:{port} failed: the broker rejected the client "
                                      f"certificate or wants one ({reason}): set ssl.certfile and "
                                      f"ssl.keyfile to a certificate its CA signed")
    return SslAuthenticationError(f"TLS with {host}:{port} failed: {reason}")
