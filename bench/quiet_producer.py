"""What a quiet producer costs, thread by thread: one producer process alone at a fixed rate.

A producer (kio threading, asyncio or trio, or confluent-kafka; ``--client``)
sends ``--records`` 100-byte records to a fresh one-partition topic at
``--rate`` records/s, paced by ``bench_latency.py``'s own loop (the same
``paced``/``paced_async`` functions, so the two benches measure the same
thing), then flushes. Printed as one JSON line:

* ``cpu_us``: whole-process CPU per record (getrusage, every thread), from
  the first send to the end of the flush, as ``bench_latency.py`` reports it;
* ``threads``: CPU per record of each thread (``/proc/self/task/*/schedstat``,
  ns), by thread name (``comm``): the caller's thread, kio's network thread,
  librdkafka's ``rdk:*`` threads;
* kio only, from counters wrapped around the core by this script: ``rounds``
  (``core.poll`` calls), ``kicks`` (wake-ups of the network side for a round:
  flush), ``deadline_kicks`` (``send()``'s wake-ups for a batch it opened,
  which only move the network side's deadline), ``timer_rounds`` (threading: rounds after a select that
  returned no event), and the producer's ``batches`` and ``requests``;
  ``rounds_per_batch`` = rounds / batches.

``--client pace`` runs the pacing loop alone (a send that does nothing): the
floor every client pays at this rate on this machine; ``pace-asyncio`` and
``pace-trio`` the async loops' (``paced_async`` with the framework's sleep).

``--callgrind`` (kio threading) runs the producer under valgrind's
callgrind with one output file per thread and prints the network thread's
instructions per round (load-independent; valgrind slows the process, so
run it at a lower rate; the two runs' difference divides out start-up)::

    python bench/quiet_producer.py --bootstrap HOST:PORT --client kio --rate 1000 --records 5000
    python bench/quiet_producer.py --bootstrap HOST:PORT --client kio --rate 200 --callgrind 400,1200
    python bench/quiet_producer.py --bootstrap HOST:PORT --client kio --rate 100 --records 400 --opcodes

``--opcodes`` (kio threading) counts the Python bytecodes the network thread
runs per batch over the measured span (``sys.settrace`` with opcode events;
compiled modules run no bytecode), by function: deterministic, unlike time,
though slowed (run it at a low rate, where a batch holds one record or two).
    strace -f -c -o out.txt python bench/quiet_producer.py --bootstrap HOST:PORT --client confluent
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_latency  # noqa: E402 - the pacing loops and the record values of the latency bench
from _bench import cpu, create_topic  # noqa: E402


def _thread_names() -> dict:
    """{native thread id: Python thread name} (Python does not give the OS thread its name)."""
    import threading
    return {t.native_id: t.name for t in threading.enumerate()}


def thread_stats() -> dict:
    """{thread name: [CPU ns, user ticks, system ticks, voluntary switches,
    involuntary switches]} of this process's threads (names may repeat:
    summed): a Python thread's name, else the OS's (``comm``: librdkafka's
    ``rdk:*``). CPU from ``schedstat`` (ns); user and system time from
    ``stat`` (clock ticks, coarse: 10 ms); context switches from ``status``
    (a voluntary one is a sleep: a wait in select, on the GIL or a lock)."""
    names = _thread_names()
    out: dict = {}
    for task in glob.glob("/proc/self/task/*"):
        try:
            name = names.get(int(os.path.basename(task)))
            if name is None:
                with open(task + "/comm") as f:
                    name = f.read().strip()
            with open(task + "/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(task + "/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            utime, stime = int(fields[11]), int(fields[12])     # stat's 14th and 15th fields
            with open(task + "/status") as f:
                status = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
            vol = int(status["voluntary_ctxt_switches"])
            invol = int(status["nonvoluntary_ctxt_switches"])
        except OSError:                 # the thread ended meanwhile
            continue
        row = out.setdefault(name, [0, 0, 0, 0, 0])
        for i, v in enumerate((ns, utime, stime, vol, invol)):
            row[i] += v
    return out


class Counted:
    """Counts calls of one bound method (an instance attribute shadowing it)."""

    def __init__(self, obj, name):
        self.n = 0
        self.fn = getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        self.n += 1
        return self.fn(*args, **kwargs)


class TimerRounds:
    """Counts the threading driver's selects (``selects``) and those that
    returned no event or only its deadline timer's (``n``: its next round
    is a timer's)."""

    def __init__(self, net):
        self.n = self.selects = 0
        self.select = net.select
        self.timer_fd = getattr(net, "timer_fd", -1)
        net.select = self

    def __call__(self, timeout):
        events = self.select(timeout)
        self.selects += 1
        if not events or (len(events) == 1 and events[0][0] == self.timer_fd):
            self.n += 1
        return events


