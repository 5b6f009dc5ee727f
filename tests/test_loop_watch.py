"""The event-loop stall watch: lateness recorded, a stall near the session timeout warned of."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from consumer_sdk.loop_watch import PERIOD_S, LoopStallWatch


def test_a_stall_of_a_third_of_the_session_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopStallWatch("g-watch", session_timeout_s=1.5)
    with caplog.at_level(logging.WARNING, logger="consumer_sdk.loop_watch"):
        watch.observe(0.2)
        assert not caplog.records
        watch.observe(0.6)
    assert watch.worst_s == 0.6
    assert "blocked for 0.6 s" in caplog.records[-1].getMessage()
    assert "g-watch" in caplog.records[-1].getMessage()


def test_the_watch_sees_the_loop_blocked() -> None:
    async def go() -> float:
        watch = LoopStallWatch("g-watch", session_timeout_s=180)
        watch.start()
        await asyncio.sleep(PERIOD_S / 2)  # the watch is asleep in its period
        time.sleep(4 * PERIOD_S)  # blocks the loop (what a sink must never do)
        await asyncio.sleep(2 * PERIOD_S)
        await watch.stop()
        return watch.worst_s

    assert asyncio.run(go()) >= 2 * PERIOD_S


def _hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # what a sink must never do on the loop


def test_a_stall_is_warned_of_with_where_the_loop_was(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> LoopStallWatch:
        watch = LoopStallWatch("g-watch", session_timeout_s=1.5, sample_after_s=2 * PERIOD_S)
        watch.start()
        await asyncio.sleep(PERIOD_S / 2)
        _hold_the_loop(0.8)  # past a third of the session: warned of
        await asyncio.sleep(2 * PERIOD_S)
        await watch.stop()
        return watch

    with caplog.at_level(logging.WARNING, logger="consumer_sdk.loop_watch"):
        watch = asyncio.run(go())
    [site] = watch.stall_sites
    assert site.endswith(" _hold_the_loop")
    warning = caplog.records[-1].getMessage()
    assert "blocked for" in warning
    assert "_hold_the_loop" in warning


def test_lateness_quantiles_come_from_the_recent_wake_ups() -> None:
    watch = LoopStallWatch("g-watch", session_timeout_s=180)
    for late in [0.001] * 98 + [0.3, 0.5]:
        watch.observe(late)
    assert watch.quantile(0.5) == 0.001
    assert watch.quantile(0.99) == 0.5
    assert LoopStallWatch("g-empty", session_timeout_s=10).quantile(0.99) == 0.0
