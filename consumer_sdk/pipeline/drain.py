"""Drain meter: what this consumer writes per second while it is the bottleneck.

A batch is *saturated* when, as it is cut, at least as many records wait in Kafka behind it
(high watermark minus the batch's next offset, over its partitions) as it holds: the
consumer could have cut another full batch at once, so the time to its completion is
spent draining, not waiting for records. Between the completions of two saturated batches
in a row the whole pipeline (fetch, decode, write, commit) was busy with a backlog waiting:
those intervals, and the records and bytes written in them, are the measurement. A batch
cut while the consumer keeps up (fewer records behind it than in it) ends the run: time
spent waiting for arrivals is not capacity. The rate is over the last ``window_s`` of such
intervals, reported once they add up to ``min_saturated_s``.

Pure: the caller gives the times; no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from contract.capacity import CapacityReport

Partition = TypeVar("Partition")


def backlog_behind(
    highwaters: Mapping[Partition, int | None], next_offsets: Mapping[Partition, int]
) -> int:
    """Records waiting in Kafka behind a batch: per partition its high watermark (None when
    not known yet: counted as nothing) minus the offset after the batch."""
    behind = 0
    for tp, next_offset in next_offsets.items():
        high = highwaters.get(tp)
        if high is not None:
            behind += max(0, high - next_offset)
    return behind


@dataclass(frozen=True)
class _Busy:
    done_at: float
    seconds: float
    records: int


@dataclass(frozen=True)
class _Interval:
    done_at: float
    seconds: float
    records: int
    bytes: int


class DrainMeter:
    """See the module docstring."""

    def __init__(self, window_s: float = 60.0, min_saturated_s: float = 1.0) -> None:
        if not window_s > 0 or not 0 < min_saturated_s <= window_s:
            raise ValueError(
                f"window_s must be > 0 and min_saturated_s in (0, window_s], got "
                f"{window_s!r}, {min_saturated_s!r}"
            )
        self.window_s = window_s
        self.min_saturated_s = min_saturated_s
        self._intervals: deque[_Interval] = deque()
        self._last_saturated_done: float | None = None
        self.measurements = 0
        self.records_per_s = 0.0
        self.bytes_per_s = 0.0
        self.saturated_s = 0.0
        self._busy: deque[_Busy] = deque()
        self._busy_until: float | None = None
        self.busy_records_per_s = 0.0
        self.busy_s = 0.0

    def busy(self, started_at: float, done_at: float, records: int) -> None:
        """The sink wrote ``records`` between ``started_at`` and ``done_at``; time another
        write in flight already covered counts once."""
        since = started_at if self._busy_until is None else max(started_at, self._busy_until)
        self._busy_until = done_at if self._busy_until is None else max(self._busy_until, done_at)
        self._busy.append(_Busy(done_at, max(0.0, done_at - since), records))
        while self._busy and self._busy[0].done_at < done_at - self.window_s:
            self._busy.popleft()
        self.busy_s = sum(b.seconds for b in self._busy)
        written = sum(b.records for b in self._busy)
        self.busy_records_per_s = written / self.busy_s if self.busy_s > 0 else 0.0

    def written(self, done_at: float, records: int, size: int, saturated: bool) -> bool:
        """A batch completed at ``done_at``; whether this gave a new measurement."""
        previous, self._last_saturated_done = self._last_saturated_done, None
        if not saturated:
            return False
        self._last_saturated_done = done_at
        if previous is None or done_at <= previous:
            return False  # the first of a run: its start is not known to be busy
        self._intervals.append(_Interval(done_at, done_at - previous, records, size))
        while self._intervals and self._intervals[0].done_at < done_at - self.window_s:
            self._intervals.popleft()
        seconds = sum(i.seconds for i in self._intervals)
        if seconds < self.min_saturated_s:
            return False
        self.saturated_s = seconds
        self.records_per_s = sum(i.records for i in self._intervals) / seconds
        self.bytes_per_s = sum(i.bytes for i in self._intervals) / seconds
        self.measurements += 1
        return True

    def report(self, member: str, commits: int) -> CapacityReport:
        """The latest measurement as a report from ``member`` (zeros until there is one)."""
        return CapacityReport(
            member,
            commits,
            self.measurements,
            self.records_per_s,
            self.bytes_per_s,
            self.saturated_s if self.measurements else 0.0,
            self.busy_records_per_s,
            self.busy_s,
        )
