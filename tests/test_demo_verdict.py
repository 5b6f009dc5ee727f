"""The demo's verdict on its control loop, from synthetic samples."""

from __future__ import annotations

import pytest

from examples.demo_verdict import best_count, drains_by_count, judge


def samples(phases: list[tuple[int, int, float, float]]) -> list[dict[str, float]]:
    """(seconds, consumers, production rate, drain rate) phases -> per-second samples."""
    out: list[dict[str, float]] = []
    t, lag = 0.0, 10_000.0
    for seconds, running, rate, drain in phases:
        for _ in range(seconds):
            out.append({"t": t, "running": float(running), "rate": rate, "lag": lag})
            lag = max(0.0, lag + rate - drain)
            t += 1.0
    return out


def test_drains_are_measured_per_count_while_a_backlog_waits() -> None:
    run = samples([(20, 2, 3_000.0, 1_500.0), (20, 4, 3_000.0, 3_500.0)])
    drains = drains_by_count(run)
    assert drains[2] == pytest.approx(1_500.0, rel=0.01)
    assert drains[4] == pytest.approx(3_500.0, rel=0.01)


def test_seconds_of_consumers_still_joining_are_not_a_drain() -> None:
    # The group forming: 2 consumers asked for, none reading yet for 10 s (the lag grows at
    # the production rate), then both drain 2,500/s.
    run = samples([(10, 2, 1_000.0, 0.0), (20, 2, 1_000.0, 2_500.0)])
    for sample in run[:10]:
        sample["ready"] = 0.0
    assert drains_by_count(run)[2] == pytest.approx(2_500.0, rel=0.01)
    assert drains_by_count([{k: v for k, v in s.items() if k != "ready"} for s in run])[2] < 2_000


def test_the_verdict_marks_a_peak_above_the_need_and_a_lag_not_drained() -> None:
    # 30 s low, 30 s high (3,000/s), 30 s low; 3 consumers drain 3,600/s, 6 no more.
    run = samples(
        [
            (30, 2, 1_000.0, 1_000.0),
            (10, 3, 3_000.0, 3_600.0),
            (20, 6, 3_000.0, 3_600.0),
            (30, 6, 1_000.0, 3_600.0),
        ]
    )
    verdict = judge(run, 90.0)
    assert verdict.needed == 3 and verdict.best == 3 and verdict.peak == 6
    lines = verdict.lines()
    assert "peak consumers 6 (target <= 4: MISSED)" in lines[2]
    assert "target <= half: holds" in lines[3]  # the lag fell from 10,000 in the high phase


def test_no_best_count_when_no_count_drained_anything() -> None:
    # Found by `make test` on a fresh clone: a 12 s demo on Apache Kafka measured only
    # negative drains (the lag grew faster than the sampled production rate), and the
    # verdict crashed looking for a count within 5 % of a negative best.
    assert best_count({2: -300.0, 3: -120.0}) is None
    assert best_count({}) is None
    assert best_count({2: -300.0, 3: 1_000.0, 4: 990.0}) == 3
