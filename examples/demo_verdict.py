"""What a demo run says about the control loop, from its per-second samples.

The targets (issue: the control loop measures instead of assuming): the peak consumer count
at most one above what the group's best measured drain needs for the high phase's load, and
the lag at the end of the high phase at most half its peak in that phase.

The drain of a consumer count is measured from the samples themselves: over each second the
group held that count with a backlog waiting (lag above ``BACKLOG_RECORDS``) and, where a
sample says (its "ready" 0), every consumer of that count had joined, records drained =
records produced - growth of the lag; a count's drain is over all its such seconds (at least
``MIN_SECONDS`` of them). Pure: samples in, verdict out.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BACKLOG_RECORDS = 2_000.0
MIN_SECONDS = 5
# A count whose drain is within this of the best one is as good.
AS_GOOD = 0.95


@dataclass(frozen=True)
class DemoVerdict:
    """See the module docstring."""

    peak: int
    drains: Mapping[int, float]
    best: int | None  # the fewest consumers within AS_GOOD of the best drain
    needed: int | None  # the fewest whose drain covers the high phase's mean load
    high_rate: float
    high_peak_lag: float
    high_end_lag: float

    @property
    def bound(self) -> int | None:
        """The most consumers the target allows: what the load needs (else the best
        count) plus one; None when no drain was measured."""
        count = self.needed if self.needed is not None else self.best
        return None if count is None else count + 1

    def lines(self) -> list[str]:
        """The verdict in words, targets marked."""
        drains = ", ".join(f"{n}: {d:,.0f}/s" for n, d in sorted(self.drains.items())) or "none"
        bound = self.bound
        peak_ok = bound is None or self.peak <= bound
        lag_ok = self.high_end_lag <= self.high_peak_lag / 2
        return [
            f"drain with a backlog waiting, by consumer count: {drains}",
            f"high phase: {self.high_rate:,.0f} records/s on average; needs "
            f"{self.needed if self.needed is not None else 'more than any measured count'}"
            f" consumer(s) by those drains (best: {self.best})",
            f"peak consumers {self.peak} (target <= {bound if bound is not None else '-'}: "
            f"{'holds' if peak_ok else 'MISSED'})",
            f"lag at the end of the high phase {self.high_end_lag:,.0f}, its peak in that "
            f"phase {self.high_peak_lag:,.0f} (target <= half: {'holds' if lag_ok else 'MISSED'})",
        ]


def drains_by_count(samples: Sequence[Mapping[str, float]]) -> dict[int, float]:
    """Records/s drained per consumer count while a backlog waited (see the module doc):
    over all such seconds of a count, records produced minus the lag's growth, over the
    time (a total, not a median of seconds: the lag is a saw, commits come per batch).
    Seconds where a sample is not "ready" (consumers of its count still starting: a
    forming group drains nothing yet) are left out."""
    drained: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for a, b in itertools.pairwise(samples):
        count, dt = int(a["running"]), b["t"] - a["t"]
        if count <= 0 or count != int(b["running"]) or dt <= 0 or not draining(a) or not ready(b):
            continue
        drained[count] = drained.get(count, 0.0) + a["rate"] * dt - (b["lag"] - a["lag"])
        seconds[count] = seconds.get(count, 0.0) + dt
    return {n: drained[n] / t for n, t in seconds.items() if t >= MIN_SECONDS}


def ready(sample: Mapping[str, float]) -> bool:
    """Whether every consumer of the sample's count had joined (no "ready": not known, yes)."""
    return bool(sample.get("ready", 1.0))


def draining(sample: Mapping[str, float]) -> bool:
    """Whether the sample's group, ready, had a backlog waiting: its drain was what it can
    do, not its load."""
    return ready(sample) and sample["lag"] >= BACKLOG_RECORDS


def best_count(drains: Mapping[int, float]) -> int | None:
    """The fewest consumers whose drain is within ``AS_GOOD`` of the best (None: none, or
    no count drained anything: in a short run the lag can grow faster than the sampled
    production rate, and a negative drain has no "within 5 % of")."""
    top = max(drains.values(), default=0.0)
    if top <= 0:
        return None
    return min(n for n, d in drains.items() if d >= top * AS_GOOD)


def judge(samples: Sequence[Mapping[str, float]], duration_s: float) -> DemoVerdict:
    """The verdict on one run of ``duration_s`` seconds of load (high phase: its middle
    third)."""
    high = [s for s in samples if duration_s / 3 <= s["t"] < 2 * duration_s / 3]
    drains = drains_by_count(samples)
    high_rate = statistics.fmean(s["rate"] for s in high) if high else 0.0
    enough = [n for n, d in drains.items() if d >= high_rate]
    return DemoVerdict(
        peak=int(max((s["running"] for s in samples), default=0)),
        drains=drains,
        best=best_count(drains),
        needed=min(enough) if enough else None,
        high_rate=high_rate,
        high_peak_lag=max((s["lag"] for s in high), default=0.0),
        high_end_lag=high[-1]["lag"] if high else 0.0,
    )
