"""Issue 23, point 7: while the coordinator is unknown - or keeps being found
and lost - every core waits an exponential backoff (Java's retry.backoff.ms =
100 growing x2 to retry.backoff.max.ms = 1000, +-20% jitter, KIP-580) between
lookups, resets it after a success, logs the repeats rate-limited, and
fails at once on GROUP_AUTHORIZATION_FAILED (Java's GroupAuthorizationException).

Every scenario runs the whole core (consumer with either group protocol,
share consumer, transactional producer) against scripted brokers in
simulated time, for a 12 s outage: FindCoordinator answering
COORDINATOR_NOT_AVAILABLE, a coordinator whose connection is refused right
after it was found, or a coordinator answering NOT_COORDINATOR. Bounds: the
backoff reaches 1 s after ~log2(1000/100) steps, so 12 s cost about 3 + 10
lookups (asserted between 8 and 20); a busy loop costs thousands.
"""
import logging
import random

import pytest

try:
    from test_consumer_core import COORD_CONN, FakeKafka, Sim
    from test_producer_core import Sim as ProducerSim
    from test_producer_core_transactions import TxnKafka
except ImportError:  # pragma: no cover  (tests/ as a package)
    from tests.test_consumer_core import COORD_CONN, FakeKafka, Sim
    from tests.test_producer_core import Sim as ProducerSim
    from tests.test_producer_core_transactions import TxnKafka

from kproto import error_codes as E
from kproto.backoff import ExponentialBackoff, RateLimitedLog, RetryBackoff
from kproto.cluster import TopicPartition as TP
from kproto.consumer.core import ConsumerCore
from kproto.producer.core import ProducerCore
from kproto.share.core import ShareConsumerCore

OUTAGE_MS = 12000
CNA, NOT_COORDINATOR, GROUP_AUTHZ = 15, 16, 30


# == the shared helper =========================================================================

def test_retry_backoff_grows_with_jitter_caps_and_resets():
    b = RetryBackoff(100, 1000, random.Random(4))
    waits = [b.failed() for _ in range(12)]
    for i, w in enumerate(waits):
        term = min(100 * 2 ** i, 1000)
        assert int(0.8 * term) <= w <= min(int(1.2 * term), 1000), (i, w)
    assert waits[-1] <= 1000 and len(set(waits[:4])) == 4
    # jitter: not the bare powers of two
    assert waits[:4] != [100, 200, 400, 800]
    assert b.failures == 12
    b.reset()
    assert b.failures == 0 and 80 <= b.failed() <= 120
    # a found coordinator lost again: at once if it had served, else one more failure
    assert b.lost(served=False) in range(160, 241) and b.failures == 2
    assert b.lost(served=True) == 0 and b.failures == 0
    # the connection's reconnect backoff is the very same class
    from kproto.connection import ReconnectBackoff
    assert ReconnectBackoff is ExponentialBackoff


def test_rate_limited_log_says_how_many_it_left_out(caplog):
    rl = RateLimitedLog(logging.getLogger("kproto.test"), interval_ms=10000)
    with caplog.at_level(logging.DEBUG, logger="kproto.test"):
        logged = [rl.log(t, logging.WARNING, "lookup failed: %s", "X") for t in range(0, 25000, 500)]
    assert logged.count(True) == 3                      # at 0, 10 s and 20 s
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == "lookup failed: X"
    assert warnings[1] == "lookup failed: X (19 more like it in the last 10 s not logged)"
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 50 - 3


# == drivers and fake brokers ==================================================================

def run_for(sim, ms, stop=lambda: False):
    """Advance ``sim`` (a consumer-core Sim) by ``ms`` of simulated time."""
    end = sim.now + ms
    while sim.now < end and not stop():
        if sim.step():
            sim.now += 1
        else:
            d = sim.core.next_deadline(sim.now)
            sim.now = max(sim.now + 1, min(d if d is not None else end, sim.now + 100, end))


class Outage:
    """Wraps the fake broker's FindCoordinator: records when each lookup came,
    and answers COORDINATOR_NOT_AVAILABLE (or ``error``) while ``on``."""

    def __init__(self, broker, answer, clock, error=CNA):
        self.answer, self.clock, self.error = answer, clock, error
        self.on = False
        self.times = []
        broker.on("FindCoordinator", self._find)

    def _find(self, req):
        self.times.append(self.clock())
        if not self.on:
            return self.answer(req)
        key = req.body.get("key") or (req.body.get("coordinator_keys") or [""])[0]
        return {"error_code": self.error, "node_id": -1, "host": "", "port": -1,
                "coordinators": [{"key": key, "node_id": -1, "host": "", "port": -1,
                                  "error_code": self.error}]}

    def between(self, start, end):
        return [t for t in self.times if start <= t < end]


