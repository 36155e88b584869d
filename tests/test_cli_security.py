"""``kio acls``, ``kio users`` (against the secured Kafka: an authorizer and
SCRAM) and ``kio configs`` (against Kafka 4.4) as a user runs them:
subprocesses, real stdout and exit codes. Kafka only: Tansu has no
authorizer, no SCRAM API, and reports every topic setting as a default."""
import time
import uuid

import pytest

try:
    from test_cli import kio, ok
except ImportError:  # tests/ as a package
    from tests.test_cli import kio, ok

kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


def _as(secured_kafka, user=None):
    """The connection options of the super user (PLAIN) or ``user`` (SCRAM-SHA-512)."""
    cfg = secured_kafka.client_config(user, "SCRAM-SHA-512", "SASL_PLAINTEXT")
    out = ["--bootstrap-server", cfg["bootstrap_servers"]]
    for key in ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password"):
        out += ["--property", f"{key.replace('_', '.')}={cfg[key]}"]
    return out


def until(fn, ok_, seconds=10.0):
    end = time.monotonic() + seconds
    while True:
        value = fn()
        if ok_(value) or time.monotonic() > end:
            return value
        time.sleep(0.2)


def test_acls_add_list_remove(secured_kafka):
    admin = _as(secured_kafka)
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    who = f"User:cli-{uuid.uuid4().hex[:6]}"
    out = ok(kio("acls", "add", *admin, "--topic", topic, "--allow-principal", who,
                 "--operation", "read", "--operation", "describe"))
    assert out.splitlines() == [f"TOPIC\tLITERAL\t{topic}\t{who}\t*\tREAD\tALLOW",
                                f"TOPIC\tLITERAL\t{topic}\t{who}\t*\tDESCRIBE\tALLOW"]
    ok(kio("acls", "add", *admin, "--topic", topic[:5], "--resource-pattern-type", "prefixed",
           "--deny-principal", who, "--operation", "write"))
    listed = until(lambda: ok(kio("acls", "list", *admin, "--topic", topic, "--resource-pattern-type", "match",
                                  "--principal", who)).splitlines(), lambda v: len(v) == 3)
    assert sorted(listed) == sorted([f"TOPIC\tLITERAL\t{topic}\t{who}\t*\tREAD\tALLOW",
                                     f"TOPIC\tLITERAL\t{topic}\t{who}\t*\tDESCRIBE\tALLOW",
                                     f"TOPIC\tPREFIXED\t{topic[:5]}\t{who}\t*\tWRITE\tDENY"])
    assert ok(kio("acls", "list", *admin, "--topic", topic, "--principal", who)).count("\n") == 2   # ANY: exact
    removed = ok(kio("acls", "remove", *admin, "--principal", who)).splitlines()
    assert sorted(removed) == sorted(listed)
    assert until(lambda: ok(kio("acls", "list", *admin, "--principal", who)), lambda v: v == "") == ""
    res = kio("acls", "add", *_as(secured_kafka, "alice"), "--topic", topic, "--allow-principal", who,
              "--operation", "read")
    assert res.returncode == 1 and b"ClusterAuthorizationFailedError" in res.stderr
    assert len(res.stderr.decode().strip().splitlines()) == 1
    res = kio("acls", "add", *admin, "--topic", topic, "--allow-principal", who, "--operation", "fly")
    assert res.returncode == 2 and b"'FLY' is not a AclOperation" in res.stderr


