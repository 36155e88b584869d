"""SCRAM credential administration, as operations of
:class:`kproto.admin.AdminCore` (mixed in): ``describe_user_scram_credentials``
and ``alter_user_scram_credentials`` (KIP-554).

The password never goes to the broker: as Java's Admin does
(``ScramFormatter.hi``), the client salts it - PBKDF2-HMAC with the
mechanism's hash (SHA-256 or SHA-512) over the UTF-8 password, the salt
(random unless given) and the iteration count - and sends the salt, the
iterations and that salted password; the broker derives the stored and
server keys from them. Both requests go to any broker (forwarded to the
controller).
"""
from __future__ import annotations

import enum
from typing import Iterable, NamedTuple, Optional, Tuple, Union

from kproto import error_codes
from kproto._admin_mixin import AdminMixin

__all__ = ["ScramAdmin", "ScramMechanism", "ScramCredentialInfo", "UserScramCredentialsDescription",
           "UserScramCredentialUpsertion", "UserScramCredentialDeletion", "salted_password"]

#: Java's default iteration count for an upsertion (ScramCredentialInfo examples, kafka-configs).
DEFAULT_ITERATIONS = 4096


class ScramMechanism(enum.IntEnum):
    """Java's ``ScramMechanism``: wire codes, and the hash each one uses."""
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL name, e.g. "SCRAM-SHA-256"."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return {1: "sha256", 2: "sha512"}[int(self)]

    @classmethod
    def of(cls, value) -> "ScramMechanism":
        """A member from a member, a code or a name ("SCRAM-SHA-256", "scram_sha_512")."""
        try:
            m = cls[value.upper().replace("-", "_")] if isinstance(value, str) else cls(value)
        except (KeyError, ValueError):
            raise ValueError(f"{value!r} is not a SCRAM mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)") from None
        if m is cls.UNKNOWN:
            raise ValueError("the SCRAM mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512, not UNKNOWN")
        return m


class ScramCredentialInfo(NamedTuple):
    mechanism: ScramMechanism
    iterations: int


class UserScramCredentialsDescription(NamedTuple):
    name: str
    credential_infos: Tuple[ScramCredentialInfo, ...]


class UserScramCredentialUpsertion(NamedTuple):
    """Set ``user``'s credential for ``mechanism`` from ``password`` (salted
    here; ``salt`` random when None)."""
    user: str
    mechanism: Union[ScramMechanism, str]
    password: Union[str, bytes]
    iterations: int = DEFAULT_ITERATIONS
    salt: Optional[bytes] = None


class UserScramCredentialDeletion(NamedTuple):
    """Remove ``user``'s credential for ``mechanism``."""
    user: str
    mechanism: Union[ScramMechanism, str]


