"""``kio.broker`` is :mod:`kio.testing.broker` (the test brokers live in kio.testing);
this name is kept for existing imports."""
import sys

from kio.testing import broker as _module

sys.modules[__name__] = _module
