"""Shared fixtures: the real brokers, started by the suite itself.

The integration tests run against two brokers, one session-wide instance
each, on free loopback ports:

* ``kafka`` — Apache Kafka 4.x (kio.testing.kafka_broker.KafkaBroker), the reference;
* ``tansu`` — Tansu (kio.testing.broker.LocalBroker), the light Java-free broker.

``KIO_TEST_BROKERS=kafka`` (or ``tansu``) narrows the matrix for a local run;
CI runs both. A test that asserts behaviour of one implementation reads
``broker.kind``. A failing test gets the tail of its broker's log in its report.
"""
import os
import sys

import pytest

# The suite is built on kio.testing, the plugin users get for their own suites
# (its kafka_broker fixture is one broker; this suite runs the matrix of both).
from kio.testing import BROKER_KINDS, new_topic, start_broker, wait_for_leaders  # noqa: F401

try:
    import early_runs
except ImportError:  # tests/ as a package
    from tests import early_runs


def broker_kinds():
    """The broker implementations under test (KIO_TEST_BROKERS, default all)."""
    wanted = os.environ.get("KIO_TEST_BROKERS", ",".join(BROKER_KINDS))
    kinds = [k.strip() for k in wanted.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in BROKER_KINDS]
    if unknown or not kinds:
        raise pytest.UsageError(f"KIO_TEST_BROKERS={wanted!r}: choose from {BROKER_KINDS}")
    return kinds


@pytest.fixture(scope="session", params=broker_kinds())
def broker(request, tmp_path_factory):
    kind = request.param
    log_path = str(tmp_path_factory.mktemp(f"broker-{kind}") / f"{kind}.log")
    b = start_broker(kind, log_path=log_path)
    try:
        yield b
    finally:
        b.stop()


