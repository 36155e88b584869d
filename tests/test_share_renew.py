"""AcknowledgeType.RENEW (KIP-1222, Kafka 4.2+): a share consumer in explicit
mode extends the acquisition lock of a record it is still processing, as
Java's KafkaShareConsumer does. Against Apache Kafka 4.4 (Tansu has no share
groups). The group needs ``share.renew.acknowledge.enable=true``."""
import time

import pytest

from kio import AcknowledgeType, ShareConsumer

try:
    from test_share_consumer import produce, share_group, share_lag
except ImportError:  # pragma: no cover
    from tests.test_share_consumer import produce, share_group, share_lag

pytestmark = pytest.mark.parametrize("broker", ["kafka"], indirect=True)

LOCK_MS = 6000                      # kio.testing's Kafka allows 5000 (Kafka's default floor: 15000)
RENEW_S = LOCK_MS / 1000 / 3        # renewed three times a lock, as the 5 s renewals of a 15 s lock were


def _explicit(bootstrap, group, **kw):
    return ShareConsumer(bootstrap_servers=bootstrap, group_id=group,
                         share_acknowledgement_mode="explicit", **kw)


def test_renew_holds_records_past_the_lock_while_another_member_polls(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap, share_record_lock_duration_ms=LOCK_MS,
                        share_renew_acknowledge_enable="true")
    produce(bootstrap, topic, 20, chunk=20)
    done = {}
    with _explicit(bootstrap, group) as slow, \
            ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as other:
        slow.subscribe([topic])
        held = []
        end = time.monotonic() + 30
        while not held and time.monotonic() < end:
            held = slow.poll(0.5)
        assert held, "no records"
        offsets = sorted(r.offset for r in held)
        other.subscribe([topic])
        t0 = time.monotonic()
        renewals = 0
        stolen = []
        # Hold them for 1.7 locks, renewing every third of one; the other member polls all along.
        while time.monotonic() - t0 < LOCK_MS / 1000 * 1.7:
            for r in held:
                slow.acknowledge(r, AcknowledgeType.RENEW)
            renewals += 1
            back = []
            wait_until = time.monotonic() + RENEW_S
            while time.monotonic() < wait_until:
                if not back:                    # once back, they are the application's again
                    back = slow.poll(0.2)
                stolen += other.poll(0.2)
            assert sorted(r.offset for r in back) == offsets, (renewals, back)
            assert all(r.delivery_count == 1 for r in back)       # renewed, never redelivered
            held = back
        assert stolen == [], [r.offset for r in stolen]
        for r in held:
            slow.acknowledge(r, AcknowledgeType.ACCEPT)
        done = slow.commit_sync(10)
    assert renewals >= 4
    assert all(err is None for err in done.values()), done
    assert share_lag(bootstrap, group, topic) == {0: 0}


def test_renew_needs_explicit_mode(bootstrap, make_topic):
    topic = make_topic(1)
    group = share_group(bootstrap)
    produce(bootstrap, topic, 1)
    with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.subscribe([topic])
        records = []
        end = time.monotonic() + 30
        while not records and time.monotonic() < end:
            records = c.poll(0.5)
        with pytest.raises(Exception, match="explicit"):
            c.acknowledge(records[0], AcknowledgeType.RENEW)