class GroupKafka(FakeKafka):
    """FakeKafka plus the KIP-848 heartbeat (one member gets every partition)
    and the share group heartbeat (an empty assignment: nothing to fetch)."""

    def __init__(self):
        super().__init__({"t": 1})
        self.hb_errors = []                # group heartbeat answers (KIP-848, share)
        self.error_times = []              # when a scripted error was answered
        self.clock = lambda: 0
        self.broker.on("ConsumerGroupHeartbeat", self._cg_heartbeat)
        self.broker.on("ShareGroupHeartbeat", self._share_heartbeat)

    def _error(self, api):
        code = super()._error(api)
        if code:
            self.error_times.append(self.clock())
        return code

    def _hb_error(self):
        self.error_times.append(self.clock())
        return {"error_code": self.hb_errors.pop(0), "member_epoch": -1, "heartbeat_interval_ms": 0}

    def _cg_heartbeat(self, req):
        if self.hb_errors:
            return self._hb_error()
        epoch = max(req.body["member_epoch"], 0) + (req.body["member_epoch"] == 0)
        return {"error_code": 0, "member_id": req.body["member_id"], "member_epoch": epoch,
                "heartbeat_interval_ms": 1000,
                "assignment": {"topic_partitions": [{"topic_id": self.ids["t"], "partitions": [0]}]}}

    def _share_heartbeat(self, req):
        if self.hb_errors:
            return self._hb_error()
        return {"error_code": 0, "member_id": None, "member_epoch": 1, "heartbeat_interval_ms": 5000,
                "assignment": {"topic_partitions": []}}


def consumer(protocol, **conf):
    kafka = GroupKafka()
    kafka.produce("t", 0, 3)
    conf = {"bootstrap.servers": "b1:9092", "group.id": "g", **conf}
    if protocol == "share":
        core = ShareConsumerCore(conf, rng=random.Random(1))
        core.subscribe(["t"], 0)
    else:
        core = ConsumerCore({**conf, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "group.protocol": "consumer" if protocol == "consumer" else "classic"},
                            rng=random.Random(1))
        if protocol == "assign":
            core.assign([TP("t", 0)], 0)
        else:
            core.subscribe(["t"], 0)
    sim = Sim(kafka, core)
    kafka.clock = lambda: sim.now
    outage = Outage(kafka.broker, kafka._FindCoordinator, lambda: sim.now)
    run_for(sim, 3000)                               # joined (or positioned) and healthy
    assert core.coordinator.known
    return kafka, core, sim, outage


def coordinator_logs(caplog):
    return [r for r in caplog.records if r.name == "kproto.consumer.coordinator" and r.levelno >= logging.INFO]


# == the consumer (both group protocols) and the share consumer ==================================

