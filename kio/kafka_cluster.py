"""``kio.kafka_cluster`` is :mod:`kio.testing.kafka_cluster` (the test brokers live in kio.testing);
this name is kept for existing imports."""
import sys

from kio.testing import kafka_cluster as _module

sys.modules[__name__] = _module
