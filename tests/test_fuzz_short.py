"""A short, bounded run of bench/fuzz.py (the long run lives in bench/)."""
import importlib.util
import io
from pathlib import Path


def _fuzz_module():
    path = Path(__file__).resolve().parents[1] / "bench" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("kproto_bench_fuzz", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_decoders_only_raise_decode_error_on_hostile_bytes():
    out = io.StringIO()
    assert _fuzz_module().run(30000, seed=12345, out=out) == 0, out.getvalue()
    assert "only DecodeError raised: OK" in out.getvalue()


def test_mutations_change_the_input():
    mod = _fuzz_module()
    import random
    rng = random.Random(1)
    seed = bytes(range(64))
    assert sum(mod.mutate(rng, seed) != seed for _ in range(100)) > 90
