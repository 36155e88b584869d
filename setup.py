"""Build script: compiles the Cython modules of the sans-IO core.

Every hot path of kproto (wire primitives, message codecs, framing, record
batches, murmur2) is a typed Cython extension (a ``.pyx``, found by walking
kproto/). A few pure-Python modules on the per-record path are also compiled
by Cython as they are (``COMPILED_PY_MODULES``): the ``.py`` stays the source
of truth (type checkers, readers and an uncompiled checkout use it), and the
extension built next to it is what ``import`` picks (an extension module comes
before a ``.py`` of the same name in the import system's search order). Only
modules whose compilation measurably cut the CPU per record are listed: see
docs/benchmarks.md (``bench/send_cost.py``). Line coverage
(coverage.py) cannot see inside an extension: for a coverage run, build with
``KPROTO_COMPILE_PY=0`` and delete those modules' ``.so`` files, so the very
same source runs interpreted (tests/test_build.py checks what was compiled).

Building needs a C compiler; when there is none we stop with a message that
says so instead of a wall of distutils output.
"""
import os
import shutil
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))

# Pure-Python modules compiled by Cython as they are (see the docstring). An
# entry that names no file is an error, not a silent skip: a renamed module
# would otherwise quietly fall back to the interpreter.
COMPILED_PY_MODULES = [
    "kproto/connection.py",
    "kproto/client.py",
    "kproto/consumer/fetch_plan.py",
    "kproto/consumer/fetch_session.py",
    "kproto/consumer/fetcher.py",
    "kproto/consumer/positions.py",
    "kproto/producer/accumulator.py",
    "kproto/producer/idempotence.py",
    "kproto/producer/outcome.py",
    "kproto/producer/sender.py",
]


def _pyx_sources():
    """Every .pyx under kproto/, as a path relative to this file."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "kproto")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".pyx"):
                found.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    if not found:
        sys.exit("kproto-kio: no .pyx file found under kproto/: is this a complete source tree?")
    return found


def _listed_py_sources():
    missing = [p for p in COMPILED_PY_MODULES if not os.path.isfile(os.path.join(ROOT, p))]
    if missing:
        sys.exit(f"kproto-kio: setup.py's COMPILED_PY_MODULES names files that do not exist: "
                 f"{', '.join(missing)} (renamed or removed? fix the list)")
    return list(COMPILED_PY_MODULES)


def _compiler_available():
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


class BuildExtWithClearErrors(build_ext):
    def finalize_options(self):
        # Compile the extensions in parallel, one per core, unless told
        # otherwise (--parallel/-j): an install then takes half the time on two cores.
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self):
        if not _compiler_available():
            sys.exit(
                "kproto-kio: no C compiler found. kproto's Cython modules must be "
                "compiled: install gcc (Debian: apt-get install build-essential "
                "python3-dev) or set CC, then retry the install."
            )
        super().run()


def _extensions():
    from Cython.Build import cythonize

    listed = _listed_py_sources()       # checked first: a wrong list fails before any compiling
    typed = cythonize(
        _pyx_sources(),
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
    )
    # Plain Python semantics for the compiled .py modules: bounds-checked,
    # negative indexes, Python division; binding=True keeps their functions
    # introspectable (inspect.signature, __wrapped__-style decorators).
    plain = cythonize(
        listed,
        compiler_directives={"language_level": "3", "binding": True, "embedsignature": True},
    ) if COMPILED_PY_MODULES and os.environ.get("KPROTO_COMPILE_PY", "1") != "0" else []
    return typed + plain


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExtWithClearErrors})
