"""The monitor and publisher against the `kafka` fixture, on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.commit import OffsetFetchRequest, OffsetFetchResponse_v3
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from consumer_sdk.snapshot_cache import SnapshotCache
from local_kafka.clusters import Capability, KafkaCluster
from sidecar.monitor import NOT_DESCRIBED, Monitor, group_description, lags_in_bytes
from sidecar.publisher import SnapshotPublisher


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def produce_per_partition(kafka: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for partition, count in counts.items():
        for _ in range(count):
            producer.produce(topic, value=b"x" * 50, partition=partition)
    assert producer.flush(30) == 0


def commit(kafka: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def test_speeds_lags_and_problems(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(3)
    group = f"g-{topic}"
    rates = {0: 10, 1: 20, 2: 30}  # records per (fake) second
    clock = FakeClock()

    async def run() -> tuple[dict[TopicPartition, float], dict[TopicPartition, float], list[str]]:
        monitor = Monitor(
            kafka, group, [topic, "no-such-topic"], window_s=30, min_span_s=3, clock=clock
        )
        await monitor.start()
        try:
            for _ in range(5):
                produce_per_partition(kafka, topic, rates)
                clock.now += 1.0
                reading = await monitor.poll()
            commit(kafka, group, topic, {0: 15, 1: 0, 2: 150})
            reading = await monitor.poll()
            return monitor.tracker.speeds(), reading.lags(), reading.problems
        finally:
            await monitor.stop()

    speeds, lags, problems = asyncio.run(run())
    assert speeds == pytest.approx({TopicPartition(topic, p): float(r) for p, r in rates.items()})
    assert lags == {
        TopicPartition(topic, 0): 35.0,
        TopicPartition(topic, 1): 100.0,
        TopicPartition(topic, 2): 0.0,
    }
    assert problems == ["topic no-such-topic not found"]


async def coordinator_gone(*args: object, **kwargs: object) -> int:
    raise KafkaConnectionError("the coordinator is down")


@pytest.mark.parametrize(
    "fault, problem",
    [
        (
            "unreachable",
            "committed offsets unavailable: KafkaConnectionError('the coordinator is down')",
        ),
        (
            "loading",
            "committed offsets unavailable: the group's coordinator answered "
            "COORDINATOR_LOAD_IN_PROGRESS (14)",
        ),
    ],
)
def test_offsets_that_cannot_be_read_leave_the_lags_unknown_not_whole_logs(
    kafka: str,
    topic_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    problem: str,
) -> None:
    topic = topic_factory(2)

    async def run() -> tuple[bool, dict[TopicPartition, int], bool, list[str]]:
        monitor = Monitor(kafka, f"g-{topic}", [topic], clock=FakeClock())
        await monitor.start()
        try:
            produce_per_partition(kafka, topic, {0: 40, 1: 40})
            commit(kafka, f"g-{topic}", topic, {0: 10})  # its coordinator is up
            readable = await monitor.poll()
            assert monitor._admin is not None
            if fault == "unreachable":
                monkeypatch.setattr(monitor._admin, "find_coordinator", coordinator_gone)
            else:
                # What a broker answers while it loads the group's offsets after a restart:
                # the group-level error and no partitions (aiokafka's admin read it as
                # "nothing committed", every partition's whole log as lag).
                client = monitor._admin._client
                send = client.send

                async def loading(node: int, request: Any, **kwargs: Any) -> Any:
                    if request.API_KEY == OffsetFetchRequest.API_KEY:
                        return OffsetFetchResponse_v3(0, [], 14)
                    return await send(node, request, **kwargs)

                monkeypatch.setattr(client, "send", loading)
            unreadable = await monitor.poll()
            return (
                readable.lags_known,
                readable.committed,
                unreadable.lags_known,
                unreadable.problems,
            )
        finally:
            await monitor.stop()

    readable, committed, known, problems = asyncio.run(run())
    assert readable and committed == {TopicPartition(topic, 0): 10}  # 1: nothing committed
    assert not known
    assert problems == [problem]


def test_published_snapshot_reaches_the_sdk_cache(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    speeds_topic = topic_factory(1, prefix="speeds")
    group = f"g-{topic}"
    clock = FakeClock()

    async def run() -> tuple[dict[TopicPartition, float], dict[TopicPartition, float] | None]:
        monitor = Monitor(kafka, group, [topic], min_span_s=2, clock=clock)
        publisher = SnapshotPublisher(kafka, speeds_topic)
        await monitor.start()
        await publisher.start()
        try:
            for _ in range(3):
                produce_per_partition(kafka, topic, {0: 5, 1: 50})
                clock.now += 1.0
                reading = await monitor.poll()
            snapshot = monitor.snapshot(reading)
            await publisher.publish(snapshot)
        finally:
            await publisher.stop()
            await monitor.stop()
        cache = SnapshotCache(kafka, speeds_topic, group, max_age_s=30)
        await cache.start()
        try:
            view = cache.view()
        finally:
            await cache.stop()
        return dict(snapshot.speeds), dict(view.speeds) if view else None

    measured, cached = asyncio.run(run())
    assert measured == pytest.approx(
        {TopicPartition(topic, 0): 5.0, TopicPartition(topic, 1): 50.0}
    )
    assert cached == measured


def test_broker_down_is_reported_and_survived() -> None:
    from local_kafka.embedded import EmbeddedKafka

    clock = FakeClock()
    with EmbeddedKafka(brokers=3) as broker:
        broker.create_topic("down", 3, 1)  # one leader per broker
        kafka = broker.bootstrap_servers

        async def run() -> tuple[list[str], int, list[str], int]:
            monitor = Monitor(kafka, "g-down", ["down"], request_timeout_ms=2000, clock=clock)
            await monitor.start()
            try:
                produce_per_partition(kafka, "down", {0: 5, 1: 5, 2: 5})
                broker.broker_down(2)
                clock.now += 1
                while_down = await monitor.poll()
                broker.broker_up(2)
                clock.now += 1
                for _ in range(20):  # the client reconnects on its own
                    after = await monitor.poll()
                    if len(after.end_offsets) == 3 and not after.problems:
                        break
                    await asyncio.sleep(0.25)
                return (
                    while_down.problems,
                    len(while_down.end_offsets),
                    after.problems,
                    len(after.end_offsets),
                )
            finally:
                await monitor.stop()

        problems_down, read_down, problems_after, read_after = asyncio.run(run())
    assert problems_down and read_down < 3  # said what it could not read
    assert problems_after == [] and read_after == 3


def test_lags_in_bytes_use_each_partitions_bytes_per_record() -> None:
    a, b, c, d = (TopicPartition("t", p) for p in range(4))
    lags = {a: 10.0, b: 10.0, c: 10.0, d: 0.0}
    converted = lags_in_bytes(
        lags,
        byte_speeds={a: 2000.0, d: 500.0},  # a: 2000 B/s over 20 records/s = 100 B/record
        record_speeds={a: 20.0, d: 0.0},
        sizes={b: 30_000, d: 1000},  # b: no speed yet: 30,000 B of log over 100 records
        end_offsets={b: 100, d: 10},
    )
    # c: nothing measured: the mean of a (100), b (300) and d (100 from its log).
    assert converted == {a: 1000.0, b: 3000.0, c: pytest.approx(10 * 500 / 3), d: 0.0}


def test_the_group_is_described_with_its_state_and_members(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str]
) -> None:
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(2)
    group = f"g-{topic}"
    member = Consumer({"bootstrap.servers": kafka, "group.id": group, "session.timeout.ms": 6000})
    member.subscribe([topic])
    try:
        while not member.assignment():
            member.poll(0.1)

        async def run(
            describe: bool = True,
        ) -> tuple[tuple[str | None, int | None, bool | None], bool | None]:
            monitor = Monitor(kafka, group, [topic], describe_group=describe)
            await monitor.start()
            try:
                await monitor.poll()
                reading = await monitor.poll()  # the second poll: asked again, or not
                described = (reading.group_state, reading.group_members, reading.group_stable)
                return described, monitor.groups_describable
            finally:
                await monitor.stop()

        if kafka_cluster_handle.supports(Capability.DESCRIBE_GROUPS):
            assert asyncio.run(run()) == (("Stable", 1, True), True)
        else:  # unknown, and not asked again: the controller does not wait for the group
            assert asyncio.run(run()) == ((None, None, None), False)
        # A KIP-848 group: the planner describes it; the classic request is never sent.
        assert asyncio.run(run(describe=False)) == ((None, None, None), None)
    finally:
        member.close()


def test_group_description_reads_its_group_and_nothing_else() -> None:
    members = [("member-1", "client", "host", b"", b""), ("member-2", "client", "host", b"", b"")]
    groups = [
        (0, "other", "Stable", "consumer", "autoscaler", members[:1]),
        (0, "mine", "PreparingRebalance", "consumer", "autoscaler", members),
    ]
    assert group_description(groups, "mine") == (
        "PreparingRebalance",
        frozenset({"member-1", "member-2"}),
        "autoscaler",
    )
    assert group_description([(16, "mine", "", "", "", [])], "mine") == NOT_DESCRIBED  # error
    assert group_description([("short",)], "mine") == NOT_DESCRIBED
    assert group_description([], "mine") == NOT_DESCRIBED
    # A group with no member yet has no protocol: "", not ours.
    assert group_description([(0, "mine", "Empty", "consumer", "", [])], "mine").protocol == ""
