"""A steady load for tests and benchmarks: records at a fixed rate, round-robin over a topic's
partitions, produced by confluent-kafka from a thread until stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Self

from confluent_kafka import Producer

TICK_S = 0.05
"""How often the thread sends what fell due: the pace of the load, not a wait for a result."""


class PacedLoad:
    """``rate`` records/s of ``value_bytes`` each, spread round-robin over ``partitions``;
    ``acked`` holds the (partition, offset) of every record the brokers acknowledged.

    ``settings`` are producer properties over ``linger.ms`` 20. Use as a context manager, or
    call :meth:`start` and :meth:`stop` (which flushes what is still in flight)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: float,
        partitions: int,
        *,
        value_bytes: int = 100,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not rate > 0 or partitions < 1 or value_bytes < 0:
            raise ValueError(
                f"rate must be > 0, partitions >= 1 and value_bytes >= 0, got {rate!r}, "
                f"{partitions!r}, {value_bytes!r}"
            )
        self.topic, self.rate, self.partitions = topic, rate, partitions
        self.value = b"v" * value_bytes
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 20, **(settings or {})}
        )
        self.acked: set[tuple[int, int]] = set()
        self.sent = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def _delivered(self, err: object, message: Any) -> None:
        if err is None:
            self.acked.add((message.partition(), message.offset()))

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stopping.is_set():
            due = int((time.monotonic() - started) * self.rate)
            for _ in range(due - self.sent):
                partition = self.sent % self.partitions
                self.producer.produce(
                    self.topic, self.value, partition=partition, on_delivery=self._delivered
                )
                self.sent += 1
            self.producer.poll(0)
            self._stopping.wait(TICK_S)
        self.producer.flush(30)

    def start(self) -> Self:
        """Start producing."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop producing and wait until what was sent is acknowledged (30 s at most)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(60)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
