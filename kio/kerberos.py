"""``kio.kerberos`` is :mod:`kio.testing.kerberos` (the test brokers live in kio.testing);
this name is kept for existing imports."""
import sys

from kio.testing import kerberos as _module

sys.modules[__name__] = _module
