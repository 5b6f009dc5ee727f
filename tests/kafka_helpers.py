"""Small produce/consume helpers shared by the Kafka tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer


def produce_numbered(bootstrap: str, topic: str, count: int, partitions: int) -> set[bytes]:
    """Produce ``count`` records keyed ``0..count-1`` round-robin over partitions; wait for acks."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    keys = {str(i).encode() for i in range(count)}
    for i in range(count):
        producer.produce(
            topic,
            key=str(i).encode(),
            value=b"v" * 64,
            partition=i % partitions,
            on_delivery=on_delivery,
        )
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not acknowledged"
    assert not failures, failures
    return keys


def consume_keys(
    bootstrap: str, topics: Iterable[str], expected: int, group: str, deadline_s: float = 30.0
) -> list[bytes]:
    """Consume with confluent-kafka until ``expected`` records arrived or the deadline passed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
        }
    )
    consumer.subscribe(list(topics))
    keys: list[bytes] = []
    end = time.monotonic() + deadline_s
    try:
        while len(keys) < expected and time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            key = message.key()
            assert key is not None, f"record without key at {message.offset()}"
            keys.append(key)
    finally:
        consumer.close()
    return keys


def produce_tracked(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    pause_every: int = 0,
    pause_s: float = 0.0,
    value_for: Callable[[int], bytes] | None = None,
    idempotent: bool = False,
) -> set[tuple[int, int]]:
    """Produce ``count`` records round-robin; return the acknowledged (partition, offset).
    ``idempotent`` where brokers die under load: a plain producer re-sends a batch whose
    acknowledgement was lost, and the topic then holds records no delivery report names."""
    settings: dict[str, object] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    if idempotent:
        settings["enable.idempotence"] = True
    producer = Producer(settings)
    acked: set[tuple[int, int]] = set()
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            acked.add((msg.partition(), msg.offset()))

    for i in range(count):
        value = value_for(i) if value_for is not None else b"v" * 100
        producer.produce(topic, value=value, partition=i % partitions, on_delivery=on_delivery)
        producer.poll(0)
        if pause_every and i % pause_every == pause_every - 1:
            producer.flush(30)
            time.sleep(pause_s)  # paces the load so a kill lands mid-stream
    assert producer.flush(30) == 0
    assert not failures, failures
    return acked


class TrackedLoad:
    """Batches of ``batch`` records produced round-robin from a thread until the ``with``
    block ends, so a fault injected inside it lands while records arrive; ``acked`` holds
    every acknowledged (partition, offset) once the block has ended."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, batch: int = 500) -> None:
        self.bootstrap, self.topic, self.partitions, self.batch = (
            bootstrap,
            topic,
            partitions,
            batch,
        )
        self.acked: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.acked.update(
                produce_tracked(self.bootstrap, self.topic, self.batch, self.partitions)
            )
            self._stop.wait(0.1)  # the pace of the load, not a wait for a result

    def __enter__(self) -> TrackedLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
