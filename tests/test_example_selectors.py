"""examples/selectors_loop.py - kproto driven by a plain selectors loop, no
kio - run as a user would, against the suite's broker."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "selectors_loop.py")


def test_the_example_imports_no_kio():
    with open(EXAMPLE) as f:
        source = f.read()
    assert "import kio" not in source and "from kio" not in source


def test_selectors_example_produces_and_consumes(bootstrap):
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, EXAMPLE, bootstrap, "700"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "produced 700 records to selectors-" in res.stdout
    assert "consumed 700 records: all match" in res.stdout
    assert res.stderr == ""
