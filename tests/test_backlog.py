"""The drain rule (pure): backlog beyond the batch allowance, paid off as extra speed."""

from __future__ import annotations

import pytest

from assignor import TopicPartition
from assignor.backlog import DrainRule

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_only_lag_beyond_the_allowance_is_backlog() -> None:
    rule = DrainRule(drain_seconds=10, allowance_seconds=5)
    speeds = {A: 100.0, B: 100.0}
    lags = {A: 400.0, B: 1500.0}  # A: within 5 s of arrivals; B: 1000 beyond
    assert rule.effective_speeds(speeds, lags) == {A: 100.0, B: 100.0 + 1000.0 / 10}
    assert rule.total_backlog(speeds, lags) == 1000.0


def test_partitions_without_lag_keep_their_speed_and_unlisted_lags_are_ignored() -> None:
    rule = DrainRule(drain_seconds=30)
    effective = rule.effective_speeds({A: 7.0}, {B: 1e6})
    assert effective == {A: 7.0}


@pytest.mark.parametrize(
    ("drain", "allowance", "message"),
    [
        (0, 0, r"drain_seconds must be a finite number > 0, got 0"),
        (float("inf"), 0, r"drain_seconds must be a finite number > 0, got inf"),
        (True, 0, r"drain_seconds must be a finite number > 0, got True"),
        (30, -1, r"allowance_seconds must be a finite number >= 0, got -1"),
        (30, float("nan"), r"allowance_seconds must be a finite number >= 0, got nan"),
    ],
)
def test_bad_rules_name_the_field(drain: object, allowance: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DrainRule(drain, allowance)  # type: ignore[arg-type]
