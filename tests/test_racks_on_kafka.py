"""Racks on Apache Kafka: three nodes in racks a/b/c; each SDK member declares its rack
(client.rack) and the group's leader gives it the partitions led in its rack."""

from __future__ import annotations

import asyncio
import time
import uuid

from assignor import TopicPartition
from consumer_sdk.sink import CallbackSink
from contract.snapshot import PartitionStat, Snapshot
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind
from sidecar.monitor import Monitor, Reading
from tests.conftest import skip_unless_runnable
from tests.kafka_helpers import produce_numbered
from tests.sdk_helpers import (
    SeenRecords,
    ThreadedMember,
    group_settled,
    member_config,
    publish_snapshot,
    wait_until,
)

RACKS = ("a", "b", "c")


async def monitor_reading(bootstrap: str, group: str, topic: str) -> Reading:
    monitor = Monitor(bootstrap, group, [topic], rack_locality="leader")
    await monitor.start()
    try:
        return await monitor.poll()
    finally:
        await monitor.stop()


PARTITIONS = 6


def test_members_read_the_partitions_led_in_their_own_rack() -> None:
    skip_unless_runnable(ClusterKind.APACHE)
    cluster = ApacheKafka(brokers=3, racks=RACKS).start()
    members: list[ThreadedMember] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic, speeds_topic = f"orders-{uuid.uuid4().hex[:6]}", "orders-speeds"
        cluster.create_topic(topic, PARTITIONS, 1)
        cluster.create_topic(speeds_topic, 1, 1)
        described = cluster.admin_client().list_topics(topic=topic, timeout=10).topics[topic]
        leader_rack = {p: RACKS[meta.leader - 1] for p, meta in described.partitions.items()}
        group = f"g-{topic}"
        snapshot = Snapshot(
            group=group,
            sequence=1,
            timestamp=time.time(),
            unit="records/s",
            partitions={
                TopicPartition(topic, p): PartitionStat(3.0, 0.0, 0) for p in range(PARTITIONS)
            },
        )
        publish_snapshot(bootstrap, speeds_topic, snapshot)
        seen = SeenRecords()
        # Members join in an order that is not the racks' (the rack-blind plan would not
        # line them up by chance).
        for index, rack in enumerate(("c", "a", "b")):
            config = member_config(
                bootstrap,
                group,
                [topic],
                f"sink-{index}",
                snapshot_topic=speeds_topic,
                capacity=10.0,
                client_rack=rack,
                leader_delay_secs=0.0,
            )
            members.append(ThreadedMember(config, CallbackSink(seen.write)).start())

        def local() -> bool:
            """Each member holds partitions, all led in its own rack."""
            for member in members:
                if member.consumer is None:
                    return False
                held = {tp.partition for tp in member.consumer.assigned}
                if not held or any(leader_rack[p] != member.config.client_rack for p in held):
                    return False
            return True

        # A plan made before every member's join data arrived may settle first; the group
        # converges on the rack-aware one in a later round.
        assert wait_until(lambda: group_settled(members, PARTITIONS) and local(), timeout_s=90), [
            (m.config.client_rack, m.consumer and m.consumer.assigned) for m in members
        ]
        plans = [
            m.consumer.plugin_stats.last_plan
            for m in members
            if m.consumer is not None and m.consumer.plugin_stats.last_plan is not None
        ]
        assert plans and all(p.heuristic == "repair" and p.rack_note is None for p in plans)
        # The sidecar's monitor reads the same racks, for its rack-aware count.
        reading = asyncio.run(monitor_reading(bootstrap, group, topic))
        assert reading.partition_racks == {
            TopicPartition(topic, p): frozenset({rack}) for p, rack in leader_rack.items()
        }
        produced = produce_numbered(bootstrap, topic, 600, PARTITIONS)
        assert wait_until(lambda: seen.total() == len(produced), timeout_s=60)
    finally:
        for member in members:
            member.stop()
        cluster.stop()
    assert seen.duplicates() == 0