def test_users_set_password_list_delete(secured_kafka):
    admin = _as(secured_kafka)
    user = f"cli-{uuid.uuid4().hex[:6]}"
    assert ok(kio("users", "set-password", *admin, "--user", user, "--password", "pw-1",
                  "--mechanism", "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512", "--iterations", "5000")) == \
        f"set SCRAM-SHA-256 credential of {user}\nset SCRAM-SHA-512 credential of {user}\n"
    listed = until(lambda: kio("users", "list", *admin, "--user", user).stdout.decode(),
                   lambda v: v.count("\n") == 2)
    assert listed == f"{user}\tSCRAM-SHA-256\t5000\n{user}\tSCRAM-SHA-512\t5000\n"
    assert f"{user}\tSCRAM-SHA-512\t5000" in ok(kio("users", "list", *admin)).splitlines()
    # the new user connects (SCRAM-SHA-512) and is refused by the authorizer, not by authentication
    res = kio("acls", "list", *_as_user(secured_kafka, user, "pw-1"))
    assert res.returncode == 1 and b"ClusterAuthorizationFailedError" in res.stderr
    assert ok(kio("users", "delete", *admin, "--user", user)).splitlines() == [
        f"deleted SCRAM-SHA-256 credential of {user}", f"deleted SCRAM-SHA-512 credential of {user}"]
    res = until(lambda: kio("users", "list", *admin, "--user", user), lambda r: r.returncode == 1)
    assert res.returncode == 1 and b"ResourceNotFoundError" in res.stderr
    res = kio("users", "set-password", *admin, "--user", user, "--password", "x", "--iterations", "10")
    assert res.returncode == 1 and b"UnacceptableCredentialError" in res.stderr


def _as_user(secured_kafka, user, password):
    return ["--bootstrap-server", secured_kafka.bootstrap_servers, "--property", "security.protocol=SASL_PLAINTEXT",
            "--property", "sasl.mechanism=SCRAM-SHA-512", "--property", f"sasl.username={user}",
            "--property", f"sasl.password={password}"]


@kafka_only
def test_configs_describe_and_alter(bootstrap):
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "1"))
    base = ["--bootstrap-server", bootstrap]
    out = ok(kio("configs", "alter", *base, "--entity-type", "topics", "--entity-name", topic,
                 "--add-config", "retention.ms=120000,cleanup.policy=[compact,delete]"))
    assert out == f"altered topics {topic}: retention.ms=120000, cleanup.policy=compact,delete\n"
    described = until(lambda: ok(kio("configs", "describe", *base, "--entity-type", "topics",
                                     "--entity-name", topic)).splitlines(), lambda v: len(v) == 2)
    assert described == ["cleanup.policy=compact,delete", "retention.ms=120000"]
    assert "segment.bytes=1073741824" in ok(kio("configs", "describe", *base, "--entity-type", "topics",
                                                "--entity-name", topic, "--all")).splitlines()
    ok(kio("configs", "alter", *base, "--entity-type", "topics", "--entity-name", topic,
           "--delete-config", "cleanup.policy"))
    assert until(lambda: ok(kio("configs", "describe", *base, "--entity-type", "topics", "--entity-name", topic)),
                 lambda v: v.count("\n") == 1) == "retention.ms=120000\n"
    group = f"g-{uuid.uuid4().hex[:6]}"
    ok(kio("configs", "alter", *base, "--entity-type", "groups", "--entity-name", group,
           "--add-config", "consumer.session.timeout.ms=50000"))
    assert "consumer.session.timeout.ms=50000" in until(
        lambda: ok(kio("configs", "describe", *base, "--entity-type", "groups", "--entity-name", group)),
        lambda v: "50000" in v)
    ok(kio("configs", "alter", *base, "--entity-type", "brokers", "--entity-default",
           "--add-config", "log.cleaner.delete.retention.ms=86400002"))
    assert "log.cleaner.delete.retention.ms=86400002" in until(
        lambda: ok(kio("configs", "describe", *base, "--entity-type", "brokers", "--entity-default")),
        lambda v: "86400002" in v)
    ok(kio("configs", "alter", *base, "--entity-type", "brokers", "--entity-default",
           "--delete-config", "log.cleaner.delete.retention.ms"))
    res = kio("configs", "alter", *base, "--entity-type", "topics", "--entity-name", topic,
              "--add-config", "retention.ms=soon")
    assert res.returncode == 1 and b"InvalidConfigError" in res.stderr
    res = kio("configs", "describe", *base, "--entity-type", "topics", "--entity-name", "no-such-" + topic)
    assert res.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in res.stderr
    res = kio("configs", "alter", *base, "--entity-type", "topics", "--entity-name", topic)
    assert res.returncode == 2 and b"--add-config" in res.stderr
