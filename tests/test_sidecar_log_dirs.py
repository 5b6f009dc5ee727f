"""DescribeLogDirs: the protocol codec, support detection and the records/s fallback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pytest
from confluent_kafka import Producer

from contract.kafka_client.log_dirs import (
    DescribeLogDirsRequest,
    DescribeLogDirsRequest_v1,
    DescribeLogDirsResponse_v1,
    partition_sizes,
)
from sidecar.app import Sidecar
from sidecar.config import SidecarConfig
from sidecar.join_watch import MemberFailure
from sidecar.monitor import Monitor


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_request_and_response_codec() -> None:
    struct = DescribeLogDirsRequest([("b", 1), ("a", 0), ("b", 0)]).build(DescribeLogDirsRequest_v1)
    assert struct.topics == [("a", [0]), ("b", [0, 1])]
    assert struct.encode()  # encodes with the schema
    response = DescribeLogDirsResponse_v1(
        0,
        [
            (0, "/data/1", [("a", [(0, 1000, 0, False), (1, 50, 0, True)])]),
            (0, "/data/2", [("a", [(0, 1200, 0, False)])]),
            (57, "/data/broken", [("a", [(0, 9999, 0, False)])]),  # KAFKA_STORAGE_ERROR
        ],
    )
    decoded = DescribeLogDirsResponse_v1.decode(BytesIO(response.encode()))
    assert partition_sizes(decoded) == {("a", 0): 1200}


def produce(kafka: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0


@pytest.mark.needs_describe_log_dirs
def test_bytes_per_second_on_a_real_cluster(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(2)
    clock = FakeClock()

    async def run() -> tuple[str, dict[object, float]]:
        monitor = Monitor(kafka, f"g-{topic}", [topic], min_span_s=2, unit="bytes/s", clock=clock)
        await monitor.start()
        try:
            for _ in range(4):
                produce(kafka, topic, 200)
                clock.now += 1.0
                await monitor.poll()
            return monitor.unit, dict(monitor.speeds())
        finally:
            await monitor.stop()

    unit, speeds = asyncio.run(run())
    assert unit == "bytes/s" and len(speeds) == 2
    assert all(speed >= 100 * 100 for speed in speeds.values())  # >= 100 records of 100 B/s


def test_unsupported_cluster_falls_back_to_records(
    kafka_cluster_handle: object, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    from local_kafka.clusters import Capability, KafkaCluster

    assert isinstance(kafka_cluster_handle, KafkaCluster)
    if kafka_cluster_handle.supports(Capability.DESCRIBE_LOG_DIRS):
        pytest.skip("this cluster supports DescribeLogDirs: nothing to fall back from")
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(2)
    clock = FakeClock()
    config = SidecarConfig(
        bootstrap_servers=kafka,
        group=f"g-{topic}",
        topics=(topic,),
        capacity=1e6,
        capacity_unit="bytes/s",
        min_window=2.0,
        scaler="none",
        snapshot_topic=topic_factory(1, prefix="speeds"),
    )

    class NeverCalled:
        def replicas(self) -> int:
            return 1

        def scale(self, replicas: int) -> None:
            raise AssertionError("must not scale on speeds in the wrong unit")

        def problems(self) -> list[str]:
            return []

        def failing_members(self) -> list[MemberFailure]:
            return []

        def member_words(self) -> list[MemberFailure]:
            return []

        def close(self) -> None:
            return None

    sidecar = Sidecar(config, NeverCalled(), None, clock=clock)

    async def run() -> list[list[str]]:
        await sidecar.start()
        problems = []
        try:
            for _ in range(4):
                produce(kafka, topic, 50)
                clock.now += 1.0
                assert await sidecar.tick() is None
                assert sidecar.last_reading is not None
                problems.append(sidecar.last_reading.problems)
        finally:
            await sidecar.stop()
        return problems

    problems = asyncio.run(run())
    assert sidecar.monitor.unit == "records/s" and sidecar.monitor.log_dirs_supported is False
    assert "DescribeLogDirs is not supported" in problems[0][0]
    assert all(not any("DescribeLogDirs" in p for p in later) for later in problems[1:])  # once
    assert all("--capacity-unit is bytes/s: not scaling" in p[-1] for p in problems)
    assert sidecar.monitor.speeds()  # records/s still measured and published
