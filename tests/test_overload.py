"""When a member asks its group for a re-plan."""

from __future__ import annotations

import pytest

from contract.overload import OverloadWatch


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
