"""Bad configuration and input: each a specific exception whose message
says what and why, for the producer, the consumer and the admin client -
raised before anything touches the network."""
import pytest

from kio import Admin, Consumer, Producer
from kproto.errors import ConfigError
from kproto.producer import RecordTooLargeError

CLIENTS = {"producer": Producer, "consumer": Consumer, "admin": Admin}
BASE = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("key,value,match", [
    ("request.timeout.mss", 1000, r"unknown .*request\.timeout\.mss.*did you mean 'request\.timeout\.ms'"),
    ("request.timeout.ms", "soon", r"invalid value 'soon' for request\.timeout\.ms"),
    ("request.timeout.ms", 0, r"request\.timeout\.ms"),
    ("security.protocol", "TLS", r"security\.protocol.*must be one of"),
    ("sasl.mechanism", "KERBEROS", r"sasl\.mechanism"),
    ("ssl.cafile", "/tmp/ca.pem", r"ssl\.cafile is set but security\.protocol is PLAINTEXT"),
])
def test_bad_common_settings(kind, key, value, match):
    with pytest.raises(ConfigError, match=match):
        CLIENTS[kind]({**BASE, key: value})


@pytest.mark.parametrize("kind", CLIENTS)
def test_bootstrap_servers_is_required(kind):
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        CLIENTS[kind]({})


def test_producer_conflicts_and_oversized_records(bootstrap):
    with pytest.raises(ConfigError, match="acks"):
        Producer(BASE, enable_idempotence=True, acks=1)
    with pytest.raises(ConfigError, match="linger.ms"):
        Producer(BASE, linger_ms=-1)
    # as in Java, the size is checked once the topic's metadata is known
    with Producer(bootstrap_servers=bootstrap, max_request_size=1000) as p:
        with pytest.raises(RecordTooLargeError, match=r"\d+ bytes .* larger than max\.request\.size \(1000\)"):
            p.send("t", b"x" * 5000, partition=0)


def test_consumer_conflicts():
    with pytest.raises(ConfigError, match="enable.auto.commit=true needs group.id"):
        Consumer(BASE, enable_auto_commit=True)
    with pytest.raises(ConfigError, match="heartbeat.interval.ms .* must be lower than session.timeout.ms"):
        Consumer(BASE, group_id="g", heartbeat_interval_ms=10000, session_timeout_ms=6000)
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        Consumer(BASE, auto_offset_reset="beginning")
    with pytest.raises(ConfigError, match="group.instance.id needs group.id"):
        Consumer(BASE, group_instance_id="static-1")


def test_sasl_settings_need_their_credentials():
    with pytest.raises(ConfigError, match="needs sasl.username and sasl.password"):
        Producer(BASE, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    with pytest.raises(ConfigError, match="token.provider"):
        Admin(BASE, security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")