class WakeWrites:
    """Counts the wake-up bytes written to the threading driver's socketpair
    (``SocketLoop.wake`` calls that found no wake-up pending: each ends a
    select of the network thread)."""

    def __init__(self, net):
        self.n = 0
        self.sock = net._wake_w
        net._wake_w = self

    def send(self, data):
        self.n += 1
        return self.sock.send(data)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def counters(p, core):
    """Wrap kio's core and driver with counters; returns a function reading them."""
    rounds = Counted(core, "poll")
    kicks = Counted(p, "_kick")
    # (absent before the deadline-only wake-ups: a tree measured for comparison)
    deadline_kicks = Counted(p, "_kick_deadline") if hasattr(p, "_kick_deadline") else None
    timer = TimerRounds(p._net) if hasattr(p, "_net") else None
    wakes = WakeWrites(p._net) if hasattr(p, "_net") else None
    start = dict(rounds=0, kicks=0, timer=0, batches=core.metrics()["batches_sent"],
                 requests=core.metrics()["requests"])

    def read():
        m = core.metrics()
        batches = m["batches_sent"] - start["batches"]
        out = {"rounds": rounds.n, "kicks": kicks.n, "deadline_kicks": deadline_kicks and deadline_kicks.n,
               "batches": batches,
               "requests": m["requests"] - start["requests"],
               "rounds_per_batch": round(rounds.n / batches, 3) if batches else None}
        if timer is not None:
            out["timer_rounds"] = timer.n
            out["selects"] = timer.selects
            out["wake_writes"] = wakes.n
            if batches:
                out["selects_per_batch"] = round(timer.selects / batches, 3)
                out["wake_writes_per_batch"] = round(wakes.n / batches, 3)
        return out

    def reset():
        rounds.n = kicks.n = 0
        if deadline_kicks is not None:
            deadline_kicks.n = 0
        if timer is not None:
            timer.n = timer.selects = wakes.n = 0
        start["batches"], start["requests"] = core.metrics()["batches_sent"], core.metrics()["requests"]
    return read, reset


class Span:
    """CPU of the process and of each thread over the measured span, and
    each thread's user/system split and context switches."""

    def __enter__(self):
        self.t0, self.c0, self.w0 = thread_stats(), cpu(), time.monotonic()
        return self

    def __exit__(self, *exc):
        self.c1, self.t1, self.w1 = cpu(), thread_stats(), time.monotonic()

    def result(self, total):
        tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
        delta = {n: [v - w for v, w in zip(row, self.t0.get(n, (0, 0, 0, 0, 0)))] for n, row in self.t1.items()}
        busy = sorted((kv for kv in delta.items() if kv[1][0] > 0), key=lambda kv: -kv[1][0])
        return {"cpu_us": round((self.c1 - self.c0) / total * 1e6, 2), "seconds": round(self.w1 - self.w0, 2),
                "threads": {n: round(d[0] / 1e3 / total, 2) for n, d in busy},
                # per record: user and system CPU (coarse, see thread_stats), context switches
                "threads_user_sys_us": {n: [round(d[1] * tick_us / total, 1), round(d[2] * tick_us / total, 1)]
                                        for n, d in busy},
                "threads_switches": {n: {"voluntary": d[3], "involuntary": d[4]} for n, d in busy}}


class Opcodes:
    """Counts the Python bytecodes of the threads started after it was
    installed (``threading.settrace``: the producer's network thread), by
    function (``file:qualname``), while ``on`` is true."""

    def __init__(self):
        import threading
        self.on = False
        self.counts: dict = {}
        threading.settrace(self._call)

    def _call(self, frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._opcode

    def _opcode(self, frame, event, arg):
        if event == "opcode" and self.on:
            code = frame.f_code
            name = f"{os.path.basename(code.co_filename)}:{code.co_qualname}"
            self.counts[name] = self.counts.get(name, 0) + 1
        return self._opcode

    def result(self, batches, top=25):
        per = {n: round(c / batches, 1) for n, c in sorted(self.counts.items(), key=lambda kv: -kv[1])}
        return {"opcodes_per_batch": round(sum(self.counts.values()) / batches, 1),
                "top": dict(list(per.items())[:top])}


def run_kio(bootstrap, topic, rate, total, opcodes=None):
    from kio import Producer
    p = Producer(bootstrap_servers=bootstrap)
    p.partitions_for(topic)
    p.send(topic, b"first", partition=0).result(30)        # producer id and connection settled
    with p._lock:
        read, reset = counters(p, p._core)
        if opcodes is not None:
            opcodes.on = True
    with Span() as span:
        bench_latency.paced(lambda: p.send(topic, bench_latency.value(), partition=0), rate, total)
        assert p.flush() == 0
    with p._lock:
        if opcodes is not None:
            opcodes.on = False
        counts = read()
    p.close()
    out = {**span.result(total), **counts}
    if opcodes is not None:
        out.update(opcodes.result(counts["batches"]))
    return out


async def _run_kio_async(mod, sleep, bootstrap, topic, rate, total):
    async with mod.Producer(bootstrap_servers=bootstrap) as p:
        await p.partitions_for(topic)
        await (await p.send(topic, b"first", partition=0))
        read, reset = counters(p, p._core)

        async def send():
            await p.send(topic, bench_latency.value(), partition=0)
        with Span() as span:
            await bench_latency.paced_async(send, rate, total, sleep)
            assert await p.flush() == 0
        return {**span.result(total), **read()}


def run_asyncio(bootstrap, topic, rate, total):
    import asyncio

    import kio.aio
    return asyncio.run(_run_kio_async(kio.aio, asyncio.sleep, bootstrap, topic, rate, total))


def run_trio(bootstrap, topic, rate, total):
    import trio

    import kio.trio
    return trio.run(_run_kio_async, kio.trio, trio.sleep, bootstrap, topic, rate, total)


def run_confluent(bootstrap, topic, rate, total):
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap})
    p.list_topics(topic, timeout=10)
    p.produce(topic, b"first", partition=0)
    assert p.flush(30) == 0

    def send():
        p.produce(topic, bench_latency.value(), partition=0)
        p.poll(0)
    with Span() as span:
        bench_latency.paced(send, rate, total)
        assert p.flush(60) == 0
    return span.result(total)


