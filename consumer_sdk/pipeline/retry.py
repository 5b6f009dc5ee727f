"""Backoff shared by the stages that retry (sink writes, resume lookups)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff of failed sink calls: first delay, growth factor, ceiling.

    The ceiling is what an outage's end can still cost: the soak's disk-full faults came
    back 23 s (median) after the disk was freed with a 30 s ceiling, the write waiting out
    a 25.6 s delay. One write attempt per consumer every 5 s is nothing to a sink that is
    down."""

    first_delay_s: float = 0.2
    factor: float = 2.0
    max_delay_s: float = 5.0

    def delays(self) -> Iterable[float]:
        """Delays between attempts, forever."""
        delay = self.first_delay_s
        while True:
            yield delay
            delay = min(self.max_delay_s, delay * self.factor)
