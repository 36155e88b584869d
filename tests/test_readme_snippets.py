"""Every ```python block of README.md runs as written, against the suite's
broker: read from README.md here (so the README and the test cannot drift),
with the README's address "localhost:9092" replaced by the test broker's,
each one as its own program (``python snippet.py`` in a fresh directory),
in README order. A block is expected to exit 0.

The asyncio block is run a second time the way its comments say trio users
run it (``import trio`` / ``kio.trio`` / ``trio.run(main)``).

The TLS/SASL block needs no secured broker: it makes its clients and closes
them. Its certificate files (ca.pem, client.pem, client.key) are made here
by openssl in the block's working directory, as a user's own files would be.
"""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
README_ADDRESS = "localhost:9092"

# The README's python blocks, by the heading they sit under (a second block
# under one heading gets "-2"). A block added or removed must be added or
# removed here too: a fence the parser stops seeing cannot pass silently.
EXPECTED_BLOCKS = [
    "producer-threading-driver",
    "consumer-threading-driver",
    "share-groups-queues-kip-932-apache-kafka-4-1",
    "asyncio-and-trio",
    "admin-blocking-driver",
    "admin-blocking-driver-2",
    "errors-and-types",
    "pyspark",
    "minimal-blocking-driver",
    "security-tls-and-sasl",
]

# What a block's output must show (a block that printed nothing would be a
# README example that does not show what it claims). The Consumer block is
# left out: it reads what the Producer block wrote, so run alone it may
# rightly print nothing.
EXPECTED_OUTPUT = {
    "producer-threading-driver": "RecordMetadata(topic='orders'",
    "asyncio-and-trio": "RecordMetadata(topic='payments'",
    "share-groups-queues-kip-932-apache-kafka-4-1": "b'job-7' 2",
    "admin-blocking-driver": "PartitionInfo(",
    "admin-blocking-driver-2": "metadata.version",
    "pyspark": "rows streamed",
    "minimal-blocking-driver": "b'key' b'value' [('h', b'v')]",
}

# Blocks that need Apache Kafka: against Tansu they must fail with this
# (Tansu has no share groups), not hang or pass by accident.
KAFKA_ONLY = {
    "share-groups-queues-kip-932-apache-kafka-4-1": "does not support",
    "admin-blocking-driver-2": "does not support DescribeQuorum",
}

TIMEOUT = 120           # seconds per block
SPARK_TIMEOUT = 240     # a Spark session starts a JVM and Python workers