#: The secured broker's users besides the super user (SCRAM-SHA-256/512 and PLAIN).
SECURED_USERS = {"alice": "alice-secret"}


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory):
    """Apache Kafka with SASL_SSL, mutual TLS, SASL_PLAINTEXT and ACLs
    (kio.testing.secured_kafka.SecuredKafkaBroker), started once for the tests that
    ask for it. ``alice`` (SASL) and ``client`` (the mTLS certificate's CN)
    may do everything on topics and groups named ``ok-*``, only DESCRIBE
    topics named ``see-*``, and nothing else; the super user ``admin``
    (``client_config()`` without a user) makes the topics."""
    if "kafka" not in broker_kinds():
        pytest.skip("the secured broker is Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.secured_kafka import SecuredKafkaBroker, make_certificates

    folder = tmp_path_factory.mktemp("secured-kafka")
    b = SecuredKafkaBroker(users=SECURED_USERS, certs=make_certificates(folder),
                           log_path=str(folder / "kafka.log"))
    b.start()
    try:
        for principal in ("User:alice", "User:client"):
            b.allow(principal, "TOPIC", "ok-", ["ALL"], "PREFIXED")
            b.allow(principal, "GROUP", "ok-", ["ALL"], "PREFIXED")
            b.allow(principal, "TOPIC", "see-", ["DESCRIBE"], "PREFIXED")
        yield b
    finally:
        b.stop()


#: OIDC clients of the reauth_kafka fixture's issuer (client id -> secret); the
#: principal is the client id (the token's ``sub``).
OIDC_CLIENTS = {"kio-app": "kio-app-secret"}
#: The reauth_kafka broker's connections.max.reauth.ms (KIP-368): short, so a
#: test sees several re-authentications in a few seconds.
REAUTH_MS = 2000


@pytest.fixture(scope="session")
def reauth_kafka(tmp_path_factory):
    """(broker, issuer): a second secured Apache Kafka with
    ``connections.max.reauth.ms`` = REAUTH_MS and OAUTHBEARER on its SASL_SSL
    listener, validated against the JWKS of ``issuer`` (tests/oidc_issuer.py,
    a local OIDC issuer started here; its tokens live an hour unless a test
    changes ``issuer.lifetime_s``). ``alice`` (PLAIN, SCRAM) and ``kio-app``
    (OIDC) may do everything on topics and groups named ``ok-*``."""
    if "kafka" not in broker_kinds():
        pytest.skip("the secured broker is Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.secured_kafka import SecuredKafkaBroker, make_certificates
    try:
        from oidc_issuer import OidcIssuer
    except ImportError:  # tests/ as a package
        from tests.oidc_issuer import OidcIssuer

    folder = tmp_path_factory.mktemp("reauth-kafka")
    issuer = OidcIssuer(OIDC_CLIENTS).start()
    b = SecuredKafkaBroker(users=SECURED_USERS, certs=make_certificates(folder),
                           log_path=str(folder / "kafka.log"), reauth_ms=REAUTH_MS,
                           oauth_jwks_url=issuer.jwks_url, oauth_issuer=issuer.issuer)
    try:
        b.start()
        for principal in ("User:alice", *(f"User:{c}" for c in OIDC_CLIENTS)):
            b.allow(principal, "TOPIC", "ok-", ["ALL"], "PREFIXED")
            b.allow(principal, "GROUP", "ok-", ["ALL"], "PREFIXED")
        yield b, issuer
    finally:
        b.stop()
        issuer.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """Three Apache Kafka KRaft nodes (kio.testing.kafka_cluster.KafkaCluster: combined
    broker+controller, RF 3, min.insync.replicas 2), started once for the
    failover tests. A test that kills or stops a node brings it back and
    waits for ``wait_in_sync()`` before it ends, so the next test starts
    from a whole cluster."""
    if "kafka" not in broker_kinds():
        pytest.skip("the cluster is Apache Kafka (KIO_TEST_BROKERS leaves it out)")
    from kio.testing.kafka_cluster import KafkaCluster

    cluster = KafkaCluster(3, log_dir=str(tmp_path_factory.mktemp("kafka-cluster")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def broker_kind(broker):
    return broker.kind


@pytest.fixture
def bootstrap(broker):
    return broker.bootstrap_servers


@pytest.fixture
def make_topic(bootstrap):
    """make_topic(partitions=1, prefix="t", configs=None) -> the name of a new topic
    (kio.testing.new_topic, what users' suites get as the kafka_topic fixture)."""
    def make(partitions=1, prefix="t", configs=None):
        return new_topic(bootstrap, partitions, prefix=prefix, configs=configs, replication_factor=1)
    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for name in ("broker", "secured_kafka", "reauth_kafka", "gssapi_kafka", "kafka_cluster"):
            b = item.funcargs.get(name) if name in getattr(item, "fixturenames", ()) else None
            if isinstance(b, tuple):          # reauth_kafka: (broker, issuer)
                b = b[0]
            if b is not None:
                report.sections.append((f"{b.kind} broker log (tail)", b.log_tail()))


def pytest_collection_modifyitems(config, items):
    # Tests that use a real broker get the `broker` marker, so `-m "not broker"`
    # selects the pure sans-IO unit tests.
    for item in items:
        brokers = {"broker", "bootstrap", "secured_kafka", "reauth_kafka", "gssapi_kafka", "kafka_cluster"}
        if brokers & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


def pytest_collection_finish(session):
    # A test marked early_run waits mostly on a broker's fixed timer: its
    # scenario runs in a child that overlaps the rest of the run
    # (tests/early_runs.py). Its broker is Apache Kafka.
    if "kafka" not in broker_kinds() or session.config.option.collectonly:
        return
    for item in session.items:
        marker = item.get_closest_marker("early_run")
        if marker is not None:
            early_runs.plan(item.nodeid, marker.args[0])


def pytest_runtest_logfinish(nodeid, location):
    # The planned scenarios start once the first test has run: by then the
    # session's brokers are up, and the scenario's own JVM does not slow
    # their start (beside it the session Kafka once took 23 s, not 4-7 s).
    early_runs.start_planned()


def _live_children(pid):
    """(pid, command line) of the live, non-zombie children of ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) != pid or state == "Z":
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry), cmd))
    return out


# PySpark's JVM gateway lives as long as this interpreter by design (it exits
# when its stdin, our pipe, closes): it is not a leak.
_EXPECTED_CHILDREN = ("org.apache.spark.deploy.SparkSubmit",)


def pytest_sessionfinish(session, exitstatus):
    early_runs.stop_all()        # a scenario no test waited for (the run stopped early)
    # Every broker, proxy or helper process a test starts must be stopped by
    # it: one left behind keeps ports and CPU after the run (issue: a broker
    # started twice by `with LocalBroker(...).start()`). Give stopping
    # processes a moment, then fail the run if any child is still there.
    if not os.path.isdir("/proc"):
        return
    import time
    deadline = time.monotonic() + 5
    while True:
        left = [(p, c) for p, c in _live_children(os.getpid())
                if not any(e in c for e in _EXPECTED_CHILDREN)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        listing = "\n".join(f"  pid {p}: {c[:200]}" for p, c in left)
        session.config.get_terminal_writer().line(
            f"\nERROR: the test session left {len(left)} child process(es) running:\n{listing}",
            red=True)
        for p, _ in left:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def spark_builder(master="local[2]", app="kio-tests", connect=False):
    """A SparkSession builder for the suite's Spark tests. The first session
    of the run launches PySpark's JVM, and a data source jar added later with
    ``spark.jars`` is not found by ``format("kafka")`` in a later session of
    the same JVM: so every session puts Spark's own Kafka connector (the
    comparison's anchor, fetched by kio.spark.connector) on the driver's
    class path, whichever module starts first.

    ``connect=True``: a Spark Connect session, ``builder.remote(master)``
    (a user's ``remote("local[2]")``): pyspark starts a local Connect server
    in this process's own JVM, so it cannot share a process with a classic
    session (tests/test_spark_connect.py runs it in a child process). Under
    SPARK_TESTING the server binds a free port and the client asks the JVM
    for it; otherwise both use 15002, and two runs on one machine would meet.
    Spark's connector jars are not needed there."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    if connect:
        os.environ["SPARK_TESTING"] = "1"
        return SparkSession.builder.remote(master).appName(app).config("spark.sql.shuffle.partitions", "2")
    from kio.spark.connector import connector_jars, spark_jars_option
    jars = connector_jars()
    return (SparkSession.builder.master(master).appName(app)
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.extraClassPath", os.pathsep.join(str(j) for j in jars))
            .config("spark.jars", spark_jars_option()))


class SharedSpark:
    """The classic ``local[2]`` SparkSession the Spark test modules share
    (kio.spark registered): started on first use and kept, instead of one
    start and stop per module and per broker of the matrix (~4-5 s each).
    A module that needs a session of its own (tests/test_spark_scaleout.py:
    another master) calls ``stop()`` first, since a JVM holds one
    SparkContext; the next ``get()`` starts a new shared one."""

    def __init__(self):
        self.session = None

    def get(self):
        """The live shared session, started if there is none."""
        if self.session is None or self.session.sparkContext._jsc is None:
            self.session = spark_builder("local[2]", "kio-tests").getOrCreate()
            self.session.sparkContext.setLogLevel("ERROR")
            import kio.spark
            kio.spark.register(self.session)
        return self.session

    def stop(self):
        """Stops the shared session, if one runs."""
        if self.session is not None:
            self.session.stop()
            self.session = None


@pytest.fixture(scope="session")
def shared_spark():
    """The SharedSpark of the run; stopped when the run ends."""
    holder = SharedSpark()
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture(scope="module")
def spark(shared_spark):
    """The shared classic SparkSession (see SharedSpark), for a module's tests."""
    return shared_spark.get()
