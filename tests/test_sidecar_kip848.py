"""The sidecar sizing a KIP-848 group (``--group-protocol consumer``) on Apache Kafka with our
broker-side assignor: its local scaler starts plain confluent-kafka consumers
(``examples/kip848_consumer.py``, no code of ours) named by ``{identity}``; the brokers'
assignor follows the sidecar's plans, so no member reads more than its capacity; a member
removed is emptied first; nothing is lost. And a broker without the assignor is one line."""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assignor.broker import ASSIGNOR_CLASS
from benchmarks.support.rate_writer import RateWriter
from contract.local_ports import free_port
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind, KafkaCluster
from sidecar.broker_plans.group import ASSIGNORS_CONFIG
from sidecar.publisher import SPEEDS_TOPIC_CONFIG
from tests.kip848_helpers import (
    CAPACITY,
    CONSUMER,
    RATES,
    kip848_sidecar,
    member_loads,
    planned_and_held,
    rows,
    running,
)
from tests.sdk_helpers import (
    example_consumer_command,
    stop_sidecar_process,
    wait_until,
)
from tests.sdk_helpers import sidecar_status as status


def topic_configs(bootstrap: str, topic: str) -> dict[str, Any]:
    """``topic``'s configuration as the brokers describe it."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer came
    return dict(admin.describe_configs([resource])[resource].result(timeout=30))


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
        assert wait_until(lambda: planned_and_held(port), timeout_s=120), status(port)
        page = status(port)
        members = sorted(page["broker_plans"]["plan"])
        assert members == [f"sink-{i}" for i in range(len(members))]
        loads = member_loads(page)
        assert all(load <= CAPACITY for load in loads.values()), page
        # At most the packing's lower bound (the load over C, rounded up) plus one, each
        # partition held by one member.
        lower_bound = math.ceil(sum(page["speeds"].values()) / CAPACITY)
        assert len(members) <= lower_bound + 1, (members, page["speeds"])
        held = [tp for tps in page["broker_plans"]["plan"].values() for tp in tps]
        assert sorted(held) == sorted(set(held)) and len(held) == len(RATES), page
        assert not page["broker_plans"]["problems"]
        # The sidecar made its plans topic as it makes the speeds topic (compacted, a day's
        # retention), before the brokers' auto-creation (a plain topic) could.
        plans = topic_configs(bootstrap, page["broker_plans"]["topic"])
        assert {key: plans[key].value for key in SPEEDS_TOPIC_CONFIG} == SPEEDS_TOPIC_CONFIG
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
