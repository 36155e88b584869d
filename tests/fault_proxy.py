"""A fault-injecting TCP proxy for the test suite (loopback only).

    proxy = FaultProxy(upstream=("127.0.0.1", broker_port)).start()
    broker = LocalBroker(advertised_port=proxy.port)      # all client traffic crosses the proxy
    proxy.cut_all()                  # reset every connection now
    proxy.cut_randomly(every_s=0.1)  # ... and keep doing it at random intervals
    proxy.delay = 0.05               # seconds added to each chunk, both ways
    proxy.stall = True               # accept and read, but never forward or answer
    proxy.truncate_next()            # forward part of the next broker answer, then close
    proxy.stop()

The proxy runs in a process of its own (this file run as a script), one
selector loop for every connection, so it behaves like a network: its
latency does not depend on how busy the client under test keeps the test
process's interpreter (a proxy thread competing for the GIL with a client
sending 200,000 records added tens of milliseconds per chunk, which with
cuts every ~100 ms starved every request on a slow machine). The parent
binds the listening socket, so ``port`` is known at once, and controls the
child with one command per line on its stdin, each answered with one JSON
line; the child exits when its stdin closes, so it never outlives the tests.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time

__all__ = ["FaultProxy", "proxied_broker"]


class FaultProxy:
    def __init__(self, upstream, host="127.0.0.1", port=0, seed=1):
        self.upstream = tuple(upstream)
        self._listen = socket.create_server((host, port))
        self.host, self.port = self._listen.getsockname()[:2]
        self.seed = seed
        self._proc = None
        self._lock = threading.Lock()

    # -- control -------------------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        fd = self._listen.fileno()
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(fd), self.upstream[0], str(self.upstream[1]),
             str(self.seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=[fd], text=True, bufsize=1)
        self._listen.close()            # the child owns it now
        assert self._command("ping") == "pong"
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            self._command("stop")
        except (OSError, ValueError, RuntimeError):
            pass
        try:
            self._proc.stdin.close()
            self._proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
        self._proc = None

    def _command(self, *words):
        with self._lock:
            if self._proc is None:
                raise RuntimeError("the fault proxy is not running")
            self._proc.stdin.write(" ".join(str(w) for w in words) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fault proxy exited (code {self._proc.poll()})")
        return json.loads(line)

    def cut_all(self) -> int:
        """Reset every open connection (RST: SO_LINGER 0); returns how many."""
        return self._command("cut_all")

    def retarget(self, upstream) -> None:
        """Forward the connections accepted from now on to ``upstream``
        (host, port): another broker answers at the same address."""
        self.upstream = tuple(upstream)
        self._command("retarget", self.upstream[0], self.upstream[1])

    def cut_randomly(self, every_s=0.1) -> None:
        """Cut all connections at random intervals averaging ``every_s``."""
        self._command("cut_randomly", every_s)

    def stop_cutting(self) -> None:
        self._command("stop_cutting")

    def truncate_next(self) -> None:
        """The next chunk from the broker is cut in half and the connection closed."""
        self._command("truncate_next")

    @property
    def cuts(self) -> int:
        """Connections cut so far."""
        return self._command("stats")["cuts"]

    @property
    def accepted(self) -> int:
        return self._command("stats")["accepted"]

    @property
    def delay(self) -> float:
        return self._command("stats")["delay"]

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._command("delay", float(seconds))

    @property
    def stall(self) -> bool:
        return self._command("stats")["stall"]

    @stall.setter
    def stall(self, on: bool) -> None:
        self._command("stall", int(bool(on)))

    @property
    def refuse(self) -> bool:
        return self._command("stats")["refuse"]

    @refuse.setter
    def refuse(self, on: bool) -> None:
        """Close new connections at once."""
        self._command("refuse", int(bool(on)))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def proxied_broker(kind="tansu"):
    """A test broker of its own (``kind``: "kafka" or "tansu") behind a
    FaultProxy; it advertises the proxy's port, so all client traffic crosses
    the proxy. Yields (bootstrap servers, proxy)."""
    from kio.testing.broker import free_port, start_broker
    broker_port = free_port()
    proxy = FaultProxy(("127.0.0.1", broker_port)).start()
    try:
        broker = start_broker(kind, port=broker_port, advertised_port=proxy.port)
        try:
            yield f"127.0.0.1:{proxy.port}", proxy
        finally:
            broker.stop()
    finally:
        proxy.stop()


# == the child process ==================================================================================

class _Pipe:
    """One direction of a proxied connection: chunks waiting to be written."""
    __slots__ = ("src", "dst", "chunks", "from_broker")

    def __init__(self, src, dst, from_broker):
        self.src, self.dst, self.from_broker = src, dst, from_broker
        self.chunks = collections.deque()        # (release time, bytes)


class _Proxy:
    def __init__(self, listen, upstream, seed):
        self.listen = listen
        self.listen.setblocking(False)
        self.upstream = upstream
        self.rng = random.Random(seed)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listen, selectors.EVENT_READ, "accept")
        self.sel.register(0, selectors.EVENT_READ, "control")      # stdin: commands
        self.control = b""
        self.pairs = {}                          # client socket -> (client, upstream, [pipe c->u, pipe u->c])
        self.connecting = set()                  # upstream sockets not yet connected
        self.delay = 0.0
        self.stall = False
        self.refuse = False
        self.truncate = False
        self.cuts = 0
        self.accepted = 0
        self.cut_every = None
        self.next_cut = None
        self.running = True

    # -- commands ----------------------------------------------------------------------
    def command(self, line):
        words = line.split()
        if not words:
            return None
        cmd, args = words[0], words[1:]
        if cmd == "ping":
            return "pong"
        if cmd == "stop":
            self.running = False
            self.cut_all(count=False)
            return True
        if cmd == "cut_all":
            return self.cut_all()
        if cmd == "cut_randomly":
            self.cut_every = float(args[0])
            self._schedule_cut()
            return True
        if cmd == "stop_cutting":
            self.cut_every = self.next_cut = None
            return True
        if cmd == "truncate_next":
            self.truncate = True
            return True
        if cmd == "delay":
            self.delay = float(args[0])
            return True
        if cmd == "stall":
            self.stall = args[0] == "1"
            return True
        if cmd == "refuse":
            self.refuse = args[0] == "1"
            return True
        if cmd == "retarget":
            self.upstream = (args[0], int(args[1]))
            return True
        if cmd == "stats":
            return {"cuts": self.cuts, "accepted": self.accepted, "delay": self.delay,
                    "stall": self.stall, "refuse": self.refuse}
        return f"unknown command {cmd!r}"

    def _schedule_cut(self):
        self.next_cut = time.monotonic() + self.rng.uniform(0.2, 1.8) * self.cut_every

    # -- connections -------------------------------------------------------------------
    def accept(self):
        while True:
            try:
                client, _ = self.listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            self.accepted += 1
            if self.refuse:
                client.close()
                continue
            client.setblocking(False)
            up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            up.setblocking(False)
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = up.connect_ex(self.upstream)
            if err not in (0, 115, 36):          # EINPROGRESS (Linux, BSD)
                client.close()
                up.close()
                continue
            pipes = [_Pipe(client, up, False), _Pipe(up, client, True)]
            pair = (client, up, pipes)
            self.pairs[client] = pair
            self.connecting.add(up)
            self.sel.register(client, selectors.EVENT_READ, pair)
            self.sel.register(up, selectors.EVENT_WRITE, pair)

    def _rst(self, s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self._close(s)

    def _close(self, s):
        try:
            self.sel.unregister(s)
        except (KeyError, ValueError):
            pass
        try:
            s.close()
        except OSError:
            pass

    def drop(self, pair, reset=False):
        client, up, _ = pair
        if self.pairs.pop(client, None) is None:
            return False
        self.connecting.discard(up)
        for s in (client, up):
            self._rst(s) if reset else self._close(s)
        return True

    def cut_all(self, count=True):
        n = 0
        for pair in list(self.pairs.values()):
            n += self.drop(pair, reset=True)
        if count:
            self.cuts += n
        return n

    # -- data ----------------------------------------------------------------------------
    def io(self, pair, sock, mask):
        client, up, pipes = pair
        if client not in self.pairs:
            return
        if sock is up and up in self.connecting:
            if up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.drop(pair)
                return
            self.connecting.discard(up)
        if mask & selectors.EVENT_READ:
            pipe = pipes[0] if sock is client else pipes[1]
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                self.drop(pair)
                return
            if data == b"":
                self.drop(pair)
                return
            if data and not self.stall:
                if pipe.from_broker and self.truncate:
                    self.truncate = False
                    pipe.chunks.append((time.monotonic() + self.delay, data[:max(1, len(data) // 2)]))
                    pipe.chunks.append((None, None))             # then close
                else:
                    pipe.chunks.append((time.monotonic() + self.delay, data))
        self.flush(pair)

    def flush(self, pair):
        """Write what is due on both directions; update interest."""
        client, up, pipes = pair
        now = time.monotonic()
        for pipe in pipes:
            if pipe.dst in self.connecting:
                continue
            while pipe.chunks:
                due, data = pipe.chunks[0]
                if data is None:
                    self.drop(pair)
                    return
                if due > now:
                    break
                try:
                    n = pipe.dst.send(data)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.drop(pair)
                    return
                if n < len(data):
                    pipe.chunks[0] = (due, data[n:])
                    break
                pipe.chunks.popleft()
        for s in (client, up):
            out = pipes[0] if s is up else pipes[1]       # what waits to be written to s
            if s in self.connecting:
                want = selectors.EVENT_WRITE
            else:
                want = selectors.EVENT_READ
                if out.chunks and out.chunks[0][0] is not None and out.chunks[0][0] <= now:
                    want |= selectors.EVENT_WRITE
            if self.sel.get_key(s).events != want:
                self.sel.modify(s, want, pair)

    def next_timer(self):
        best = self.next_cut
        for _, _, pipes in self.pairs.values():
            for pipe in pipes:
                if pipe.chunks and pipe.chunks[0][0] is not None:
                    if best is None or pipe.chunks[0][0] < best:
                        best = pipe.chunks[0][0]
        return best

    def run(self):
        while self.running:
            timer = self.next_timer()
            timeout = None if timer is None else max(0.0, timer - time.monotonic())
            for key, mask in self.sel.select(timeout):
                if key.data == "accept":
                    self.accept()
                elif key.data == "control":
                    data = os.read(0, 4096)
                    if not data:                 # the test process is gone
                        self.running = False
                        break
                    self.control += data
                    while b"\n" in self.control:
                        line, self.control = self.control.split(b"\n", 1)
                        os.write(1, (json.dumps(self.command(line.decode())) + "\n").encode())
                else:
                    self.io(key.data, key.fileobj, mask)
            now = time.monotonic()
            if self.next_cut is not None and now >= self.next_cut:
                self.cut_all()
                self._schedule_cut()
            for pair in list(self.pairs.values()):
                _, _, pipes = pair
                if any(p.chunks for p in pipes):
                    self.flush(pair)
        self.cut_all(count=False)


def _main(argv):
    fd, host, port, seed = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    listen = socket.socket(fileno=fd)
    _Proxy(listen, (host, port), seed).run()


if __name__ == "__main__":
    _main(sys.argv[1:])
