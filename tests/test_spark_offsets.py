"""The kio-kafka source's option parsing and range planning, without Spark."""
import pytest

from kio.spark.offsets import OffsetRange, consumer_config, normalize, plan_ranges
from kproto.cluster import TopicPartition as TP
from kproto.errors import ConfigError

TOPICS = {"orders": 2, "orders-eu": 1, "audit": 1}
FIRST = {TP("orders", 0): 5, TP("orders", 1): 0, TP("orders-eu", 0): 0, TP("audit", 0): 0}
LAST = {TP("orders", 0): 50, TP("orders", 1): 30, TP("orders-eu", 0): 0, TP("audit", 0): 7}


def plan(**options):
    return plan_ranges(normalize(options), lambda: TOPICS, lambda tps: {tp: FIRST[tp] for tp in tps},
                       lambda tps: {tp: LAST[tp] for tp in tps})


def test_subscribe_earliest_to_latest_skips_empty_partitions():
    assert plan(subscribe="orders,orders-eu") == [OffsetRange("orders", 0, 5, 50), OffsetRange("orders", 1, 0, 30)]


def test_json_offsets_with_earliest_and_latest_markers_and_lower_cased_names():
    opts = {"subscribePattern": "orders.*", "startingOffsets": '{"orders": {"0": 10, "1": -2}}',
            "ENDINGOFFSETS": '{"orders": {"0": 20, "1": -1}}'}
    assert plan(**opts) == [OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 1, 0, 30)]


def test_assign_and_latest_start():
    assert plan(assign='{"audit": [0]}') == [OffsetRange("audit", 0, 0, 7)]
    assert plan(assign='{"audit": [0]}', startingOffsets="latest") == []


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of the options"),
    ({"subscribe": "orders", "assign": '{"orders": [0]}'}, "got subscribe, assign"),
    ({"subscribe": "nope"}, r"\['nope'\] do not exist"),
    ({"assign": "orders"}, "assign must be JSON"),
    ({"subscribe": "orders", "startingOffsets": "begining"}, "startingOffsets must be"),
    ({"subscribe": "orders", "endingOffsets": '{"orders": 5}'}, "must map topic"),
    ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": 60}}'}, "after the ending offset"),
])
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        plan(**options)


def test_consumer_config_takes_kafka_prefixed_options():
    conf = consumer_config(normalize({"kafka.bootstrap.servers": "h:1", "kafka.fetch.max.bytes": "10",
                                      "subscribe": "t"}))
    assert conf == {"bootstrap.servers": "h:1", "fetch.max.bytes": "10", "enable.auto.commit": "false"}
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        consumer_config({"subscribe": "t"})
