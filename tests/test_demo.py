"""The README's main job, `kio demo`, run as a subprocess like a user would."""
import subprocess
import sys


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kio", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_demo_starts_its_own_broker_and_verifies():
    res = _run("demo", "--records", "30000", "--partitions", "2")
    assert res.returncode == 0, res.stderr
    assert "started local broker" in res.stdout
    assert "verification: count 30,000/30,000" in res.stdout and "OK" in res.stdout
    assert "stopped local broker" in res.stdout


def test_demo_against_a_given_broker(bootstrap):
    res = _run("demo", "--bootstrap-server", bootstrap, "--records", "20000",
               "--compression", "gzip")
    assert res.returncode == 0, res.stderr
    assert "started local broker" not in res.stdout
    assert "count 20,000/20,000" in res.stdout


def test_demo_unreachable_broker_is_one_clear_line():
    res = _run("demo", "--bootstrap-server", "127.0.0.1:1", "--records", "10", "--timeout", "3", timeout=60)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kio demo: error:"), res.stderr
    assert "127.0.0.1" in lines[0]
