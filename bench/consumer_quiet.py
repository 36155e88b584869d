"""What a quiet consumer process costs: one consumer at a fixed rate, alone.

A producer process (always confluent-kafka's, at its defaults - linger.ms 5,
so ~200 batches a second at 1,000 records/s - whichever consumer is measured)
sends ``--records`` 100-byte records at ``--rate`` to a fresh one-partition
topic while a consumer process (``--client``: kio, kio asyncio, kio trio,
confluent-kafka; the loops of bench_latency.py) reads them. The consumer
reports, from its first record to its last: the whole process's CPU per record
(getrusage, every thread), its voluntary and involuntary context switches per
record (getrusage: every thread, the ended ones too) and the CPU of each of
its threads (/proc/self/task, by name). ``--strace`` runs the consumer under
``strace -f -c`` and prints its syscall table; ``--callgrind`` under
valgrind's callgrind and prints the instructions of the whole process:
run it at two record counts (a rate low enough for the slowed process to
keep up, e.g. 20/s: one record per Fetch answer) and take the difference
per record, which leaves out the start-up and the close. ``--opcodes OUT``
counts the Python opcodes each function runs on the polling thread from the
first record on (``bench/_opcodes.py``; the same two-count difference:
``python bench/_opcodes.py OUT.100 OUT.300 200``).

    python bench/consumer_quiet.py --bootstrap HOST:PORT --client kio --rate 1000 --records 5000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_latency  # noqa: E402
from _bench import create_topic, load_average  # noqa: E402

def _threads_cpu():
    """{thread name: CPU seconds} of this process's live threads."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[f"{name} ({tid})"] = (int(fields[11]) + int(fields[12])) / tick
    return out


class _Tally(bench_latency.Tally):
    """bench_latency's Tally, with context switches and per-thread CPU."""

    opcodes = None              # --opcodes: an OpcodeCount started at the first record

    def add(self, v, ts=None):
        if self.cpu0 is None:
            self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
            self.threads0 = _threads_cpu()
            if self.opcodes is not None:
                self.opcodes.start()
        super().add(v, ts)

    def result(self):
        if self.opcodes is not None:
            self.opcodes.stop()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        threads = _threads_cpu()
        out = super().result()           # (latencies, to-broker latencies, CPU seconds)
        self.extra = {"nvcsw": ru.ru_nvcsw - self.ru0.ru_nvcsw, "nivcsw": ru.ru_nivcsw - self.ru0.ru_nivcsw,
                      "threads": {k: v - self.threads0.get(k, 0.0) for k, v in threads.items()}}
        return out


def child(spec):
    bench_latency.Tally = _Tally
    if spec.get("opcodes"):
        from _opcodes import OpcodeCount
        _Tally.opcodes = OpcodeCount()
    made = []
    real_ready = bench_latency._ready

    def ready():
        t = real_ready()
        made.append(t)
        return t
    bench_latency._ready = ready
    consume = bench_latency.CLIENTS[spec["client"]][1]
    lat, _to_broker, used = consume(spec["bootstrap"], spec["topic"], spec["records"], time.monotonic() + 120)
    if _Tally.opcodes is not None:
        _Tally.opcodes.dump(spec["opcodes"])
    print(json.dumps({"received": len(lat), "cpu": used, **made[0].extra}), flush=True)


def run_one(args, client, wrap, opcodes=None):
    topic = create_topic(args.bootstrap)
    spec = {"bootstrap": args.bootstrap, "topic": topic, "client": client, "records": args.records,
            "opcodes": opcodes}
    me = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    cons = subprocess.Popen(wrap + me, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = cons.stdout.readline()
    if line.strip() != b"ready":
        cons.kill()
        raise RuntimeError(f"consumer: {line!r} {cons.stderr.read().decode()[-1500:]}")
    seconds = max(1, args.records // args.rate)
    pspec = {"bootstrap": args.bootstrap, "topic": topic, "producer": "confluent-kafka", "rate": args.rate,
             "seconds": seconds, "linger0": False, "role": "produce"}
    prod = subprocess.Popen([sys.executable, bench_latency.__file__, "--child", json.dumps(pspec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cons.stdin.write(b"go\n")
    cons.stdin.flush()
    _, perr = prod.communicate(timeout=seconds + 120)
    if prod.returncode:
        cons.kill()
        raise RuntimeError(f"producer {prod.returncode}: {perr.decode()[-1500:]}")
    out, err = cons.communicate(timeout=seconds + 120)
    if cons.returncode:
        raise RuntimeError(f"consumer {cons.returncode}: {err.decode()[-1500:]}")
    r = json.loads(out.decode().splitlines()[-1])
    r["stderr"] = err.decode()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="a running broker (HOST:PORT)")
    ap.add_argument("--client", action="append", help="kio, kio asyncio, kio trio, confluent-kafka (repeatable)")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--strace", action="store_true", help="run the consumer under strace -f -c")
    ap.add_argument("--callgrind", metavar="OUT", help="run the consumer under callgrind, output file prefix")
    ap.add_argument("--opcodes", metavar="OUT", help="count the Python opcodes per function on the polling "
                    "thread from the first record on (bench/_opcodes.py); output file prefix")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    clients = args.client or ["kio", "confluent-kafka"]
    print(f"load average {load_average()}", flush=True)
    rows = {c: [] for c in clients}
    for k in range(args.repeat):
        for client in clients:
            wrap: list = []
            if args.strace:
                wrap = ["strace", "-f", "-c", "-o", f"/tmp/consumer_quiet.strace.{client.replace(' ', '_')}.{k}"]
            if args.callgrind:
                wrap = ["valgrind", "--tool=callgrind",
                        f"--callgrind-out-file={args.callgrind}.{client.replace(' ', '_')}.{k}"]
            opcodes = f"{args.opcodes}.{client.replace(' ', '_')}.{k}" if args.opcodes else None
            r = run_one(args, client, wrap, opcodes)
            n = r["received"]
            rows[client].append(r["cpu"] / n * 1e6)
            threads = ", ".join(f"{name} {secs / n * 1e6:.1f}" for name, secs in sorted(r["threads"].items())
                                if secs > 0)
            print(f"round {k + 1} {client:16s} {n} records: CPU {r['cpu'] / n * 1e6:.1f} µs/rec, "
                  f"ctx switches/rec voluntary {r['nvcsw'] / n:.2f} involuntary {r['nivcsw'] / n:.2f}; "
                  f"threads µs/rec: {threads} (load {load_average()})", flush=True)
            if args.strace:
                with open(wrap[4]) as f:
                    print(f.read(), flush=True)
            if args.callgrind:
                from _callgrind import instructions
                print(f"instructions (whole process): {instructions(wrap[-1].split('=', 1)[1])}", flush=True)
    for client, us in rows.items():
        print(f"{client:16s} median CPU {statistics.median(us):.1f} µs/rec over {len(us)} rounds "
              f"({', '.join(f'{u:.1f}' for u in us)})")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
