"""A producer writing each partition of a topic at its own rate, on a thread, until stopped;
what the broker acknowledged is kept, so a run can count what its consumers lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer


class RateWriter(threading.Thread):
    """Writes ``rates[p]`` records/s of ``value`` to partition p of ``topic`` until
    :meth:`finish`; :attr:`written` holds the (partition, offset) of each acknowledged one.
    ``values``, if given, makes the n-th record's value (n from 0) instead."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rates: Sequence[float],
        value: bytes = b"x" * 100,
        values: Callable[[int], bytes] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rates, self.value = bootstrap, topic, list(rates), value
        self.values = values
        self.produced = 0
        self.written: set[tuple[int, int]] = set()
        self.unflushed = 0
        self._stop_writing = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})

        def delivered(err: object, msg: Any) -> None:
            if err is None:
                self.written.add((int(msg.partition()), int(msg.offset())))

        owed = [0.0] * len(self.rates)
        last = time.monotonic()
        while not self._stop_writing.is_set():
            now = time.monotonic()
            for partition, rate in enumerate(self.rates):
                owed[partition] += rate * (now - last)
                while owed[partition] >= 1:
                    value = self.value if self.values is None else self.values(self.produced)
                    producer.produce(self.topic, value, partition=partition, on_delivery=delivered)
                    self.produced += 1
                    owed[partition] -= 1
            last = now
            producer.poll(0)
            self._stop_writing.wait(0.05)
        self.unflushed = producer.flush(30)

    def finish(self, timeout_s: float = 60.0) -> None:
        """Stop writing, flush, and wait for the thread."""
        self._stop_writing.set()
        self.join(timeout_s)
