"""What happened around bench_latency's slowest records (``--trace DIR``).

Each child process of a traced run records, in wall-clock µs (the clock the
records' send times are in):

* every cyclic-GC collection (``gc.callbacks``): generation, start, duration,
  objects collected - the bench's instrument, never the library's;
* the producer's ``send()`` calls that took longer than ``SLOW_CALL_US``
  (the application thread held up: the GIL, a lock, buffer.memory);
* the consumer's records: send time, arrival, broker append time (``--split``).

``report(dir)`` then matches the top 0.1% latencies against those: how many
of the slowest records had a collection (in the producer or the consumer
process) or a slow ``send()`` inside their send → arrival window, against the
same fraction for all records (what chance alone gives), and which side of
the broker's append held them.
"""
from __future__ import annotations

import gc
import glob
import json
import os
import time
from array import array

SLOW_CALL_US = 1000


def now_us() -> int:
    return time.time_ns() // 1000


class Trace:
    """One child's record of GC collections and slow calls; ``dump`` writes it as JSON."""

    def __init__(self):
        # (generation, start µs, wall duration µs, collected, the thread's CPU µs): the CPU time
        # is the collection's own cost, the wall time that and any wait for a CPU under load
        self.gc = []
        self.slow = []          # (start µs, duration µs)
        self._start = None
        self.tally = None       # the consumer's bench_latency.Tally
        # kio threading: µs of each socket write / readable socket, in arrays:
        # a tuple per event would be a tracked object, and 400 of them a second
        # made the consumer's GC run (0.6 collections/s) where it does not
        self.writes, self.reads = array("q"), array("q")
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase, info):
        if phase == "start":
            self._start = now_us()
            self._start_cpu = time.thread_time_ns()
        elif self._start is not None:
            self.gc.append((info["generation"], self._start, now_us() - self._start, info["collected"],
                            (time.thread_time_ns() - self._start_cpu) // 1000))
            self._start = None

    def timed(self, call):
        """``call`` wrapped: a call slower than SLOW_CALL_US is recorded."""
        slow = self.slow

        def wrapped(*args):
            t0 = time.perf_counter_ns()
            out = call(*args)
            took = (time.perf_counter_ns() - t0) // 1000
            if took > SLOW_CALL_US:
                slow.append((now_us() - took, took))
            return out
        return wrapped

    def watch_kio_sockets(self):
        """Record when kio's threading driver writes to and reads from its
        broker sockets (class-wide, in this process): for a consumer, when
        each Fetch went out and its answer came in."""
        from kio._threaded import network
        writes, reads = self.writes, self.reads
        write, io = network.SocketLoop._write, network.SocketLoop._io

        def _write(loop, node, sock, now):     # called with output waiting (write_all) or writable
            write(loop, node, sock, now)
            writes.append(now_us())

        def _io(loop, node, sock, mask, now):
            t = now_us()
            io(loop, node, sock, mask, now)
            if mask & network._READ:
                reads.append(t)
        network.SocketLoop._write = _write
        network.SocketLoop._io = _io

    def dump(self, path, **extra):
        gc.callbacks.remove(self._on_gc)
        with open(path, "w") as f:
            net = [("w", t, 0) for t in self.writes] + [("r", t, 0) for t in self.reads]
            json.dump({"gc": self.gc, "slow": self.slow, "net": net, **extra}, f)


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _overlaps(events, start, end):
    """Whether any (start, duration) event lies (in part) in [start, end]."""
    return any(s <= end and s + d >= start for s, d in events)


def gc_table(name, events, seconds):
    """Markdown rows: collections per second and pause percentiles by
    generation (wall time; the CPU time's median and max)."""
    rows = []
    for gen in (0, 1, 2):
        d = [e[2] for e in events if e[0] == gen]
        if d:
            used = [e[4] for e in events if e[0] == gen and len(e) > 4] or [float("nan")]
            rows.append(f"| {name} | {gen} | {len(d)} | {len(d) / seconds:.1f} | {_pct(d, 0.5)} | "
                        f"{_pct(d, 0.99)} | {max(d)} | {_pct(used, 0.5)} / {max(used)} |")
    return rows


EPISODE_MS = (10, 20, 50)     # latency thresholds of the episode summary
EPISODE_GAP_US = 50_000       # slow records sent closer than this belong to one episode


def episodes(sent, lat, threshold_us):
    """The records slower than ``threshold_us``, grouped in episodes (runs of
    slow records sent within EPISODE_GAP_US of each other): lists of indexes.
    A hiccup delays every record in flight at once, so the top 0.1% is a
    handful of episodes, and counting them says more than a percentile."""
    out = []
    last = None
    for i in sorted((i for i in range(len(lat)) if lat[i] > threshold_us), key=sent.__getitem__):
        if last is not None and sent[i] - last < EPISODE_GAP_US:
            out[-1].append(i)
        else:
            out.append([i])
        last = sent[i]
    return out


def _load(cons_path):
    with open(cons_path) as f:
        c = json.load(f)
    with open(cons_path[:-len("-consume.json")] + "-produce.json") as f:
        p = json.load(f)
    return p, c


def episode_summary(trace_dir: str) -> str:
    """Per client pair and rate, over every traced run: slow episodes per
    minute above each EPISODE_MS threshold, and of those above the middle one
    how many the producer's side held (send → append the larger part of the
    episode's slowest record, ``--split`` runs), how many met a GC collection
    of either process and how many a slow ``send()``."""
    rows = {}
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        sent, arrived, appended = c["sent"], c["arrived"], c.get("appended") or []
        lat = [a - s for s, a in zip(sent, arrived)]
        r = rows.setdefault((p["client"], c["client"], c["rate"]), {
            "seconds": 0.0, "runs": 0, **{ms: 0 for ms in EPISODE_MS}, "producer_side": 0, "gc": 0, "slow": 0})
        r["runs"] += 1
        r["seconds"] += (max(arrived) - min(sent)) / 1e6
        gc_all = [(s, d) for _, s, d, *_ in p["gc"] + c["gc"]]
        for ms in EPISODE_MS:
            eps = episodes(sent, lat, ms * 1000)
            r[ms] += len(eps)
            if ms != EPISODE_MS[1]:
                continue
            for ep in eps:
                worst = max(ep, key=lat.__getitem__)
                if appended and appended[worst] - sent[worst] > arrived[worst] - appended[worst]:
                    r["producer_side"] += 1
                first, last = min(sent[i] for i in ep), max(arrived[i] for i in ep)
                r["gc"] += _overlaps(gc_all, first, last)
                r["slow"] += _overlaps(p["slow"], first, last)
    mid = EPISODE_MS[1]
    out = ["| producer → consumer | rate/s | runs | " + " | ".join(f"episodes > {ms} ms per min" for ms in EPISODE_MS)
           + f" | > {mid} ms: producer's side | with a GC collection | with a slow send() |",
           "|---|---|---|" + "---|" * (len(EPISODE_MS) + 3)]
    for (prod, cons, rate), r in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0])):
        per_min = 60 / r["seconds"]
        out.append(f"| {prod} → {cons} | {rate:,} | {r['runs']} | "
                   + " | ".join(f"{r[ms] * per_min:.1f}" for ms in EPISODE_MS)
                   + f" | {r['producer_side']}/{r[mid]} | {r['gc']}/{r[mid]} | {r['slow']}/{r[mid]} |")
    return "\n".join(out)


