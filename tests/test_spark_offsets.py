"""The kio-kafka source's option parsing and range planning, without Spark."""
import pytest

from kio.spark.offsets import DataLossError, OffsetRange, consumer_config, normalize, plan_ranges
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
    opts = {"subscribePattern": "orders$", "startingOffsets": '{"orders": {"0": 10, "1": -2}}',
            "ENDINGOFFSETS": '{"orders": {"0": 20, "1": -1}}'}
    assert plan(**opts) == [OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 1, 0, 30)]


def test_assign_reads_the_assigned_partitions():
    assert plan(assign='{"audit": [0]}') == [OffsetRange("audit", 0, 0, 7)]
    assert plan(assign='{"orders": [1]}', startingOffsets='{"orders": {"1": 3}}') == [OffsetRange("orders", 1, 3, 30)]


def test_assign_reads_the_partitions_that_exist_and_warns_of_the_others(caplog):
    """As Spark's connector: partitions named by assign that the cluster does
    not have (orders-7 of a 2-partition topic, a topic that does not exist)
    are left out with a WARNING, never waited for."""
    with caplog.at_level("WARNING", logger="kio.spark"):
        got = plan(assign='{"orders": [1, 7], "nope": [0]}')
    assert got == [OffsetRange("orders", 1, 0, 30)]
    assert "2 partition(s) the cluster does not have, not read: nope-0, orders-7" in caplog.text


def test_a_batch_starting_below_the_log_start_fails_unless_fail_on_data_loss_is_false(caplog):
    """orders-0's log starts at 5: a batch read from 2 fails by default (as
    Spark's connector), reads from 5 with failOnDataLoss=false and says how
    many records it skipped; an explicit end below the log start reads nothing."""
    opts = {"subscribe": "orders", "startingOffsets": '{"orders": {"0": 2, "1": 0}}'}
    with pytest.raises(DataLossError, match=r"orders-0: offset 2 is no longer in Kafka \(the partition's log "
                                            r"starts at 5\): some data may have been lost"):
        plan(**opts)
    with pytest.raises(DataLossError):
        plan(**opts, failOnDataLoss="TRUE")
    with caplog.at_level("WARNING", logger="kio.spark"):
        got = plan(**opts, failOnDataLoss="false")
    assert got == [OffsetRange("orders", 0, 5, 50), OffsetRange("orders", 1, 0, 30)]
    assert "orders-0: offsets [2, 5) are no longer in Kafka (the log starts at 5); skipping 3 record(s)" \
        in caplog.text
    assert plan(**opts, failOnDataLoss="false", endingOffsets='{"orders": {"0": 4, "1": 0}}') == []
    with pytest.raises(ConfigError, match="failOnDataLoss must be true or false"):
        plan(**opts, failOnDataLoss="sometimes")


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of the options"),
    ({"subscribe": "orders", "assign": '{"orders": [0]}'}, "got subscribe, assign"),
    ({"subscribe": "nope"}, r"\['nope'\] do not exist"),
    ({"assign": "orders"}, "assign must be JSON"),
    ({"subscribe": "orders", "startingOffsets": "begining"}, "startingOffsets must be"),
    ({"subscribe": "orders", "endingOffsets": '{"orders": 5}'}, "must map topic"),
    ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": 60, "1": 0}}'}, "after the ending offset"),
    # what Spark's Kafka source refuses on a batch read
    ({"subscribe": "orders", "startingOffsets": "latest"}, "can't be latest for batch queries"),
    ({"subscribe": "orders", "endingOffsets": "earliest"}, "can't be earliest for batch queries"),
    ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": -1, "1": 0}}'}, "orders-0 can't be latest"),
    ({"subscribe": "orders", "endingOffsets": '{"orders": {"0": 9, "1": -2}}'}, "orders-1 can't be earliest"),
    ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": -3, "1": 0}}'}, "-3 for orders-0 is not an offset"),
    ({"subscribePattern": "orders.*", "startingOffsets": '{"orders": {"0": 1, "1": 0}}'}, "every partition"),
])
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        plan(**options)


