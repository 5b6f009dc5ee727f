"""The drain ceiling: the count past which more consumers did not drain more. Pure."""

from __future__ import annotations

from sidecar.drain_ceiling import DrainCeiling


def hold(
    ceiling: DrainCeiling, start: float, seconds: int, count: int, rate: int, done: int
) -> int:
    """``count`` consumers, ready and backlogged, draining ``rate``/s for ``seconds``."""
    for t in range(seconds):
        ceiling.observe(start + t, count, done, backlogged=True, ready=True)
        done += rate
    return done


def test_more_consumers_that_drain_more_raise_no_ceiling() -> None:
    ceiling = DrainCeiling(warmup_s=5, measure_s=10)
    done = hold(ceiling, 0, 20, 2, 100, 0)
    hold(ceiling, 20, 20, 4, 190, done)
    assert ceiling.limit() is None
    assert round(ceiling.drains[2][0]) == 100 and round(ceiling.drains[4][0]) == 190


def test_a_count_that_drains_no_more_sets_the_ceiling_at_the_best_count() -> None:
    ceiling = DrainCeiling(warmup_s=5, measure_s=10)
    done = hold(ceiling, 0, 20, 2, 100, 0)
    done = hold(ceiling, 20, 20, 3, 150, done)
    hold(ceiling, 40, 20, 5, 140, done)
    assert ceiling.limit() == 3
    assert ceiling.reason is not None and "5 consumers drained 140/s" in ceiling.reason


def test_time_without_a_backlog_or_while_joining_is_not_measured() -> None:
    ceiling = DrainCeiling(warmup_s=5, measure_s=10)
    for t in range(60):
        ceiling.observe(float(t), 2, t * 100, backlogged=t % 2 == 0, ready=True)
        ceiling.observe(float(t) + 0.5, 3, t * 100, backlogged=True, ready=False)
    assert ceiling.drains == {} and ceiling.limit() is None


def test_the_ceiling_is_retested_once_its_time_has_passed() -> None:
    ceiling = DrainCeiling(warmup_s=5, measure_s=10, retest_s=100)
    done = hold(ceiling, 0, 20, 2, 100, 0)
    done = hold(ceiling, 20, 20, 4, 100, done)
    assert ceiling.limit() == 2
    ceiling.observe(140.0, 2, done, backlogged=False, ready=True)
    assert ceiling.limit() is None and ceiling.drains == {}
