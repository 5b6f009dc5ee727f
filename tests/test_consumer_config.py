"""Consumer configuration: keyword arguments, AUTOSCALER_* variables, clear errors."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.kafka_client.properties import aiokafka_properties
from consumer_sdk.sink import CallbackSink, Record, Sink, records_table
from contract.settings import ConfigError

BASE: dict[str, Any] = {
    "bootstrap_servers": "k1:9092,k2:9092",
    "group": "orders-sink",
    "topics": ("orders",),
    "capacity": 5000.0,
}


def test_keyword_arguments_and_defaults() -> None:
    config = ConsumerConfig(**BASE, member_identity="sink-0")
    assert config.snapshot_topic == "orders-sink.autoscaler.speeds"
    assert config.heuristic == "repair" and config.capacity_unit == "records/s"
    assert config.batch_bytes == 16 * 1024 * 1024 and config.wait_time_secs == 5.0


def test_environment_fills_what_arguments_leave_out() -> None:
    env = {
        "AUTOSCALER_BOOTSTRAP_SERVERS": "k:9092",
        "AUTOSCALER_GROUP": "g",
        "AUTOSCALER_TOPICS": "a, b ,c",
        "AUTOSCALER_CAPACITY": "250.5",
        "AUTOSCALER_HEURISTIC": "mbfp",
        "AUTOSCALER_BATCH_BYTES": "4194304",
        "AUTOSCALER_WAIT_TIME_SECS": "2.5",
        "AUTOSCALER_MEMBER_IDENTITY": "sink-3",
    }
    config = ConsumerConfig.from_env(env, heuristic="mwf")
    assert config.topics == ("a", "b", "c") and config.capacity == 250.5
    assert config.heuristic == "mwf"  # the argument wins over the variable
    assert config.batch_bytes == 4194304 and config.wait_time_secs == 2.5
    assert config.member_identity == "sink-3"


def test_the_freshness_bound_is_on_by_default_and_a_chosen_batch_wait_keeps_its_meaning() -> None:
    assert ConsumerConfig(**BASE).staleness_bound_s == 1.0
    # A batch wait set before the bound existed: the wait alone, as it was.
    assert ConsumerConfig(**BASE, wait_time_secs=30).staleness_bound_s is None
    assert ConsumerConfig(**BASE, wait_time_secs=30, max_staleness_secs=2).staleness_bound_s == 2
    assert ConsumerConfig(**BASE, max_staleness_secs=0).staleness_bound_s is None
    env = {"AUTOSCALER_MAX_STALENESS_SECS": "0.5", "AUTOSCALER_WAIT_TIME_SECS": "5"}
    assert ConsumerConfig.from_env(env, **BASE).staleness_bound_s == 0.5


def test_a_zone_from_the_downward_api_is_the_rack_and_an_empty_one_is_none() -> None:
    env = {
        "AUTOSCALER_BOOTSTRAP_SERVERS": "k:9092",
        "AUTOSCALER_GROUP": "g",
        "AUTOSCALER_TOPICS": "a",
        "AUTOSCALER_CAPACITY": "10",
        "AUTOSCALER_CLIENT_RACK": "eu-west-1a",
        "AUTOSCALER_RACK_LOCALITY": "replicas",
    }
    config = ConsumerConfig.from_env(env)
    assert config.client_rack == "eu-west-1a" and config.rack_locality == "replicas"
    assert ConsumerConfig.from_env({**env, "AUTOSCALER_CLIENT_RACK": ""}).client_rack is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"bootstrap_servers": "nohost"},
            r"bootstrap_servers \(AUTOSCALER_BOOTSTRAP_SERVERS\) must",
        ),
        ({"group": " "}, r"group \(AUTOSCALER_GROUP\) must be a non-empty"),
        ({"topics": ()}, r"topics \(AUTOSCALER_TOPICS\) must be one or more"),
        ({"capacity": 0.0}, r"capacity \(AUTOSCALER_CAPACITY\) must be a finite number > 0"),
        ({"capacity": float("nan")}, r"capacity \(AUTOSCALER_CAPACITY\) must be a finite"),
        ({"capacity_unit": "MB"}, r"capacity_unit .* must be one of records/s, bytes/s"),
        ({"heuristic": "magic"}, r"heuristic \(AUTOSCALER_HEURISTIC\) must be one of nf"),
        ({"batch_bytes": 10}, r"batch_bytes .* must be an integer in \[1024, 1073741824\]"),
        ({"wait_time_secs": 0}, r"wait_time_secs .* must be a number of seconds in \[0.01, 3600\]"),
        (
            {"max_staleness_secs": 0.05},
            r"max_staleness_secs \(AUTOSCALER_MAX_STALENESS_SECS\) must be a number of seconds "
            r"in \[0.1, 3600\], 0 \(off\) or unset, got 0.05",
        ),
        ({"max_staleness_secs": float("inf")}, r"max_staleness_secs .* \[0.1, 3600\]"),
        ({"writes_in_flight": 0}, r"writes_in_flight .* must be an integer in \[1, 8\]"),
        ({"writes_in_flight": 2.5}, r"writes_in_flight .* must be an integer in \[1, 8\]"),
        ({"fetch_max_bytes": 1000}, r"fetch_max_bytes .* must be an integer in \[65536, "),
        (
            {"max_record_batch_bytes": 1000},
            r"max_record_batch_bytes \(AUTOSCALER_MAX_RECORD_BATCH_BYTES\) must be an integer in "
            r"\[1048576, 1073741824\]",
        ),
        (
            {"share_max_poll_records": 0},
            r"share_max_poll_records \(AUTOSCALER_SHARE_MAX_POLL_RECORDS\) must be an integer in "
            r"\[1, 10000\]",
        ),
        (
            {"revoke_mode": "drop"},
            r"revoke_mode \(AUTOSCALER_REVOKE_MODE\) must be one of release, flush",
        ),
        (
            {"heartbeat_interval_ms": 20_000},
            r"heartbeat_interval_ms .* in \[50, session_timeout_ms\)",
        ),
        ({"security_protocol": "SASL_SSL"}, r"sasl_mechanism .* set when security_protocol"),
        ({"sasl_mechanism": "MD5"}, r"sasl_mechanism .* must be one of PLAIN"),
        ({"leader_delay_secs": 9}, r"leader_delay_secs .* must be in \[0, 5\]"),
        ({"group": "sink (eu)"}, r"snapshot_topic .* invalid when the group id has other"),
        ({"snapshot_topic": "a/b"}, r"snapshot_topic \(AUTOSCALER_SNAPSHOT_TOPIC\) must be"),
        ({"metrics_port": 70000}, r"metrics_port .* must be a TCP port in \[1, 65535\]"),
        (
            {"rebalance_protocol": "sticky"},
            r"rebalance_protocol \(AUTOSCALER_REBALANCE_PROTOCOL\) must be one of cooperative",
        ),
        ({"bootstrap_servers": "host:notaport"}, r"port in \[1, 65535\], got 'host:notaport'"),
        ({"bootstrap_servers": "host:0"}, r"bootstrap_servers .* port in \[1, 65535\]"),
        ({"topics": ("..",)}, r"topics .* not '\.' or '\.\.'"),
        ({"max_poll_interval_ms": 10}, r"max_poll_interval_ms .* >= 1000"),
        ({"client_rack": ""}, r"client_rack \(AUTOSCALER_CLIENT_RACK\) must be 1-255 characters"),
        ({"client_rack": "eu west"}, r"client_rack .* none of them whitespace"),
        ({"rack_locality": "follower"}, r"rack_locality .* must be one of leader, replicas"),
        (
            {"client_id": "sink\n0"},
            r"client_id \(AUTOSCALER_CLIENT_ID\) must be up to 255 printable",
        ),
        (
            {"kafka_properties": {"fetch.min.bytes": "0"}},
            r"kafka_properties .* must be fetch.min.bytes as an integer in \[1, 1073741824\]",
        ),
        (
            {"kafka_properties": {"enable.auto.commit": "true"}},
            r"must be free of enable.auto.commit: the SDK sets it itself, got",
        ),
        (
            {"kafka_properties": {"group.id": "other"}},
            r"free of group.id: the SDK sets it itself from its setting group",
        ),
        (
            {"kafka_properties": {"linger.ms": "5"}},
            r"must be properties of connections.max.idle.ms, .*; linger.ms is not one",
        ),
        (
            {"kafka_properties": {"fetch.min.bytes": "1"}, "group_type": "share"},
            r"kafka_properties .* must be empty with group_type share",
        ),
        (
            {"ssl_cafile": "/no/such/ca.pem", "security_protocol": "SSL"},
            r"ssl_cafile \(AUTOSCALER_SSL_CAFILE\) must be a readable file \(PEM\)"
            r".*got '/no/such/ca.pem'",
        ),
    ],
)
def test_bad_values_name_the_field_and_range(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ConsumerConfig(**{**BASE, **changes})


def test_kafka_properties_by_their_java_names_reach_the_client_and_the_client_id_names_it() -> None:
    config = ConsumerConfig.from_env(
        {
            "AUTOSCALER_KAFKA_PROPERTIES": "fetch.min.bytes=65536, request.timeout.ms=45000",
            "AUTOSCALER_MEMBER_IDENTITY": "sink-2",
        },
        **BASE,
    )
    assert config.kafka_properties == {"fetch.min.bytes": "65536", "request.timeout.ms": "45000"}
    assert aiokafka_properties(config.kafka_properties) == {
        "fetch_min_bytes": 65536,
        "request_timeout_ms": 45000,
    }
    assert config.kafka_client_id == "kafka-autoscaler-orders-sink-sink-2"
    assert ConsumerConfig(**BASE, client_id="orders-eu").kafka_client_id == "orders-eu"
    with pytest.raises(ConfigError, match=r"AUTOSCALER_KAFKA_PROPERTIES must be key=value pairs"):
        ConsumerConfig.from_env({"AUTOSCALER_KAFKA_PROPERTIES": "fetch.min.bytes"}, **BASE)


def test_environment_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"AUTOSCALER_CAPACITY must be a number, got 'fast'"):
        ConsumerConfig.from_env(
            {"AUTOSCALER_CAPACITY": "fast"}, **{k: v for k, v in BASE.items() if k != "capacity"}
        )
    with pytest.raises(ConfigError, match=r"group is required \(argument or AUTOSCALER_GROUP\)"):
        ConsumerConfig.from_env({}, bootstrap_servers="k:1", topics="t", capacity=1.0)
    with pytest.raises(ConfigError, match="unknown configuration field"):
        ConsumerConfig.from_env({}, **BASE, colour="red")


def test_sasl_settings_pass_through_to_the_client() -> None:
    config = ConsumerConfig(
        **BASE,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="u",
        sasl_plain_password="p",
    )
    assert config.kafka_client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }


def test_callback_sink_accepts_sync_and_async_functions() -> None:
    got: list[int] = []

    async def async_write(topic: str, records: Sequence[Record]) -> None:
        got.extend(r.offset for r in records)

    async def exercise(sink: CallbackSink) -> None:
        assert isinstance(sink, Sink)
        await sink.write("t", records_table([Record("t", 0, 7, 0, None, b"v")]))
        assert await sink.resume_offsets([]) == {}

    asyncio.run(exercise(CallbackSink(lambda t, rs: got.extend(r.offset for r in rs))))
    asyncio.run(exercise(CallbackSink(async_write)))
    assert got == [7, 7]
    with pytest.raises(TypeError, match="function must be callable"):
        CallbackSink(42)  # type: ignore[arg-type]


def test_a_sync_callback_runs_off_the_event_loop_one_call_at_a_time() -> None:
    # A plain function blocks (fsync, Records built): on the loop it delays the heartbeats.
    threads: list[int] = []
    running = threading.Semaphore(1)

    def write(topic: str, records: Sequence[Record]) -> None:
        assert running.acquire(blocking=False), "two calls at once"
        threads.append(threading.get_ident())
        running.release()

    async def exercise() -> int:
        sink = CallbackSink(write)
        table = records_table([Record("t", 0, 7, 0, None, b"v")])
        await asyncio.gather(*(sink.write(topic, table) for topic in ("a", "b", "c")))
        return threading.get_ident()

    loop_thread = asyncio.run(exercise())
    assert len(threads) == 3
    assert loop_thread not in threads


def test_an_async_callback_runs_on_the_event_loop() -> None:
    threads: list[int] = []

    class Writer:
        async def __call__(self, topic: str, records: Sequence[Record]) -> None:
            threads.append(threading.get_ident())

    async def exercise() -> int:
        await CallbackSink(Writer()).write("t", records_table([Record("t", 0, 7, 0, None, b"v")]))
        return threading.get_ident()

    assert threads == [] and asyncio.run(exercise()) == threads[0]


def test_group_type_share_makes_a_share_member_and_consumer_a_consumer_group_member() -> None:
    from consumer_sdk.cli import _member, parse_sink
    from consumer_sdk.consumer import AutoscalingConsumer
    from consumer_sdk.share import ShareMember

    base: dict[str, Any] = {"bootstrap_servers": "k:9092", "group": "g", "topics": ("t",)}
    base["capacity"] = 10.0
    share = _member(ConsumerConfig(**base, group_type="share"), parse_sink("null"))
    assert isinstance(share, ShareMember) and share.config.group_type == "share"
    member = _member(ConsumerConfig(**base), parse_sink("null"))
    assert isinstance(member, AutoscalingConsumer)


@pytest.mark.parametrize(
    ("environment", "args", "message"),
    [
        ({}, [], "--sink (AUTOSCALER_SINK) is required"),
        ({}, ["--sink", "jsonl:/no/such/dir/out.jsonl"], "needs an existing directory"),
        ({}, ["--sink", "kafka"], "--sink (AUTOSCALER_SINK) must be spark"),
        (
            {},
            ["--sink", "spark:/dev/null/warehouse"],
            "warehouse (AUTOSCALER_SPARK_WAREHOUSE) must be a directory this process can write",
        ),
    ],
)
def test_consumer_cli_says_what_is_wrong_in_one_line(
    environment: dict[str, str], args: list[str], message: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "AUTOSCALER_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "AUTOSCALER_GROUP": "g",
        "AUTOSCALER_TOPICS": "t",
        "AUTOSCALER_CAPACITY": "10",
        **environment,
    }
    env.pop("AUTOSCALER_SINK", None)
    result = subprocess.run(
        [sys.executable, "-m", "consumer_sdk.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_null_sink_says_every_minute_how_many_records_it_discarded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from consumer_sdk.cli import NULL_WARNING_EVERY_S, DiscardedRecords
    from consumer_sdk.sink import Record

    now = [0.0]
    sink = DiscardedRecords(clock=lambda: now[0])
    batch = [Record("t", 0, offset, 0, None, b"v") for offset in range(3)]
    with caplog.at_level(logging.WARNING, logger="consumer_sdk.cli"):
        sink.write("t", batch)  # the first batch: said at once
        now[0] = NULL_WARNING_EVERY_S - 1
        sink.write("t", batch)  # within the minute: not again
        now[0] = NULL_WARNING_EVERY_S
        sink.write("t", batch)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and sink.discarded == 9
    assert "3 discarded so far" in said[0] and "9 discarded so far" in said[1]
