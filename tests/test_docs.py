"""The documentation: the Sphinx site in docs/ builds without a warning, its
generated pages are current, and every example of README.md and of docs/
runs as written against the suite's broker.

Examples are the fenced code blocks, read from the files here (so the pages
and the test cannot drift). By language:

* ``python``: run as its own program (``python snippet.py`` in a fresh
  directory), with the pages' address "localhost:9092" replaced by the test
  broker's; expected to exit 0.
* ``bash``: run the same way with ``bash -e``; ``kio`` is this checkout's
  console tool (``python -m kio``).
* ``shell``: shown, not run - commands that install software, run the whole
  suite or start a broker in the foreground. Each one is listed in SHOWN_ONLY
  with the reason, so a new runnable example cannot hide there.
* ``text``: not code (a folder tree).

A block is named ``<file>#<heading>`` after the nearest heading above it (a
second block under one heading gets "-2"). A block that appears in several
files (the README's tour repeats the guides' first examples) runs once,
under its first name; docs/ is read before the README.

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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
ADDRESS = "localhost:9092"
LANGUAGES = {"python", "bash", "shell", "text"}
GENERATORS = ["gen_config_docs.py", "gen_api_docs.py", "gen_state_docs.py"]

# Blocks shown but not run, and why.
SHOWN_ONLY = {
    "README.md#set-up-two-commands": "installs into .venv/ and runs the demo or the whole suite",
    "docs/getting-started.md#set-up-two-commands": "the README's set-up commands",
    "docs/getting-started.md#quick-start": "installs the package and starts a broker in the foreground",
    "docs/getting-started.md#building-these-docs": "installs the docs extra; this test builds the docs itself",
    "docs/guides/console.md#console-tools-2": "a list of every command's options (placeholders H:P, T, G)",
}

# What a block's output must show (a block that printed nothing would be an
# example that does not show what it claims). The consumer blocks are left
# out where they read what another block wrote: run alone they may rightly
# print nothing.
EXPECTED_OUTPUT = {
    "docs/guides/producer.md#producer": "RecordMetadata(topic='orders'",
    "docs/guides/asyncio.md#asyncio": "RecordMetadata(topic='payments'",
    "docs/guides/trio.md#trio": "RecordMetadata(topic='payments'",
    "docs/guides/share-consumer.md#share-consumer-queues-kip-932-apache-kafka-4-1": "b'job-7' 2",
    "docs/guides/admin.md#admin": "PartitionInfo(",
    "docs/guides/admin.md#acls-configs-quotas-scram-and-the-cluster": "metadata.version",
    "docs/guides/admin.md#streams-groups": "partition=0): OffsetAndMetadata(offset=0",
    "docs/guides/admin.md#the-kraft-quorum-voters-and-broker-registrations": "no broker 99: BROKER_ID_NOT_REGISTERED",
    "docs/guides/spark.md#pyspark": "rows streamed",
    "docs/guides/embedding.md#a-minimal-blocking-driver": "b'key' b'value' [('h', b'v')]",
    "docs/guides/console.md#console-tools": "k1 hello",
    "docs/getting-started.md#quick-start-2": "verification: count 100,000/100,000",
    # The suite's broker is PLAINTEXT (Kafka refuses token requests there) or Tansu (no token API).
    "docs/guides/security.md#delegation-tokens": "no token from this connection",
}

# Blocks that need Apache Kafka: against Tansu they must fail with this
# (Tansu has no share groups), not hang or pass by accident.
KAFKA_ONLY = {
    "docs/guides/share-consumer.md#share-consumer-queues-kip-932-apache-kafka-4-1": "does not support",
    "docs/guides/admin.md#acls-configs-quotas-scram-and-the-cluster": "does not support DescribeQuorum",
    "docs/guides/admin.md#streams-groups": "does not support OffsetDelete",
    "docs/guides/admin.md#the-kraft-quorum-voters-and-broker-registrations": "does not support DescribeQuorum",
}

# The one block that names a remote cluster instead of ADDRESS.
NO_ADDRESS = {"docs/guides/security.md#security-tls-and-sasl"}

TIMEOUT = 120           # seconds per block
SPARK_TIMEOUT = 240     # a Spark session starts a JVM and Python workers


def _slug(heading):
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def page_blocks(text, name="page"):
    """[(id, language, code)] of a Markdown page's fenced blocks, in order; the
    id is ``name#`` and the nearest heading above the block (fences and
    headings inside a block do not count). MyST directives (```{toctree})
    are not examples and are left out."""
    blocks, seen = [], {}
    heading, fence, body, start = "top", None, [], 0
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^#{1,6}\s+(.+?)\s*#*$", line)
            if m:
                heading = _slug(m.group(1))
            elif stripped.startswith("```"):
                fence, body, start = stripped[3:].strip().lower(), [], lineno
        elif stripped == "```":
            if not fence.startswith("{"):
                seen[heading] = seen.get(heading, 0) + 1
                suffix = "" if seen[heading] == 1 else f"-{seen[heading]}"
                blocks.append((f"{name}#{heading}{suffix}", fence, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{name}: the ``` fence opened on line {start} is never closed"
    return blocks


def _name(path):
    return path.relative_to(ROOT).as_posix()


def all_blocks():
    """Every block of the docs and the README: [(id, language, code)]."""
    return [b for page in PAGES for b in page_blocks(page.read_text(encoding="utf-8"), _name(page))]


BLOCKS = all_blocks()


def runnable_blocks():
    """[(id, language, code)] to run: python and bash blocks, each code once."""
    out, seen = [], set()
    for block_id, lang, code in BLOCKS:
        if lang in ("python", "bash") and code not in seen:
            seen.add(code)
            out.append((block_id, lang, code))
    return out


RUNNABLE = runnable_blocks()


# -- the pages themselves (no broker) ------------------------------------------------------------

def test_every_block_has_a_known_language_and_every_shown_block_a_reason():
    unknown = [(b, lang) for b, lang, _ in BLOCKS if lang not in LANGUAGES]
    assert unknown == [], f"blocks without one of the languages {sorted(LANGUAGES)}: {unknown}"
    shown = {b for b, lang, _ in BLOCKS if lang == "shell"}
    assert shown == set(SHOWN_ONLY), "a shell block is shown without running: list it in SHOWN_ONLY"
    named = set(EXPECTED_OUTPUT) | set(KAFKA_ONLY) | NO_ADDRESS
    assert named <= {b for b, _, _ in RUNNABLE}, named - {b for b, _, _ in RUNNABLE}


def test_the_readme_tour_repeats_the_guides_and_stays_short():
    readme = [(b, code) for b, lang, code in BLOCKS if b.startswith("README.md#") and lang == "python"]
    docs_code = {code for b, lang, code in BLOCKS if b.startswith("docs/")}
    assert len(readme) == 4 and all(code in docs_code for _, code in readme), \
        [b for b, code in readme if code not in docs_code]
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_parsing_sees_fences_headings_and_code_inside_blocks_as_they_are():
    text = ("# Top\n```bash\necho 1\n```\n## A b (c)\n```python\n# not a heading\nx = 1\n```\n"
            "text\n```python\ny = 2\n```\n```{toctree}\nx\n```\n### D\n```text\nplain\n```\n")
    assert page_blocks(text, "p") == [("p#top", "bash", "echo 1\n"),
                                      ("p#a-b-c", "python", "# not a heading\nx = 1\n"),
                                      ("p#a-b-c-2", "python", "y = 2\n"), ("p#d", "text", "plain\n")]
    with pytest.raises(AssertionError, match="never closed"):
        page_blocks("```python\nx = 1\n")


@pytest.mark.parametrize("block_id,lang,code", RUNNABLE, ids=[b for b, _, _ in RUNNABLE])
def test_a_block_is_a_complete_program(block_id, lang, code):
    if lang == "python":
        compile(code, block_id, "exec")   # a top-level await or async with fails here
    assert "..." not in code and "…" not in code, f"{block_id}: a placeholder instead of code"
    assert "127.0.0.1:9092" not in code, f"{block_id}: the examples use {ADDRESS}"
    if block_id not in NO_ADDRESS:
        assert ADDRESS in code, f"{block_id}: no {ADDRESS} for this test to replace"


@pytest.mark.parametrize("tool", GENERATORS)
def test_the_generated_pages_are_current(tool):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / tool), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_docs_build_without_a_warning(tmp_path):
    """Sphinx with -W (warnings are errors) and a fresh environment (-E), no network."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
                           str(DOCS), str(tmp_path / "html")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    built = {p.relative_to(tmp_path / "html").with_suffix("").as_posix()
             for p in (tmp_path / "html").rglob("*.html")}
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    assert pages <= built, pages - built


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


def _kio_command(directory):
    """A ``kio`` on PATH that is this checkout's console tool."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    kio = bin_dir / "kio"
    kio.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kio "$@"\n')
    kio.chmod(0o755)
    return str(bin_dir)


def _run(argv, cwd, env, timeout):
    """(returncode, stdout, stderr) of ``argv``; on a timeout the whole
    process group (a Spark JVM and its Python workers too) is killed."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err
    return proc.returncode, out, err


def run_block(block_id, lang, code, bootstrap, broker_kind, tmp_path):
    """Runs one block against the broker at ``bootstrap`` in folder
    ``tmp_path``; returns None, or what went wrong (with the block's output).
    Used by the test below and by bench/soak_examples.py (50 runs in a row)."""
    program = code.replace(ADDRESS, bootstrap)
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               TMPDIR=str(tmp_path))               # tempfile.mkdtemp() in a block stays in here
    # The Spark example sets PYSPARK_PYTHON itself, as a user's program must.
    env.pop("PYSPARK_PYTHON", None)
    if lang == "python":
        path = tmp_path / "snippet.py"
        argv = [sys.executable, str(path)]
    else:
        path = tmp_path / "snippet.sh"
        argv = ["bash", "-e", str(path)]
        env["PATH"] = _kio_command(tmp_path) + os.pathsep + env.get("PATH", "")
    path.write_text(program, encoding="utf-8")
    if "ssl_cafile=" in program:
        _make_tls_files(str(tmp_path))
    timeout = SPARK_TIMEOUT if "pyspark" in program else TIMEOUT
    rc, out, err = _run(argv, str(tmp_path), env, timeout)
    report = (f"\n--- block {block_id} ---\n{program}\n--- stdout ---\n{out[-4000:]}"
              f"\n--- stderr ---\n{err[-8000:]}")
    if rc is None:
        return f"{block_id} did not finish within {timeout} s{report}"
    if block_id in KAFKA_ONLY and broker_kind == "tansu":
        if rc != 0 and KAFKA_ONLY[block_id] in err:
            return None
        return f"{block_id} on Tansu: expected a failure naming {KAFKA_ONLY[block_id]!r}{report}"
    if rc != 0:
        return f"{block_id} exited with {rc}{report}"
    if block_id in EXPECTED_OUTPUT and EXPECTED_OUTPUT[block_id] not in out:
        return f"{block_id} did not print {EXPECTED_OUTPUT[block_id]!r}{report}"
    return None


@pytest.mark.parametrize("block_id,lang,code", RUNNABLE, ids=[b for b, _, _ in RUNNABLE])
def test_the_block_runs(block_id, lang, code, bootstrap, broker_kind, tmp_path):
    failure = run_block(block_id, lang, code, bootstrap, broker_kind, tmp_path)
    assert failure is None, failure
