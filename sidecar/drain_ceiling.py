"""The drain ceiling: the consumer count past which more consumers did not drain more.

Consumers that share a bottleneck (one Spark Connect server, a database, the CPU of one
machine) split it: adding one makes every one slower, and sizing by per-consumer capacity
then adds more. The group's own drain shows it: while a backlog waits, the committed
offsets rise as fast as the group can write. For each consumer count that held through
``warmup_s`` plus ``measure_s`` with a backlog all along, the drain is the slope of the
group's committed offsets. When a count drains no more than ``gain`` times a smaller count
did, the best count (the smallest of those that drained most) is the ceiling: no scale-up
above it, and a group above it goes back to it. The ceiling and the drains behind it are
forgotten after ``retest_s``: the bottleneck may have gone (a bigger server, other
tenants gone), so the next backlog tests again.

Pure: the caller gives the times and totals; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Segment:
    count: int
    since: float  # ready and backlogged since
    baseline: tuple[float, int] | None = None  # (time, committed) once warmed up


class DrainCeiling:
    """See the module docstring."""

    def __init__(
        self,
        *,
        warmup_s: float = 10.0,
        measure_s: float = 20.0,
        gain: float = 1.05,
        retest_s: float = 600.0,
    ) -> None:
        self.warmup_s = warmup_s
        self.measure_s = measure_s
        self.gain = gain
        self.retest_s = retest_s
        # consumer count -> (records/s drained while backlogged, when measured)
        self.drains: dict[int, tuple[float, float]] = {}
        self.ceiling: int | None = None
        self.ceiling_at: float | None = None
        self.reason: str | None = None
        self._segment: _Segment | None = None

    def observe(
        self, now: float, count: int, committed: int | None, backlogged: bool, ready: bool
    ) -> None:
        """One round: ``count`` consumers asked for, ``committed`` the sum of the group's
        committed offsets (None: unknown), whether a backlog waits, and whether the group
        has taken ``count`` in (its members joined and reading)."""
        self._expire(now)
        if committed is None or not backlogged or not ready or count <= 0:
            self._segment = None
            return
        segment = self._segment
        if segment is None or segment.count != count:
            self._segment = _Segment(count, now)
            return
        if segment.baseline is None:
            if now - segment.since >= self.warmup_s:
                segment.baseline = (now, committed)
            return
        started, first = segment.baseline
        if now - started < self.measure_s:
            return
        self.drains[count] = (max(0.0, (committed - first) / (now - started)), now)
        self._judge(now, count)

    def _judge(self, now: float, count: int) -> None:
        rate = self.drains[count][0]
        smaller = {c: d for c, (d, _) in self.drains.items() if c < count}
        if not smaller:
            return
        best_smaller = max(smaller.values())
        if rate > best_smaller * self.gain:
            return
        best = max(self.drains.values(), key=lambda d: d[0])[0]
        ceiling = min(c for c, (d, _) in self.drains.items() if d >= best / self.gain)
        if self.ceiling is None or ceiling < self.ceiling:
            self.ceiling_at = now
        self.ceiling = ceiling
        self.reason = (
            f"{count} consumers drained {rate:.0f}/s with a backlog waiting, no more than "
            f"{max(smaller, key=lambda c: smaller[c])} did ({best_smaller:.0f}/s): the "
            f"group is limited downstream (a shared sink or the CPU); at most {ceiling} "
            f"(drained {self.drains[ceiling][0]:.0f}/s) until re-tested"
        )

    def _expire(self, now: float) -> None:
        if self.ceiling_at is not None and now - self.ceiling_at >= self.retest_s:
            self.ceiling = self.ceiling_at = self.reason = None
        for count in [c for c, (_, at) in self.drains.items() if now - at >= self.retest_s]:
            del self.drains[count]

    def limit(self) -> int | None:
        """The most consumers worth running now; None: no ceiling known."""
        return self.ceiling
