"""The simulator's mechanics: conservation, pauses, and the KEDA-style rules."""

from __future__ import annotations

import numpy as np
import pytest

from assignor import TopicPartition
from sidecar.simulation import (
    KedaPolicy,
    OurPolicy,
    Policy,
    Result,
    dominates,
    frontier_cost,
    oracle_consumer_seconds,
    random_walk,
    simulate,
    work_consumer_seconds,
)


def constant(partitions: int, rate: float):  # type: ignore[no-untyped-def]
    return lambda t: np.full(partitions, rate)


def test_ample_capacity_keeps_lag_at_zero_between_decisions() -> None:
    # 10 partitions x 50 records/s on one consumer of 1000: never behind.
    result = simulate(constant(10, 50.0), 10, 1000.0, OurPolicy("repair", 1000.0, 10), 120)
    assert result.lag_max == 0.0
    assert result.rebalances == 0 and result.consumer_seconds == 120


def test_eager_rebalance_pauses_every_partition() -> None:
    class StepUp(Policy):
        name = "step"
        cooperative = False

        def replicas(self, t: float, speeds: object, lags: object, current: int) -> int:
            return 2 if t >= 10 else current

        def assign(self, speeds, previous, members, capacity):  # type: ignore[no-untyped-def]
            return {tp: members[tp.partition % len(members)] for tp in speeds}

    result = simulate(constant(6, 10.0), 6, 1000.0, StepUp(), 40, rebalance_s=3)
    assert result.rebalances == 1
    assert result.paused_partition_seconds == 6 * 3  # all six, for three seconds


def test_cooperative_rebalance_pauses_only_moved_partitions() -> None:
    class StepUp(Policy):
        name = "step"

        def replicas(self, t: float, speeds: object, lags: object, current: int) -> int:
            return 2 if t >= 10 else current

        def assign(self, speeds, previous, members, capacity):  # type: ignore[no-untyped-def]
            return {tp: "m1" if tp.partition == 0 else "m0" for tp in speeds}

    result = simulate(constant(6, 10.0), 6, 1000.0, StepUp(), 40, rebalance_s=3)
    assert result.paused_partition_seconds == 1 * 3
    assert result.total_rscore == pytest.approx(10.0 / 1000.0)


def test_the_oracle_is_the_packing_lower_bound_of_every_second() -> None:
    def step(t: int) -> np.ndarray:
        return np.full(20, 100.0 if t < 10 else 160.0)  # 2,000 then 3,200 records/s

    assert oracle_consumer_seconds(step, 1000.0, 20) == 10 * 2 + 10 * 4
    walk = random_walk(40, 1000.0, 5, seed=3)
    result = simulate(walk, 40, 1000.0, OurPolicy("repair", 1000.0, 40), 300)
    assert oracle_consumer_seconds(random_walk(40, 1000.0, 5, seed=3), 1000.0, 300) <= (
        result.consumer_seconds
    )
    with pytest.raises(ValueError, match="capacity must be > 0"):
        oracle_consumer_seconds(step, 0.0, 5)


def test_the_work_is_all_records_over_capacity_and_at_most_the_oracle() -> None:
    def step(t: int) -> np.ndarray:
        return np.full(20, 90.0 if t < 10 else 160.0)  # 1,800 then 3,200 records/s

    assert work_consumer_seconds(step, 1000.0, 20) == pytest.approx(10 * 1.8 + 10 * 3.2)
    assert work_consumer_seconds(step, 1000.0, 20) < oracle_consumer_seconds(step, 1000.0, 20)
    with pytest.raises(ValueError, match="capacity must be > 0"):
        work_consumer_seconds(step, -1.0, 5)


