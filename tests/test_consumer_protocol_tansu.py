"""``group.protocol=consumer`` against a broker without KIP-848: Tansu serves
no ConsumerGroupHeartbeat (it does not list the API in ApiVersions), so the
consumer fails at once with an error that names the way out - not a silent
retry loop, and not a hang."""
import time

import pytest

from kio import Consumer
from kproto.errors import UnsupportedVersionError

pytestmark = pytest.mark.parametrize("broker", ["tansu"], indirect=True)


def test_the_consumer_protocol_against_a_broker_without_it_fails_clearly(bootstrap, make_topic):
    topic = make_topic(1)
    with Consumer(bootstrap_servers=bootstrap, group_id="g-no-kip848", group_protocol="consumer") as c:
        c.subscribe([topic])
        with pytest.raises(UnsupportedVersionError, match="use group.protocol=classic"):
            end = time.monotonic() + 20
            while time.monotonic() < end:
                c.poll(0.2)
