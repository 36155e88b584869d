"""A quiet producer's batch, in the core alone, without a broker or a driver
(issue 27, branch qprod4): deterministic instructions per batch under
callgrind, where ``quiet_producer.py --callgrind`` moves with how many
records the machine's load puts in a batch and how many rounds it runs.

One batch of one record at a time, the way the threading producer's network
thread handles it at a low rate: ``send()`` opens the batch; the linger
timer's round (``ProducerCore.poll`` - drain, the Produce request,
``NetworkClient.send``), its bytes taken (``output``/``sent``); the answer
fed back (``received``, read and completed); the answer's round; the
completions (``events``, ``complete_results``) and ``next_deadline`` after
each round, as the driver asks. Idempotent, acks=all, linger.ms 5 (the
defaults), Produce v13 (topics by id). The answer's bytes are made once by
the generic encoder and only their correlation id changes: the broker's own
work is not counted. Run at two N and divide the difference::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=a.out python bench/quiet_batch_cost.py 200
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=b.out python bench/quiet_batch_cost.py 1200
    # (totals of b.out - a.out) / 1000 = instructions per batch

``send()`` (the application thread's) is in the count: the same in both
trees of a comparison unless the append path changed.
"""
from __future__ import annotations

import os
import struct
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from kproto import messages  # noqa: E402
from kproto.producer.core import complete_results  # noqa: E402
from test_producer_core import FakeKafka, make  # noqa: E402 - the scripted broker of the core's tests

VALUE = b"x" * 100


def main(n: int) -> None:
    kafka = FakeKafka()
    kafka.topic_ids["t"] = uuid.UUID(int=0x5EED)       # Metadata gives the topic's id: Produce v13
    core, kafka, sim = make(kafka)
    sim.send(b"first", partition=0)                 # metadata, producer id, the connection
    sim.run_until(lambda: core.metrics()["records_sent"] == 1)
    node = 1
    now = sim.now + 10.0
    version = core.client.connections[node].versions.get("Produce")
    assert version == 13, version                   # topics by id, as Kafka 4 answers
    topic_id = core.cluster.topic_ids["t"]
    answer = messages.encode_response("Produce", version, 0, {
        "responses": [{"topic_id": topic_id, "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 1, "log_append_time_ms": -1, "log_start_offset": 0}]}],
        "throttle_time_ms": 0})
    head, tail = answer[:4], answer[8:]
    for _ in range(n):
        core.send("t", VALUE, partition=0, now=now)
        now += 5.0                                                  # linger.ms: the timer's round
        core.poll(now)
        complete_results(core.events())
        core.next_deadline(now)
        data = bytes(core.output(node))
        core.sent(node, len(data), now)
        cid = struct.unpack_from(">i", data, 8)[0]                 # size, api key, version, correlation id
        now += 1.0                                                  # the answer's round
        core.received(node, head + struct.pack(">i", cid) + tail, now)
        core.poll(now)
        complete_results(core.events())
        core.next_deadline(now)
        now += 10.0
    assert core.metrics()["records_sent"] == n + 1, core.metrics()["records_sent"]
    assert not core.sender.in_flight


if __name__ == "__main__":
    main(int(sys.argv[1]))
