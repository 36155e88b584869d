"""Rebalance times of kio consumers: the classic protocol (cooperative-sticky)
against the KIP-848 consumer protocol (``group.protocol=consumer``).

For each protocol and round, on a fresh topic of 6 partitions and a fresh group:

* join: one member subscribes; seconds until it owns all 6;
* scale out: a second member subscribes; seconds until each owns 3, and how
  many partitions the first one gave up on the way (3 is the least possible);
* scale in: the second member closes; seconds until the first owns all 6.

Both members are polled from this thread every 50 ms. The broker is the
suite's Apache Kafka (started here, or ``--bootstrap`` for a running one),
which tells consumer-protocol members to heartbeat every 500 ms; the classic
members are given the same heartbeat.interval.ms (and session.timeout.ms 10 s).

    python bench/bench_rebalance.py [--rounds 3] [--bootstrap host:port]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import create_topic, local_broker  # noqa: E402

PROTOCOLS = {
    "classic (cooperative-sticky)": dict(partition_assignment_strategy="cooperative-sticky",
                                         session_timeout_ms=10000, heartbeat_interval_ms=500),
    "consumer (KIP-848)": dict(group_protocol="consumer"),
}


def until(consumers, cond, timeout=60.0):
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the group did not settle in time")
        for c in consumers:
            c.poll(0.05)
    return time.perf_counter() - t0


def ready_topic(bootstrap, partitions):
    """A new topic, once the broker's metadata shows a leader for every
    partition (Kafka answers CreateTopics a moment before: a consumer-protocol
    member joining in between is first assigned nothing, and the bench would
    time the broker's metadata propagation instead of the rebalance)."""
    from kio.blocking import BlockingClient
    topic = create_topic(bootstrap, partitions)
    with BlockingClient(bootstrap) as c:
        end = time.monotonic() + 15
        while time.monotonic() < end:
            leaders = c.leaders(topic)
            if len(leaders) == partitions and all(n >= 0 for n in leaders.values()):
                break
            time.sleep(0.05)
    time.sleep(0.5)
    return topic


def one_round(bootstrap, settings):
    from kio import Consumer
    topic = ready_topic(bootstrap, 6)
    group = "bench-rebalance-" + topic
    revoked = []
    a = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **settings)
    b = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **settings)
    try:
        a.subscribe([topic], on_revoke=revoked.extend)
        join = until([a], lambda: len(a.assignment()) == 6)
        b.subscribe([topic])
        out = until([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3)
        given_up = len(revoked)
        b.close()
        back = until([a], lambda: len(a.assignment()) == 6)
        return join, out, given_up, back
    finally:
        a.close()
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bootstrap", help="a running Kafka 4 broker (default: start one)")
    args = ap.parse_args()
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = local_broker("kafka")
        bootstrap = broker.bootstrap_servers
    try:
        print(f"{'protocol':30s} {'join s':>8s} {'scale-out s':>12s} {'revoked':>8s} {'scale-in s':>11s}"
              f"   (median of {args.rounds})")
        for name, settings in PROTOCOLS.items():
            runs = [one_round(bootstrap, settings) for _ in range(args.rounds)]
            med = [statistics.median(r[i] for r in runs) for i in range(4)]
            print(f"{name:30s} {med[0]:8.2f} {med[1]:12.2f} {med[2]:8.0f} {med[3]:11.2f}")
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
