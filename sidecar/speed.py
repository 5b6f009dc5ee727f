"""Write speed of each partition from its end offsets: the slope over a sliding window.

Pure: feed ``(time, end offset)`` samples, read speeds. The slope is a least-squares fit over
the window (robust to a late or early sample), reported only once the window spans at least
``min_span_s``. An end offset that goes backwards (topic re-created, truncated) restarts that
partition's window instead of reporting a negative speed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from assignor import TopicPartition

# A recent total this much above the window's is a step up, not noise (the paper's random
# walk moves a 24-partition total by a few per cent a second).
STEP_MARGIN = 1.25


@dataclass
class SpeedWindow:
    """Samples of one partition's end offset over the last ``window_s`` seconds.

    Keeps running sums for the least-squares slope, so reading the speed costs O(1). The
    sums are over values relative to a base sample (precision: offsets reach 1e12), and the
    base is moved, with the sums rebuilt, once it is far behind the window.
    """

    window_s: float = 30.0
    min_span_s: float = 3.0
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    _base: tuple[float, int] = (0.0, 0)
    _sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # n, t, o, tt, to

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s must be a finite number > 0, got {self.window_s!r}")
        if not (0 < self.min_span_s <= self.window_s):
            raise ValueError(
                f"min_span_s must be in (0, window_s={self.window_s}], got {self.min_span_s!r}"
            )

    def add(self, at: float, end_offset: int) -> None:
        """Record the end offset seen at time ``at`` (seconds, monotonic)."""
        if end_offset < 0:
            raise ValueError(f"end_offset must be >= 0, got {end_offset!r}")
        if self.samples and at <= self.samples[-1][0]:
            return  # a sample not newer than the last adds nothing
        if self.samples and end_offset < self.samples[-1][1]:
            self.samples.clear()  # offsets went backwards: a new log, a new window
        if not self.samples:
            self._rebase(at, end_offset)
        self.samples.append((at, end_offset))
        self._account(at, end_offset, +1)
        while self.samples[0][0] < at - self.window_s:
            old_at, old_offset = self.samples.popleft()
            self._account(old_at, old_offset, -1)
        if at - self._base[0] > 10 * self.window_s:
            self._rebase(*self.samples[0])

    def _account(self, at: float, offset: int, sign: int) -> None:
        t, o = at - self._base[0], float(offset - self._base[1])
        sums = self._sums
        sums[0] += sign
        sums[1] += sign * t
        sums[2] += sign * o
        sums[3] += sign * t * t
        sums[4] += sign * t * o

    def _rebase(self, at: float, offset: int) -> None:
        self._base = (at, offset)
        self._sums = [0.0] * 5
        for sample_at, sample_offset in self.samples:
            self._account(sample_at, sample_offset, +1)

    def latest(self, span_s: float) -> list[tuple[float, int]]:
        """The samples of the last ``span_s`` seconds, oldest first."""
        since = self.samples[-1][0] - span_s if self.samples else 0.0
        recent: list[tuple[float, int]] = []
        for sample in reversed(self.samples):
            if sample[0] < since:
                break
            recent.append(sample)
        return recent[::-1]

    def span(self) -> float:
        """Seconds between the oldest and newest sample."""
        return self.samples[-1][0] - self.samples[0][0] if len(self.samples) > 1 else 0.0

    def speed(self) -> float | None:
        """Records per second (least-squares slope), or None with less than ``min_span_s``."""
        if self.span() < self.min_span_s:
            return None
        return _least_squares(*self._sums)


def _least_squares(n: float, st: float, so: float, stt: float, sto: float) -> float:
    """The slope from the sums of n, t, offset, t*t and t*offset (never negative)."""
    denominator = n * stt - st * st
    return max(0.0, (n * sto - st * so) / denominator) if denominator > 0 else 0.0


def slope(samples: Sequence[tuple[float, int]]) -> float | None:
    """Least-squares records/s through a few (time, offset) samples; None below two."""
    if len(samples) < 2:
        return None
    t0, o0 = samples[0]
    ts = [t - t0 for t, _ in samples]
    offsets = [float(o - o0) for _, o in samples]
    return _least_squares(
        len(ts),
        sum(ts),
        sum(offsets),
        sum(t * t for t in ts),
        sum(t * o for t, o in zip(ts, offsets, strict=True)),
    )


def _higher(
    window: Mapping[TopicPartition, float], other: Mapping[TopicPartition, float]
) -> dict[TopicPartition, float]:
    """Each partition of ``window`` at the higher of its two speeds."""
    return {tp: max(speed, other.get(tp, 0.0)) for tp, speed in window.items()}


class SpeedTracker:
    """Speed windows for many partitions; partitions that disappear are forgotten."""

    def __init__(self, window_s: float = 30.0, min_span_s: float = 3.0) -> None:
        SpeedWindow(window_s, min_span_s)  # validates
        self.window_s = window_s
        self.min_span_s = min_span_s
        self.windows: dict[TopicPartition, SpeedWindow] = {}
        # When the step up being followed began (None: no step within the last window).
        self.step_since: float | None = None

    def observe(self, at: float, end_offsets: Mapping[TopicPartition, int]) -> None:
        """Record one round of end offsets (partitions missing this round are kept)."""
        for tp, offset in end_offsets.items():
            window = self.windows.get(tp)
            if window is None:
                window = self.windows[tp] = SpeedWindow(self.window_s, self.min_span_s)
            window.add(at, offset)

    def forget(self, keep: Iterable[TopicPartition]) -> None:
        """Drop windows of partitions not in ``keep`` (deleted topics)."""
        kept = set(keep)
        for tp in [tp for tp in self.windows if tp not in kept]:
            del self.windows[tp]

    def speeds(self) -> dict[TopicPartition, float]:
        """Speed of every partition with enough data."""
        result = {}
        for tp, window in self.windows.items():
            speed = window.speed()
            if speed is not None:
                result[tp] = speed
        return result

    def following_speeds(self, margin: float = STEP_MARGIN) -> dict[TopicPartition, float]:
        """The window's speeds, or during a step up each partition's higher of its window
        speed and its slope since the step began.

        A step up shows when the total over the last ``min_span_s`` exceeds the reference
        (the window's, or the one since the step being followed) by more than ``margin``;
        it is followed until the window spans only the new level. The
        window alone reports a step over its whole length (one consumer per decision), and
        going back to it as soon as it comes within the margin under-reports the new level
        by up to 1 / margin for the rest of the window (measured on Apache Kafka: a re-plan
        21 s into a x3 step packed a member to 1.15x its capacity).
        """
        window = self.speeds()
        latest = [w.samples[-1][0] for w in self.windows.values() if w.samples]
        if not window or not latest:
            return window
        now = max(latest)
        recent = self.recent_speeds(self.min_span_s, window)
        since = self.step_since
        if since is not None and now - since >= self.window_s + self.min_span_s:
            since = None  # the window now starts after the step began
        reference = window
        if since is not None:
            # The step began somewhere in the span that showed it; the slope since then
            # includes a little of the old level, the recent one is the new level alone.
            reference = _higher(_higher(window, self.recent_speeds(now - since, window)), recent)
        if sum(recent.values()) > margin * sum(reference.values()):
            since = now - self.min_span_s
            reference = _higher(window, recent)
        self.step_since = since
        return reference

    def recent_speeds(
        self, span_s: float, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, float]:
        """Speed over the last ``span_s`` seconds of each of ``partitions`` (those with a
        window speed, as :meth:`speeds` returned them)."""
        result = {}
        for tp in partitions:
            window = self.windows.get(tp)
            speed = slope(window.latest(span_s)) if window is not None else None
            if speed is not None:
                result[tp] = speed
        return result

    def ready(self) -> bool:
        """Whether every tracked partition has a speed."""
        return bool(self.windows) and all(w.speed() is not None for w in self.windows.values())