def test_consumer_config_takes_kafka_prefixed_options():
    conf = consumer_config(normalize({"kafka.bootstrap.servers": "h:1", "kafka.fetch.max.bytes": "10",
                                      "subscribe": "t"}))
    # auto.offset.reset is set, never left to kio's default (latest would jump to the end silently)
    assert conf == {"bootstrap.servers": "h:1", "fetch.max.bytes": "10", "enable.auto.commit": "false",
                    "auto.offset.reset": "none"}
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        consumer_config({"subscribe": "t"})


@pytest.mark.parametrize("key", ["auto.offset.reset", "key.deserializer", "value.deserializer",
                                 "enable.auto.commit", "interceptor.classes"])
def test_consumer_settings_sparks_source_refuses_are_refused(key):
    with pytest.raises(ConfigError, match=f"'kafka.{key}' is not supported"):
        consumer_config(normalize({"kafka.bootstrap.servers": "h:1", f"kafka.{key}": "x"}))


def test_include_headers_option():
    from kio.spark.offsets import include_headers
    assert include_headers({}) is False
    assert include_headers(normalize({"includeHeaders": "TRUE"})) is True
    with pytest.raises(ConfigError, match="includeHeaders must be true or false"):
        include_headers(normalize({"includeHeaders": "yes"}))


# -- streaming ------------------------------------------------------------------------------
from kio.spark.offsets import (  # noqa: E402
    DataLossError, offsets_from_json, offsets_to_json, stream_initial, stream_latest, stream_options,
    stream_ranges,
)


def first_of(tps):
    return {tp: FIRST[tp] for tp in tps}


def last_of(tps):
    return {tp: LAST[tp] for tp in tps}


ORDERS = [TP("orders", 0), TP("orders", 1)]


def test_stream_offsets_round_trip_in_sparks_json_shape():
    pos = {TP("orders", 1): 30, TP("orders", 0): 5, TP("audit", 0): 7}
    assert offsets_to_json(pos) == {"audit": {"0": 7}, "orders": {"0": 5, "1": 30}}
    assert offsets_from_json(offsets_to_json(pos)) == pos


def test_stream_starts_at_latest_by_default_and_takes_earliest_or_json():
    assert stream_initial({}, ORDERS, first_of, last_of) == {TP("orders", 0): 50, TP("orders", 1): 30}
    assert stream_initial(normalize({"startingOffsets": "earliest"}), ORDERS, first_of, last_of) == \
        {TP("orders", 0): 5, TP("orders", 1): 0}
    spec = normalize({"startingOffsets": '{"orders": {"0": 20, "1": -1}}'})
    assert stream_initial(spec, ORDERS, first_of, last_of) == {TP("orders", 0): 20, TP("orders", 1): 30}


def test_stream_latest_reads_everything_and_new_partitions_from_their_beginning():
    start = {TP("orders", 0): 10}
    end = stream_latest(start, ORDERS + [TP("audit", 0)], first_of, last_of)
    assert end == {TP("orders", 0): 50, TP("orders", 1): 30, TP("audit", 0): 7}
    assert stream_ranges(start, end, first_of) == [
        OffsetRange("audit", 0, 0, 7), OffsetRange("orders", 0, 10, 50), OffsetRange("orders", 1, 0, 30)]
    # nothing new: the same offsets, no ranges
    assert stream_latest(end, ORDERS + [TP("audit", 0)], first_of, last_of) == end
    assert stream_ranges(end, end, first_of) == []


def test_max_offsets_per_trigger_shares_the_batch_by_backlog_and_always_moves_on():
    start = {TP("orders", 0): 10, TP("orders", 1): 0}           # backlogs 40 and 30
    end = stream_latest(start, ORDERS, first_of, last_of, max_rows=7)
    assert end == {TP("orders", 0): 14, TP("orders", 1): 3}
    # a backlog too small for a whole share still gets one record
    end = stream_latest({TP("orders", 0): 10, TP("orders", 1): 29}, ORDERS, first_of, last_of, max_rows=4)
    assert end == {TP("orders", 0): 13, TP("orders", 1): 30}
    # repeated micro-batches reach the end and never overshoot it
    pos, batches = start, 0
    while True:
        nxt = stream_latest(pos, ORDERS, first_of, last_of, max_rows=7)
        if nxt == pos:
            break
        assert sum(r.end - r.start for r in stream_ranges(pos, nxt, first_of)) <= 8
        pos, batches = nxt, batches + 1
    assert pos == {TP("orders", 0): 50, TP("orders", 1): 30} and batches >= 10


