"""Stuck partitions: fetches failing at one offset again and again (corrupt bytes on the
broker) are said on the health endpoint and in a metric, and the partition is paused between
tries with a growing pause (:mod:`consumer_sdk.records.corrupt_fetches`), instead of being
fetched again as fast as the broker answers. Nothing of it is skipped."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk.records.corrupt_fetches import Failure, pause_for


class PausingClient(Protocol):
    """What the step needs of the Kafka client (aiokafka's consumer has it)."""

    def pause(self, *partitions: KafkaTopicPartition) -> None:
        """Stop fetching ``partitions``."""

    def resume(self, *partitions: KafkaTopicPartition) -> None:
        """Fetch ``partitions`` again."""


class StuckPartitions:
    """Pauses stuck partitions between tries; says which are stuck."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Partition -> (paused until, or None once resumed; its failures when paused).
        self._tries: dict[KafkaTopicPartition, tuple[float | None, int]] = {}

    def step(
        self,
        client: PausingClient,
        stuck: Mapping[KafkaTopicPartition, Failure],
        owned: Collection[KafkaTopicPartition],
        busy: Collection[KafkaTopicPartition] = (),
    ) -> str | None:
        """Pause what is ``stuck`` (of ``owned``, not ``busy`` with a lookup that pauses and
        resumes it itself) until its next try is due, resume what is due; the line that
        says which partitions are stuck (None: none)."""
        now = self._clock()
        for tp in [tp for tp in self._tries if tp not in owned or tp not in stuck]:
            until, _ = self._tries.pop(tp)
            if until is not None and tp in owned and tp not in busy:
                client.resume(tp)  # read past the bad offset (or gone): fetch as usual
        for tp, failure in stuck.items():
            if tp not in owned or tp in busy:
                continue
            until, count = self._tries.get(tp, (None, 0))
            if until is not None and now >= until:
                client.resume(tp)
                self._tries[tp] = (None, count)
            elif until is None and failure.count > count:  # failed again since it resumed
                client.pause(tp)
                self._tries[tp] = (now + pause_for(failure), failure.count)
        lines = [
            f"{f.reason} ({f.count} fetches in a row)"
            for tp, f in sorted(stuck.items())
            if tp in owned
        ]
        return "; ".join(lines) or None