PROTOCOLS = ["classic", "consumer", "share"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_lookups_answered_coordinator_not_available_back_off_with_jitter(protocol, caplog):
    kafka, core, sim, outage = consumer(protocol)
    outage.on = True
    start = sim.now
    with caplog.at_level(logging.DEBUG, logger="kproto"):
        core.coordinator.mark_unknown("test: the coordinator went away", sim.now)
        run_for(sim, OUTAGE_MS)
        end = sim.now
        outage.on = False
        run_for(sim, 1500, stop=lambda: core.coordinator.known)
    lookups = outage.between(start, end)
    assert 8 <= len(lookups) <= 20, lookups
    gaps = [b - a for a, b in zip(lookups, lookups[1:])]
    for i, g in enumerate(gaps):
        term = min(100 * 2 ** i, 1000)
        assert int(0.8 * term) <= g <= min(int(1.2 * term), 1000) + 2, (i, gaps)
    assert gaps[:4] != [100, 200, 400, 800]          # jittered (KIP-580)
    # found again within one backoff step of its return
    assert core.coordinator.known and sim.now - end <= 1000 + 5
    # a dozen failures: one line, not a dozen
    logs = coordinator_logs(caplog)
    assert sum("lookup failed" in r.getMessage() for r in logs) <= 2, [r.getMessage() for r in logs]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_coordinator_refusing_connections_is_looked_up_with_backoff(protocol, caplog):
    """Found, then its connection refused at once (a coordinator broker that
    is down while another broker still names it): before, found/lost
    alternated as fast as FindCoordinator was answered."""
    kafka, core, sim, outage = consumer(protocol)
    start = sim.now
    with caplog.at_level(logging.DEBUG, logger="kproto"):
        core.disconnected(COORD_CONN, sim.now, ConnectionResetError(104, "reset"))
        sim.refuse.add(COORD_CONN)
        run_for(sim, OUTAGE_MS, stop=lambda: len(outage.times) > 200)
        end = sim.now
        sim.refuse.clear()
        run_for(sim, 2000)
    lookups = outage.between(start, end)
    assert 8 <= len(lookups) <= 20, len(lookups)
    assert outage.between(end + 1100, sim.now) == []   # back to normal: no more lookups
    assert core.coordinator.known and core.coordinator.backoff.failures == 0   # reset by an answer
    logs = [r.getMessage() for r in coordinator_logs(caplog)]
    assert sum("coordinator is node" in m for m in logs) == 0    # the same node: not news
    assert sum("marked unknown" in m for m in logs) <= 2, logs


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_not_coordinator_answers_back_off_and_the_backoff_resets_after_success(protocol):
    """The heartbeat (classic: Heartbeat; KIP-848 / share: the group
    heartbeat) answered NOT_COORDINATOR for 12 s - a coordinator that moved
    and the broker named still being loaded - then a healthy coordinator
    again: a single loss after that is looked up at once."""
    kafka, core, sim, outage = consumer(protocol)
    errors = kafka.errors.setdefault("Heartbeat", []) if protocol == "classic" else kafka.hb_errors
    start = sim.now
    errors.extend([NOT_COORDINATOR] * 100000)
    run_for(sim, OUTAGE_MS, stop=lambda: len(outage.times) > 200)
    end = sim.now
    errors.clear()
    lookups = outage.between(start, end)
    assert 8 <= len(lookups) <= 20, len(lookups)
    run_for(sim, 6000)
    assert core.coordinator.known and core.coordinator.backoff.failures == 0
    n = len(outage.times)
    errors.append(NOT_COORDINATOR)                     # one loss after a healthy spell
    run_for(sim, 6000, stop=lambda: len(outage.times) > n)
    assert len(outage.times) == n + 1
    run_for(sim, 50)
    assert core.coordinator.known
    assert outage.times[-1] - kafka.error_times[-1] <= 2      # at once, not after up to 1 s


def test_assign_mode_commits_against_a_refusing_coordinator_back_off():
    kafka, core, sim, outage = consumer("assign")
    core.disconnected(COORD_CONN, sim.now, ConnectionResetError(104, "reset"))
    sim.refuse.add(COORD_CONN)
    start = sim.now
    h = core.commit_sync({TP("t", 0): 1}, sim.now, timeout_ms=OUTAGE_MS + 5000)
    run_for(sim, OUTAGE_MS, stop=lambda: len(outage.times) > 200)
    assert 8 <= len(outage.between(start, sim.now)) <= 20 and not h.done
    sim.refuse.clear()
    run_for(sim, 1500, stop=lambda: h.done)
    assert h.done and h.error is None and kafka.committed[("t", 0)] == 1


# == GROUP_AUTHORIZATION_FAILED: an error for the application, not a retry loop ==================

@pytest.mark.parametrize("protocol", ["classic", "consumer", "assign", "share"])
def test_group_authorization_failed_surfaces_at_once(protocol, caplog):
    kafka = GroupKafka()
    conf = {"bootstrap.servers": "b1:9092", "group.id": "g"}
    if protocol == "share":
        core = ShareConsumerCore(conf)
        core.subscribe(["t"], 0)
    else:
        core = ConsumerCore({**conf, "enable.auto.commit": False,
                             "group.protocol": "consumer" if protocol == "consumer" else "classic"})
        if protocol == "assign":
            core.assign([TP("t", 0)], 0)
        else:
            core.subscribe(["t"], 0)
    sim = Sim(kafka, core)
    outage = Outage(kafka.broker, kafka._FindCoordinator, lambda: sim.now, error=GROUP_AUTHZ)
    outage.on = True
    raised = []

    def app_poll():
        try:
            core.drain()
        except E.GroupAuthorizationFailedError as exc:
            raised.append((sim.now, exc))
        return bool(raised)

    with caplog.at_level(logging.INFO, logger="kproto"):
        run_for(sim, 30000, stop=app_poll)
    assert len(outage.times) == 1
    # raised by the polls right after the answer (the sim idles in 100 ms hops), not retried
    assert raised and raised[0][0] - outage.times[0] <= 150
    if protocol != "assign":
        # the member failed for good (as when JoinGroup or the heartbeat answers
        # the same): no lookups behind the application's back, no log flood
        run_for(sim, 30000)
        assert core.membership.state.name in ("FATAL", "FAILED")
        if protocol == "share":
            with pytest.raises(E.GroupAuthorizationFailedError):
                core.drain()                                # (a failed share member: every poll)
        assert len(outage.times) == 1
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                    and "GROUP_AUTHORIZATION_FAILED" in r.getMessage()]
        assert len(warnings) <= 3, [r.getMessage() for r in warnings]
    else:
        # assign mode: the committed offsets are fetched again, one lookup a
        # second at most, each failure raised by a poll, one WARNING per 10 s
        raised.clear()
        run_for(sim, 30000, stop=lambda: app_poll() and False)
        assert 20 <= len(outage.times) <= 40 and raised
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) <= 8, [r.getMessage() for r in warnings]
    if protocol in ("classic", "assign"):
        # a commit fails with it too (Java: commitSync throws it) at its lookup,
        # which waits at most the backoff (1 s), not its 60 s timeout
        n = len(outage.times)
        h = core.commit_sync({TP("t", 0): 1}, sim.now)
        run_for(sim, 1100, stop=lambda: h.done)
        assert h.done and isinstance(h.error, E.GroupAuthorizationFailedError)
        assert len(outage.times) == n + 1


