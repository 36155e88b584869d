"""How often a quiet producer's core makes its driver wake up (issue 27).

At a low rate each batch cost the driver three rounds: the send() that opens
it wakes the network side (to set its linger timer), the timer drains it, the
answer completes it. While a Produce is in flight its answer brings a round
anyway: the sender promises a round by ``sent + linger.ms`` (the answer's, or
a timer's), so a batch opened meanwhile needs no wake-up of its own. The
promise is made only when it is unlikely to cost a timer round of its own.

The driver here is simulated (fake clock, scripted broker): it runs a round
when the core asks for one (``accumulator.wakeup``), when the core's deadline
has come, and when an answer arrives ``rtt`` ms after its request - as the
kio drivers do. Counts, not timings: nothing depends on the machine's load.
"""
try:
    from test_producer_core import FakeKafka, make
except ImportError:  # pragma: no cover
    from tests.test_producer_core import FakeKafka, make

TICK = 0.25          # ms of fake time per step of the simulated driver


def _run_paced(rtt_ms, records=2000, every_ms=1.0, linger_ms=5, deadline_only=False):
    """Send ``records`` one every ``every_ms`` to one partition, the broker
    answering each Produce ``rtt_ms`` after it was written. Returns
    (wake-ups asked by send(), timer rounds, answer rounds, batches, the
    longest time a batch waited in the accumulator). ``deadline_only``: a
    wake-up asked by send() runs no round, the driver only looks at the
    core's deadline again (as kio's drivers do: SocketLoop.wake(round=False),
    Engine.kick(round=False))."""
    core, kafka, sim = make(FakeKafka(), linger_ms=linger_ms)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc, broker = core.accumulator, kafka.brokers[1]
    acc.wakeup = False                   # taken, as a driver's send() takes it
    waited = []
    drain = acc.drain

    def noting_drain(cluster, nodes, now, can_drain=None):
        out = drain(cluster, nodes, now, can_drain)
        waited.extend(now - b.created_ms for bs in out.values() for b in bs)
        return out
    acc.drain = noting_drain
    kafka.hold_replies = True
    answers = []                         # fake times the held answers arrive at, in order
    seen_requests = len(kafka.produce_requests)
    wakeups = timer_rounds = answer_rounds = 0
    sent = 0
    next_send = sim.now
    while sent < records or core.pending:
        if sent < records and sim.now >= next_send:
            sim.send(b"v%d" % sent, partition=0)
            sent += 1
            next_send += every_ms
            if acc.wakeup:
                acc.wakeup = False
                wakeups += 1
                if not deadline_only:
                    sim.step()
        if answers and answers[0] <= sim.now:
            answers.pop(0)
            core.received(1, broker.held.pop(0), sim.now)
            answer_rounds += 1
            sim.step()
        deadline = core.next_deadline(sim.now)
        if deadline is not None and deadline <= sim.now:
            timer_rounds += 1
            sim.step()
        while len(kafka.produce_requests) > seen_requests:
            seen_requests += 1
            answers.append(sim.now + rtt_ms)
        sim.now += TICK
        assert sim.now < 60000, "the records were never all acknowledged"
    assert core.metrics()["records_sent"] == records + 1
    return wakeups, timer_rounds, answer_rounds, len(waited), max(waited)


def test_batches_opened_while_an_answer_is_awaited_do_not_wake_the_driver():
    # 1 record/ms, linger.ms 5, answers in 2 ms: nearly every batch opens while
    # the previous one's Produce is in flight. Each used to wake the driver
    # (one wake-up per batch); the answer's round now sets its timer.
    wakeups, timer_rounds, answer_rounds, batches, longest = _run_paced(rtt_ms=2)
    assert batches > 200                               # ~6 records a batch: the case at hand
    assert wakeups <= batches / 10, (wakeups, batches)
    # two rounds a batch (its timer, its answer), not three; generous bound
    assert timer_rounds + answer_rounds + wakeups <= 2.2 * batches, (timer_rounds, answer_rounds, wakeups, batches)
    # and no batch waits longer for it: linger.ms plus the driver's step
    assert longest <= 5 + TICK, longest


def test_a_slow_broker_still_gets_batches_out_within_linger():
    # Answers slower than linger.ms while records keep coming: the promised
    # round is a timer round, taken by the batch opened meanwhile (instead of
    # its wake-up); every batch still leaves within linger.ms.
    wakeups, timer_rounds, answer_rounds, batches, longest = _run_paced(rtt_ms=8)
    assert batches > 200
    assert longest <= 5 + TICK, longest
    assert timer_rounds + answer_rounds + wakeups <= 3.2 * batches, (timer_rounds, answer_rounds, wakeups, batches)


