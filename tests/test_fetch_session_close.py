"""ConsumerCore's close() and its fetch sessions, without a network: the
final epoch (-1) goes to every broker holding a session and its answer is
awaited until the close deadline, as Java's consumer does (AbstractFetch's
close sends the final-epoch requests and polls until they are answered or
the close timer runs out)."""
try:
    from scripted_broker import NO_RESPONSE
    from test_consumer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.scripted_broker import NO_RESPONSE
    from tests.test_consumer_core import FakeKafka, make

TP = __import__("kproto.cluster", fromlist=["TopicPartition"]).TopicPartition
SESSION_ID = 7


class SessionKafka(FakeKafka):
    """FakeKafka that keeps a fetch session (id 7) and records the
    final-epoch requests (held unanswered while ``hold_final``)."""

    def __init__(self):
        super().__init__()
        self.finals = []            # (session id, time) of each final-epoch request
        self.hold_final = False
        self.now = lambda: 0

    def _Fetch(self, req):
        if req.body["session_epoch"] == -1:
            self.finals.append((req.body["session_id"], self.now()))
            if self.hold_final:
                return NO_RESPONSE
            return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []}
        body = super()._Fetch(req)
        body["session_id"] = SESSION_ID
        return body


def _reading(**conf):
    kafka = SessionKafka()
    kafka, core, sim = make(kafka, auto_offset_reset="earliest", **conf)
    kafka.now = lambda: sim.now
    kafka.produce("t", 0, 3)
    core.assign([TP("t", 0), TP("t", 1)], sim.now)
    assert len(sim.records(3)) == 3
    session = core.fetcher.sessions[1]
    sim.run(lambda: session.state == "open")
    return kafka, core, sim


def test_close_sends_the_final_epoch_and_waits_for_its_answer():
    kafka, core, sim = _reading()
    core.begin_close(sim.now, 5000)
    sim.run(lambda: core.close_done)
    assert [sid for sid, _ in kafka.finals] == [SESSION_ID]
    m = core.metrics()
    assert m["fetch_sessions_closed_sent"] == 1 and m["fetch_sessions_closed_answered"] == 1
    assert core.fetcher.sessions == {}


def test_close_waits_for_an_unanswered_final_epoch_until_its_deadline():
    kafka, core, sim = _reading()
    kafka.hold_final = True
    start = sim.now
    core.begin_close(start, 3000)
    sim.run(lambda: kafka.finals)
    sim.run(lambda: sim.now - start >= 2900)
    assert not core.close_done                     # the answer is still awaited
    sim.run(lambda: core.close_done)
    assert sim.now - start >= 3000
    m = core.metrics()
    assert m["fetch_sessions_closed_sent"] == 1 and m["fetch_sessions_closed_answered"] == 0


def test_close_without_a_session_sends_no_final_epoch():
    kafka, core, sim = make(FakeKafka(), auto_offset_reset="earliest")
    kafka.produce("t", 0, 2)
    core.assign([TP("t", 0)], sim.now)
    assert len(sim.records(2)) == 2                # FakeKafka answers session id 0: no session
    core.begin_close(sim.now, 3000)
    sim.run(lambda: core.close_done)
    assert core.metrics()["fetch_sessions_closed_sent"] == 0
    assert all(r.body["session_epoch"] != -1 for r in kafka.broker.requests_of("Fetch"))