def _net_times(run, kind):
    return sorted(t for k, t, _ in run.get("net") or () if k == kind)


def consumer_side(trace_dir: str, threshold_ms: int = 20) -> str:
    """For kio threading consumers (``net`` recorded), each episode whose
    slowest record lost more than ``threshold_ms`` after the broker's append
    (``--split``): where that time went - append → the Fetch that brought it
    written (> 0: no Fetch was in flight at the append; the client asked
    later), the Fetch written → its answer readable (the broker's wait and
    the network thread's wake-up), and readable → in poll()'s hands."""
    out = ["| run | episode at s | records | append → arrival ms | append → Fetch written ms | "
           "Fetch written → answer readable ms | readable → in poll()'s hands ms |",
           "|---|---|---|---|---|---|---|"]
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        if not c.get("net") or not c.get("appended"):
            continue
        sent, arrived, appended = c["sent"], c["arrived"], c["appended"]
        after = [a - b for a, b in zip(arrived, appended)]
        writes, reads = _net_times(c, "w"), _net_times(c, "r")
        t0 = min(sent)
        for ep in episodes(sent, after, threshold_ms * 1000):
            i = max(ep, key=after.__getitem__)
            a, r = appended[i], arrived[i]
            # the read that delivered it: the last before it was in hand; its Fetch: the last write before that
            # read's answer began (the first read after that write)
            last_read = max((t for t in reads if t <= r), default=None)
            w = max((t for t in writes if last_read is not None and t < last_read), default=None)
            first_read = min((t for t in reads if w is not None and t > w), default=None)
            if w is None or first_read is None:
                continue
            out.append(f"| {os.path.basename(cons_path)[:14]} {p['client']} → {c['client']} {c['rate']:,}/s | "
                       f"{(a - t0) / 1e6:.3f} | {len(ep)} | {(r - a) / 1000:.1f} | "
                       f"{max(0, w - a) / 1000:.1f} | {(first_read - max(w, a)) / 1000:.1f} | "
                       f"{(r - first_read) / 1000:.1f} |")
    return "\n".join(out)