# == the transactional producer =================================================================

def txn_producer():
    kafka = TxnKafka()
    core = ProducerCore({"bootstrap.servers": "boot:9092", "transactional.id": "tx-1", "linger.ms": 0},
                        rng=random.Random(7))
    sim = ProducerSim(core, kafka)
    finds = Outage(kafka.brokers[1], kafka._find, lambda: sim.now)
    kafka.brokers[2].on("FindCoordinator", finds._find)
    return core, kafka, sim, finds


def test_transaction_coordinator_lookup_backs_off_while_not_available():
    core, kafka, sim, finds = txn_producer()
    finds.on = True
    res = core.init_transactions()
    sim.run_until(lambda: sim.now >= OUTAGE_MS)
    assert 8 <= len(finds.times) <= 20, len(finds.times)
    gaps = [b - a for a, b in zip(finds.times, finds.times[1:])]
    assert all(80 <= g <= 1000 + 2 for g in gaps) and gaps[:4] != [100, 200, 400, 800]
    finds.on = False
    back = sim.now
    sim.run_until(lambda: res.done, max_ms=2000)
    assert res.error is None and sim.now - back <= 1000 + 5
    assert core.transactions.coordinator_backoff.failures == 0


def test_a_transaction_coordinator_refusing_connections_is_looked_up_again_with_backoff():
    """Before: the producer waited for the refusing node forever (no new
    lookup); now it looks again, backing off, and finds the moved coordinator."""
    core, kafka, sim, finds = txn_producer()
    sim.refuse.add(2)
    res = core.init_transactions()
    sim.run_until(lambda: sim.now >= OUTAGE_MS or len(finds.times) > 200)
    assert 8 <= len(finds.times) <= 20 and not res.done
    # the coordinator moved to node 1
    moved = lambda req: {"error_code": 0, "node_id": 1, "host": "b1", "port": 9092, "coordinators": [  # noqa: E731
        {"key": "tx-1", "node_id": 1, "host": "b1", "port": 9092, "error_code": 0}]}
    finds.answer = moved
    sim.run_until(lambda: res.done, max_ms=2000)
    assert res.error is None


def test_transaction_not_coordinator_answers_back_off():
    core, kafka, sim, finds = txn_producer()
    kafka.txn_errors["InitProducerId"] = [NOT_COORDINATOR] * 100000
    res = core.init_transactions()
    sim.run_until(lambda: sim.now >= OUTAGE_MS or len(finds.times) > 200)
    assert 8 <= len(finds.times) <= 20 and not res.done
    kafka.txn_errors["InitProducerId"] = []
    sim.run_until(lambda: res.done, max_ms=2000)
    assert res.error is None and core.transactions.coordinator_backoff.failures == 0
