"""Cross-rack fetched bytes on Apache Kafka: three nodes in racks a, b and c, one consumer in
each rack, and the assignors users would pick.

The topic's 12 partitions have one replica each (so every fetch goes to the partition's
leader, and which rack a fetch crosses follows from who reads what): partitions 0-5 led in
rack a at 1 unit of bytes each, 6-8 in b and 9-11 in c at 2 units each. Every rack leads the
same bytes, not the same number of partitions: a count-balanced assignor (4 partitions per
consumer) must send two of rack a's partitions to another rack even when it knows racks.

Rows: ours with racks (the SDK with ``client_rack``, a speed snapshot with the same weights),
ours without, Kafka's Java consumer with its cooperative-sticky assignor and ``client.rack``
(KIP-881; ``support/java/RackConsumer.java``, compiled here against the brokers' own
jars), confluent-kafka's cooperative-sticky with ``client.rack`` (librdkafka's port of the
same), and KIP-848 (``group.protocol=consumer``, the broker's assignor) with
``client.rack``. The group settles first, then the records are produced, then
each consumer reads until everything was read; bytes each consumer fetched, per partition,
are counted as it reads them. With replication factor 3 over the three racks and follower
fetching (KIP-392) every rack holds a replica of every partition and no fetch needs to cross
whatever the assignment: the second table shows it with librdkafka's own count of the bytes
it received from each broker.

``python -m benchmarks.rack_fetch`` writes ``results/rack_fetch.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Consumer, Producer

from assignor import TopicPartition
from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.lake.jar_lock import cache_dir
from consumer_sdk.sink import CallbackSink, Record
from contract.snapshot import PartitionStat, Snapshot
from local_kafka.apache_kafka import ApacheKafka, java_executable, kafka_classpath

RACKS = ("a", "b", "c")
JOIN_ORDER = ("c", "a", "b")  # not the racks' order: a rack-blind plan does not line up by luck
LEADER_NODE = [1] * 6 + [2] * 3 + [3] * 3  # partition -> node id (node i is in RACKS[i - 1])
WEIGHT = [1] * 6 + [2] * 6  # units of bytes per partition


def replicas(partition: int, replication: int) -> list[int]:
    """The partition's replicas: its leader (:data:`LEADER_NODE`), then the next nodes."""
    leader = LEADER_NODE[partition]
    return [(leader - 1 + i) % len(RACKS) + 1 for i in range(replication)]


VALUE = b"x" * 1024
CAPACITY = 7.0  # in the snapshot's units: the 18 units need three consumers
SETTLE_S, READ_S = 60.0, 120.0


class Reader:
    """One consumer of a row, in its own thread: what it owns, and bytes it read per
    partition."""

    def __init__(self, name: str, rack: str) -> None:
        self.name, self.rack = name, rack
        self.owned: set[int] = set()
        self.read: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def run(self) -> None:
        raise NotImplementedError

    def count(self, partition: int, size: int) -> None:
        with self.lock:
            self.read[partition] += size

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


class ConfluentReader(Reader):
    """confluent-kafka, classic cooperative-sticky or KIP-848, with ``client.rack``."""

    def __init__(self, name: str, rack: str, bootstrap: str, group: str, topic: str, kip848: bool):
        super().__init__(name, rack)
        self.settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.rack": rack,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            # Bytes received from each broker (librdkafka's statistics): where fetches went.
            "statistics.interval.ms": 500,
            "stats_cb": self.on_stats,
        }
        self.received: dict[int, int] = {}  # node id -> bytes received from it
        if kip848:
            self.settings["group.protocol"] = "consumer"
        else:
            self.settings["partition.assignment.strategy"] = "cooperative-sticky"
        self.topic = topic

    def on_stats(self, stats: str) -> None:
        brokers = json.loads(stats).get("brokers", {})
        self.received = {
            int(b["nodeid"]): int(b["rxbytes"]) for b in brokers.values() if b.get("nodeid", -1) > 0
        }

    def run(self) -> None:
        consumer = Consumer(self.settings)
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                for message in consumer.consume(500, 0.2):
                    partition, value = message.partition(), message.value()
                    if message.error() is None and partition is not None and value is not None:
                        self.count(partition, len(value))
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()