def producer_side(trace_dir: str, threshold_ms: int = 20) -> str:
    """For kio threading producers (``net`` recorded), each episode whose
    slowest record took more than ``threshold_ms`` from ``send()`` to the
    broker's append (``--split``): send → the first Produce written after it
    (linger.ms and the network thread's round: more than linger.ms is the
    client late) and that write → the append (the network and the broker;
    the append time is whole ms)."""
    out = ["| run | episode at s | records | send → append ms | send → Produce written ms | "
           "written → append ms |", "|---|---|---|---|---|---|"]
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        if not p.get("net") or not c.get("appended"):
            continue
        sent, appended = c["sent"], c["appended"]
        before = [a - s for s, a in zip(sent, appended)]
        writes = _net_times(p, "w")
        t0 = min(sent)
        for ep in episodes(sent, before, threshold_ms * 1000):
            i = max(ep, key=before.__getitem__)
            w = min((t for t in writes if t >= sent[i]), default=None)
            if w is None:
                continue
            out.append(f"| {os.path.basename(cons_path)[:14]} {p['client']} → {c['client']} {c['rate']:,}/s | "
                       f"{(sent[i] - t0) / 1e6:.3f} | {len(ep)} | {before[i] / 1000:.1f} | "
                       f"{(w - sent[i]) / 1000:.1f} | {(appended[i] - w) / 1000:.1f} |")
    return "\n".join(out)