def test_available_now_stops_at_the_offsets_it_began_with():
    target = {TP("orders", 0): 20, TP("orders", 1): 30}
    end = stream_latest({TP("orders", 0): 10}, ORDERS + [TP("audit", 0)], first_of, last_of, target=target)
    assert end == {TP("orders", 0): 20, TP("orders", 1): 30}        # audit came later: left out


def test_lost_records_fail_the_stream_unless_fail_on_data_loss_is_false():
    start = {TP("orders", 0): 2, TP("orders", 1): 0}               # orders-0 now begins at 5
    end = {TP("orders", 0): 50, TP("orders", 1): 30}
    with pytest.raises(DataLossError, match=r"orders-0: offset 2 is no longer in Kafka \(the partition's log starts at 5\): "
                                                 r"some data may have been lost.*failOnDataLoss=false"):
        stream_ranges(start, end, first_of)
    assert stream_ranges(start, end, first_of, fail_on_data_loss=False)[0] == OffsetRange("orders", 0, 5, 50)
    # offsets that went back (a topic deleted and created again) are data loss too
    gone_back = stream_latest({TP("orders", 1): 99}, ORDERS, first_of, last_of)
    with pytest.raises(DataLossError, match=r"orders-1: the stream was at offset 99 but the partition now ends at 30"):
        stream_ranges({TP("orders", 1): 99}, gone_back, first_of)
    assert OffsetRange("orders", 1, 0, 30) in stream_ranges({TP("orders", 1): 99}, gone_back, first_of,
                                                            fail_on_data_loss=False)


@pytest.mark.parametrize("options, message", [
    ({"endingOffsets": "latest"}, "endingOffsets is for batch reads"),
    ({"maxOffsetsPerTrigger": "0"}, "must be a positive integer"),
    ({"maxOffsetsPerTrigger": "lots"}, "must be a positive integer"),
    ({"minOffsetsPerTrigger": "-5"}, "minOffsetsPerTrigger must be a positive integer"),
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"}, "above maxOffsetsPerTrigger"),
    ({"maxTriggerDelay": "5s"}, "set that too"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
])
def test_bad_stream_options_are_clear_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        stream_options(normalize(options))


def test_stream_options_defaults_and_values():
    assert stream_options({}) == (None, True, None, 15 * 60 * 1000)
    assert stream_options(normalize({"maxOffsetsPerTrigger": "500", "failOnDataLoss": "False"}))[:2] == (500, False)
    got = stream_options(normalize({"minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s"}))
    assert (got.min_rows, got.max_trigger_delay_ms) == (100, 30_000)
    from kio.spark.offsets import parse_duration_ms
    assert [parse_duration_ms(x, "d") for x in ("250", "250ms", "2s", "15m", "1h")] == [
        250, 250, 2000, 900_000, 3_600_000]


def test_min_offsets_per_trigger_waits_for_rows_at_most_max_trigger_delay():
    from kio.spark.offsets import delay_batch
    start = {TP("orders", 0): 10, TP("orders", 1): 0}
    few = {TP("orders", 0): 12, TP("orders", 1): 3}              # 5 new records
    enough = {TP("orders", 0): 20, TP("orders", 1): 3}           # 13
    assert delay_batch(None, 1000, start, few, 5000, 4999) is False
    assert delay_batch(10, 1000, start, few, 5000, 4500) is True       # too few, not waited long
    assert delay_batch(10, 1000, start, enough, 5000, 4500) is False
    assert delay_batch(10, 1000, start, few, 5000, 4000) is False      # waited maxTriggerDelay
    # a partition not in start (new since) is not counted: its first offset is not known here
    assert delay_batch(3, 1000, {}, {TP("audit", 0): 7}, 10, 0) is True
