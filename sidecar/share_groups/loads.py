"""What the sidecar tells the brokers' share assignor (pure): each partition's load in
consumers, and whether it moved enough to publish again."""

from __future__ import annotations

from collections.abc import Mapping

from assignor.types import TopicPartition

# Loads that moved less than this (relative to the largest) are not published again before
# the republish interval: the assignor only re-plans when members change anyway.
CHANGED = 0.05


def partition_loads(
    effective: Mapping[TopicPartition, float], capacity: float
) -> dict[TopicPartition, float]:
    """Each partition's effective speed (speed plus backlog drained in the drain time) over
    one consumer's capacity: the members it needs."""
    return {tp: max(0.0, speed) / capacity for tp, speed in effective.items()}


def moved(
    before: Mapping[TopicPartition, float] | None, now: Mapping[TopicPartition, float]
) -> bool:
    """Whether ``now`` differs from ``before`` (None: never published) by more than
    ``CHANGED`` of the largest load, or names other partitions."""
    if before is None or set(before) != set(now):
        return True
    scale = max([*before.values(), *now.values(), 1e-9])
    return any(abs(now[tp] - before[tp]) > CHANGED * scale for tp in now)