def report(trace_dir: str) -> str:
    """The slowest 0.1% of each traced run against the GC collections and slow
    sends of its two processes (markdown)."""
    out = []
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        run = cons_path[:-len("-consume.json")]
        p, c = _load(cons_path)
        sent, arrived, appended = c["sent"], c["arrived"], c.get("appended") or []
        n = len(sent)
        lat = [a - s for s, a in zip(sent, arrived)]
        order = sorted(range(n), key=lat.__getitem__)
        top = order[-max(1, n // 1000):]
        seconds = max(1e-6, (max(arrived) - min(sent)) / 1e6)
        gc_all = [(s, d) for _, s, d, *_ in p["gc"]] + [(s, d) for _, s, d, *_ in c["gc"]]
        gc_p = [(s, d) for _, s, d, *_ in p["gc"]]
        gc_c = [(s, d) for _, s, d, *_ in c["gc"]]
        full = [(s, d) for g, s, d, *_ in p["gc"] + c["gc"] if g == 2]

        def share(idx, events):
            hit = sum(1 for i in idx if _overlaps(events, sent[i], arrived[i]))
            return f"{hit}/{len(idx)} ({hit / len(idx):.1%})" if idx else "-"
        # chance: the same test over every 10th record
        sample = order[::10]
        out.append(f"### {os.path.basename(run)}: {p['client']} → {c['client']}, {c['rate']:,}/s, {n:,} records")
        out.append("")
        out.append(f"latency p50 {_pct(lat, 0.5) / 1000:.1f} ms, p99 {_pct(lat, 0.99) / 1000:.1f}, "
                   f"p99.9 {_pct(lat, 0.999) / 1000:.1f}, max {max(lat) / 1000:.1f}; "
                   f"top 0.1%: {len(top)} records ≥ {lat[top[0]] / 1000:.1f} ms")
        out.append("")
        out.append("| process | gen | collections | per s | pause p50 µs | p99 µs | max µs | CPU p50 / max µs |")
        out.append("|---|---|---|---|---|---|---|---|")
        out += gc_table("producer", p["gc"], seconds) + gc_table("consumer", c["gc"], seconds)
        out.append("")
        out.append("| records | a GC pause in their window (either) | producer's | consumer's | "
                   "a full (gen 2) collection | a slow send() |")
        out.append("|---|---|---|---|---|---|")
        for label, idx in (("top 0.1%", top), ("every 10th (chance)", sample)):
            out.append(f"| {label} | {share(idx, gc_all)} | {share(idx, gc_p)} | {share(idx, gc_c)} | "
                       f"{share(idx, full)} | {share(idx, p['slow'])} |")
        out.append("")
        slow = sorted(d for _, d in p["slow"])
        if slow:
            out.append(f"slow send() calls (> {SLOW_CALL_US} µs): {len(slow)}, p50 {_pct(slow, 0.5)} µs, "
                       f"max {slow[-1]} µs")
            out.append("")
        if appended:
            to_b = [appended[i] - sent[i] for i in top]
            from_b = [arrived[i] - appended[i] for i in top]
            prod_side = sum(1 for a, b in zip(to_b, from_b) if a > b)
            out.append(f"top 0.1% split at the broker's append (ms truncated): send → append p50 "
                       f"{_pct(to_b, 0.5) / 1000:.1f} ms max {max(to_b) / 1000:.1f}, append → arrival p50 "
                       f"{_pct(from_b, 0.5) / 1000:.1f} ms max {max(from_b) / 1000:.1f}; "
                       f"producer's side the larger in {prod_side}/{len(top)}")
            out.append("")
        # the slowest records: when, and what was near
        out.append("| latency ms | sent at s | send → append ms | GC in window (process gen µs) |")
        out.append("|---|---|---|---|")
        t0 = min(sent)
        for i in reversed(top[-10:]):
            near = [f"{who} g{g} {d}" for who, ev in (("P", p["gc"]), ("C", c["gc"]))
                    for g, s, d, *_ in ev if s <= arrived[i] and s + d >= sent[i]]
            ab = f"{(appended[i] - sent[i]) / 1000:.1f}" if appended else "-"
            out.append(f"| {lat[i] / 1000:.1f} | {(sent[i] - t0) / 1e6:.3f} | {ab} | {', '.join(near) or '-'} |")
        out.append("")
    out.append(episode_summary(trace_dir))
    out.append("")
    out.append(consumer_side(trace_dir))
    out.append("")
    out.append(producer_side(trace_dir))
    return "\n".join(out)


if __name__ == "__main__":
    import sys
    if sys.argv[2:] == ["--summary"]:
        print(episode_summary(sys.argv[1]))
        print()
        print(consumer_side(sys.argv[1]))
        print()
        print(producer_side(sys.argv[1]))
    else:
        print(report(sys.argv[1]))
