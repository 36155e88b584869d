"""Every sans-IO core offers its driver the one contract of kproto.driver:
the same methods with the same parameters, so one driver loop fits them all."""
import inspect

import pytest

from kproto.admin import AdminCore
from kproto.consumer.core import ConsumerCore
from kproto.driver import SansIOCore
from kproto.producer import ProducerCore
from kproto.share.core import ShareConsumerCore

CORES = [ProducerCore, ConsumerCore, AdminCore, ShareConsumerCore]
CONTRACT = [name for name, v in vars(SansIOCore).items()
            if callable(v) and not name.startswith("_")]


def test_the_contract_names_the_driver_methods():
    assert sorted(CONTRACT) == sorted(["poll", "next_deadline", "events", "connected", "received",
                                       "disconnected", "nodes_with_output", "output", "sent"])


@pytest.mark.parametrize("core", CORES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", CONTRACT)
def test_every_core_has_each_contract_method_with_its_parameters(core, method):
    want = inspect.signature(getattr(SansIOCore, method))
    have = inspect.signature(getattr(core, method))
    # The contract's parameters come first, by the same names; a core may add
    # optional ones after them (the consumer's events(ack=True)).
    want_names = list(want.parameters)
    have_params = list(have.parameters.values())
    assert [p.name for p in have_params[:len(want_names)]] == want_names, (core, method, have)
    assert all(p.default is not inspect.Parameter.empty for p in have_params[len(want_names):])


@pytest.mark.parametrize("core, settings", [(ProducerCore, {}), (ConsumerCore, {"group_id": "g"}),
                                             (AdminCore, {}), (ShareConsumerCore, {"group_id": "g"})],
                         ids=lambda c: getattr(c, "__name__", ""))
def test_each_core_asks_for_its_bootstrap_connection_the_same_way(core, settings):
    from kproto.client import Connect
    c = core(bootstrap_servers=["127.0.0.1:9"], **settings)
    assert isinstance(c, SansIOCore)
    # No I/O happened: the core asks the driver to open the bootstrap socket,
    # with a deadline (connection setup timeout) to wake it if nothing comes.
    assert c.poll(0) == [Connect(node=-1, host="127.0.0.1", port=9)]
    assert c.next_deadline(0) == 10000
    assert list(c.nodes_with_output()) == []