def salted_password(mechanism, password: Union[str, bytes], salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword (RFC 5802 ``Hi``): PBKDF2-HMAC with the mechanism's
    hash over the UTF-8 password (Java's ``ScramFormatter.normalize``: no
    SASLprep), as Java's Admin computes it for an upsertion."""
    m = ScramMechanism.of(mechanism)
    if iterations < 1:
        raise ValueError(f"SCRAM iterations must be positive, not {iterations}")
    import hashlib   # here, not at the top: OpenSSL's libraries cost ~3.5 MB of RSS (issue 27)

    pw = password.encode("utf-8") if isinstance(password, str) else bytes(password)
    return hashlib.pbkdf2_hmac(m.hash_name, pw, bytes(salt), iterations)


def random_salt() -> bytes:
    """A salt as Java's ``ScramFormatter.secureRandomBytes``: a 130-bit random
    number in base 36, as UTF-8 bytes."""
    import secrets   # imports hashlib: loaded with the first upsertion only

    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return (out or "0").encode()


class ScramAdmin(AdminMixin):
    """The SCRAM operations of AdminCore (a mixin)."""

    def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = None, *, timeout_ms=None, now):
        """{user: UserScramCredentialsDescription} (DescribeUserScramCredentials).
        ``users`` None: every user with a credential, as one item "users";
        else one item per user (a user without credentials fails with
        ResourceNotFoundError)."""
        from kproto.admin import _no_dups, _SelfCall
        wanted = None if users is None else list(users)
        if wanted is not None:
            _no_dups(wanted, "describe_user_scram_credentials")
        op = self._op("describe_user_scram_credentials", ["users"] if wanted is None else wanted, now,
                      timeout_ms, single=wanted is None)

        def build(node, call=None):
            # "Every user" is an empty list, as Java sends it: Kafka 4.4 answers a
            # null list it must refuse (no DESCRIBE on the cluster) with a
            # NullPointerException and no response at all.
            return {"users": [{"name": u} for u in wanted or ()]}

        def handle(call, body, now):
            code = body.get("error_code", 0)
            if code:
                self._fail_call(call, error_codes.error_for_code(code, body.get("error_message"),
                                                                 "describe SCRAM credentials"))
                return
            found, errors = {}, {}
            for r in body.get("results") or []:
                if r.get("error_code", 0):
                    errors[r["user"]] = error_codes.error_for_code(
                        r["error_code"], r.get("error_message"), f"describe SCRAM credentials of {r['user']!r}")
                else:
                    found[r["user"]] = UserScramCredentialsDescription(r["user"], tuple(sorted(
                        ScramCredentialInfo(ScramMechanism(c["mechanism"]), c["iterations"])
                        for c in r.get("credential_infos") or ())))
            if wanted is None:
                self._complete(op, "users", value=dict(sorted(found.items())))
                return
            for u in wanted:
                if u in found or u in errors:
                    self._complete(op, u, value=found.get(u), error=errors.get(u))
            self._unanswered(call, op, "DescribeUserScramCredentials")

        self._submit(_SelfCall(op, "DescribeUserScramCredentials", op.items, build, handle))
        return op

    def alter_user_scram_credentials(self, alterations: Iterable[Union[UserScramCredentialUpsertion,
                                                                       UserScramCredentialDeletion]],
                                     *, timeout_ms=None, now):
        """Upsert or delete SCRAM credentials (AlterUserScramCredentials); one
        item per user (value None). Upsertions are salted here (see the
        module); the broker checks the iteration count (4096..16384, else
        UnacceptableCredentialError) and refuses two alterations of one
        user in a request (DuplicateResourceError)."""
        from kproto.admin import _SelfCall
        deletions, upsertions, users = [], [], []
        for a in alterations:
            if isinstance(a, UserScramCredentialUpsertion):
                m = ScramMechanism.of(a.mechanism)
                salt = random_salt() if a.salt is None else bytes(a.salt)
                upsertions.append({"name": a.user, "mechanism": int(m), "iterations": a.iterations, "salt": salt,
                                   "salted_password": salted_password(m, a.password, salt, a.iterations)})
            elif isinstance(a, UserScramCredentialDeletion):
                deletions.append({"name": a.user, "mechanism": int(ScramMechanism.of(a.mechanism))})
            else:
                raise TypeError(f"alter_user_scram_credentials: expected UserScramCredentialUpsertion or "
                                f"UserScramCredentialDeletion values, not {a!r}")
            if not a.user:
                raise ValueError("alter_user_scram_credentials: the user name is empty")
            if a.user not in users:
                users.append(a.user)
        op = self._op("alter_user_scram_credentials", users, now, timeout_ms)

        def build(node, call=None):
            return {"deletions": deletions, "upsertions": upsertions}

        def handle(call, body, now):
            for r in body.get("results") or []:
                u = r.get("user")
                if u not in op.items:
                    continue
                code = r.get("error_code", 0)
                self._complete(op, u, error=error_codes.error_for_code(
                    code, r.get("error_message"), f"alter SCRAM credentials of {u!r}") if code else None)
            self._unanswered(call, op, "AlterUserScramCredentials")

        if users:
            self._submit(_SelfCall(op, "AlterUserScramCredentials", users, build, handle))
        return op