def test_keda_rules() -> None:
    tps = [TopicPartition("t", p) for p in range(20)]
    keda = KedaPolicy(lag_threshold=100, partitions=20, cooperative=False)
    lags = dict.fromkeys(tps, 50.0)  # 1,000 in all: 10 consumers
    # KEDA's HPA has no behavior: up to at most max(2x, 4) per decision.
    assert keda.replicas(0.0, {}, lags, 1) == 4
    assert keda.replicas(1.0, {}, lags, 4) == 4  # the HPA decides every 15 s
    assert keda.replicas(15.0, {}, lags, 4) == 8
    assert keda.replicas(30.0, {}, lags, 8) == 10
    assert keda.replicas(45.0, {}, dict.fromkeys(tps, 52.0), 10) == 10  # within 10 %
    assert keda.replicas(60.0, {}, dict.fromkeys(tps, 10.0), 10) == 10  # stabilised for 300 s
    assert keda.replicas(361.0, {}, dict.fromkeys(tps, 10.0), 10) == 2
    assert keda.replicas(376.0, {}, dict.fromkeys(tps, 1e6), 2) == 4
    assert keda.replicas(391.0, {}, dict.fromkeys(tps, 1e6), 4) == 8
    # The lag is gone, but the window still holds 20 (the partitions): it keeps doubling.
    assert keda.replicas(406.0, {}, dict.fromkeys(tps, 0.0), 8) == 16
    assert keda.replicas(421.0, {}, dict.fromkeys(tps, 0.0), 16) == 20  # capped at partitions
    ranged = keda.assign(dict.fromkeys(tps, 1.0), {}, ["m0", "m1"], 100.0)
    assert [ranged[tp] for tp in tps] == ["m0"] * 10 + ["m1"] * 10


def test_a_new_consumer_reads_after_its_start_up_and_a_moved_partition_after_the_rebalance() -> (
    None
):
    class StepUp(Policy):
        name = "step"

        def replicas(self, t: float, speeds: object, lags: object, current: int) -> int:
            return 3 if t >= 10 else 2 if t >= 5 else current

        def assign(self, speeds, previous, members, capacity):  # type: ignore[no-untyped-def]
            # Partition 0 to the newest member each time: it moves m0 -> m1 -> m2.
            return {tp: members[-1] if tp.partition == 0 else "m0" for tp in speeds}

    result = simulate(constant(6, 10.0), 6, 1000.0, StepUp(), 40, rebalance_s=3, startup_s=10)
    # Decided at t=5: m1 reads from t=16, so partition 0 pauses 10 s (not 3); moved again to
    # m2 at t=10, it waits for m2's start-up, until t=21.
    assert result.paused_partition_seconds == 21 - 6
    with pytest.raises(ValueError, match="startup_s must be"):
        simulate(constant(6, 10.0), 6, 1000.0, StepUp(), 40, startup_s=-1.0)


def test_our_policy_follows_a_step_in_load() -> None:
    def step(t: int) -> np.ndarray:
        return np.full(20, 100.0 if t < 100 else 300.0)  # 2,000 -> 6,000 records/s

    result = simulate(step, 20, 1000.0, OurPolicy("repair", 1000.0, 20), 200)
    # Two consumers' worth of load; the start-up backlog (one consumer for the first
    # seconds) may add one until it drains. After the step: six consumers' worth.
    assert 2 <= max(result.replicas[50:100]) <= 3
    assert min(result.replicas[150:]) >= 6


def test_consumers_added_for_a_backlog_get_partitions() -> None:
    class SpeedsOnly(OurPolicy):
        """The same controller, but an assignor that packs the write speeds alone."""

        def assign(self, speeds, previous, members, capacity):  # type: ignore[no-untyped-def]
            return self.heuristic.assign(
                speeds, capacity=capacity, previous=previous, members=members
            )

    def rates(t: int) -> np.ndarray:
        return np.full(20, 99.0)  # 1,980 records/s: two consumers with 20 records/s to spare

    drained = simulate(rates, 20, 1000.0, OurPolicy("repair", 1000.0, 20), 200)
    idle = simulate(rates, 20, 1000.0, SpeedsOnly("repair", 1000.0, 20), 200)
    # The start-up backlog (one consumer for the first seconds) asks for a third consumer;
    # packed by speed alone it sits idle and the backlog drains at the spare 20 records/s;
    # packed by the drain rule, it reads and the backlog is paid within the drain time.
    assert max(drained.replicas) == max(idle.replicas) == 3
    assert drained.lag[-1] == 0.0 < idle.lag[-1]
    assert sum(drained.lag) < sum(idle.lag)


