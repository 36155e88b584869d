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
    return any(fd == loop.wake_fd for fd, _ in loop.select(timeout))


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
            loop.handle([(fd, m) for fd, m in loop.select(0) if fd == loop.wake_fd], 0)
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
            assert any(fd == loop.wake_fd for fd, _ in events)
            loop.handle(events, 0)
            assert not _woken(loop, 0)        # drained: nothing left to wake select
    finally:
        loop.close()



class _IdleCore:
    """A core with nothing to do (no connection, no timer): counts the rounds
    the network thread runs over it; ``due`` is its next deadline."""

    def __init__(self):
        self.config = ProducerCore(bootstrap_servers=["127.0.0.1:9"]).config
        self.client = self
        self.progress = 0
        self.polls = 0
        self.due = None

    def poll(self, now):
        self.polls += 1
        return []

    def next_deadline(self, now):
        return self.due

    def nodes_with_output(self):
        return []

    def take_errors(self):
        return []

    def has_errors(self):
        return False

    def close(self, now):
        return []


def _wait_for(cond, timeout=5.0):
    import time
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "the network thread did not get there in time"
        time.sleep(0.005)


def test_a_wake_that_asks_no_round_only_moves_the_network_threads_deadline():
    import time

    from kio._shared.common import now_ms
    from kio._threaded.driver import ThreadDriver
    core, driver = _IdleCore(), ThreadDriver()
    driver._start_network(core, "test-network-thread")
    try:
        _wait_for(lambda: core.polls == 1)        # its first round; then it sleeps with no timer
        for _ in range(5):                        # send() opening batches: no round each
            driver._net.wake(round=False)
            time.sleep(0.01)
        assert core.polls == 1
        with driver._lock:                        # a deadline 50 ms ahead: the next round comes then
            core.due = now_ms() + 50
        driver._net.wake(round=False)
        _wait_for(lambda: core.polls >= 2)
        with driver._lock:
            core.due = None                       # nothing due again: it sleeps with no timer
        time.sleep(0.05)
        seen = core.polls
        driver._net.wake()                        # a wake-up that asks for a round gets one
        _wait_for(lambda: core.polls > seen)
    finally:
        driver._stop_network()                    # the thread closes its SocketLoop as it ends


def test_wake_flags_a_round_only_when_asked():
    loop = SocketLoop(ProducerCore(bootstrap_servers=["127.0.0.1:9"]))
    try:
        loop.wake(round=False)
        assert not loop.round_wanted
        loop.handle(loop.select(1.0), 0)
        loop.wake()
        assert loop.round_wanted
    finally:
        loop.close()