JAVA_SOURCE = Path(__file__).parent / "support" / "java" / "RackConsumer.java"


def java_consumer_classpath() -> str:
    """RackConsumer compiled (once per source) against the locked Kafka jars, and the
    classpath to run it with."""
    source = JAVA_SOURCE.read_bytes()
    classes = cache_dir() / "bench-java" / hashlib.sha256(source).hexdigest()[:16]
    jars = kafka_classpath()
    if not (classes / "RackConsumer.class").is_file():
        javac = shutil.which("javac")
        if javac is None:
            raise RuntimeError("javac not found: the Java consumer row needs a JDK 17")
        command = [javac, "--release", "17", "-nowarn", "-cp", jars, "-d", str(classes)]
        subprocess.run([*command, str(JAVA_SOURCE)], check=True, capture_output=True)
    return os.pathsep.join([str(classes), jars])


class JavaReader(Reader):
    """Kafka's Java consumer (the same version as the brokers), cooperative-sticky with
    ``client.rack`` (KIP-881), as a process printing what it owns and reads."""

    def __init__(self, name: str, rack: str, command: list[str]) -> None:
        super().__init__(name, rack)
        self.command = command
        self.process: subprocess.Popen[str] | None = None

    def run(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, *words = line.split()
            if kind == "owned":
                self.owned = {int(word) for word in words}
            elif kind == "read":
                for word in words:
                    partition, size = word.split(":")
                    self.count(int(partition), int(size))

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.thread.join(30)


class OursReader(Reader):
    """Our SDK consumer (``client_rack`` set, or not), reading into a counting sink."""

    def __init__(self, name: str, rack: str, config: ConsumerConfig) -> None:
        super().__init__(name, rack)
        self.config = config
        self.consumer: AutoscalingConsumer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def write(self, _topic: str, records: Sequence[Record]) -> None:
        for record in records:
            self.count(record.partition, len(record.value or b""))

    def run(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self.consumer = AutoscalingConsumer(self.config, CallbackSink(self.write))
            watcher = asyncio.create_task(self.watch())
            try:
                await self.consumer.run_async()
            finally:
                watcher.cancel()

        asyncio.run(go())

    async def watch(self) -> None:
        while True:
            if self.consumer is not None:
                self.owned = {tp.partition for tp in self.consumer.assigned}
            await asyncio.sleep(0.1)

    def close(self) -> None:
        if self.loop is not None and self.consumer is not None:
            self.loop.call_soon_threadsafe(self.consumer.request_stop)
        self.thread.join(60)


Row = Callable[[str, str, str, str], list[Reader]]


def ours(with_racks: bool) -> Row:
    """Three SDK members, with or without their racks."""

    def make(bootstrap: str, group: str, topic: str, speeds_topic: str) -> list[Reader]:
        return [
            OursReader(
                f"ours-{rack}",
                rack,
                ConsumerConfig(
                    bootstrap_servers=bootstrap,
                    group=group,
                    topics=(topic,),
                    member_identity=f"sink-{index}",
                    capacity=CAPACITY,
                    snapshot_topic=speeds_topic,
                    client_rack=rack if with_racks else None,
                    session_timeout_ms=6000,
                    wait_time_secs=0.3,
                ),
            )
            for index, rack in enumerate(JOIN_ORDER)
        ]

    return make


def confluent(kip848: bool) -> Row:
    """Three confluent-kafka consumers with ``client.rack``."""

    def make(bootstrap: str, group: str, topic: str, _speeds: str) -> list[Reader]:
        return [
            ConfluentReader(f"confluent-{rack}", rack, bootstrap, group, topic, kip848)
            for rack in JOIN_ORDER
        ]

    return make


def java_cooperative_sticky(bootstrap: str, group: str, topic: str, _speeds: str) -> list[Reader]:
    """Three Java consumers with ``client.rack``."""
    base = [java_executable(), "-Xmx256m", "-cp", java_consumer_classpath(), "RackConsumer"]
    return [
        JavaReader(f"java-{rack}", rack, [*base, bootstrap, group, topic, rack])
        for rack in JOIN_ORDER
    ]


# Replication factor 3 and follower fetching: every rack holds a replica of every partition.
FOLLOWER_ROWS: dict[str, Row] = {
    "KIP-848 (broker's assignor), client.rack": confluent(True),
    "confluent-kafka cooperative-sticky, client.rack": confluent(False),
}

ROWS: dict[str, Row] = {
    "ours, racks declared": ours(True),
    "ours, no racks": ours(False),
    "Java consumer 4.3.1 cooperative-sticky, client.rack (KIP-881)": java_cooperative_sticky,
    "confluent-kafka cooperative-sticky, client.rack": confluent(False),
    "KIP-848 (broker's assignor), client.rack": confluent(True),
}


def settled(readers: Sequence[Reader]) -> bool:
    """Every partition owned by exactly one reader, and every reader owning some."""
    owned = [p for r in readers for p in r.owned]
    return len(owned) == len(set(owned)) == len(WEIGHT) and all(r.owned for r in readers)


class SnapshotPublisher:
    """Publishes the row's speed snapshot every few seconds, as the sidecar would (a member
    ignores one older than 30 s)."""

    def __init__(self, bootstrap: str, group: str, topic: str, speeds_topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap})
        self.group, self.topic, self.speeds_topic = group, topic, speeds_topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        sequence = 0
        while True:
            sequence += 1
            snapshot = Snapshot(
                group=self.group,
                sequence=sequence,
                timestamp=time.time(),
                unit="records/s",
                partitions={
                    TopicPartition(self.topic, p): PartitionStat(float(w), 0.0, 0)
                    for p, w in enumerate(WEIGHT)
                },
            )
            self.producer.produce(self.speeds_topic, snapshot.encode())
            self.producer.flush(10)
            if self.stop.wait(5.0):
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def produce(bootstrap: str, topic: str, records_per_unit: int) -> int:
    """Each partition's weight x ``records_per_unit`` records of 1 KiB; bytes produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    total = 0
    for partition, weight in enumerate(WEIGHT):
        for _ in range(weight * records_per_unit):
            producer.produce(topic, VALUE, partition=partition)
            producer.poll(0)
            total += len(VALUE)
    assert producer.flush(60) == 0
    return total


async def create_topics(bootstrap: str, topic: str, speeds_topic: str, replication: int) -> None:
    """The row's topic, each partition led by the node :data:`LEADER_NODE` names
    (through aiokafka's admin client: confluent-kafka 2.x refuses any replica assignment
    with "a default partition count and a replica assignment are mutually exclusive"), and
    its speeds topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(topic, -1, -1, {p: replicas(p, replication) for p in range(len(WEIGHT))}),
                NewTopic(speeds_topic, 1, 1),
            ]
        )
    finally:
        await admin.close()


