"""The embedded broker: both clients, a 3-member group, broker faults, bad input, the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from local_kafka.broker_cli import execute_control_line
from local_kafka.embedded import EmbeddedKafka, EmbeddedKafkaError
from local_kafka.embedded_process import EmbeddedKafkaProcess
from tests.kafka_helpers import consume_keys, produce_numbered


def test_confluent_round_trip(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(4)
    produced = produce_numbered(kafka, topic, 2000, 4)
    consumed = consume_keys(kafka, [topic], len(produced), group=f"g-{topic}")
    assert sorted(consumed) == sorted(produced)


def test_aiokafka_round_trip(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(3)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all")
        await producer.start()
        try:
            for i in range(300):
                await producer.send(topic, key=str(i).encode(), value=b"x", partition=i % 3)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            session_timeout_ms=2000,
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        keys: list[bytes] = []
        try:
            end = time.monotonic() + 30
            while len(keys) < 300 and time.monotonic() < end:
                batch = await consumer.getmany(timeout_ms=200)
                keys.extend(r.key for records in batch.values() for r in records if r.key)
        finally:
            await consumer.stop()
        return keys

    keys = asyncio.run(run())
    assert sorted(keys) == sorted(str(i).encode() for i in range(300))


class _DelayedLeaderAssignor(RoundRobinPartitionAssignor):
    """Round robin, but the leader waits briefly so followers' SyncGroup arrive first.

    The mock completes SyncGroup as soon as the leader's arrives; followers whose request
    comes later get INVALID_REQUEST (docs/architecture.md section 7).
    """

    name = "roundrobin"

    @classmethod
    def assign(cls, cluster: Any, member_metadata: Any) -> Any:
        time.sleep(0.1)
        return super().assign(cluster, member_metadata)


def test_three_aiokafka_members_split_partitions(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(6)
    stop = threading.Event()
    owned: dict[int, set[int]] = {}

    async def member(index: int) -> None:
        # Each member has its own thread and loop, as separate processes would: the leader's
        # delay inside assign() must not block the followers' SyncGroup.
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka,
            group_id=f"g-{topic}",
            enable_auto_commit=False,
            session_timeout_ms=1500,
            heartbeat_interval_ms=100,
            partition_assignment_strategy=(_DelayedLeaderAssignor,),
        )
        await consumer.start()
        try:
            while not stop.is_set():
                await consumer.getmany(timeout_ms=100)
                owned[index] = {tp.partition for tp in consumer.assignment()}
        finally:
            await consumer.stop()

    threads = [threading.Thread(target=asyncio.run, args=(member(i),)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            snapshot = [set(owned.get(i, set())) for i in range(3)]
            if [len(o) for o in snapshot] == [2, 2, 2] and set().union(*snapshot) == set(range(6)):
                break
            stop.wait(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert [len(o) for o in snapshot] == [2, 2, 2]
    assert set().union(*snapshot) == set(range(6))


def test_broker_down_and_up_loses_nothing() -> None:
    with EmbeddedKafka(brokers=3) as broker:
        broker.create_topic("faults", 6, 3)
        first = produce_numbered(broker.bootstrap_servers, "faults", 1000, 6)
        broker.broker_down(2)
        from confluent_kafka import Producer

        # A producer started while broker 2 is down still delivers once it comes back.
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "acks": "all",
                "message.timeout.ms": 60000,
            }
        )
        later = {f"late-{i}".encode() for i in range(600)}
        for i, key in enumerate(sorted(later)):
            producer.produce("faults", key=key, value=b"v", partition=i % 6)
        producer.poll(0.5)
        broker.broker_up(2)
        assert producer.flush(60) == 0
        expected = first | later
        consumed = consume_keys(broker.bootstrap_servers, ["faults"], len(expected), "g-faults")
    assert len(consumed) == len(expected)
    assert set(consumed) == expected


def test_injected_request_errors_are_retried_by_the_producer() -> None:
    with EmbeddedKafka(brokers=1) as broker:
        broker.create_topic("errs", 1, 1)
        produce_api_key, not_leader = 0, 6
        broker.push_request_errors(produce_api_key, [not_leader, not_leader])
        produced = produce_numbered(broker.bootstrap_servers, "errs", 50, 1)
        consumed = consume_keys(broker.bootstrap_servers, ["errs"], 50, "g-errs")
    assert sorted(consumed) == sorted(produced)


def test_another_process_reaches_an_in_process_cluster(tmp_path: Path) -> None:
    with EmbeddedKafka(brokers=1) as broker:
        broker.create_topic("xproc", 2, 1)
        script = (
            "import sys; from tests.kafka_helpers import produce_numbered;"
            "produce_numbered(sys.argv[1], 'xproc', 500, 2)"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script, broker.bootstrap_servers],
            cwd=Path(__file__).parent.parent,
        )
        # The parent keeps the GIL busy meanwhile: the mock's native thread serves anyway.
        spins = 0
        while child.poll() is None:
            spins += sum(range(10_000)) > 0
        assert child.wait(timeout=60) == 0
        assert spins > 0
        consumed = consume_keys(broker.bootstrap_servers, ["xproc"], 500, "g-xproc")
    assert len(set(consumed)) == 500


def test_process_proxy_creates_topics_and_injects_faults() -> None:
    with EmbeddedKafkaProcess(brokers=2) as broker:
        broker.create_topic("proxied", 2, 2)
        broker.set_rtt(1, 5)
        broker.broker_down(2)
        broker.broker_up(2)
        produced = produce_numbered(broker.bootstrap_servers, "proxied", 200, 2)
        consumed = consume_keys(broker.bootstrap_servers, ["proxied"], 200, "g-proxied")
        with pytest.raises(ValueError, match=r"broker_id must be in \[1, 2\]"):
            broker.broker_down(9)
    assert sorted(consumed) == sorted(produced)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.create_topic("x", 0), r"partitions must be in \[1, 100000\]"),
        (lambda b: b.create_topic("", 1), r"name must be a topic name of 1-249 characters"),
        (lambda b: b.create_topic("x", 1, 4), r"replication must be in \[1, 3\]"),
        (lambda b: b.broker_down(4), r"broker_id must be in \[1, 3\]"),
        (lambda b: b.broker_up(0), r"broker_id must be in \[1, 3\]"),
        (lambda b: b.set_rtt(1, -1), r"ms must be in \[0, 3600000\]"),
        (lambda b: b.push_request_errors(0, []), r"errors must hold at least one"),
    ],
)
def test_bad_arguments_name_the_field_and_range(
    call: Callable[[EmbeddedKafka], None], message: str
) -> None:
    with EmbeddedKafka(brokers=3) as broker, pytest.raises(ValueError, match=message):
        call(broker)


def test_bootstrap_before_start_is_a_clear_error() -> None:
    with pytest.raises(EmbeddedKafkaError, match="not started"):
        _ = EmbeddedKafka().bootstrap_servers
    with pytest.raises(ValueError, match=r"brokers must be an integer in \[1, 64\]"):
        EmbeddedKafka(brokers=0)


def test_control_protocol_replies() -> None:
    with EmbeddedKafka(brokers=1) as broker:
        assert execute_control_line(broker, "create_topic ctl 2 1") == "ok"
        assert execute_control_line(broker, "explode").startswith("error unknown command")
        assert "partitions must be" in execute_control_line(broker, "create_topic ctl2 0")


def test_cli_rejects_a_bad_topic_spec() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "local_kafka.broker_cli", "--topic", "nopartitions"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--topic must look like NAME:PARTITIONS" in result.stderr
