"""Public names of a package that are imported on first use (PEP 562).

A package that re-exports the names of its submodules would load them all at
its own import; a client that needs one of them then pays (in import time and
resident memory, issue 27) for every other. With these hooks ``from pkg import
Name`` and ``pkg.Name`` work as before and load only the module that defines
``Name``, the first time it is asked for.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Mapping, Tuple


def lazy_names(namespace: Dict[str, Any], module_of: Mapping[str, str]
               ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module whose globals are
    ``namespace``, for the names of ``module_of`` (name -> the module that
    defines it, or ``"module:attribute"`` for a name that is an alias of
    another). A name, once imported, is kept in ``namespace``: later
    lookups are ordinary attribute reads. Type checkers do not see these
    names: import them under ``if TYPE_CHECKING:`` as well."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = module.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