def run_pace(bootstrap, topic, rate, total):
    with Span() as span:
        bench_latency.paced(bench_latency.value, rate, total)
    return span.result(total)


async def _pace_async(sleep, rate, total):
    async def send():
        bench_latency.value()
    with Span() as span:
        await bench_latency.paced_async(send, rate, total, sleep)
    return span.result(total)


def run_pace_asyncio(bootstrap, topic, rate, total):
    import asyncio
    return asyncio.run(_pace_async(asyncio.sleep, rate, total))


def run_pace_trio(bootstrap, topic, rate, total):
    import trio
    return trio.run(_pace_async, trio.sleep, rate, total)


CLIENTS = {"kio": run_kio, "asyncio": run_asyncio, "trio": run_trio, "confluent": run_confluent,
           "pace": run_pace, "pace-asyncio": run_pace_asyncio, "pace-trio": run_pace_trio}


def _under_callgrind(args, records, out):
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
           sys.executable, os.path.abspath(__file__), "--bootstrap", args.bootstrap, "--client", "kio",
           "--rate", str(args.rate), "--records", str(records), "--topic", args.topic]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    from _callgrind import instructions
    # The network thread is the second thread the process started (-02; -01 is the caller's).
    return json.loads(proc.stdout.strip().splitlines()[-1]), instructions(out, "-01"), instructions(out, "-02")


def callgrind(args):
    """The kio threading producer under callgrind twice (``--callgrind N1,N2``
    records), a file per thread: the difference divides out start-up
    (imports, connecting, metadata), leaving the instructions of N2 - N1
    records: the network thread's per round and the caller's per record."""
    n1, n2 = (int(n) for n in args.callgrind.split(","))
    out = tempfile.mkdtemp(prefix="quiet-cg-")
    r1, caller1, net1 = _under_callgrind(args, n1, f"{out}/a.out")
    r2, caller2, net2 = _under_callgrind(args, n2, f"{out}/b.out")
    rounds = r2["rounds"] - r1["rounds"]
    batches = r2["batches"] - r1["batches"]
    return {"records": [n1, n2], "rounds": [r1["rounds"], r2["rounds"]], "batches": [r1["batches"], r2["batches"]],
            "rounds_per_batch": round(rounds / batches, 3) if batches else None,
            "network_instructions_per_round": round((net2 - net1) / rounds) if rounds else None,
            "network_instructions_per_batch": round((net2 - net1) / batches) if batches else None,
            "caller_instructions_per_record": round((caller2 - caller1) / (n2 - n1)),
            "out": out}          # a.out-NN / b.out-NN: for callgrind_annotate (bench/_callgrind_functions.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--client", choices=tuple(CLIENTS), default="kio")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--topic", help="an existing one-partition topic (default: a new one)")
    ap.add_argument("--callgrind", metavar="N1,N2",
                    help="kio threading under callgrind at N1 and N2 records: instructions per round")
    ap.add_argument("--opcodes", action="store_true",
                    help="kio threading: the network thread's Python bytecodes per batch, by function")
    args = ap.parse_args()
    if not args.topic:
        args.topic = create_topic(args.bootstrap)
    if args.callgrind:
        print(json.dumps(callgrind(args)))
        return
    if args.opcodes:
        print(json.dumps({"client": "kio", "rate": args.rate, "records": args.records,
                          **run_kio(args.bootstrap, args.topic, args.rate, args.records, Opcodes())}))
        return
    print(json.dumps({"client": args.client, "rate": args.rate, "records": args.records,
                      **CLIENTS[args.client](args.bootstrap, args.topic, args.rate, args.records)}))


if __name__ == "__main__":
    main()
