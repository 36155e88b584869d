"""The network client's rounds when nothing is due (issue 27): ``poll`` and
``next_deadline`` walk the connections (request and setup timeouts, idle
closing) only once the earliest connection deadline has come, which
``next_deadline`` keeps between walks; every request queued lowers it, and
connects, connection events and throttles make the next round walk again.
No network: the scripted brokers of test_producer_core, fake time."""
try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

from call_counter import patchable_network_clients
from kproto.client import Close, NetworkClient
from kproto.connection import Connection


class _CountingConnection(Connection):
    """Counts its check_timeouts calls (the walk of poll) once ``walks`` is
    set: compiled, Connection is an extension type whose instances refuse a
    method put on them, so the client makes these (``_CountingClient``)."""
    walks = None

    def check_timeouts(self, now):
        if self.walks is not None:
            self.walks.append(self.node_id)
        return super().check_timeouts(now)


class _CountingClient(NetworkClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connection_class = _CountingConnection


def _counting_walks(client):
    """Count check_timeouts calls on each connection (the walk of poll)."""
    calls = []
    for c in client.connections.values():
        assert type(c) is _CountingConnection, type(c)   # made under _settled(monkeypatch)
        c.walks = calls
    return calls


def _settled(monkeypatch=None):
    if monkeypatch is not None:     # the client makes _CountingConnection
        patchable_network_clients(monkeypatch, _CountingClient)
    core, kafka, sim = make(FakeKafka(), linger_ms=5)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    return core, kafka, sim


def test_quiet_rounds_do_not_walk_the_connections(monkeypatch):
    core, kafka, sim = _settled(monkeypatch)
    client = core.client
    walks = _counting_walks(client)
    core.next_deadline(sim.now)              # the driver's end of round: the earliest deadline kept
    for _ in range(20):                      # timer and wake-up rounds with nothing due
        sim.now += 1
        core.poll(sim.now)
        core.next_deadline(sim.now)
    assert walks == []
    # Records still go out and are answered: the rounds that matter are the same.
    h = sim.send(b"v", partition=0)
    sim.run_until(lambda: h.done)
    assert h.error is None and kafka.values()[-1] == b"v"


def test_a_request_queued_between_walks_still_times_out_on_time():
    core, kafka, sim = _settled()
    client = core.client
    core.next_deadline(sim.now)              # kept: the idle deadline, minutes away
    kafka.hold = True                        # the broker swallows Produce requests
    h = sim.send(b"lost", partition=0)
    sim.run_until(lambda: kafka.produce_requests and client.in_flight(1))
    sent = sim.now
    timeout = core.config.request_timeout_ms
    assert core.next_deadline(sim.now) <= sent + timeout   # the request's timeout, not the idle deadline
    sim.run_until(lambda: not client.in_flight(1), max_ms=timeout + 1000)
    assert sim.now <= sent + timeout + 1     # failed at its deadline, not minutes later
    # the timeout closed the connection (Java's behaviour), the batch waits for a retry
    assert any(isinstance(a, Close) and a.node == 1 for a in sim.log)
    assert "no response" in client.connections[1].last_close_reason
    assert not h.done


def test_a_throttle_makes_the_next_round_walk_again():
    kafka = FakeKafka()
    orig = kafka.brokers[1].handlers["Produce"]

    def throttled(req):
        reply = orig(req)
        reply["throttle_time_ms"] = 300
        return reply
    core, kafka, sim = make(kafka, linger_ms=0)
    first = sim.send(b"a")
    sim.run_until(lambda: first.done)
    kafka.brokers[1].on("Produce", throttled)
    second = sim.send(b"b")
    sim.run_until(lambda: second.done)
    answered = sim.now
    # The throttle's end is the next deadline, though nothing else is due.
    assert core.next_deadline(sim.now) <= answered + 300
    third = sim.send(b"c")
    sim.run_until(lambda: third.done)
    assert third.error is None and sim.now >= answered + 300
