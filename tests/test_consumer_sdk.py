"""The consumer SDK on the `kafka` fixture: exactly once, packing by speed, fallbacks."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from assignor import TopicPartition
from assignor.group_plan import GroupPlan
from assignor.plugin import MemberState, PluginStats, build_assignor
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import RetryPolicy
from consumer_sdk.sink import (
    RECORD_FIXED_BYTES,
    CallbackSink,
    PartitionsFenced,
    Record,
    RecordsView,
)
from contract.snapshot import PartitionStat, Snapshot
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.kafka_helpers import produce_numbered, produce_tracked
from tests.sdk_helpers import (
    SeenRecords,
    ThreadedMember,
    group_settled,
    group_stable,
    member_config,
    publish_snapshot,
    start_members,
    wait_until,
)

SPEEDS = [6.0, 5.0, 4.0, 3.0, 2.0, 0.0]  # 20 in all: two consumers of capacity 10


def snapshot_for(group: str, topic: str, timestamp: float | None = None) -> Snapshot:
    return Snapshot(
        group=group,
        sequence=1,
        timestamp=time.time() if timestamp is None else timestamp,
        unit="records/s",
        partitions={
            TopicPartition(topic, p): PartitionStat(s, 0.0, 0) for p, s in enumerate(SPEEDS)
        },
    )


def group_with_snapshot(
    kafka: str, topic_factory: Callable[..., str], timestamp: float | None = None
) -> tuple[str, str, str]:
    """A 6-partition topic, its group, and a speeds topic holding one snapshot of SPEEDS."""
    topic = topic_factory(6)
    speeds_topic = topic_factory(1, prefix="speeds")
    group = f"g-{topic}"
    publish_snapshot(kafka, speeds_topic, snapshot_for(group, topic, timestamp))
    return topic, group, speeds_topic


def leaders_plans(members: Sequence[ThreadedMember]) -> list[GroupPlan]:
    return [
        m.consumer.plugin_stats.last_plan
        for m in members
        if m.consumer is not None and m.consumer.plugin_stats.last_plan is not None
    ]


def test_three_members_hand_every_record_to_the_sink_once(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(6)
    seen = SeenRecords()
    members = start_members(kafka, f"g-{topic}", [topic], 3, seen.write)
    try:
        assert wait_until(lambda: group_settled(members, 6))
        # No snapshot was published: the leader fell back to count-balanced sticky.
        assert sorted(len(m.consumer.assigned) for m in members if m.consumer) == [2, 2, 2]
        plans = leaders_plans(members)
        assert plans and all(getattr(p, "heuristic", None) == "sticky" for p in plans)
        produced = produce_numbered(kafka, topic, 3000, 6)
        assert wait_until(lambda: seen.total() == len(produced))
    finally:
        for member in members:
            member.stop()
    assert seen.total() == 3000 and seen.duplicates() == 0


def test_assignment_follows_the_heuristic_with_a_fresh_snapshot(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic, group, speeds_topic = group_with_snapshot(kafka, topic_factory)
    members = start_members(
        kafka, group, [topic], 3, SeenRecords().write, snapshot_topic=speeds_topic, capacity=10.0
    )
    try:
        assert wait_until(lambda: group_settled(members, 6) and not members[2].consumer.assigned)  # type: ignore[union-attr]
        loads = {
            m.config.member_identity: sum(SPEEDS[tp.partition] for tp in m.consumer.assigned)
            for m in members
            if m.consumer
        }
        plans = leaders_plans(members)
    finally:
        for member in members:
            member.stop()
    # 20 of load in consumers of 10: two full, and sink-2 (highest ordinal) left empty.
    assert loads == {"sink-0": 10.0, "sink-1": 10.0, "sink-2": 0.0}
    last = plans[-1]
    assert last.heuristic == "repair" and last.fallback_reason is None


def test_stale_snapshot_falls_back_to_sticky(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic, group, speeds_topic = group_with_snapshot(kafka, topic_factory, time.time() - 3600)
    publish_snapshot(kafka, speeds_topic, b"{not json")  # malformed, after it
    members = start_members(
        kafka, group, [topic], 3, SeenRecords().write, snapshot_topic=speeds_topic
    )
    try:
        assert wait_until(lambda: group_settled(members, 6))
        plans = leaders_plans(members)
        caches = [m.consumer.snapshots for m in members if m.consumer]
    finally:
        for member in members:
            member.stop()
    assert plans and all(p.fallback_reason == "no fresh speed snapshot" for p in plans)
    assert any(c.counters.stale_views > 0 for c in caches)
    assert all(c.counters.malformed == 1 and c.counters.accepted == 1 for c in caches)


def test_member_with_garbage_user_data_still_gets_work(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

    topic = topic_factory(6)
    group = f"g-{topic}"
    members = start_members(kafka, group, [topic], 2, SeenRecords().write)
    # The two hold the topic before the raw member joins: otherwise a raw member joining
    # first holds all six while the others still start, which also looks stable.
    assert wait_until(lambda: group_stable(members, 6))
    raw_stats = PluginStats()
    plugin = build_assignor(
        MemberState("raw", "repair", 10.0), lambda: None, raw_stats, leader_delay_s=0.1
    )

    class GarbageAssignor(plugin):  # type: ignore[misc, valid-type]
        @classmethod
        def metadata(cls, topics: object) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(0, [topic], b"\x00garbage\xff")

    owned: list[set[int]] = []

    async def raw_member() -> None:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka,
            group_id=group,
            enable_auto_commit=False,
            session_timeout_ms=1500,
            heartbeat_interval_ms=100,
            partition_assignment_strategy=(GarbageAssignor,),
        )
        await consumer.start()
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                await consumer.getmany(timeout_ms=100)
                mine = {tp.partition for tp in consumer.assignment()}
                if mine and group_stable(members, 6 - len(mine)):
                    owned.append(mine)
                    return
        finally:
            await consumer.stop()

    try:
        asyncio.run(raw_member())
        # Whoever led counted the garbage member (the raw member may have led).
        undecodable = raw_stats.undecodable_members + sum(
            m.consumer.plugin_stats.undecodable_members for m in members if m.consumer
        )
    finally:
        for member in members:
            member.stop()
    assert owned and len(owned[0]) == 2  # sticky fallback: 2 each, the garbage member too
    assert undecodable >= 1


def test_failing_writes_are_retried_and_never_committed_past(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    seen = SeenRecords()
    failures = {"left": 3}

    def flaky(topic_name: str, records: Sequence[Record]) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OSError("table unavailable")
        seen.write(topic_name, records)

    produce_numbered(kafka, topic, 500, 2)
    config = member_config(kafka, f"g-{topic}", [topic], "sink-0")
    member = ThreadedMember(config, CallbackSink(flaky), RetryPolicy(first_delay_s=0.01)).start()
    try:
        assert wait_until(lambda: seen.total() == 500)
    finally:
        member.stop()
    assert failures["left"] == 0 and seen.duplicates() == 0
    assert records_after_restart(kafka, config, topic, 2, produce=10) == 10


class LateSink(CallbackSink):
    """Its start fails until the test lets it (a Spark Connect server not up yet)."""

    def __init__(self, seen: SeenRecords) -> None:
        super().__init__(seen.write)
        self.starts = 0
        self.ready = threading.Event()

    async def start(self) -> None:
        self.starts += 1
        if not self.ready.is_set():
            raise OSError("connection refused")

    async def close(self) -> None:
        return None


def test_a_sink_that_cannot_start_yet_is_retried_and_a_stop_ends_the_wait(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    produce_numbered(kafka, topic, 100, 2)
    seen = SeenRecords()
    group = f"g-{topic}"
    retry = RetryPolicy(first_delay_s=0.01, max_delay_s=0.05)
    late = LateSink(seen)
    member = ThreadedMember(member_config(kafka, group, [topic], "sink-0"), late, retry).start()
    try:
        assert wait_until(lambda: late.starts >= 3)
        assert seen.total() == 0  # nobody joined, nothing was read
        late.ready.set()
        assert wait_until(lambda: seen.total() == 100)
    finally:
        member.stop()
    assert seen.duplicates() == 0
    failures = REGISTRY.get_sample_value(
        "autoscaler_consumer_sink_start_failures_total", {"group": group}
    )
    assert failures is not None and failures >= 2
    never = LateSink(SeenRecords())
    stuck = ThreadedMember(member_config(kafka, group, [topic], "sink-1"), never, retry).start()
    assert wait_until(lambda: never.starts >= 2)
    stuck.stop()  # returns (and raises nothing) though the sink never started
    assert stuck.consumer is not None and stuck.consumer.assigned == set()


class SlowResumeSink(CallbackSink):
    """Its first lookup of where partitions resume fails, the second waits for the test; it
    holds offsets 0..29 of partition 0 already."""

    def __init__(self, topic: str, seen: SeenRecords) -> None:
        super().__init__(seen.write)
        self.topic = topic
        self.lookups = 0
        self.release = threading.Event()

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        self.lookups += 1
        if self.lookups == 1:
            raise OSError("table unavailable")
        await asyncio.to_thread(self.release.wait, 60)
        return {TopicPartition(self.topic, 0): 30}


def test_a_slow_resume_lookup_pauses_its_partitions_and_keeps_the_member_heartbeating(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    produce_numbered(kafka, topic, 100, 2)
    seen = SeenRecords()
    sink = SlowResumeSink(topic, seen)
    config = member_config(kafka, f"g-{topic}", [topic], "sink-0")
    member = ThreadedMember(config, sink, RetryPolicy(first_delay_s=0.01)).start()
    try:
        assert wait_until(lambda: sink.lookups == 2)
        consumer = member.consumer
        assert consumer is not None and consumer._consumer is not None
        # The listener has returned: aiokafka heartbeats again (it sends none while one
        # runs, and a lookup can outlast the session timeout) ...
        heartbeat = consumer._consumer._coordinator._heartbeat_task
        assert heartbeat is not None and not heartbeat.done()
        # ... and nothing of the new partitions is read before the sink has answered.
        assert consumer._consumer.paused() == consumer._consumer.assignment()
        assert seen.total() == 0
        assert (
            REGISTRY.get_sample_value(
                "autoscaler_consumer_resume_lookup_failures_total", {"group": config.group}
            )
            == 1
        )
        sink.release.set()
        assert wait_until(lambda: seen.total() == 20 + 50)
    finally:
        sink.release.set()
        member.stop()
    received = seen.keys()
    assert min(offset for (_, p, offset) in received if p == 0) == 30
    assert seen.duplicates() == 0


def test_partitions_the_sink_fences_are_not_retried_and_never_committed(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    seen = SeenRecords()
    fenced_writes = {"count": 0}

    def fenced_on_partition_0(topic_name: str, records: Sequence[Record]) -> None:
        seen.write(topic_name, [r for r in records if r.partition != 0])
        if any(r.partition == 0 for r in records):  # as if another member claimed it
            fenced_writes["count"] += 1
            raise PartitionsFenced(frozenset({TopicPartition(topic_name, 0)}))

    produce_numbered(kafka, topic, 500, 2)
    config = member_config(kafka, f"g-{topic}", [topic], "sink-0")
    member = ThreadedMember(config, CallbackSink(fenced_on_partition_0)).start()
    try:
        assert wait_until(lambda: seen.total() == 250)  # all of partition 1
        assert wait_until(lambda: fenced_writes["count"] > 0)
    finally:
        member.stop()
    assert seen.duplicates() == 0
    # Nothing of partition 0 was committed: a new member reads all 250 of it again, and
    # partition 1 was committed in full.
    assert records_after_restart(kafka, config, topic, 2, produce=10) == 10 + 250


def records_after_restart(
    kafka: str, config: ConsumerConfig, topic: str, partitions: int, produce: int
) -> int:
    """Records a new member of the same group reads once it reached ``produce`` new ones:
    ``produce`` if every earlier one was committed, more if some were not (a partition is
    read in offset order, so re-read records arrive before the new ones)."""
    again = SeenRecords()
    second = ThreadedMember(config, CallbackSink(again.write)).start()
    try:
        assert wait_until(lambda: group_settled([second], partitions))
        new = {(topic, p, o) for p, o in produce_tracked(kafka, topic, produce, partitions)}
        assert wait_until(lambda: new <= again.keys())
    finally:
        second.stop()
    return again.total()


class StagingRecorder:
    """A staging sink in memory: what was staged, published and discarded. Optionally the
    first publish waits until a second batch was staged, or every publish fails."""

    def __init__(self, *, gate_first_publish: bool = False, fail: bool = False) -> None:
        self.gate_first_publish, self.fail = gate_first_publish, fail
        self.stages = 0
        self.second_staged = threading.Event()
        self.overlapped: bool | None = None
        self.published: list[Record] = []
        self.publish_order: list[int] = []
        self.discarded: list[int] = []

    async def stage(self, topic: str, table: pa.Table) -> tuple[int, list[Record]]:
        self.stages += 1
        if self.stages >= 2:
            self.second_staged.set()
        return self.stages, list(RecordsView(topic, table))

    async def publish(self, staged: object) -> None:
        assert isinstance(staged, tuple)
        number, records = staged
        if number == 1 and self.gate_first_publish:
            self.overlapped = await asyncio.to_thread(self.second_staged.wait, 30)
        if self.fail:
            raise OSError("table unavailable")
        self.published.extend(records)
        self.publish_order.append(number)

    async def discard(self, staged: object) -> None:
        assert isinstance(staged, tuple)
        self.discarded.append(staged[0])

    async def write(self, topic: str, table: pa.Table) -> None:
        if self.fail:
            raise OSError("table unavailable")
        self.published.extend(RecordsView(topic, table))

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        return {}


def test_a_batch_stages_while_the_one_before_it_is_written_and_publishes_after_it(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    produce_numbered(kafka, topic, 2000, 2)  # polls take up to 500: several batches
    sink = StagingRecorder(gate_first_publish=True)
    config = member_config(kafka, f"g-{topic}", [topic], "sink-0", batch_bytes=1024)
    member = ThreadedMember(config, sink).start()
    try:
        assert wait_until(lambda: len(sink.published) >= 2000)
    finally:
        member.stop()
    assert sink.overlapped is True  # batch 1 was still unpublished when batch 2 staged
    assert sink.stages > 2 and sink.publish_order == sorted(sink.publish_order)
    offsets: dict[int, list[int]] = {}
    for r in sink.published:
        offsets.setdefault(r.partition, []).append(r.offset)
    assert sum(len(o) for o in offsets.values()) == 2000
    assert all(o == sorted(set(o)) for o in offsets.values())  # once each, in order
    assert records_after_restart(kafka, config, topic, 2, produce=10) == 10


def test_a_batch_after_one_that_never_lands_is_discarded_and_nothing_is_committed(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    produce_numbered(kafka, topic, 200, 2)
    sink = StagingRecorder(fail=True)
    config = member_config(kafka, f"g-{topic}", [topic], "sink-0", batch_bytes=1024)
    member = ThreadedMember(config, sink, RetryPolicy(first_delay_s=0.01)).start()
    try:
        assert wait_until(lambda: sink.stages >= 1)
        produce_numbered(kafka, topic, 200, 2)  # a second batch, behind the failing one
        assert wait_until(lambda: sink.stages >= 2)
    finally:
        member.stop()
    assert sink.published == []
    assert sorted(set(sink.discarded)) == list(range(1, sink.stages + 1))
    assert records_after_restart(kafka, config, topic, 2, produce=10) == 410


@pytest.mark.parametrize("identity", ["sink-0"])
def test_sink_must_implement_the_protocol(kafka: str, identity: str) -> None:
    from consumer_sdk.consumer import AutoscalingConsumer

    with pytest.raises(TypeError, match="sink must implement"):
        AutoscalingConsumer(member_config(kafka, "g", ["t"], identity), object())  # type: ignore[arg-type]


def test_members_with_different_heuristics_agree_on_the_majority(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic, group, speeds_topic = group_with_snapshot(kafka, topic_factory)
    members = [
        ThreadedMember(
            member_config(
                kafka, group, [topic], f"sink-{i}", heuristic=heuristic, snapshot_topic=speeds_topic
            ),
            CallbackSink(SeenRecords().write),
        ).start()
        for i, heuristic in enumerate(["mbf", "repair", "mbf"])
    ]
    try:
        assert wait_until(lambda: group_settled(members, 6))
        plans = leaders_plans(members)
    finally:
        for member in members:
            member.stop()
    full_plans = [p for p in plans if len(p.assignment) == 3]
    assert full_plans and all(p.heuristic == "mbf" for p in full_plans)


def test_a_failed_sync_group_is_retried(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str]
) -> None:
    broker = kafka_cluster_handle.embedded
    if broker is None:
        pytest.skip("error injection needs the embedded broker")
    topic = topic_factory(4)
    seen = SeenRecords()
    sync_group, invalid_request = 14, 42
    broker.push_request_errors(sync_group, [invalid_request, invalid_request])
    members = start_members(
        kafka_cluster_handle.bootstrap_servers, f"g-{topic}", [topic], 2, seen.write
    )
    try:
        assert wait_until(lambda: group_settled(members, 4))
        produced = produce_numbered(kafka_cluster_handle.bootstrap_servers, topic, 400, 4)
        assert wait_until(lambda: seen.total() == len(produced))
    finally:
        for member in members:
            member.stop()
    assert seen.duplicates() == 0


def test_consumed_records_and_bytes_are_metrics(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    import socket
    import urllib.request

    from prometheus_client import REGISTRY

    topic = topic_factory(2)
    group = f"g-{topic}"
    with socket.socket() as probe:  # a free port for this member's /metrics
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = SeenRecords()
    member = ThreadedMember(
        member_config(kafka, group, [topic], "sink-0", metrics_port=port), CallbackSink(seen.write)
    ).start()
    try:
        produce_numbered(kafka, topic, 100, 2)
        assert wait_until(lambda: seen.total() == 100)
        # The counters move after the write is committed, a moment after the sink saw it.
        counted = f'autoscaler_consumer_records_total{{group="{group}"'.encode()

        def metrics_page() -> bytes:
            answer: bytes = urllib.request.urlopen(
                f"http://127.0.0.1:{port}/metrics", timeout=10
            ).read()
            return answer

        assert wait_until(lambda: counted in metrics_page())
        page = metrics_page()
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert member.consumer is not None and member.consumer.health.problems() == []
        # Other consumers of this test process count too: none may name this one's group.
        assert f"group {group}:".encode() not in health.read()
    finally:
        member.stop()
    records = [
        REGISTRY.get_sample_value(
            "autoscaler_consumer_records_total",
            {"group": group, "topic": topic, "partition": str(p)},
        )
        for p in (0, 1)
    ]
    assert records == [50.0, 50.0]
    # kafka_helpers values are 64 B, keys "0".."99"; a record also counts its fixed cells.
    value_bytes = RECORD_FIXED_BYTES + 64 + len("99")
    total_bytes = sum(
        REGISTRY.get_sample_value(
            "autoscaler_consumer_bytes_total", {"group": group, "topic": topic, "partition": str(p)}
        )
        or 0
        for p in (0, 1)
    )
    assert 100 * (RECORD_FIXED_BYTES + 64) < total_bytes <= 100 * value_bytes
    assert f'autoscaler_consumer_records_total{{group="{group}"'.encode() in page


def test_overloaded_member_asks_for_a_replan(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(4)
    speeds_topic = topic_factory(1, prefix="speeds")
    group = f"g-{topic}"

    def publish(sequence: int, speeds: dict[int, float]) -> None:
        publish_snapshot(
            kafka,
            speeds_topic,
            Snapshot(
                group=group,
                sequence=sequence,
                timestamp=time.time(),
                unit="records/s",
                partitions={
                    TopicPartition(topic, p): PartitionStat(s, 0.0, 0) for p, s in speeds.items()
                },
            ),
        )

    publish(1, dict.fromkeys(range(4), 4.0))  # 16 in all: two members of 10, 2 + 2
    members = start_members(
        kafka,
        group,
        [topic],
        2,
        SeenRecords().write,
        snapshot_topic=speeds_topic,
        replan_after_secs=1.0,
    )
    try:
        assert wait_until(lambda: group_settled(members, 4))
        first = members[0].consumer
        assert first is not None and len(first.assigned) == 2
        # The first member's partitions speed up: 6 + 6 = 12 > 10. The other's slow down.
        hot = set(first.assigned)
        speeds = {p: 6.0 if TopicPartition(topic, p) in hot else 2.0 for p in range(4)}
        publish(2, speeds)
        assert wait_until(lambda: first.replans_requested >= 1)

        def within_capacity() -> bool:
            return group_settled(members, 4) and all(
                sum(speeds[tp.partition] for tp in m.consumer.assigned) <= 10.0
                for m in members
                if m.consumer is not None
            )

        # The leader re-packed: nobody above capacity now (6 | 6 + 2 + 2).
        assert wait_until(within_capacity)
    finally:
        for member in members:
            member.stop()


def test_a_member_without_partitions_stays_in_the_group(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str]
) -> None:
    """aiokafka issue 720: an idle member leaves its group after max_poll_interval_ms when it
    stops polling. The SDK keeps polling with nothing assigned, so a member left without
    partitions stays, for three times the interval, and no rebalance happens."""
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(1)
    group = f"g-{topic}"
    seen = SeenRecords()
    # A consumer property by its Java name reaches the client (kafka_properties).
    tuned = {"request.timeout.ms": "40000"}
    members = start_members(
        kafka, group, [topic], 2, seen.write, max_poll_interval_ms=1000, kafka_properties=tuned
    )
    try:
        consumers = [m.consumer for m in members if m.consumer is not None]
        # Settled, and the idle member's own sync has completed too: its empty assignment
        # looks the same before and after, only its generation tells them apart.
        assert wait_until(
            lambda: (
                group_settled(members, 1)
                and len({c.state.generation for c in consumers}) == 1
                and consumers[0].state.generation >= 0
            )
        )
        [idle] = [c for c in consumers if not c.assigned]
        generations = [c.state.generation for c in consumers]
        idle_events = len(idle.ownership_log)
        # Records keep flowing to the busy member for 3 s: three poll intervals.
        produced = produce_tracked(kafka, topic, 300, 1, pause_every=10, pause_s=0.1)
        assert wait_until(lambda: seen.total() == len(produced))
        assert [c.state.generation for c in consumers] == generations
        assert len(idle.ownership_log) == idle_events and not idle.assigned
        if kafka_cluster_handle.kind is not ClusterKind.EMBEDDED:  # DescribeGroups: real only
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": kafka})
            description = admin.describe_consumer_groups([group])[group].result(timeout=30)
            assert len(description.members) == 2
            # The brokers tell the members apart by client.id (quotas, request logs).
            assert sorted(m.client_id for m in description.members) == [
                f"kafka-autoscaler-{group}-sink-{i}" for i in range(2)
            ]
    finally:
        for member in members:
            member.stop()
    assert seen.duplicates() == 0
