"""Backoff shared by the stages that retry (sink writes, resume lookups)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff of failed sink calls: first delay, growth factor, ceiling."""

    first_delay_s: float = 0.2
    factor: float = 2.0
    max_delay_s: float = 30.0

    def delays(self) -> Iterable[float]:
        """Delays between attempts, forever."""
        delay = self.first_delay_s
        while True:
            yield delay
            delay = min(self.max_delay_s, delay * self.factor)
