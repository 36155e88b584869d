"""CRC-32C (Castagnoli) for record batches, from the ``crc32c`` package's extension alone.

``import crc32c`` runs the package's ``__init__``, which imports
``importlib.metadata`` (for ``__version__``) and its command-line module
(``argparse``): about 7 MB of resident memory in every process that imports
kproto, for one function. The function lives in the package's C extension
``crc32c._crc32c``, which depends on nothing in the package, so we load that
extension file directly. If the package is laid out otherwise (a zipped or
vendored install, a future release that moves the file), we fall back to the
ordinary import: slower to start, same checksum.
"""
from __future__ import annotations

import sys
from typing import Callable

_EXTENSION = "crc32c._crc32c"


def _load_extension() -> Callable[..., int]:
    """The ``crc32c`` function of ``crc32c._crc32c``, without executing the package's ``__init__``."""
    loaded = sys.modules.get(_EXTENSION)
    if loaded is not None:
        return loaded.crc32c
    import importlib.machinery
    import importlib.util
    import os

    spec = importlib.util.find_spec("crc32c")   # finds the package; does not import it
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise ImportError("crc32c is not an installed package directory")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(locations[0], "_crc32c" + suffix)
        if os.path.isfile(path):
            break
    else:
        raise ImportError(f"no _crc32c extension in {locations[0]}")
    loader = importlib.machinery.ExtensionFileLoader(_EXTENSION, path)
    module_spec = importlib.util.spec_from_file_location(_EXTENSION, path, loader=loader)
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module.crc32c


try:
    crc32c = _load_extension()
except ImportError:
    from crc32c import crc32c   # noqa: F811 - the documented import, with its start-up cost
