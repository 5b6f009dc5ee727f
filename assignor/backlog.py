"""Backlog as speed: how a group's lag is paid off (pure).

A consumer sized only for the write speeds never catches up on a backlog (a rebalance pause,
a slow batch, a start-up): it reads exactly as fast as records arrive. So the sidecar's
controller and the group's assignor both pack *effective* speeds

    effective = speed + max(0, lag - speed * allowance_seconds) / drain_seconds

The backlog is what a partition owes beyond the records its consumer legitimately holds in
the batch it is building (``allowance_seconds``, the consumers' batch wait time: lag is
measured from committed offsets, which trail by up to one batch); paying it within
``drain_seconds`` takes that much more speed. The controller's count and the assignor's
packing must use the same rule, or the extra consumers the backlog asked for sit idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from assignor.types import TopicPartition
from assignor.validation import check_non_negative, is_finite_number


@dataclass(frozen=True)
class DrainRule:
    """How fast a backlog is paid off, and how much lag is no backlog at all."""

    drain_seconds: float
    allowance_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not is_finite_number(self.drain_seconds) or self.drain_seconds <= 0:
            raise ValueError(
                f"drain_seconds must be a finite number > 0, got {self.drain_seconds!r}"
            )
        check_non_negative(self.allowance_seconds, "allowance_seconds")

    def backlog(self, speed: float, lag: float) -> float:
        """The part of ``lag`` to pay off (records or bytes, as the speed's unit)."""
        return max(0.0, lag - speed * self.allowance_seconds)

    def effective_speeds(
        self, speeds: Mapping[TopicPartition, float], lags: Mapping[TopicPartition, float]
    ) -> dict[TopicPartition, float]:
        """Every partition of ``speeds`` with its backlog's drain rate added."""
        return {
            tp: speed + self.backlog(speed, lags.get(tp, 0.0)) / self.drain_seconds
            for tp, speed in speeds.items()
        }

    def total_backlog(
        self, speeds: Mapping[TopicPartition, float], lags: Mapping[TopicPartition, float]
    ) -> float:
        """Sum of the backlogs of the partitions of ``speeds``."""
        return sum(self.backlog(speed, lags.get(tp, 0.0)) for tp, speed in speeds.items())
