"""The ``kio`` console tools as a user runs them: subprocesses with real
stdin/stdout against the suite's broker."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kio(*args, stdin=None, timeout=60):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "kio", *args], input=stdin, capture_output=True,
                          timeout=timeout, env=env)


def ok(res):
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode()


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_produce_from_a_pipe_then_consume_the_same_lines(bootstrap):
    topic = name("cli")
    ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "1"))
    lines = [f"line {i} ünïcode" for i in range(500)] + [""]
    res = kio("produce", "--bootstrap-server", bootstrap, "--topic", topic,
              stdin=("\n".join(lines) + "\n").encode())
    assert ok(res) == "" and res.stderr == b""           # quiet when piped
    out = ok(kio("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", str(len(lines))))
    assert out.split("\n")[:-1] == lines


def test_parse_key_sync_headers_and_format(bootstrap):
    topic = name("cli")
    ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "3"))
    ok(kio("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--parse-key", "--sync",
           "--header", "src=cli", "--header", "n=1", "--acks", "all", "--compression", "gzip",
           stdin=b"k1\tv1\nk2\tv2\nk1\tv3\n"))
    out = ok(kio("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", "3", "--format", "{key}={value} [{headers}] p{partition}"))
    rows = sorted(out.splitlines())
    assert [r.split(" [")[0] for r in rows] == ["k1=v1", "k1=v3", "k2=v2"]
    assert all("[src:cli,n:1]" in r for r in rows)
    # keys go to one partition: k1's two records share it
    parts = {r.split("=")[0]: r.rsplit("p", 1)[1] for r in rows}
    assert len({r.rsplit("p", 1)[1] for r in rows if r.startswith("k1")}) == 1 and parts
    # a line without the separator: one clear error, exit 2, earlier lines delivered
    res = kio("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--parse-key",
              stdin=b"k9\tv9\nno separator here\n")
    assert res.returncode == 2
    assert res.stderr.decode().strip().splitlines() == [
        "kio produce: error: line 2 has no key separator '\\t'"]


def test_consume_json_partition_offset_and_group_then_groups_describe(bootstrap):
    topic = name("cli")
    group = name("grp")
    ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "2"))
    ok(kio("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--parse-key",
           stdin=b"a\t1\nb\t2\nc\t3\nd\t4\n"))
    out = ok(kio("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                 "--json", "--max-messages", "4", "--group", group,
                 "--property", "session.timeout.ms=6000"))
    recs = [json.loads(line) for line in out.splitlines()]
    assert sorted((r["key"], r["value"]) for r in recs) == [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
    one = next(r for r in recs if r["key"] == "c")
    # --partition/--offset: exactly that record and what follows it in its partition
    out = ok(kio("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--partition",
                 str(one["partition"]), "--offset", str(one["offset"]), "--max-messages", "1",
                 "--format", "{offset}:{key}"))
    assert out == f"{one['offset']}:c\n"
    # the group committed on close: describe shows it with a lag per partition
    desc = ok(kio("groups", "describe", "--bootstrap-server", bootstrap, "--group", group))
    table = [line.split("\t") for line in desc.splitlines() if line.startswith(group + "\t")]
    assert sorted(int(row[2]) for row in table) == [0, 1]
    assert all(row[1] == topic and int(row[5]) == 0 for row in table)
    assert group in ok(kio("groups", "list", "--bootstrap-server", bootstrap))


def test_topics_create_list_describe_delete(bootstrap):
    topic = name("cli")
    assert ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic,
                  "--partitions", "4")) == f"created topic {topic}\n"
    assert topic in ok(kio("topics", "list", "--bootstrap-server", bootstrap)).splitlines()
    desc = ok(kio("topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic)).splitlines()
    assert desc[0].startswith(f"Topic: {topic}\t") and "PartitionCount: 4" in desc[0]
    assert [line.split("\t")[2] for line in desc[1:]] == [f"Partition: {p}" for p in range(4)]
    res = kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic)
    assert res.returncode == 1 and b"TopicAlreadyExistsError" in res.stderr
    assert len(res.stderr.decode().strip().splitlines()) == 1
    assert ok(kio("topics", "delete", "--bootstrap-server", bootstrap, "--topic", topic)) == \
        f"deleted topic {topic}\n"
    res = kio("topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic)
    assert res.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in res.stderr


def test_perf_produce_and_consume_print_figures(bootstrap):
    topic = name("perf")
    out = ok(kio("perf", "produce", "--bootstrap-server", bootstrap, "--topic", topic,
                 "--num-records", "20000", "--record-size", "50"))
    assert out.startswith("20,000 records sent, ") and "99.9th" in out and "MB/sec" in out
    out = ok(kio("perf", "consume", "--bootstrap-server", bootstrap, "--topic", topic,
                 "--messages", "20000"))
    assert out.startswith("20,000 records, 0.95 MB in ") and "records/sec" in out and "50th" in out


def test_bad_bootstrap_server_is_one_line_and_nonzero_within_the_timeout():
    for args, stdin in ((["produce", "--topic", "t"], b"x\n"), (["consume", "--topic", "t"], None),
                        (["topics", "list"], None)):
        start = time.monotonic()
        res = kio(*args, "--bootstrap-server", "127.0.0.1:1", "--timeout", "2", stdin=stdin, timeout=30)
        elapsed = time.monotonic() - start
        err = res.stderr.decode().strip().splitlines()
        assert res.returncode == 1 and len(err) == 1, res.stderr
        assert err[0].startswith(f"kio {args[0]}") and "127.0.0.1:1" in err[0] and "ECONNREFUSED" in err[0]
        assert elapsed < 15, (args, elapsed)


def test_bad_property_and_usage_are_exit_2(bootstrap):
    res = kio("produce", "--bootstrap-server", bootstrap, "--topic", "t", "--property", "linger.mss=5",
              stdin=b"")
    err = res.stderr.decode().strip().splitlines()
    assert res.returncode == 2 and len(err) == 1 and "linger.ms" in err[0]
    res = kio("consume", "--bootstrap-server", bootstrap, "--topic", "t", "--format", "{nope}")
    assert res.returncode == 2 and b"fields: topic partition offset" in res.stderr
    res = kio("consume", "--bootstrap-server", bootstrap, "--topic", "t", "--group", "g", "--partition", "0")
    assert res.returncode == 2


def test_sigterm_flushes_and_reports_undelivered(bootstrap):
    topic = name("cli")
    ok(kio("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "1"))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "kio", "produce", "--bootstrap-server", bootstrap,
                             "--topic", topic, "--rate", "200"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdin.write(b"".join(b"r%d\n" % i for i in range(2000)))
    proc.stdin.flush()
    time.sleep(2.0)                                     # some records sent, most still to come
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    line = err.decode().strip().splitlines()[-1]
    assert line.startswith("interrupted: ") and "records delivered" in line
    delivered = int(line.split()[1].replace(",", ""))
    assert 0 < delivered < 2000
    out = ok(kio("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", str(delivered), "--idle-timeout", "3"))
    assert out.splitlines() == [f"r{i}" for i in range(delivered)]


def _serve_broker(flags, path=None):
    """Runs ``kio broker`` on a free port; returns (kind line, stderr so far, port) once it serves
    (a topic created through it), then stops it with SIGTERM and checks it went away."""
    from kio.testing.broker import free_port
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT, **({"PATH": path} if path is not None else {}))
    proc = subprocess.Popen([sys.executable, "-m", "kio", "broker", "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = proc.stdout.readline().decode()
        assert ok(kio("topics", "create", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "b1",
                      "--partitions", "1")) == "created topic b1\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    res = kio("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "1")
    assert res.returncode == 1                       # the broker went away with the command
    return first, err.decode(), port


@pytest.mark.parametrize("flags, kind", [([], "kafka"), (["--kafka"], "kafka"), (["--tansu"], "tansu")],
                         ids=["default-with-java", "kafka", "tansu"])
def test_broker_command_serves_until_sigterm(flags, kind):
    """``kio broker`` runs Apache Kafka where Java and Maven are (this
    machine), Tansu with --tansu, with a warning naming its deviations."""
    first, err, port = _serve_broker(flags)
    assert first.startswith(f"{kind} broker ready on 127.0.0.1:{port}"), first + err
    if kind == "tansu":
        assert "Tansu is not Apache Kafka" in err and "LATEST" in err, err
    else:
        assert "starting Apache Kafka (Java found" in err and "Tansu is not" not in err, err


def test_broker_command_without_java_runs_tansu_and_says_why(tmp_path):
    """No java/mvn on the PATH: the default falls back to Tansu with the
    warning; --kafka is a usage error that says what is missing."""
    first, err, port = _serve_broker([], path=str(tmp_path))
    assert first.startswith(f"tansu broker ready on 127.0.0.1:{port}"), first + err
    assert "Tansu is not Apache Kafka" in err, err
    env = dict(os.environ, PYTHONPATH=ROOT, PATH=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "kio", "broker", "--kafka"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert "--kafka needs Java 17+ and Maven on the PATH" in res.stderr, res.stderr


def test_progress_line_only_on_a_terminal():
    import io

    from kio.cli.common import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress("produce", every=0.0, stream=stream)
        p.update(10)
        p.update(20)
        p.done()
    assert pipe.getvalue() == ""
    assert "produce: 20 records" in tty.getvalue() and tty.getvalue().endswith("\n")
