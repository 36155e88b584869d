"""The threading drivers' wake-up protocol (kio._threaded.network.SocketLoop): a
wake() racing the network thread's drain of the wake-up pipe must not be
lost, else a core with no timer sleeps in select for good."""
from kio._threaded.network import SocketLoop
from kproto.producer import ProducerCore


class _RacingPipe:
    """The read end of the wake-up pipe, calling ``loop.wake()`` (as an
    application thread would) in the middle of the network thread's drain."""

    def __init__(self, sock, loop):
        self.sock, self.loop, self.raced = sock, loop, False

    def recv(self, n):
        data = self.sock.recv(n)
        if not self.raced:
            self.raced = True
            self.loop.wake()
        return data

    def fileno(self):
        return self.sock.fileno()


def _woken(loop, timeout=0.2):
    return any(key.data is None for key, _ in loop.select(timeout))


def test_a_wake_during_the_drain_does_not_swallow_the_next_wake():
    loop = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    try:
        loop.wake()
        events = loop.select(1.0)
        real = loop._wake_r
        loop._wake_r = _RacingPipe(real, loop)
        loop.handle(events, 0)               # drains, with a wake() racing it
        loop._wake_r = real
        assert loop.woken
        # Whatever the race left in the pipe, the next wake() must reach select.
        while _woken(loop, 0):
            loop.handle([(k, m) for k, m in loop.select(0) if k.data is None], 0)
        loop.wake()
        assert _woken(loop), "a wake() after the race was lost: select would sleep for good"
    finally:
        loop.close()


def test_repeated_wakes_each_reach_select_once_drained():
    loop = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    try:
        for _ in range(3):
            loop.wake()
            loop.wake()                       # a second one before the drain sends nothing more
            events = loop.select(1.0)
            assert any(k.data is None for k, _ in events)
            loop.handle(events, 0)
            assert not _woken(loop, 0)        # drained: nothing left to wake select
    finally:
        loop.close()

