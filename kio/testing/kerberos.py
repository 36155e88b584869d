"""A throw-away Kerberos KDC for tests (MIT krb5's ``krb5kdc``).

:class:`KerberosKdc` makes its own realm (``KIO.TEST`` by default) in a
folder: ``krb5.conf`` and ``kdc.conf``, a database made by ``kdb5_util
create -s``, principals added by ``kadmin.local`` with random keys and
exported to keytabs (``ktadd``), and ``krb5kdc -n`` in the foreground on a
free loopback port (UDP and TCP). Nothing outside the folder is read or
written: the programs get ``KRB5_CONFIG`` / ``KRB5_KDC_PROFILE``, and
:meth:`KerberosKdc.environ` gives a client process the same.

Host names are used as given: ``rdns = false`` and
``dns_canonicalize_hostname = false``, so a service principal
``kafka/localhost`` is what a client connecting to ``localhost`` asks for.

Debian packages: krb5-kdc (krb5kdc, kdb5_util), krb5-admin-server or
krb5-kdc's kadmin.local, krb5-user (kinit, klist).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

from kio.testing.broker import free_port

__all__ = ["KerberosKdc", "KdcError"]


class KdcError(RuntimeError):
    """The test KDC could not be made or started (the krb5 tool's output says why)."""


def _tool(name: str) -> str:
    for folder in ("/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found is None:
        raise KdcError(f"{name} not found: install the Debian packages krb5-kdc and krb5-user")
    return found


class KerberosKdc:
    """A KDC of realm ``realm`` living in ``folder`` (a temporary one if None).

    Use as a context manager, or :meth:`start` / :meth:`stop`. Principals are
    added with :meth:`add_principal`, which also writes their keytab.
    """

    def __init__(self, realm: str = "KIO.TEST", folder: Optional[str] = None, host: str = "127.0.0.1"):
        self.realm = realm
        self.host = host
        self._own_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="kio-kdc-"))
        self.port = free_port(host)
        self.krb5_conf = str(self.folder / "krb5.conf")
        self.kdc_conf = str(self.folder / "kdc.conf")
        self.log_path = str(self.folder / "kdc.log")
        self._process: Optional[subprocess.Popen] = None

    # -- configuration -----------------------------------------------------------------------------
    def environ(self) -> dict:
        """The variables a krb5 program (or this process's gssapi) needs to use this KDC."""
        return {"KRB5_CONFIG": self.krb5_conf, "KRB5_KDC_PROFILE": self.kdc_conf}

    def _write_configs(self) -> None:
        d = self.folder
        # udp_preference_limit = 1: clients (MIT and Java) talk TCP, which
        # fails fast with a refused connection when the KDC is gone.
        Path(self.krb5_conf).write_text(f"""[libdefaults]
    default_realm = {self.realm}
    rdns = false
    dns_canonicalize_hostname = false
    dns_lookup_kdc = false
    dns_lookup_realm = false
    udp_preference_limit = 1
    ticket_lifetime = 1h
    renew_lifetime = 1d
    forwardable = true

[realms]
    {self.realm} = {{
        kdc = {self.host}:{self.port}
    }}

[domain_realm]
    localhost = {self.realm}
    .localhost = {self.realm}
""")
        Path(self.kdc_conf).write_text(f"""[kdcdefaults]
    kdc_listen = {self.host}:{self.port}
    kdc_tcp_listen = {self.host}:{self.port}

[realms]
    {self.realm} = {{
        database_name = {d / 'principal'}
        key_stash_file = {d / 'stash'}
        acl_file = {d / 'kadm5.acl'}
        max_life = 1h
        max_renewable_life = 1d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{self.log_path}
    default = FILE:{self.log_path}
""")
        (d / "kadm5.acl").write_text("")

    def _run(self, *args: str) -> str:
        env = {**os.environ, **self.environ()}
        done = subprocess.run(list(args), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60)
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            raise KdcError(f"{' '.join(args[:3])} failed ({done.returncode}): {out[-2000:]}")
        return out

    def _kadmin(self, query: str) -> str:
        return self._run(_tool("kadmin.local"), "-r", self.realm, "-q", query)

    # -- principals --------------------------------------------------------------------------------
    def principal(self, name: str) -> str:
        """``name`` with this realm (``kafka/localhost`` -> ``kafka/localhost@KIO.TEST``)."""
        return name if "@" in name else f"{name}@{self.realm}"

    def add_principal(self, name: str, keytab: Optional[str] = None) -> str:
        """Add ``name`` with a random key and write its keytab (``keytab``, or
        ``<name>.keytab`` in the folder); returns the keytab's path."""
        keytab = keytab or str(self.folder / (name.replace("/", "_") + ".keytab"))
        self._kadmin(f"addprinc -randkey {self.principal(name)}")
        self._kadmin(f"ktadd -k {keytab} {self.principal(name)}")
        return keytab

    def delete_principal(self, name: str) -> None:
        """Remove ``name`` from the database (its keytab then names an unknown principal)."""
        self._kadmin(f"delprinc -force {self.principal(name)}")

    # -- life cycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "KerberosKdc":
        """Make the realm and run krb5kdc until it accepts TCP connections."""
        self._write_configs()
        self._run(_tool("kdb5_util"), "create", "-s", "-r", self.realm, "-P", "kio-master-key")
        env = {**os.environ, **self.environ()}
        log = open(self.folder / "krb5kdc.out", "wb")
        self._process = subprocess.Popen([_tool("krb5kdc"), "-n", "-r", self.realm], env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise KdcError("krb5kdc exited at start: "
                               + (self.folder / "krb5kdc.out").read_text(errors="replace")[-2000:])
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise KdcError(f"krb5kdc did not listen on {self.host}:{self.port} within {timeout:.0f} s")

    def stop(self) -> None:
        """Stop krb5kdc and remove the folder if this object made it."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    def __enter__(self) -> "KerberosKdc":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
