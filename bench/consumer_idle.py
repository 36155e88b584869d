"""What an idle consumer costs: assigned (or a group member), receiving nothing.

A kio threading consumer takes a fresh, empty one-partition topic - by
``assign`` (no group), or with ``--group`` by ``subscribe`` (heartbeats every
``heartbeat.interval.ms``) - and calls ``poll(--poll)`` for ``--seconds``
after a warm-up; the broker holds each Fetch for fetch.max.wait.ms (500 ms).
It prints, per second: the process's CPU (getrusage, every thread), its
voluntary context switches, the CPU of each thread, and how many times the
standing-by network thread woke (PolledThreadDriver's stand-by Condition).

    python bench/consumer_idle.py --bootstrap HOST:PORT --seconds 10 --repeat 3 [--group]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import create_topic, load_average  # noqa: E402
from consumer_quiet import _threads_cpu  # noqa: E402


def _count_standby_waits(consumer) -> list:
    """[waits of the standing-by network thread on its Condition] from now on."""
    calls = [0]
    standby = consumer._standby
    real = standby.wait

    def counting(timeout=None):
        calls[0] += 1
        return real(timeout)
    standby.wait = counting
    return calls


def idle_run(bootstrap: str, seconds: float, poll_s: float, group: bool) -> dict:
    """One idle consumer for ``seconds``: its CPU, switches and stand-by wake-ups per second."""
    from kio import Consumer, TopicPartition
    topic = create_topic(bootstrap)
    conf = dict(bootstrap_servers=bootstrap, enable_auto_commit=False)
    if group:
        conf.update(group_id="idle-" + uuid.uuid4().hex[:8], auto_offset_reset="earliest")
    with Consumer(**conf) as c:
        if group:
            c.subscribe([topic])
            end = time.monotonic() + 30
            while not c.assignment() and time.monotonic() < end:
                c.poll(0.2)
            if not c.assignment():
                raise RuntimeError("no assignment within 30 s")
        else:
            c.assign([TopicPartition(topic, 0)])
            c.seek(TopicPartition(topic, 0), 0)
        end = time.monotonic() + 2.0                 # connected, fetching, the group settled
        while time.monotonic() < end:
            c.poll(poll_s)
        waits = _count_standby_waits(c)
        ru0, threads0, t0 = resource.getrusage(resource.RUSAGE_SELF), _threads_cpu(), time.monotonic()
        end = t0 + seconds
        got = 0
        while time.monotonic() < end:
            got += len(c.poll(poll_s))
        ru, threads, took = resource.getrusage(resource.RUSAGE_SELF), _threads_cpu(), time.monotonic() - t0
        if got:
            raise RuntimeError(f"the topic was not empty: {got} records")
    cpu = (ru.ru_utime + ru.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return {"cpu_ms_s": cpu / took * 1000.0, "nvcsw_s": (ru.ru_nvcsw - ru0.ru_nvcsw) / took,
            "standby_waits_s": waits[0] / took,
            "threads": {k: (v - threads0.get(k, 0.0)) / took * 1000.0 for k, v in threads.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True, help="a running broker (HOST:PORT)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--poll", type=float, default=0.5, help="poll() timeout (s)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--group", action="store_true", help="subscribe in a group (heartbeats) instead of assign")
    args = ap.parse_args()
    print(f"load average {load_average()}", flush=True)
    cpus = []
    for k in range(args.repeat):
        r = idle_run(args.bootstrap, args.seconds, args.poll, args.group)
        cpus.append(r["cpu_ms_s"])
        threads = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(r["threads"].items()) if ms > 0)
        print(f"round {k + 1}: CPU {r['cpu_ms_s']:.2f} ms/s, voluntary ctx switches {r['nvcsw_s']:.1f}/s, "
              f"stand-by wake-ups {r['standby_waits_s']:.1f}/s; threads ms/s: {threads}", flush=True)
    print(f"median CPU {statistics.median(cpus):.2f} ms/s over {len(cpus)} rounds "
          f"({', '.join(f'{c:.2f}' for c in cpus)}); load average {load_average()}")


if __name__ == "__main__":
    main()
