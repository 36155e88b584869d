"""``kio.secured_kafka`` is :mod:`kio.testing.secured_kafka` (the test brokers live in kio.testing);
this name is kept for existing imports."""
import sys

from kio.testing import secured_kafka as _module

sys.modules[__name__] = _module
