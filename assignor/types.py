"""The small vocabulary every heuristic speaks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


Speeds = Mapping[TopicPartition, float]
"""Write speed of every partition, in the same unit as the capacity."""

Assignment = dict[TopicPartition, str]
"""Partition -> consumer (member) id."""


def partitions_by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """``[(topic, [partition, ...]), ...]``, topics and partitions in order: how Kafka's
    requests, member data and assignments list partitions."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())
