"""Speed = slope of end offsets over a sliding window, on scripted offsets."""

from __future__ import annotations

import pytest

from assignor import TopicPartition
from sidecar.speed import SpeedTracker, SpeedWindow

TP = TopicPartition("t", 0)


def test_constant_rate_with_jittered_sampling() -> None:
    window = SpeedWindow(window_s=30, min_span_s=3)
    for i in range(20):
        at = i + (0.2 if i % 2 else -0.1)  # samples arrive early and late
        window.add(at, int(100 * at) + 5_000)
    assert window.speed() == pytest.approx(100, rel=0.02)


def test_no_speed_before_the_minimum_span() -> None:
    window = SpeedWindow(window_s=30, min_span_s=3)
    for at in (0.0, 1.0, 2.0):
        window.add(at, int(at * 10))
    assert window.speed() is None
    window.add(3.0, 30)
    assert window.speed() == pytest.approx(10)


def test_window_forgets_old_rate() -> None:
    window = SpeedWindow(window_s=10, min_span_s=3)
    offset = 0
    for at in range(0, 40):
        offset += 100 if at < 20 else 10
        window.add(float(at), offset)
    assert window.speed() == pytest.approx(10)


def test_offsets_going_backwards_restart_the_window() -> None:
    window = SpeedWindow(window_s=30, min_span_s=3)
    for at in range(10):
        window.add(float(at), 1000 + at * 50)
    window.add(10.0, 5)  # topic re-created
    assert window.speed() is None
    for at in range(11, 15):
        window.add(float(at), 5 + (at - 10) * 7)
    assert window.speed() == pytest.approx(7)


def test_idle_partition_has_speed_zero_and_stale_samples_are_ignored() -> None:
    window = SpeedWindow(window_s=30, min_span_s=3)
    for at in range(5):
        window.add(float(at), 42)
    window.add(2.0, 99)  # older than the last sample: ignored
    assert window.speed() == 0.0


def test_tracker_follows_partitions() -> None:
    tracker = SpeedTracker(window_s=30, min_span_s=2)
    other = TopicPartition("t", 1)
    for at in range(4):
        tracker.observe(float(at), {TP: at * 10, other: at * 3})
    assert tracker.ready()
    assert tracker.speeds() == pytest.approx({TP: 10.0, other: 3.0})
    tracker.forget([TP])
    assert set(tracker.speeds()) == {TP}


@pytest.mark.parametrize(
    ("window_s", "min_span_s", "message"),
    [
        (0.0, 3.0, r"window_s must be a finite number > 0"),
        (10.0, 11.0, r"min_span_s must be in \(0, window_s=10.0\]"),
    ],
)
def test_bad_windows(window_s: float, min_span_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeedWindow(window_s, min_span_s)
    with pytest.raises(ValueError, match="end_offset must be >= 0"):
        SpeedWindow().add(1.0, -1)


def test_long_runs_with_huge_offsets_stay_exact() -> None:
    window = SpeedWindow(window_s=30, min_span_s=3)
    offset = 10**12  # a partition that has seen a trillion records
    for second in range(2000):  # past many rebasings of the running sums
        offset += 250 if second < 1000 else 40
        window.add(float(second), offset)
    assert window.speed() == pytest.approx(40, rel=1e-9)


def tripled_at(
    tracker: SpeedTracker, step_at: int, until: int, every: int = 1
) -> dict[int, dict[TopicPartition, float]]:
    """Feed four partitions at 100 records/s, 300 from ``step_at``; the tracker's
    following speeds after each second (every ``every``-th second read)."""
    partitions = [TopicPartition("t", p) for p in range(4)]
    offsets = dict.fromkeys(partitions, 0)
    seen: dict[int, dict[TopicPartition, float]] = {}
    for at in range(until):
        rate = 100 if at <= step_at else 300
        for tp in partitions:
            offsets[tp] += rate
        tracker.observe(float(at), offsets)
        if at % every == 0:
            seen[at] = tracker.following_speeds()
    return seen


def test_a_step_up_is_followed_within_the_minimum_span_not_the_window() -> None:
    tracker = SpeedTracker(window_s=8, min_span_s=2)
    seen = tripled_at(tracker, step_at=10, until=12 + 1)
    assert all(s < 250 for s in tracker.speeds().values())  # the 8 s slope is catching up
    assert all(s == pytest.approx(300) for s in seen[12].values())  # 2 s into the step
    assert tracker.step_since == 9  # seen at 11, in the 2 s span that began at 9


def test_a_step_is_followed_until_the_window_spans_only_the_new_level() -> None:
    # 30 s window: 20 s into a x3 step its slope is 0.85 of the new level, within the
    # 25 % margin of the recent slope; the speeds must still be the new level.
    tracker = SpeedTracker(window_s=30, min_span_s=3)
    seen = tripled_at(tracker, step_at=40, until=90)
    for at in range(44, 90):
        assert all(s == pytest.approx(300) for s in seen[at].values()), (at, seen[at])
    assert tracker.step_since is None  # the window is past the step: its own speeds again


def test_the_window_alone_under_reports_a_step_for_most_of_its_length() -> None:
    # What following guards against: the window's slope 20 s into the step.
    tracker = SpeedTracker(window_s=30, min_span_s=3)
    tripled_at(tracker, step_at=40, until=61, every=100)
    assert all(200 < s < 270 for s in tracker.speeds().values())


def test_steady_and_noisy_speeds_are_the_windows_own() -> None:
    tracker = SpeedTracker(window_s=8, min_span_s=2)
    partitions = [TopicPartition("t", p) for p in range(4)]
    offsets = dict.fromkeys(partitions, 0)
    for at in range(30):
        for tp in partitions:  # partition 0 jitters by 20 % every other second
            offsets[tp] += 100 + (20 if tp.partition == 0 and at % 2 else 0)
        tracker.observe(float(at), offsets)
        assert tracker.following_speeds() == tracker.speeds()
    assert tracker.step_since is None
