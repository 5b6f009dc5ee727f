"""Apache Kafka started from its jars, and the broker CLI's two kinds."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from local_kafka.apache_kafka import ApacheKafka, _Node, kafka_version, node_properties
from local_kafka.broker_cli import MAX_PARTITIONS
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.conftest import skip_unless_runnable
from tests.kafka_helpers import consume_keys, produce_numbered


def test_pinned_version_is_a_4x_release_with_share_groups() -> None:
    major, minor, *_ = (int(part) for part in kafka_version().split("."))
    assert (major, minor) >= (4, 2)


def test_node_properties_for_three_combined_nodes(tmp_path: Path) -> None:
    node = _Node(2, 9092, 9093, tmp_path)
    properties = node_properties(node, "1@127.0.0.1:1,2@127.0.0.1:9093,3@127.0.0.1:3", 3)
    assert properties["process.roles"] == "broker,controller"
    assert properties["node.id"] == "2"
    assert properties["listeners"].startswith("PLAINTEXT://127.0.0.1:9092,")
    assert properties["offsets.topic.replication.factor"] == "3"
    assert properties["group.initial.rebalance.delay.ms"] == "0"
    assert int(properties["group.min.session.timeout.ms"]) <= 1000
    assert properties["log.dirs"] == str(tmp_path / "data")


@pytest.mark.parametrize("tracking", [False, True])
def test_memory_options_commit_the_heap_and_track_native_memory_on_request(tracking: bool) -> None:
    options = ApacheKafka(heap_mb=768, heap_committed=True, native_memory_tracking=tracking)
    chosen = options._memory_options()
    assert {"-Xms768m", "-Xmx768m", "-XX:+AlwaysPreTouch"} <= set(chosen)
    assert ("-XX:NativeMemoryTracking=summary" in chosen) is tracking


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"brokers": 0}, "brokers must be"),
        ({"brokers": 6}, "brokers must be"),
        ({"heap_mb": 10}, "heap_mb must be"),
        ({"brokers": 2, "racks": ["a"]}, r"racks must name one rack per broker \(2\)"),
        ({"racks": ["a b"]}, "racks must name one rack per broker"),
        ({"racks": "a"}, "racks must name one rack per broker"),
    ],
)
def test_handle_rejects_bad_sizes(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ApacheKafka(**kwargs)


def test_session_cluster_node_down_and_up(kafka_cluster_handle: KafkaCluster) -> None:
    """On the Apache leg: kill -9 of the single node, restart on its data, data still there."""
    if kafka_cluster_handle.kind is not ClusterKind.APACHE:
        pytest.skip("kill -9 and restart of a node is the Apache Kafka handle's")
    cluster = kafka_cluster_handle
    topic = cluster.create_topic(2)
    produced = produce_numbered(cluster.bootstrap_servers, topic, 50, 2)
    handle = cluster.broker_handle()
    assert isinstance(handle, ApacheKafka)
    pid = handle.node_pid(1)
    cluster.broker_down(1)
    assert handle.node_pid(1) is None
    cluster.broker_up(1)
    assert handle.node_pid(1) not in (None, pid)
    keys = consume_keys(cluster.bootstrap_servers, [topic], 50, f"g-{topic}")
    assert sorted(keys) == sorted(produced)


def _broker_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "local_kafka.broker_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _started_broker_cli(
    *args: str, stdin: int = subprocess.DEVNULL
) -> tuple[subprocess.Popen[str], str]:
    """The broker CLI started with ``args``, and the bootstrap string it printed first."""
    process = subprocess.Popen(
        [sys.executable, "-m", "local_kafka.broker_cli", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    printed = process.stdout.readline().strip()
    if not printed:
        assert process.stderr is not None
        pytest.fail(f"no bootstrap string; stderr: {process.stderr.read()}")
    return process, printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "x" * 250 + ":1"], "--topic NAME must be 1-249 characters"),
        (["--topic", "..:1"], "--topic NAME must be"),
        (["--topic", "t:99999999"], f"PARTITIONS in [1, {MAX_PARTITIONS}]"),
        (["--topic", "t:\u0661"], "PARTITIONS in"),
        (["--topic", "t:2", "--topic", "t:3"], "given more than once"),
        (["--bootstrap-file", "/nonexistent-dir/b.txt"], "directory '/nonexistent-dir'"),
        (["--kind", "apache", "--brokers", "9"], "--brokers must be in [1, 5] for --kind apache"),
        (["--brokers", "0"], "--brokers must be in [1, 64]"),
    ],
)
def test_broker_cli_rejects_bad_input_in_one_line(args: list[str], message: str) -> None:
    result = _broker_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("kafka-autoscaler-broker: error:")


@pytest.mark.parametrize("kind", ["embedded", "apache"])
def test_broker_cli_prints_bootstrap_writes_the_file_and_answers_control(
    kind: str, tmp_path: Path
) -> None:
    if kind == "apache":
        skip_unless_runnable(ClusterKind.APACHE)
    bootstrap_file = tmp_path / "bootstrap.txt"
    process, printed = _started_broker_cli(
        *("--kind", kind, "--brokers", "1", "--topic", "cli:2", "--control"),
        *("--bootstrap-file", str(bootstrap_file)),
        stdin=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert printed.startswith("127.0.0.1:")
        assert bootstrap_file.read_text().strip() == printed
        process.stdin.write("create_topic made 3\n")
        process.stdin.flush()
        assert process.stdout.readline().strip() == "ok"
        process.stdin.write("set_rtt 1 5\n")  # latency injection: the embedded broker's only
        process.stdin.flush()
        reply = process.stdout.readline().strip()
        assert reply == "ok" if kind == "embedded" else reply.startswith("error unknown command")
        produced = produce_numbered(printed, "cli", 100, 2)
        assert len(consume_keys(printed, ["cli"], 100, "g-cli")) == len(produced)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=60) == 0
    assert process.stderr is not None
    said = process.stderr.read()
    assert ("node(s) ready in" in said) == (kind == "apache")


def test_broker_cli_loads_the_broker_side_assignor_on_request(tmp_path: Path) -> None:
    """Issue 94: without the switch, members naming the autoscaler assignor could not join
    a cluster the CLI started, and docs/broker-assignor.md could not be followed locally."""
    skip_unless_runnable(ClusterKind.APACHE)
    process, bootstrap = _started_broker_cli(
        "--kind", "apache", "--brokers", "1", "--topic", "packed:2", "--broker-assignor"
    )
    try:
        produce_numbered(bootstrap, "packed", 20, 2)
        member = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "g-packed",
                "group.protocol": "consumer",
                "group.remote.assignor": "autoscaler",
                "auto.offset.reset": "earliest",
            }
        )
        try:
            member.subscribe(["packed"])
            read = 0
            deadline = time.monotonic() + 60
            while read < 20 and time.monotonic() < deadline:
                message = member.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                read += 1
            assert read == 20
        finally:
            member.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_broker_cli_refuses_the_assignor_switch_on_the_embedded_broker() -> None:
    result = _broker_cli("--broker-assignor")
    assert result.returncode == 2
    assert "--broker-assignor needs --kind apache" in result.stderr
