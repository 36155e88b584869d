"""The package as a registry user gets it: ``python -m build`` makes an sdist
and, from that sdist, a wheel; the wheel carries its metadata, the compiled
core and the type information, and installed into a fresh venv it runs the
demo (produce, consume in a group, verify) against the suite's broker.

Built once per session from a copy of this checkout's files (git's tracked
and untracked-but-not-ignored files: no .so, no build/), with the build
dependencies already installed (``--no-isolation``: no download). The C
compiler runs at -O0 (CFLAGS): the same code, compiled a few times faster;
the optimised build is what ``pip install -e .`` makes for every other test.

The fresh venv gets the wheel alone (``pip install --no-deps``); its
dependencies (crc32c, lz4) are taken from this interpreter's site-packages
through a path file added after the install, which puts that folder on
sys.path without running its .pth files - so this checkout's editable install
stays invisible and ``kio`` can only come from the wheel.
"""
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 900


def _run(argv, cwd, env=None, timeout=300):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return proc


def _source_copy(dest: Path) -> Path:
    files = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if not src.is_file() or src.suffix in (".so", ".c"):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(src.read_bytes())
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(sdist path, wheel path), built by ``python -m build``."""
    src = _source_copy(tmp_path_factory.mktemp("source"))
    out = src / "dist"
    env = dict(os.environ, CFLAGS="-O0")
    env.pop("PYTHONPATH", None)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)], src, env,
         timeout=BUILD_TIMEOUT)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory):
    """The python of a fresh venv with the wheel installed."""
    _, wheel = built
    home = tmp_path_factory.mktemp("venv")
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--without-pip", str(home / "venv")], home)
    python = home / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # pip from this interpreter, installing into the venv (no pip download into it)
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--quiet", str(wheel)], home, env)
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                home, env).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "zz_outer_site_packages.pth").write_text("\n".join(sorted(outer)) + "\n")
    return python


def test_the_sdist_has_the_sources_and_the_metadata(built):
    sdist, _ = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        top = sdist.name[:-len(".tar.gz")]
        pkg_info = tar.extractfile(f"{top}/PKG-INFO").read().decode()
    for needed in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "kproto/_codec.pyx",
                   "kproto/py.typed", "kio/py.typed", "kio/__main__.py"):
        assert needed in names, needed
    assert "License-Expression: Apache-2.0" in pkg_info


def test_the_wheel_has_the_compiled_core_metadata_and_types(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
        entry_points = zf.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    compiled = {n for n in names if n.endswith(".so")}
    pyx = {p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "kproto").rglob("*.pyx")}
    assert {n.split(".", 1)[0] for n in compiled} >= pyx, pyx - {n.split(".", 1)[0] for n in compiled}
    assert {"kproto/py.typed", "kio/py.typed", "kio/_async/admin.pyi", "kio/testing/plugin.py"} <= names
    assert not any(n.startswith(("tests/", "bench/", "docs/")) for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for field in ("License-Expression: Apache-2.0", "Classifier: Typing :: Typed",
                  "Classifier: Framework :: Trio", "Requires-Dist: crc32c", "Requires-Dist: lz4",
                  "Provides-Extra: docs", "Requires-Python: >=3.9"):
        assert field in meta, field
    assert "kio = kio.__main__:main" in entry_points
    assert "[pytest11]" in entry_points and "kio = kio.testing.plugin" in entry_points


def test_mypy_accepts_a_users_program_against_the_installed_wheel(venv, tmp_path):
    """The other half of tests/test_typing.py's editable-install check: the
    same user program, type-checked against the wheel in a fresh venv."""
    try:
        from test_typing import AS_A_USER_WRITES
    except ImportError:  # pragma: no cover
        from tests.test_typing import AS_A_USER_WRITES
    (tmp_path / "app.py").write_text(AS_A_USER_WRITES)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-executable", str(venv),
                        "--cache-dir", str(tmp_path / ".cache"), "--no-color-output", "app.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout + r.stderr


def test_the_installed_wheel_runs_the_demo_against_the_broker(venv, bootstrap, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run([str(venv), "-c", "import kio, kproto._codec as c; print(kio.__file__); print(c.__file__)"],
                 tmp_path, env).stdout.split()
    assert all(str(venv.parent.parent) in p for p in where), where        # the wheel's, not the checkout's
    assert where[1].endswith(".so"), where
    demo = _run([str(venv.parent / "kio"), "demo", "--bootstrap-server", bootstrap, "--records", "20000"],
                tmp_path, env, timeout=180)
    assert "verification: count 20,000/20,000" in demo.stdout and ": OK" in demo.stdout, demo.stdout
