"""The sidecar sizing a KIP-848 group (``--group-protocol consumer``) on Apache Kafka with our
broker-side assignor: its local scaler starts plain confluent-kafka consumers
(``examples/kip848_consumer.py``, no code of ours) named by ``{identity}``; the brokers'
assignor follows the sidecar's plans, so no member reads more than its capacity; a member
removed is emptied first; nothing is lost. And a broker without the assignor is one line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assignor.broker import ASSIGNOR_CLASS
from benchmarks.support.polling import processes_mentioning
from benchmarks.support.rate_writer import RateWriter
from contract.local_ports import free_port
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind, KafkaCluster
from sidecar.broker_plans.group import ASSIGNORS_CONFIG
from tests.sdk_helpers import (
    example_consumer_command,
    local_sidecar_env,
    stop_sidecar_process,
    wait_until,
)
from tests.sdk_helpers import sidecar_status as status

ROOT = Path(__file__).parent.parent
CONSUMER = ROOT / "examples" / "kip848_consumer.py"
RATES = (160, 120, 80, 40, 40, 40)  # records/s per partition: 480 in all
CAPACITY = 250.0  # records/s per consumer: two are needed, and the plan is not an even split


def rows(folder: Path) -> set[tuple[int, int]]:
    """(partition, offset) of every complete line the consumers wrote."""
    found: set[tuple[int, int]] = set()
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().split("\n")[:-1]:
            row = json.loads(line)
            found.add((row["partition"], row["offset"]))
    return found


def running(folder: Path) -> list[str]:
    """The members (by instance id) whose consumer process writes into ``folder`` and runs."""
    return sorted(
        words[words.index("--instance-id") + 1]
        for words in processes_mentioning(str(folder)).values()
        if str(CONSUMER) in words
    )


def member_loads(page: dict[str, Any]) -> dict[str, float]:
    """Each planned member's load by the sidecar's own speeds."""
    speeds = page["speeds"]
    plan = page["broker_plans"]["plan"] or {}
    return {member: sum(speeds.get(tp, 0.0) for tp in tps) for member, tps in plan.items()}


def kip848_sidecar(
    bootstrap: str, topic: str, consumer: str, port: int, folder: Path, *, max_replicas: int
) -> subprocess.Popen[str]:
    """A sidecar CLI process for group ``g-<topic>`` with ``--group-protocol consumer`` and
    the local scaler starting ``consumer``; its stderr is piped."""
    env = local_sidecar_env(
        bootstrap,
        topic,
        f"speeds-{topic}",
        consumer,
        http_port=port,
        lock_file=str(folder / "lock"),
        capacity=CAPACITY,
        max_replicas=max_replicas,
    )
    env |= {"AUTOSCALER_GROUP_PROTOCOL": "consumer", "AUTOSCALER_SCALE_DOWN_WINDOW": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def load(apache_with_assignor: ApacheKafka) -> Iterator[tuple[str, RateWriter]]:
    """A topic written at RATES until the writer is finished."""
    topic = f"kip848-{free_port()}"
    apache_with_assignor.create_topic(topic, len(RATES), 1)
    writer = RateWriter(apache_with_assignor.bootstrap_servers, topic, RATES, b"x" * 50)
    writer.start()
    yield topic, writer
    writer.finish()


def test_the_sidecar_sizes_a_kip848_group_and_the_broker_follows_its_plans(
    apache_with_assignor: ApacheKafka,
    load: tuple[str, RateWriter],
    tmp_path: Path,
) -> None:
    topic, writer = load
    delivered = writer.written
    bootstrap = apache_with_assignor.bootstrap_servers
    out = tmp_path / "out"
    out.mkdir()
    consumer = example_consumer_command(CONSUMER, bootstrap, topic, out, "--instance-id {identity}")
    port = free_port()
    sidecar = kip848_sidecar(bootstrap, topic, consumer, port, tmp_path, max_replicas=4)
    try:

        def planned_and_held() -> bool:
            page = status(port)
            plans = page.get("broker_plans") or {}
            return (page.get("replicas") or 0) >= 2 and bool(plans.get("holds"))

        assert wait_until(planned_and_held, timeout_s=120), status(port)
        page = status(port)
        members = sorted(page["broker_plans"]["plan"])
        assert members == [f"sink-{i}" for i in range(len(members))]
        assert all(load <= CAPACITY for load in member_loads(page).values()), page
        assert not page["broker_plans"]["problems"]
        writer.finish()  # no traffic: down to one member, the others emptied first
        assert wait_until(lambda: running(out) == ["sink-0"], timeout_s=120), status(port)
        page = status(port)
        assert page["broker_plans"]["holds"] and not page["broker_plans"]["being_emptied"]
        assert wait_until(lambda: delivered <= rows(out), timeout_s=60)  # nothing lost
    finally:
        writer.finish()
        errors = stop_sidecar_process(sidecar)
    assert "stopped all the same" not in errors  # every member removed was emptied first
    assert writer.unflushed == 0 and delivered and delivered <= rows(out)


def test_a_broker_without_the_assignor_is_one_line(
    kafka_cluster_handle: KafkaCluster, tmp_path: Path
) -> None:
    if kafka_cluster_handle.kind is not ClusterKind.APACHE:
        pytest.skip("the embedded broker runs no KIP-848 assignors")
    bootstrap = kafka_cluster_handle.bootstrap_servers
    topic = kafka_cluster_handle.create_topic(2, prefix="plain848")
    port = free_port()
    idle = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(600)'"
    sidecar = kip848_sidecar(bootstrap, topic, idle, port, tmp_path, max_replicas=2)
    try:

        def said() -> list[str]:
            return [line for line in status(port).get("problems", []) if ASSIGNORS_CONFIG in line]

        assert wait_until(lambda: bool(said()), timeout_s=60), status(port)
        (line,) = said()
        assert "uniform" in line and ASSIGNOR_CLASS in line
        assert status(port)["healthy"] is False  # /healthz says so too
    finally:
        errors = stop_sidecar_process(sidecar)
    assert sum(ASSIGNORS_CONFIG in row for row in errors.splitlines()) == 1  # said once