def test_traces_are_seeded() -> None:
    first, second = random_walk(5, 1000.0, 5, 3), random_walk(5, 1000.0, 5, 3)
    assert np.array_equal(first(10), second(10))


def run(policy: str, consumer_seconds: float, p99_s: float) -> Result:
    return Result(policy, consumer_seconds, 0, 0, 0, 0, p99_s, 0, 0, 0.0, 0.0)


def test_dominance_needs_no_worse_on_both_and_better_on_one() -> None:
    ours = run("ours", 1000, 5.0)
    assert dominates(run("cheaper, as punctual", 900, 5.0), ours)
    assert dominates(run("as cheap, more punctual", 1000, 4.0), ours)
    assert not dominates(run("the same", 1000, 5.0), ours)
    assert not dominates(run("cheaper, later", 900, 6.0), ours)


def test_the_frontier_is_interpolated_between_settings_and_skips_dominated_ones() -> None:
    settings = [
        run("1k", 3000, 2.0),
        run("5k", 2000, 6.0),
        run("dominated", 2500, 7.0),  # later than 5k and dearer: not on the frontier
        run("20k", 1000, 10.0),
    ]
    assert frontier_cost(settings, 1.0) is None  # no setting is that punctual
    assert frontier_cost(settings, 2.0) == 3000
    assert frontier_cost(settings, 4.0) == pytest.approx(2500)  # halfway from 1k to 5k
    assert frontier_cost(settings, 8.0) == pytest.approx(1500)  # halfway from 5k to 20k
    assert frontier_cost(settings, 30.0) == 1000  # beyond the cheapest: its cost
    assert frontier_cost([], 5.0) is None


def test_a_warm_up_is_left_out_of_what_a_run_cost() -> None:
    rates = constant(10, 300.0)  # 3,000 records/s: three consumers of 1000
    cold = simulate(rates, 10, 1000.0, OurPolicy("repair", 1000.0, 10), 200)
    warm = simulate(rates, 10, 1000.0, OurPolicy("repair", 1000.0, 10), 200, warm_up_s=100)
    # The start from one consumer builds a backlog the warm-up leaves out.
    assert warm.lag_max < cold.lag_max
    assert warm.consumer_seconds == sum(warm.replicas[100:])
    assert oracle_consumer_seconds(rates, 1000.0, 200, start_s=100) == 3 * 100
    with pytest.raises(ValueError, match=r"warm_up_s must be in \[0, duration_s\)"):
        simulate(rates, 10, 1000.0, OurPolicy("repair", 1000.0, 10), 200, warm_up_s=200)


def test_a_cold_group_reads_nothing_until_its_first_consumer_has_started() -> None:
    # 10 partitions x 50 records/s; the one consumer reads from t=8 on: 500 records/s pile
    # up for 8 s, every partition paused meanwhile, then one second of 1000 drains 1000.
    result = simulate(
        constant(10, 50.0), 10, 1000.0, OurPolicy("repair", 1000.0, 10), 60, cold_start_s=8
    )
    assert result.lag[7] == 8 * 500
    assert result.paused_partition_seconds == 10 * 8
    assert result.lag[8] == result.lag[7] + 500 - 1000
    with pytest.raises(ValueError, match="cold_start_s must be"):
        simulate(constant(10, 50.0), 10, 1000.0, KedaPolicy(1000, 10, True), 60, cold_start_s=60)


def test_the_uncommitted_arrivals_the_policy_sees_may_change_every_second() -> None:
    seen: dict[int, float] = {}

    class Watching(Policy):
        name = "watch"

        def replicas(self, t: float, speeds: object, lags: dict, current: int) -> int:  # type: ignore[type-arg]
            seen[int(t)] = sum(lags.values())
            return current

    simulate(
        constant(4, 100.0),
        4,
        1000.0,
        Watching(),
        10,
        uncommitted_s=lambda t, busy: 0.5 * (t % 3) + (busy != 0.4),
    )
    # Nothing is unread (one consumer of 1000 for 400 records/s): the lag seen is the
    # uncommitted arrivals alone, 400 records/s x the seconds given for that second (at a
    # utilisation of 400 / 1000).
    assert seen == {t: 400 * 0.5 * (t % 3) for t in range(3, 10)}
