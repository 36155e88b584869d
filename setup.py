"""Build script: compiles the Cython modules of the sans-IO core.

Every hot path of kproto (wire primitives, message codecs, record batches) is a
Cython extension. Building needs a C compiler; when there is none we stop with a
message that says so instead of a wall of distutils output.
"""
import os
import shutil
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Every .pyx file under kproto/ becomes an extension named after its path.
EXTENSION_SOURCES = [
    "kproto/_wire.pyx",
    "kproto/_codec.pyx",
    "kproto/_framing.pyx",
    "kproto/records/_batch.pyx",
    "kproto/producer/_murmur2.pyx",
]


def _compiler_available():
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


class BuildExtWithClearErrors(build_ext):
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

    return cythonize(
        [s for s in EXTENSION_SOURCES if os.path.exists(s)],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExtWithClearErrors})