def run_row(
    name: str, make: Row, cluster: ApacheKafka, records_per_unit: int, replication: int = 1
) -> dict[str, Any]:
    """One group on a fresh topic: settle, produce, read everything; bytes per rack."""
    topic = f"rack-{uuid.uuid4().hex[:8]}"
    speeds_topic = f"{topic}-speeds"
    asyncio.run(create_topics(cluster.bootstrap_servers, topic, speeds_topic, replication))
    group = f"g-{topic}"
    publisher = SnapshotPublisher(cluster.bootstrap_servers, group, topic, speeds_topic)
    readers = make(cluster.bootstrap_servers, group, topic, speeds_topic)
    for reader in readers:
        reader.thread.start()
        time.sleep(1.0)  # join one after another, in JOIN_ORDER
    try:
        deadline = time.monotonic() + SETTLE_S
        while not settled(readers) and time.monotonic() < deadline:
            time.sleep(0.2)
        was_settled = settled(readers)
        owned = {r.rack: sorted(r.owned) for r in readers}
        produced = produce(cluster.bootstrap_servers, topic, records_per_unit)
        deadline = time.monotonic() + READ_S
        while sum(sum(r.read.values()) for r in readers) < produced:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(1.5)  # a last round of the clients' statistics
    finally:
        for reader in readers:
            reader.close()
        publisher.close()
    received = [
        (r.rack, node, size)
        for r in readers
        if isinstance(r, ConfluentReader)
        for node, size in r.received.items()
    ]
    received_total = sum(size for _, _, size in received)
    received_across = sum(size for rack, node, size in received if RACKS[node - 1] != rack)
    read = sum(sum(r.read.values()) for r in readers)
    cross = sum(
        size
        for r in readers
        for partition, size in r.read.items()
        if RACKS[LEADER_NODE[partition] - 1] != r.rack
    )
    row = {
        "row": name,
        "settled": was_settled,
        "owned": owned,
        "produced_bytes": produced,
        "read_bytes": read,
        "cross_rack_bytes": cross,
        "cross_rack_share": cross / read if read else 0.0,
        "replication": replication,
        # From the clients' own statistics (confluent-kafka rows): None elsewhere.
        "received_bytes": received_total if received else None,
        "received_across_share": received_across / received_total if received_total else None,
    }
    print(f"{name}: cross-rack {row['cross_rack_share']:.1%} of {read:,} bytes", flush=True)
    return row


