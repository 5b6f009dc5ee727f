"""When a member asks its group for a re-plan."""

from __future__ import annotations

import pytest

from assignor import DEFAULT_HEURISTIC, TopicPartition
from contract.overload import OverloadWatch, replan_can_help


def seconds_until_asked(
    watch: OverloadWatch, load: float, start: int = 0, ask: bool = True
) -> int | None:
    """Observe ``load`` once a second from ``start``; seconds until a re-plan is due (and,
    with ``ask``, asked for)."""
    for t in range(start, start + 120):
        if watch.observe(t, load):
            if ask:
                watch.asked(t)
            return t - start
    return None


@pytest.mark.parametrize(
    ("load", "asks_after_s"),
    [
        (104.0, None),  # within the margin: never
        (105.01, 30),  # just over the margin: after sustain_s
        (110.0, 15),  # owes 0.1 s a second: 1.5 s (margin * sustain_s) after 15 s
        (120.0, 8),  # 0.2 s a second: 1.5 s after 7.5 s, asked at the next observation
        (150.0, 5),  # 0.5 s a second: owed after 3 s, but one high snapshot is no trend
        (300.0, 5),
    ],
)
def test_the_further_over_the_sooner_it_asks(load: float, asks_after_s: int | None) -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, cooldown_s=60, margin=0.05, min_over_s=5)
    assert seconds_until_asked(watch, load) == asks_after_s


def test_asks_at_most_once_per_cooldown() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, cooldown_s=60, margin=0.05)
    assert seconds_until_asked(watch, 150.0) == 5
    # Still over: due again 5 s later, but the last request was less than 60 s ago.
    assert seconds_until_asked(watch, 150.0, start=6) == 59


def test_a_re_plan_not_asked_for_does_not_start_the_cooldown() -> None:
    # Due, but the member found a re-plan would not help (the sidecar adds members).
    watch = OverloadWatch(capacity=100, sustain_s=30, cooldown_s=60, margin=0.05)
    assert seconds_until_asked(watch, 150.0, ask=False) == 5
    # Counted from scratch, and due again as soon as that count allows.
    assert seconds_until_asked(watch, 150.0, start=6) == 5


def test_a_measured_capacity_moves_the_limit() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, margin=0.05, min_over_s=5)
    assert not watch.observe(0, 150, capacity=200)  # over the declared 100, under 200
    assert watch.capacity == 200 and watch.limit == pytest.approx(210)
    assert not watch.observe(10, 150, capacity=200)  # still under: never due


def test_dropping_below_resets_the_count() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, margin=0.05, min_over_s=5)
    assert not watch.observe(0, 200)
    assert not watch.observe(4, 200)  # owes 4 s, but has been over for 4 s only
    assert not watch.observe(5, 50)  # below: what it owed is paid
    assert seconds_until_asked(watch, 120.0, start=6) == 8  # counted from scratch


def test_owed_time_follows_the_load_between_irregular_observations() -> None:
    watch = OverloadWatch(capacity=100, sustain_s=30, margin=0.05, min_over_s=5)
    assert not watch.observe(0, 110)
    assert not watch.observe(10, 200)  # 110 held for 10 s: owes 1.0 s
    assert not watch.observe(10.4, 200)  # 200 held for 0.4 s: owes 1.4 s
    assert watch.observe(10.6, 200)  # 1.6 s >= 1.5 s


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="capacity must be > 0"):
        OverloadWatch(capacity=0)
    with pytest.raises(ValueError, match="min_over_s >= 0"):
        OverloadWatch(capacity=1, min_over_s=-1)


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
