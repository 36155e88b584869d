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

import bisect
import gc
import glob
import json
import os
import threading
import time
from array import array

SLOW_CALL_US = 1000
_SO_TIMESTAMPNS = 35        # socket.SO_TIMESTAMPNS on Linux (Python 3.11 does not name it)


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
        self.arrivals = array("q")      # per read: the kernel's receive time of its bytes (0: unknown)
        # kio threading: each wait in select: (returned µs, timer due µs or 0, events, run delay µs,
        # and the round before it: wall, run delay, CPU µs)
        self.waits = array("q")
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
        each Fetch went out and its answer came in; for a producer, each
        Produce and its answer. Each read also records when the kernel got
        its first bytes (``SO_TIMESTAMPNS``, peeked before the read): the
        read's time minus that is how long the socket stood readable before
        a thread of the client took it (the wake-up: GIL, scheduler, a
        thread busy elsewhere)."""
        import socket as _socket
        import struct
        from kio._threaded import network
        writes, reads, arrivals = self.writes, self.reads, self.arrivals
        write, io = network.SocketLoop._write, network.SocketLoop._io
        stamped = set()
        unpack = struct.Struct("qq").unpack_from

        def _write(loop, node, sock, now):     # called with output waiting (write_all) or writable
            fd = sock.fileno()
            if fd not in stamped:              # the first write: before any answer can come
                stamped.add(fd)
                sock.setsockopt(_socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            write(loop, node, sock, now)
            writes.append(now_us())

        def _io(loop, node, sock, mask, now):
            t = now_us()
            arrived = 0
            if mask & network._READ and sock.fileno() in stamped:
                try:
                    _, anc, _, _ = sock.recvmsg(1, 64, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
                    for level, kind, data in anc:
                        if kind == _SO_TIMESTAMPNS and len(data) >= 16:
                            sec, ns = unpack(data)
                            arrived = sec * 1_000_000 + ns // 1000
                except OSError:
                    pass
            io(loop, node, sock, mask, now)
            if mask & network._READ:
                reads.append(t)
                arrivals.append(arrived)
        network.SocketLoop._write = _write
        network.SocketLoop._io = _io

    def watch_kio_waits(self):
        """Record each wait of a kio threading client in ``select`` (class-wide,
        in this process: the producer's network thread, the consumer's polling
        or network thread): when it returned, when its timer was due (0: no
        timer), how many events it returned, and how long the thread waited
        for a CPU meanwhile (``/proc/thread-self/schedstat``'s run delay: the
        kernel's count). A wait that ended past its due time, or a readable
        socket taken late, with as much run delay is the machine (no CPU for
        the thread); without it, the thread was runnable but held elsewhere
        (the GIL, a lock)."""
        from kio._threaded import network
        log = self.waits
        select = network.SocketLoop.select
        local = threading.local()

        def run_delay():
            fd = getattr(local, "fd", None)
            if fd is None:
                fd = local.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            return int(os.pread(fd, 64, 0).split()[1]) // 1000

        def _select(loop, timeout):
            d0 = run_delay()
            c0 = time.thread_time_ns() // 1000
            t0 = now_us()
            # the round since this thread's last wait: its wall time, its run delay and its CPU time
            # (wall well above the other two: the thread waited for the GIL or a lock)
            prev = getattr(local, "after", None) or (t0, d0, c0)
            events = select(loop, timeout)
            t1 = now_us()
            d1 = run_delay()
            log.extend((t1, 0 if timeout is None else t0 + int(timeout * 1e6), len(events), d1 - d0,
                        t0 - prev[0], d0 - prev[1], c0 - prev[2]))
            local.after = (t1, d1, time.thread_time_ns() // 1000)
            return events
        network.SocketLoop.select = _select

    def dump(self, path, **extra):
        gc.callbacks.remove(self._on_gc)
        with open(path, "w") as f:
            net = [("w", t, 0) for t in self.writes] + [("r", t, a) for t, a in zip(self.reads, self.arrivals)]
            w = self.waits
            waits = [tuple(w[i:i + 7]) for i in range(0, len(w), 7)]
            json.dump({"gc": self.gc, "slow": self.slow, "net": net, "waits": waits,
                       "load": os.getloadavg()[0], **extra}, f)


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
        r["split"] = r.get("split") or bool(appended)
        r["seconds"] += (max(arrived) - min(sent)) / 1e6
        gc_all = [(s, d) for _, s, d, *_ in p["gc"] + c["gc"]]
        r["load"] = r.get("load", []) + [c["load"]] if "load" in c else r.get("load", [])
        for ms in EPISODE_MS:
            eps = episodes(sent, lat, ms * 1000)
            r[ms] += len(eps)
            if ms == EPISODE_MS[0]:
                # at 1,000/s most episodes are 10-20 ms: which side held them, per minute
                for ep in eps:
                    worst = max(ep, key=lat.__getitem__)
                    if appended and appended[worst] - sent[worst] > arrived[worst] - appended[worst]:
                        r["producer_side_low"] = r.get("producer_side_low", 0) + 1
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
    low = EPISODE_MS[0]
    out = ["| producer → consumer | rate/s | runs | " + " | ".join(f"episodes > {ms} ms per min" for ms in EPISODE_MS)
           + f" | > {low} ms per min: producer's side / consumer's side | > {mid} ms: producer's side "
           "| with a GC collection | with a slow send() | load (1 min) |",
           "|---|---|---|" + "---|" * (len(EPISODE_MS) + 5)]
    for (prod, cons, rate), r in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0])):
        per_min = 60 / r["seconds"]
        sides = "-"
        if r.get("split"):
            ps = r.get("producer_side_low", 0)
            sides = f"{ps * per_min:.1f} / {(r[low] - ps) * per_min:.1f}"
        load = r.get("load") or []
        out.append(f"| {prod} → {cons} | {rate:,} | {r['runs']} | "
                   + " | ".join(f"{r[ms] * per_min:.1f}" for ms in EPISODE_MS)
                   + f" | {sides} | {r['producer_side']}/{r[mid]} | {r['gc']}/{r[mid]} | {r['slow']}/{r[mid]} | "
                   + (f"{min(load):.1f}-{max(load):.1f}" if load else "-") + " |")
    return "\n".join(out)


def runs_table(trace_dir: str, threshold_ms: int = EPISODE_MS[0]) -> str:
    """One row per traced run, in the order they ran (rounds interleave the
    clients): the load when it ended, its p99.9, and its episodes above
    ``threshold_ms`` per minute - all, and by the side of the broker's append
    that held each (``--split``). Load moves a lot between rows on a shared
    machine: compare a row with its neighbours."""
    out = [f"| run | producer → consumer | load (1 min) | p99.9 ms | episodes > {threshold_ms} ms per min | "
           "producer's side | consumer's side |", "|---|---|---|---|---|---|---|"]
    runs = []
    for cons_path in glob.glob(os.path.join(trace_dir, "*-consume.json")):
        p, c = _load(cons_path)
        runs.append((min(c["sent"]), os.path.basename(cons_path)[:-len("-consume.json")], p, c))
    for _, name, p, c in sorted(runs, key=lambda r: r[0]):
        sent, arrived, appended = c["sent"], c["arrived"], c.get("appended") or []
        lat = [a - s for s, a in zip(sent, arrived)]
        per_min = 60 / max(1e-6, (max(arrived) - min(sent)) / 1e6)
        eps = episodes(sent, lat, threshold_ms * 1000)
        prod = cons = "-"
        if appended:
            worst = [max(ep, key=lat.__getitem__) for ep in eps]
            n = sum(1 for i in worst if appended[i] - sent[i] > arrived[i] - appended[i])
            prod, cons = f"{n * per_min:.1f}", f"{(len(eps) - n) * per_min:.1f}"
        load = f"{c['load']:.1f}" if "load" in c else "-"
        out.append(f"| {name} | {p['client']} → {c['client']} | {load} | {_pct(lat, 0.999) / 1000:.1f} | "
                   f"{len(eps) * per_min:.1f} | {prod} | {cons} |")
    return "\n".join(out)


def _net_times(run, kind):
    return sorted(t for k, t, _ in run.get("net") or () if k == kind)


def _reads(run):
    """(read µs, kernel arrival µs or 0) of each socket read, in time order."""
    return sorted((t, a) for k, t, a in run.get("net") or () if k == "r")


def _waits(run):
    """(returned µs, timer due µs or 0, events, run delay µs or -1, and the
    round before the wait: wall, run delay and CPU µs, -1 if not recorded) of
    each wait in select a kio threading process recorded, in time order
    (traces before ``waits`` kept only the producer's timer waits: ``timers``)."""
    if run.get("waits"):
        return sorted(tuple(x) + (-1, -1, -1)[:max(0, 7 - len(x))] for x in run["waits"])
    return sorted((w, d, 0, -1, -1, -1, -1) for d, w in run.get("timers") or ())


def _first_after(times, t):
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def _last_before(times, t):
    i = bisect.bisect_right(times, t)
    return times[i - 1] if i else None


def _ms(us):
    return "-" if us is None else f"{us / 1000:.1f}"


def consumer_side(trace_dir: str, threshold_ms: int = 10) -> str:
    """For kio threading consumers (``net`` recorded), each episode whose
    slowest record lost more than ``threshold_ms`` after the broker's append
    (``--split``): where that time went - append → the Fetch that brought it
    written (> 0: no Fetch was in flight at the append; the client asked
    later), the Fetch's answer: append (or the Fetch, if later) → its bytes
    in the kernel (the broker's wait; the append time is whole ms) → read
    by a thread of the client (the wake-up) → in poll()'s hands."""
    out = ["| run | episode at s | records | append → arrival ms | append → Fetch written ms | "
           "→ answer in the kernel ms | kernel → read (wake-up) ms | read → in poll()'s hands ms |",
           "|---|---|---|---|---|---|---|---|"]
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        if not c.get("net") or not c.get("appended"):
            continue
        sent, arrived, appended = c["sent"], c["arrived"], c["appended"]
        after = [a - b for a, b in zip(arrived, appended)]
        writes, reads = _net_times(c, "w"), _reads(c)
        read_times = [t for t, _ in reads]
        t0 = min(sent)
        for ep in episodes(sent, after, threshold_ms * 1000):
            i = max(ep, key=after.__getitem__)
            a, r = appended[i], arrived[i]
            # the read that delivered it: the last before it was in hand; its Fetch: the last write before
            # that read's answer began (the first read after that write)
            last_read = _last_before(read_times, r)
            w = _last_before(writes, last_read - 1) if last_read is not None else None
            if w is None:
                continue
            k = bisect.bisect_right(read_times, w)
            if k >= len(reads):
                continue
            first_read, kernel = reads[k]
            kernel = kernel or None
            out.append(f"| {os.path.basename(cons_path)[:14]} {p['client']} → {c['client']} {c['rate']:,}/s | "
                       f"{(a - t0) / 1e6:.3f} | {len(ep)} | {(r - a) / 1000:.1f} | "
                       f"{max(0, w - a) / 1000:.1f} | {_ms(kernel - max(w, a) if kernel else None)} | "
                       f"{_ms(first_read - kernel if kernel else None)} | {(r - first_read) / 1000:.1f} |")
    return "\n".join(out)


LINGER_US = 5000        # linger.ms at kio's defaults: a batch is due this long after its first record


def producer_side(trace_dir: str, threshold_ms: int = 10) -> str:
    """For kio threading producers (``net`` recorded), each episode whose
    slowest record took more than ``threshold_ms`` from ``send()`` to the
    broker's append (``--split``): send → the first Produce written after it,
    of which past its batch's linger (its first record's send + linger.ms;
    > 1 ms: the client late), the timer wait that ended last before that
    write (how late it woke: the network thread not running), the write →
    its answer's bytes in the kernel (the network and the broker; the append
    is in there, in whole ms) → read by the network thread (the wake-up)."""
    out = ["| run | episode at s | records | send → append ms | send → Produce written ms | "
           "written past the batch's linger ms | the wait before it: on its timer, late by ms | "
           "the round that wrote it: wall / run delay / CPU ms | written → append ms | "
           "written → answer in the kernel ms | kernel → read (wake-up) ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        if not p.get("net") or not c.get("appended"):
            continue
        sent, appended = c["sent"], c["appended"]
        by_send = sorted(sent)
        before = [a - s for s, a in zip(sent, appended)]
        writes, reads = _net_times(p, "w"), _reads(p)
        read_times = [t for t, _ in reads]
        waits = _waits(p)
        woke_at = [x[0] for x in waits]
        t0 = min(sent)
        for ep in episodes(sent, before, threshold_ms * 1000):
            i = max(ep, key=before.__getitem__)
            w = _first_after(writes, sent[i])
            if w is None:
                continue
            prev = _last_before(writes, sent[i]) or 0
            first = by_send[bisect.bisect_right(by_send, prev)]        # the batch's first record
            # the wait that ended last before the write: on its timer, how late (and the run delay in it)
            j = bisect.bisect_right(woke_at, w) - 1
            late = "-"
            if j >= 0 and waits[j][1] and not waits[j][2]:
                late = f"{max(0, waits[j][0] - waits[j][1]) / 1000:.1f}"
                if waits[j][3] >= 0:
                    late += f" (run delay {waits[j][3] / 1000:.1f})"
            k = bisect.bisect_right(read_times, w)
            kernel = reads[k][1] if k < len(reads) else 0
            # the round that wrote it: recorded with the wait that followed it
            rnd = "-"
            if j + 1 < len(waits) and waits[j + 1][4] >= 0:
                rnd = "/".join(f"{v / 1000:.1f}" for v in waits[j + 1][4:7])
            out.append(f"| {os.path.basename(cons_path)[:14]} {p['client']} → {c['client']} {c['rate']:,}/s | "
                       f"{(sent[i] - t0) / 1e6:.3f} | {len(ep)} | {before[i] / 1000:.1f} | "
                       f"{(w - sent[i]) / 1000:.1f} | {max(0, w - first - LINGER_US) / 1000:.1f} | {late} | {rnd} | "
                       f"{(appended[i] - w) / 1000:.1f} | {_ms(kernel - w if kernel else None)} | "
                       f"{_ms(reads[k][0] - kernel if kernel else None)} |")
    return "\n".join(out)


def wakeup_summary(trace_dir: str) -> str:
    """Per kio threading process traced, over the whole run: how late its
    thread took a readable socket (kernel receive → read) and, for a
    producer, how late its timer waits ended (linger.ms) and how far past
    its batch's linger each Produce was written: count, p50, p99, max and
    how many over 2 and 5 ms."""
    out = ["| run | process | what | count | p50 ms | p99 ms | max ms | > 2 ms | > 5 ms |",
           "|---|---|---|---|---|---|---|---|---|"]

    def row(name, who, what, values):
        if not values:
            return
        values = sorted(values)
        out.append(f"| {name} | {who} | {what} | {len(values)} | {_pct(values, 0.5) / 1000:.2f} | "
                   f"{_pct(values, 0.99) / 1000:.2f} | {values[-1] / 1000:.1f} | "
                   f"{sum(v > 2000 for v in values)} | {sum(v > 5000 for v in values)} |")
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        name = f"{os.path.basename(cons_path)[:14]} {p['client']} → {c['client']}"
        for who, run in (("producer", p), ("consumer", c)):
            row(name, who, "kernel → read", [t - a for t, a in _reads(run) if a])
        for who, run in (("producer", p), ("consumer", c)):
            timed = [x for x in _waits(run) if x[1] and not x[2]]
            row(name, who, "wait ended by its timer: past due", [max(0, x[0] - x[1]) for x in timed])
            late = [x for x in timed if x[0] - x[1] > 2000 and x[3] >= 0]
            if late:
                machine = sum(1 for x in late if 2 * x[3] >= x[0] - x[1])
                out.append(f"| {name} | {who} | of those > 2 ms late: half or more of it waiting for a CPU "
                           f"(run delay) | {machine}/{len(late)} | | | | | |")
        writes = _net_times(p, "w")
        if writes and c.get("sent"):
            by_send = sorted(c["sent"])
            past = []
            for prev, w in zip(writes, writes[1:]):
                k = bisect.bisect_right(by_send, prev)
                if k < len(by_send) and by_send[k] <= w:
                    past.append(max(0, w - by_send[k] - LINGER_US))
            row(name, "producer", "Produce written past its batch's linger", past)
    return "\n".join(out)


def jvm_pauses(log_path: str, min_us: int = 1000) -> list:
    """(start µs, duration µs) of each safepoint (GC and other stop-the-world
    pauses) of a broker run with ``-Xlog:gc,safepoint:file=...:timemillis``
    longer than ``min_us``: a JVM line is stamped when the pause ended."""
    out = []
    with open(log_path) as f:
        for line in f:
            if "Safepoint" not in line or "Total: " not in line:
                continue
            end_ms = int(line[1:line.index("ms]")])
            took = int(line.rsplit("Total: ", 1)[1].split()[0]) // 1000
            if took >= min_us:
                out.append((end_ms * 1000 - took, took))
    return out


def broker_pause_summary(trace_dir: str, log_path: str, threshold_ms: int = EPISODE_MS[0]) -> str:
    """Per client pair: the episodes above ``threshold_ms`` (by the side of
    the broker's append that held them, ``--split``) and how many had a
    broker pause (safepoint over 1 ms) inside their window, against the
    share of every 100th record's window that had one (chance)."""
    pauses = jvm_pauses(log_path)
    rows = {}
    for cons_path in sorted(glob.glob(os.path.join(trace_dir, "*-consume.json"))):
        p, c = _load(cons_path)
        sent, arrived, appended = c["sent"], c["arrived"], c.get("appended") or []
        lat = [a - s for s, a in zip(sent, arrived)]
        r = rows.setdefault((p["client"], c["client"]), {"eps": [0, 0], "hit": [0, 0], "chance": [0, 0]})
        for ep in episodes(sent, lat, threshold_ms * 1000):
            worst = max(ep, key=lat.__getitem__)
            side = 0 if appended and appended[worst] - sent[worst] > arrived[worst] - appended[worst] else 1
            r["eps"][side] += 1
            r["hit"][side] += _overlaps(pauses, min(sent[i] for i in ep), max(arrived[i] for i in ep))
        for i in range(0, len(sent), 100):
            r["chance"][0] += 1
            r["chance"][1] += _overlaps(pauses, sent[i], arrived[i])
    out = [f"| producer → consumer | episodes > {threshold_ms} ms, producer's side: with a broker pause | "
           "consumer's side: with a broker pause | every 100th record: with a broker pause (chance) |",
           "|---|---|---|---|"]
    for (prod, cons), r in sorted(rows.items()):
        out.append(f"| {prod} → {cons} | {r['hit'][0]}/{r['eps'][0]} | {r['hit'][1]}/{r['eps'][1]} | "
                   f"{r['chance'][1]}/{r['chance'][0]} |")
    pause_ms = sorted(d / 1000 for _, d in pauses)
    if pause_ms:
        out.append("")
        out.append(f"broker pauses over 1 ms: {len(pause_ms)}, p50 {_pct(pause_ms, 0.5):.1f} ms, "
                   f"max {pause_ms[-1]:.1f} ms")
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
    out.append(runs_table(trace_dir))
    out.append("")
    out.append(consumer_side(trace_dir))
    out.append("")
    out.append(producer_side(trace_dir))
    out.append("")
    out.append(wakeup_summary(trace_dir))
    return "\n".join(out)


if __name__ == "__main__":
    import sys
    if sys.argv[2:3] == ["--jvm-log"]:
        print(broker_pause_summary(sys.argv[1], sys.argv[3]))
    elif sys.argv[2:] == ["--summary"]:
        print(episode_summary(sys.argv[1]))
        print()
        print(runs_table(sys.argv[1]))
        print()
        print(consumer_side(sys.argv[1]))
        print()
        print(producer_side(sys.argv[1]))
        print()
        print(wakeup_summary(sys.argv[1]))
    else:
        print(report(sys.argv[1]))
