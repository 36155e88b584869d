"""Counting the calls of one method of a live object, for the tests that
check what a round no longer does (a quiet producer's round, a wake-up)."""
import functools

import kproto.client
import kproto.producer.core


class Calls:
    """Counts the calls of one method of ``obj``: an instance attribute
    shadowing the method, which it calls on."""

    def __init__(self, obj, name):
        self.n = 0
        self.fn = getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        self.n += 1
        return self.fn(*args, **kwargs)


class PatchableNetworkClient(kproto.client.NetworkClient):
    """A NetworkClient whose instances take attributes (:class:`Calls`, a
    method replaced): compiled, NetworkClient is an extension type whose
    instances refuse them."""


def patchable_network_clients(monkeypatch, client_class=PatchableNetworkClient):
    """Producer cores made from now on (in this test) get a ``client_class``
    client (``network_for``'s seam)."""
    monkeypatch.setattr(kproto.producer.core, "network_for",
                        functools.partial(kproto.client.network_for, client_class=client_class))
