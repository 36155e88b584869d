"""The build compiles what setup.py says, and the compiled modules are the ones imported.

setup.py compiles every .pyx under kproto/ and the pure-Python modules of its
COMPILED_PY_MODULES list (Cython, as they are). An extension module next to a
.py of the same name is what ``import`` loads, so after a build (``pip install
-e .`` or ``setup.py build_ext --inplace``) the tests exercise the compiled
code; these tests fail when a module silently falls back to the interpreter.
"""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _compiled_py_modules() -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "COMPILED_PY_MODULES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED_PY_MODULES list")


def _module_name(path: str) -> str:
    return os.path.splitext(path)[0].replace("/", ".")


PYX_MODULES = sorted(_module_name(str(p.relative_to(ROOT))) for p in (ROOT / "kproto").rglob("*.pyx"))
PY_MODULES = [_module_name(p) for p in _compiled_py_modules()]


def _is_extension(module) -> bool:
    return any(module.__file__.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)


def test_setup_lists_existing_modules():
    """Every COMPILED_PY_MODULES entry names a .py under kproto/ (setup.py
    stops the build otherwise; this says so before anyone builds)."""
    for path in _compiled_py_modules():
        assert path.startswith("kproto/") and path.endswith(".py"), path
        assert (ROOT / path).is_file(), f"setup.py lists {path}, which does not exist"


@pytest.mark.parametrize("name", PYX_MODULES)
def test_every_pyx_is_compiled(name):
    module = importlib.import_module(name)
    assert _is_extension(module), f"{name} was imported from {module.__file__}, not a compiled extension"


@pytest.mark.parametrize("name", PY_MODULES)
def test_listed_python_modules_are_compiled_from_their_source(name):
    """The extension is imported, its .py source stays beside it (for mypy,
    readers and an uncompiled checkout) and exposes the same public names."""
    module = importlib.import_module(name)
    if os.environ.get("KPROTO_COMPILE_PY") == "0":
        # a coverage build (see setup.py): the same source, interpreted
        assert module.__file__.endswith(".py"), f"{name} is still compiled: delete its .so"
        return
    assert _is_extension(module), (
        f"{name} was imported from {module.__file__}: rebuild (pip install -e . or "
        f"python setup.py build_ext --inplace)")
    source = Path(module.__file__).with_name(name.rsplit(".", 1)[-1] + ".py")
    assert source.is_file()
    tree = ast.parse(source.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert defined and all(hasattr(module, n) for n in defined)