def _slug(heading):
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def readme_blocks(text=None):
    """[(id, code)] of README.md's ```python blocks, in order; the id is the
    nearest heading above the block (fences and headings inside a block do
    not count)."""
    if text is None:
        with open(README, encoding="utf-8") as f:
            text = f.read()
    blocks, seen = [], {}
    heading, fence, body = "top", None, []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^#{1,6}\s+(.+?)\s*#*$", line)
            if m:
                heading = _slug(m.group(1))
            elif stripped.startswith("```"):
                fence, body, start = stripped[3:].strip().lower(), [], lineno
        elif stripped == "```":
            if fence == "python":
                seen[heading] = seen.get(heading, 0) + 1
                block_id = heading if seen[heading] == 1 else f"{heading}-{seen[heading]}"
                blocks.append((block_id, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"README.md: the ``` fence opened on line {start} is never closed"
    return blocks


BLOCKS = readme_blocks()


def as_trio(code):
    """The asyncio block as its comments tell a trio user to write it."""
    out = (code.replace("import asyncio\n", "import trio\n", 1)
               .replace("import kio.aio ", "import kio.trio ", 1)
               .replace("kio.aio.", "kio.trio.")
               .replace("asyncio.run(main())", "trio.run(main)", 1))
    assert "asyncio" not in out and "kio.aio" not in out, out
    return out


def _cases():
    cases = []
    for block_id, code in BLOCKS:
        cases.append(pytest.param(block_id, code, id=block_id))
        if block_id == "asyncio-and-trio":
            cases.append(pytest.param(block_id, as_trio(code), id=block_id + "-under-trio"))
    return cases


# -- the README itself (no broker) ---------------------------------------------------------------

def test_the_readme_has_the_python_blocks_this_test_expects():
    assert [block_id for block_id, _ in BLOCKS] == EXPECTED_BLOCKS


def test_parsing_sees_fences_headings_and_code_inside_blocks_as_they_are():
    text = ("# Top\n```bash\necho 1\n```\n## A b (c)\n```python\n# not a heading\nx = 1\n```\n"
            "text\n```python\ny = 2\n```\n### D\n```\nplain\n```\n")
    assert readme_blocks(text) == [("a-b-c", "# not a heading\nx = 1\n"), ("a-b-c-2", "y = 2\n")]
    with pytest.raises(AssertionError, match="never closed"):
        readme_blocks("```python\nx = 1\n")


@pytest.mark.parametrize("block_id,code", BLOCKS, ids=[b for b, _ in BLOCKS])
def test_a_block_is_a_complete_program(block_id, code):
    compile(code, f"README.md[{block_id}]", "exec")   # a top-level await or async with fails here
    assert "..." not in code and "…" not in code, f"{block_id}: a placeholder instead of code"
    assert "127.0.0.1:9092" not in code, f"{block_id}: the README's examples use {README_ADDRESS}"
    if block_id != "security-tls-and-sasl":     # the one block that names a remote cluster
        assert README_ADDRESS in code, f"{block_id}: no {README_ADDRESS} for this test to replace"


# -- each block against the broker ---------------------------------------------------------------

def _make_tls_files(directory):
    """The block's ca.pem, client.pem and client.key: a self-signed client
    certificate that is its own CA (enough for the files to load)."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make the TLS block's certificate files"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key",
                    "-out", "client.pem", "-subj", "/CN=client", "-days", "2"],
                   cwd=directory, check=True, capture_output=True, timeout=60)
    shutil.copy(os.path.join(directory, "client.pem"), os.path.join(directory, "ca.pem"))


def _run(path, cwd, env, timeout):
    """(returncode, stdout, stderr) of ``python path``; on a timeout the whole
    process group (a Spark JVM and its Python workers too) is killed."""
    proc = subprocess.Popen([sys.executable, path], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err
    return proc.returncode, out, err


@pytest.mark.parametrize("block_id,code", _cases())
def test_the_readme_block_runs(block_id, code, bootstrap, broker_kind, tmp_path):
    program = code.replace(README_ADDRESS, bootstrap)
    path = tmp_path / "snippet.py"
    path.write_text(program, encoding="utf-8")
    if "ssl_cafile=" in program:
        _make_tls_files(str(tmp_path))
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
               PYSPARK_PYTHON=sys.executable,      # Spark's Python workers: this interpreter
               TMPDIR=str(tmp_path))               # tempfile.mkdtemp() in a block stays in here
    timeout = SPARK_TIMEOUT if "pyspark" in program else TIMEOUT
    rc, out, err = _run(str(path), str(tmp_path), env, timeout)
    report = (f"\n--- README block {block_id} ---\n{program}\n--- stdout ---\n{out[-4000:]}"
              f"\n--- stderr ---\n{err[-8000:]}")
    assert rc is not None, f"{block_id} did not finish within {timeout} s{report}"
    if block_id in KAFKA_ONLY and broker_kind == "tansu":
        assert rc != 0 and KAFKA_ONLY[block_id] in err, f"{block_id} on Tansu{report}"
        return
    assert rc == 0, f"{block_id} exited with {rc}{report}"
    if block_id in EXPECTED_OUTPUT:
        assert EXPECTED_OUTPUT[block_id] in out, f"{block_id} did not print {EXPECTED_OUTPUT[block_id]!r}{report}"
