"""Generate kio/_async/admin.pyi: the type stub of the async Admin (kio.aio.Admin,
kio.trio.Admin), from the one place its operations are written.

Every admin operation - signature, ``raise_errors`` overloads, docstring -
is written once, in ``kio/_shared/admin_ops.py`` (AdminOps), with the blocking
annotations: ``Admin.create_topics(...) -> Dict[str, Optional[UUID]]``. At
run time the async class inherits those methods and its ``_call`` makes them
return awaitables; a type checker needs them as ``async def`` to see
``await admin.create_topics(...)`` as that Dict. This tool writes that view:
the AsyncAdmin class of ``kio/_async/admin.py`` (its bases but AdminOps,
its own public methods) plus every public AdminOps method - and those of
its mixins from ``kio/_shared/admin_*`` modules - as ``async def`` with the same
parameters, overloads and return types.

    python tools/gen_async_admin_stub.py           # rewrite the stub
    python tools/gen_async_admin_stub.py --check   # exit 1 if it is out of date
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any, Dict, List, Set, Union

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "kio" / "_shared" / "admin_ops.py"
#: Mixins of AdminOps in modules of their own, whose operations the stub has too.
_MIXIN_MODULES = ("kio._shared.admin_", "kio._shared.telemetry_ops")
DRIVER = ROOT / "kio" / "_async" / "admin.py"
OUT = ROOT / "kio" / "_async" / "admin.pyi"
OPS_CLASS, DRIVER_CLASS = "AdminOps", "AsyncAdmin"
sys.path.insert(0, str(ROOT / "tools"))

from _generated import generator_main  # noqa: E402

_Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SystemExit(f"no class {name} in the module")


def _is_overload(fn: _Function) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "overload" for d in fn.decorator_list)


def _public(fn: _Function) -> bool:
    return not fn.name.startswith("_") or fn.name == "__init__"


def _stub(fn: _Function, make_async: bool) -> str:
    """``fn`` with an ``...`` body (``async def`` if asked)."""
    # name, args, decorators, returns (and type_params): fn's; the body: ``...``
    fields: Dict[str, Any] = {f: getattr(fn, f) for f in fn._fields}
    fields["body"] = [ast.Expr(ast.Constant(...))]
    out: _Function = ast.AsyncFunctionDef(**fields) if make_async else type(fn)(**fields)
    return "\n".join("    " + line for line in ast.unparse(ast.fix_missing_locations(out)).splitlines())


def _runs_operation(fn: _Function) -> bool:
    """Whether ``fn`` returns ``self._call(...)``: the async driver's awaitable.
    A method that does not (``metrics``) returns its value in every driver."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "_call"
               for n in ast.walk(fn))


def _stubs(cls: ast.ClassDef, make_async: bool) -> List[str]:
    """A stub per public method; of an overloaded one only its overloads (a
    stub has no implementation signature). With ``make_async``, the methods
    that run an operation become ``async def``."""
    fns = [fn for fn in cls.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(fn)]
    overloaded = {fn.name for fn in fns if _is_overload(fn)}
    awaited = {fn.name for fn in fns if _runs_operation(fn)} if make_async else set()
    return [_stub(fn, fn.name in awaited) for fn in fns if fn.name not in overloaded or _is_overload(fn)]


def _imports(trees: List[ast.Module], used: Set[str]) -> List[str]:
    """The modules' imports of the ``used`` names, merged per module."""
    names: Dict[str, Set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names.setdefault(node.module or "", set()).update(
                    a.name for a in node.names if (a.asname or a.name) in used)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    names.setdefault("", set()).add(a.name)
    lines = [f"import {n}" for n in sorted(names.pop("", set()))]
    lines += [f"from {m} import {', '.join(sorted(ns))}" for m, ns in sorted(names.items()) if ns]
    return lines


def _mixins(ops_tree: ast.Module, ops: ast.ClassDef) -> List[tuple]:
    """(module tree, class) of each base of AdminOps imported from a
    ``kio._shared.admin_*`` module (or telemetry_ops, the calls every client
    has): operations written in mixins of their own."""
    where = {a.asname or a.name: node.module for node in ops_tree.body if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith(_MIXIN_MODULES) for a in node.names}
    found = []
    for base in ops.bases:
        module = where.get(ast.unparse(base))
        if module:
            tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
            found.append((tree, _class(tree, ast.unparse(base))))
    return found


def render() -> str:
    ops_tree, driver_tree = ast.parse(OPS.read_text()), ast.parse(DRIVER.read_text())
    ops, driver = _class(ops_tree, OPS_CLASS), _class(driver_tree, DRIVER_CLASS)
    mixins = _mixins(ops_tree, ops)
    bases = [ast.unparse(b) for b in driver.bases if ast.unparse(b) != OPS_CLASS]
    out = [f"# Generated by tools/gen_async_admin_stub.py from {OPS.relative_to(ROOT).as_posix()} and "
           f"{DRIVER.relative_to(ROOT).as_posix()}:",
           "# do not edit; run the tool after changing either.",
           '"""' + (ast.get_docstring(driver_tree) or "") + '"""',
           ""]
    body = [f"class {DRIVER_CLASS}({', '.join(bases)}):",
            '    """' + (ast.get_docstring(driver, clean=False) or "") + '"""', "",
            "\n\n".join(_stubs(driver, make_async=False) + _stubs(ops, make_async=True)
                        + [stub for _, cls in mixins for stub in _stubs(cls, make_async=True)])]
    used = {n.id for n in ast.walk(ast.parse("\n".join(body))) if isinstance(n, ast.Name)}
    out += _imports([ops_tree, driver_tree] + [tree for tree, _ in mixins], used)
    out += ["", f'__all__ = ["{DRIVER_CLASS}"]', "", ""] + body
    return "\n".join(out) + "\n"


def main(argv: Union[List[str], None] = None) -> int:
    return generator_main(__file__, __doc__, OUT, render, argv)


if __name__ == "__main__":
    sys.exit(main())