def render(rows: list[dict[str, Any]], cluster: ApacheKafka) -> str:
    """The results page."""
    lines = [
        "# Cross-rack fetched bytes: three racks, one consumer in each",
        "",
        machine_line(),
        f"Broker: Apache Kafka {cluster.version} (KRaft, 3 nodes in racks a, b, c; "
        "replica.selector.class RackAwareReplicaSelector).",
        "",
        "12 partitions of one replica: 0-5 led in rack a (1 unit of bytes each), 6-8 in b and "
        "9-11 in c (2 units each). Bytes each consumer read, per partition, after the group "
        "settled; a fetch crosses when the consumer's rack is not the leader's.",
        "",
        "| assignor | runs | settled | cross-rack bytes, mean (each run) "
        "| partitions read in a / b / c, first run |",
        "|---|---:|---|---:|---|",
    ]
    for name in ROWS:
        runs = [r for r in rows if r["row"] == name and r["replication"] == 1]
        owned = " / ".join(
            ",".join(map(str, runs[0]["owned"].get(rack, []))) or "-" for rack in RACKS
        )
        shares = [r["cross_rack_share"] for r in runs]
        each = ", ".join(f"{share:.1%}" for share in shares)
        lines.append(
            f"| {name} | {len(runs)} | {'yes' if all(r['settled'] for r in runs) else 'NO'} | "
            f"{sum(shares) / len(shares):.1%} ({each}) | {owned} |"
        )
    lines += [
        "",
        "## Replication factor 3, follower fetching",
        "",
        "The same partitions and leaders, each with a replica in every rack. 'Led elsewhere': "
        "bytes a consumer read of partitions led in another rack (what would cross fetching "
        "from leaders); 'received from another rack': bytes the client received from brokers "
        "in another rack, from librdkafka's own statistics (fetches, and the little else a "
        "client asks).",
        "",
        "| assignor | runs | led elsewhere, mean | received from another rack, mean (each run) |",
        "|---|---:|---:|---:|",
    ]
    for name in FOLLOWER_ROWS:
        runs = [r for r in rows if r["row"] == name and r["replication"] == 3]
        if not runs:
            continue
        led = sum(r["cross_rack_share"] for r in runs) / len(runs)
        shares = [r["received_across_share"] or 0.0 for r in runs]
        each = ", ".join(f"{share:.1%}" for share in shares)
        lines.append(
            f"| {name} | {len(runs)} | {led:.1%} | {sum(shares) / len(shares):.1%} ({each}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Every row on one three-node cluster, one after another."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records-per-unit", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    with ApacheKafka(brokers=3, racks=RACKS) as cluster:
        rows = [
            run_row(name, make, cluster, args.records_per_unit)
            for _ in range(args.repeats)
            for name, make in ROWS.items()
        ]
        rows += [
            run_row(name, make, cluster, args.records_per_unit, replication=3)
            for _ in range(args.repeats)
            for name, make in FOLLOWER_ROWS.items()
        ]
        table = render(rows, cluster)
    publish("rack_fetch", table, {"rows": rows, "args": vars(args)}, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