def test_no_round_is_promised_when_neither_answers_nor_records_come_within_linger():
    # A record every 20 ms, answers in 8 ms: a promised round would fire with
    # nothing to do. None is promised (after the first answer shows the round
    # trip), so there is one timer round per batch - its linger - and no more.
    wakeups, timer_rounds, answer_rounds, batches, longest = _run_paced(rtt_ms=8, records=100, every_ms=20)
    assert batches == 100
    assert timer_rounds <= batches + 2, (timer_rounds, batches)
    assert longest <= 5 + TICK, longest


def test_at_linger_zero_no_round_is_promised():
    # linger.ms 0: every batch is due at once, the driver is woken for it.
    wakeups, timer_rounds, answer_rounds, batches, longest = _run_paced(rtt_ms=2, records=300, linger_ms=0)
    assert longest <= TICK, longest
    assert wakeups >= batches * 0.9, (wakeups, batches)


def test_a_wake_up_for_a_new_batch_needs_no_round_only_the_deadline():
    # Answers in 0.5 ms, a record every ms: each answer comes before the next
    # record, so no round is promised and each new batch wakes the driver.
    # That wake-up was a round of its own (3 a batch: the wake-up, the linger
    # timer, the answer); the core's deadline now holds the new batch's due
    # time, so the driver only sleeps less: 2 rounds a batch.
    wakeups, timer_rounds, answer_rounds, batches, longest = _run_paced(rtt_ms=0.5, deadline_only=True)
    assert batches > 200
    assert wakeups >= batches * 0.9, (wakeups, batches)      # the case at hand
    assert timer_rounds + answer_rounds <= 2.05 * batches, (timer_rounds, answer_rounds, batches)
    # and no batch waits longer for it: sent within linger.ms (plus the driver's step)
    assert longest <= 5 + TICK, longest


def test_a_batch_filled_while_a_wake_up_is_pending_is_due_at_once():
    # A wake-up not yet taken (the driver reads it after the append) and a
    # batch that fills up meanwhile: the core's deadline must say now, since
    # a driver woken without a round only reads that deadline.
    core, kafka, sim = make(FakeKafka(), linger_ms=1000, batch_size=300)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc = core.accumulator
    acc.wakeup = False
    core.send("t", b"x" * 100, partition=0, now=sim.now)      # opens a batch due in 1000 ms
    assert acc.wakeup and core.next_deadline(sim.now) == sim.now + 1000
    dq = acc.queues[("t", 0)]
    while len(dq) < 2:                                        # the wake-up still pending
        core.send("t", b"x" * 100, partition=0, now=sim.now)
    assert dq[0].full
    assert core.next_deadline(sim.now) <= sim.now


def test_only_a_transactional_core_asks_its_driver_for_a_round_for_a_new_batch():
    # The driver obeys ProducerCore.new_batch_needs_round when an append sets
    # accumulator.wakeup: a plain producer's new batch only moves the core's
    # deadline (its linger), a transaction's new partition must have its
    # AddPartitionsToTxn sent by the very next round, long before linger.ms.
    from test_producer_core_transactions import txn_producer

    core, kafka, sim = make(FakeKafka(), linger_ms=1000)
    sim.send(b"warm")
    sim.run_until(lambda: not core.pending)
    acc = core.accumulator
    acc.wakeup = False
    core.send("t", b"x", partition=0, now=sim.now)
    assert acc.wakeup and not core.new_batch_needs_round
    assert core.next_deadline(sim.now) == sim.now + 1000          # what the driver re-reads instead

    core, kafka, sim = txn_producer(linger_ms=1000)
    core.begin_transaction()
    acc = core.accumulator
    acc.wakeup = False
    sim.send(b"x", partition=0)                                    # (after the topic's metadata)
    assert acc.wakeup and core.new_batch_needs_round
    assert core.next_deadline(sim.now) > sim.now                   # the deadline alone would wait
    core.poll(sim.now)                                             # the round it asks for
    coordinator = 2
    assert coordinator in core.nodes_with_output(), "the round did not send AddPartitionsToTxn"
    sim.run_until(lambda: len(kafka.txn_log) > 2, max_ms=10)
    assert kafka.txn_log[2] == ("AddPartitionsToTxn", [("t", 0)])
