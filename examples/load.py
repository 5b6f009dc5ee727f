"""Demo load: per-partition write rates that follow the paper's random walk, with a step up
and a step down, produced in 100 ms ticks. Rate logic is pure; :class:`LoadGenerator` runs it."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from assignor import TopicPartition

TICK_S = 0.1


@dataclass
class RateWalk:
    """s_0 ~ U[low, high]; every second s += U[-delta, delta] % of ``scale``, clipped to
    [0, high]; times ``step_up`` between the first and second third of the run, times
    ``step_down`` in the last third."""

    partitions: Sequence[TopicPartition]
    low: float
    high: float
    delta: float
    duration_s: float
    step_up: float = 2.5
    step_down: float = 0.4
    seed: int = 7
    rates: dict[TopicPartition, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.rates = {tp: self._rng.uniform(self.low, self.high) for tp in self.partitions}

    def advance(self) -> None:
        """One second of random walk."""
        for tp, rate in self.rates.items():
            step = self._rng.uniform(-self.delta, self.delta) / 100 * self.high
            self.rates[tp] = min(self.high, max(0.0, rate + step))

    def factor(self, elapsed_s: float) -> float:
        """The step applied at ``elapsed_s``."""
        if elapsed_s < self.duration_s / 3:
            return 1.0
        return self.step_up if elapsed_s < 2 * self.duration_s / 3 else self.step_down

    def current(self, elapsed_s: float) -> dict[TopicPartition, float]:
        """Records per second of every partition now."""
        factor = self.factor(elapsed_s)
        return {tp: rate * factor for tp, rate in self.rates.items()}


class LoadGenerator(threading.Thread):
    """Produces the walk's rates until ``duration_s`` or :meth:`stop`; remembers every
    acknowledged (topic, partition, offset)."""

    def __init__(self, bootstrap: str, walk: RateWalk, value_bytes: int = 200) -> None:
        super().__init__(name="load", daemon=True)
        self.walk = walk
        self.value = b"x" * value_bytes
        self.bootstrap = bootstrap
        self.acked: set[tuple[str, int, int]] = set()
        self.failed = 0
        self.started_at = time.monotonic()
        self._halt = threading.Event()
        self._owed: dict[TopicPartition, float] = {}
        self._next_walk = 1.0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add((msg.topic(), msg.partition(), msg.offset()))
        else:
            self.failed += 1

    def stop(self) -> None:
        """Stop producing (the thread flushes and ends)."""
        self._halt.set()

    def elapsed(self) -> float:
        """Seconds since the load started."""
        return time.monotonic() - self.started_at

    def produce_tick(self, producer: Producer) -> None:
        """One tick of the walk's rates (and, once a second, its step) handed to ``producer``."""
        while self.elapsed() >= self._next_walk:
            self.walk.advance()
            self._next_walk += 1.0
        for tp, rate in self.walk.current(self.elapsed()).items():
            owed = self._owed.get(tp, 0.0) + rate * TICK_S
            whole = int(owed)
            self._owed[tp] = owed - whole
            for _ in range(whole):
                try:
                    producer.produce(
                        tp.topic,
                        value=self.value,
                        partition=tp.partition,
                        on_delivery=self._delivered,
                    )
                except BufferError:
                    self.failed += 1  # the local queue is full while the brokers are away
        producer.poll(0)

    def run(self) -> None:
        # Created and dropped here: a producer must not outlive the broker it talks to.
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 10})
        while not self._halt.is_set() and self.elapsed() < self.walk.duration_s:
            self.produce_tick(producer)
            self._halt.wait(TICK_S)
        producer.flush(60)
