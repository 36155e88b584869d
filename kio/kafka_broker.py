"""``kio.kafka_broker`` is :mod:`kio.testing.kafka_broker` (the test brokers live in kio.testing);
this name is kept for existing imports."""
import sys

from kio.testing import kafka_broker as _module

sys.modules[__name__] = _module
