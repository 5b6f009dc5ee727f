"""When a member asks its group for a re-plan."""

from __future__ import annotations

import pytest

from assignor import DEFAULT_HEURISTIC, TopicPartition
from contract.overload import OverloadWatch, replan_can_help


def test_asks_after_sustained_overload_then_cools_down() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, cooldown_s=60, margin=0.05)
    assert not watch.observe(0, 104)  # within the margin
    assert not watch.observe(1, 120)  # over, starts counting
    assert not watch.observe(30, 120)
    assert watch.observe(31, 120)  # 30 s over: ask
    assert not watch.observe(62, 120)  # counting again, and cooling down
    assert not watch.observe(90, 120)
    assert watch.observe(92, 120)  # 30 s over again and 61 s since the last ask


def test_dropping_below_resets_the_count() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=10)
    assert not watch.observe(0, 200)
    assert not watch.observe(9, 50)
    assert not watch.observe(15, 200)
    assert watch.observe(25, 200)


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="capacity must be > 0"):
        OverloadWatch(capacity=0)


@pytest.mark.parametrize(
    ("speeds", "members", "helps"),
    [
        ([40, 40, 40, 40], 2, True),  # fits in 2 of capacity 100: a re-pack can fix it
        ([40, 40, 40, 40], 3, True),
        ([40, 40, 40, 40, 40], 2, False),  # needs 3: the sidecar adds one, not a re-plan
        ([40, 40, 40, 40, 40], None, True),  # the leader did not say how many members
        ([0, 0], 1, True),
    ],
)
def test_a_replan_is_asked_for_only_when_the_speeds_fit_the_group(
    speeds: list[float], members: int | None, helps: bool
) -> None:
    by_partition = {TopicPartition("t", p): s for p, s in enumerate(speeds)}
    assert replan_can_help(by_partition, 100.0, members, DEFAULT_HEURISTIC) is helps
