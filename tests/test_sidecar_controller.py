"""Controller decisions, table-driven, on a fake clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from assignor import TopicPartition
from sidecar.controller import (
    GROUP_SETTLE_LIMIT_S,
    Action,
    Controller,
    ControllerConfig,
    Decision,
    Observation,
)
from sidecar.keda import KedaController, KedaRule

CAPACITY = 10.0
PARTITIONS = 12


def speeds(full: int, partitions: int = PARTITIONS) -> dict[TopicPartition, float]:
    """``full`` partitions at exactly C (one consumer each), the rest idle: demand = full."""
    return {TopicPartition("t", p): CAPACITY if p < full else 0.0 for p in range(partitions)}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Step:
    at: float
    full: int
    action: Action
    desired: int
    stable: bool | None = None  # the group as described: None unknown
    members: int | None = None
    join_problem: str | None = None  # sidecar.join_watch's finding


def run(steps: list[Step], start: int, **config: float) -> list[str]:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY, **config), clock)  # type: ignore[arg-type]
    controller.synchronise(start)
    reasons = []
    for step in steps:
        clock.now = step.at
        observation = Observation(
            step.at,
            speeds(step.full),
            group_stable=step.stable,
            group_members=step.members,
            join_problem=step.join_problem,
        )
        decision = controller.step(observation)
        assert (decision.action, decision.desired) == (step.action, step.desired), (step, decision)
        reasons.append(decision.reason)
    return reasons


def test_spike_scales_up_at_once() -> None:
    run(
        [Step(0, 2, Action.HOLD, 2), Step(1, 5, Action.SCALE_UP, 5), Step(2, 5, Action.HOLD, 5)],
        start=2,
    )


def test_a_step_measured_over_seconds_is_one_scale_up_more_not_one_per_consumer() -> None:
    reasons = run(
        [
            Step(0, 3, Action.SCALE_UP, 3),  # the step's first second shows
            Step(1, 4, Action.HOLD, 3),  # still filling the recent window
            Step(2, 5, Action.HOLD, 3),
            Step(3, 5, Action.SCALE_UP, 5),  # the rest of the step, at once
            Step(4, 6, Action.HOLD, 5),  # settling again after that one
            Step(6, 6, Action.SCALE_UP, 6),  # but not past the settle time
            Step(7, 7, Action.HOLD, 6),
        ],
        start=2,
        scale_up_settle_s=3,
    )
    assert "still measuring" in reasons[1]


def test_one_surplus_consumer_waits_the_window_and_goes_to_the_peak_of_its_last_quarter() -> None:
    reasons = run(
        [
            Step(0, 3, Action.HOLD, 4),
            Step(60, 3, Action.HOLD, 4),
            Step(100, 3, Action.HOLD, 4),
            Step(119, 2, Action.HOLD, 4),
            Step(120, 2, Action.SCALE_DOWN, 3),  # the highest demand of its last 30 s
            Step(121, 2, Action.HOLD, 3),
        ],
        start=4,
        scale_down_window_s=120,
    )
    assert "before scaling down" in reasons[0] and "last 30 s; down to 3" in reasons[4]


@pytest.mark.parametrize(
    ("start", "full", "due"),
    [(4, 3, 120.0), (5, 3, 60.0), (6, 3, 40.0), (6, 2, 30.0), (12, 1, 30.0)],
)
def test_a_larger_surplus_scales_down_sooner_never_before_a_quarter_of_the_window(
    start: int, full: int, due: float
) -> None:
    run(
        [
            Step(0, full, Action.HOLD, start),
            Step(due - 1, full, Action.HOLD, start),
            Step(due, full, Action.SCALE_DOWN, full),
        ],
        start=start,
        scale_down_window_s=120,
    )


def test_the_surplus_is_counted_above_the_peak_of_the_last_quarter() -> None:
    # One surplus consumer for the first 10 s (a backlog draining), four from then on; the 5
    # stays the last quarter's peak until 40 s: 40 consumer-s by then, 4 a second after it.
    steps = [Step(t, 5 if t < 10 else 2, Action.HOLD, 6) for t in range(60)]
    run([*steps, Step(60, 2, Action.SCALE_DOWN, 2)], start=6, scale_down_window_s=120)


def test_the_drain_right_after_a_drop_does_not_size_the_scale_down() -> None:
    run(
        [
            Step(0, 4, Action.HOLD, 5),  # the backlog of the load that just dropped
            Step(10, 2, Action.HOLD, 5),  # 10 surplus consumer-s so far (above the 4)
            Step(60, 2, Action.HOLD, 5),  # 60 (the 4 is in the last 30 s until then)
            Step(79, 2, Action.HOLD, 5),  # 117 (3 surplus consumers since 60 s)
            Step(80, 2, Action.SCALE_DOWN, 2),
        ],
        start=5,
        scale_down_window_s=120,
    )


def test_flapping_demand_never_scales_down() -> None:
    steps = [Step(30.0 * i, 2 if i % 2 else 3, Action.HOLD, 3) for i in range(12)]
    run(steps, start=3, scale_down_window_s=120)


def test_clamps() -> None:
    run([Step(0, 6, Action.SCALE_UP, 4)], start=1, max_replicas=4)
    run([Step(0, 1, Action.SCALE_UP, 3)], start=1, min_replicas=3)
    run([Step(0, 0, Action.HOLD, 1)], start=1)  # idle group keeps one consumer
    run([Step(0, 0, Action.SCALE_DOWN, 0)], start=1, min_replicas=0, scale_down_window_s=0)


def test_partition_count_caps_min_replicas() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY, min_replicas=5), clock)
    controller.synchronise(1)
    decision = controller.step(Observation(0.0, speeds(1, partitions=2)))
    assert (decision.action, decision.desired) == (Action.SCALE_UP, 2)


def test_backlog_raises_the_count_until_drained() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY, drain_seconds=300), clock)
    controller.synchronise(2)
    lag = {TopicPartition("t", 5): 3000.0}  # 3000 / 300 s = 10 more records/s: one consumer
    decision = controller.step(Observation(0.0, speeds(2), lag))
    assert (decision.action, decision.desired) == (Action.SCALE_UP, 3)
    assert "backlog of 3000" in decision.reason


def test_offsets_that_could_not_be_read_hold_the_count_whatever_the_speeds_say() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY), clock)
    controller.synchronise(2)
    decision = controller.step(Observation(0.0, speeds(6), lags_known=False))
    assert (decision.action, decision.desired) == (Action.HOLD, 2)
    assert "offsets could not be read" in decision.reason
    decision = controller.step(Observation(0.0, speeds(6)))  # read again: sized as usual
    assert (decision.action, decision.desired) == (Action.SCALE_UP, 6)


@dataclass
class Tick:
    at: float
    full: int
    lag: float
    action: Action
    desired: int


def test_a_backlog_alone_does_not_reverse_a_scale_down_within_its_window() -> None:
    clock = FakeClock()
    config = ControllerConfig(capacity=CAPACITY, scale_down_window_s=60, drain_seconds=300)
    controller = Controller(config, clock)
    controller.synchronise(3)
    ticks = [
        Tick(0, 2, 0, Action.HOLD, 3),
        Tick(60, 2, 0, Action.SCALE_DOWN, 2),
        # The scale-down's rebalance paused reading: 3000 records behind (one consumer's
        # worth over 300 s), the speeds unchanged. Held: the load did not rise.
        Tick(65, 2, 3000, Action.HOLD, 2),
        Tick(119, 2, 3000, Action.HOLD, 2),
        # The window has passed: a backlog still there counts again.
        Tick(120, 2, 3000, Action.SCALE_UP, 3),
        Tick(180, 2, 0, Action.HOLD, 3),
        Tick(240, 2, 0, Action.SCALE_DOWN, 2),
        # The load really rose within the window: scale up at once.
        Tick(245, 3, 0, Action.SCALE_UP, 3),
    ]
    reasons = []
    for tick in ticks:
        clock.now = tick.at
        lags = {TopicPartition("t", 11): tick.lag} if tick.lag else {}
        decision = controller.step(Observation(tick.at, speeds(tick.full), lags))
        assert (decision.action, decision.desired) == (tick.action, tick.desired), tick
        reasons.append(decision.reason)
    assert "a backlog alone does not reverse a scale-down" in reasons[2]


def test_lag_within_the_batch_allowance_adds_no_consumer() -> None:
    clock = FakeClock()
    config = ControllerConfig(capacity=CAPACITY, drain_seconds=30, lag_allowance_s=5)
    controller = Controller(config, clock)
    controller.synchronise(2)
    halves = {TopicPartition("t", p): CAPACITY / 2 for p in range(4)}  # two consumers' worth
    # Every partition holding 5 s of arrivals: batches being built, not a backlog.
    building = dict.fromkeys(halves, 5 * CAPACITY / 2)
    assert controller.step(Observation(0.0, halves, building)).action is Action.HOLD
    # 150 beyond that on one partition: 5 more records/s for 30 s, so it needs a consumer.
    behind = {TopicPartition("t", 0): 5 * CAPACITY / 2 + 150.0}
    decision = controller.step(Observation(0.0, halves, behind))
    assert (decision.action, decision.desired) == (Action.SCALE_UP, 3)
    assert "backlog of 150" in decision.reason


def test_never_acts_on_stale_or_missing_data() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY, max_data_age_s=10), clock)
    assert controller.step(None).action is Action.WAIT  # not synchronised yet
    controller.synchronise(2)
    assert controller.step(None).action is Action.HOLD
    clock.now = 100.0
    stale = controller.step(Observation(89.0, speeds(6)))
    assert (stale.action, stale.desired) == (Action.HOLD, 2) and "11 s old" in stale.reason


def test_plan_rscore_is_reported_and_zero_when_nothing_moves() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY), clock)
    controller.synchronise(3)
    observation = Observation(0.0, speeds(3))
    controller.step(observation)
    assert controller.step(observation).planned_rscore == 0.0
    moved = controller.step(Observation(0.0, speeds(2)))
    assert moved.planned_rscore >= 0.0 and moved.demand == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, r"--capacity must be a finite number > 0, got 0"),
        ({"min_replicas": -1}, r"--min-replicas must be an integer >= 0"),
        ({"min_replicas": 5, "max_replicas": 3}, r"--max-replicas must be an integer >= max"),
        ({"scale_down_window_s": -5}, r"--scale-down-window must be a number of seconds >= 0"),
        ({"drain_seconds": 0}, r"--drain-seconds must be a number of seconds > 0"),
        ({"lag_allowance_s": -1}, r"--wait-time-secs must be a number of seconds >= 0"),
        ({"heuristic": "nope"}, r"heuristic must be one of"),
    ],
)
def test_bad_config(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"capacity": CAPACITY, **kwargs}
    with pytest.raises(ValueError, match=message):
        ControllerConfig(**arguments)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="actual_replicas must be an integer >= 0"):
        Controller(ControllerConfig(capacity=CAPACITY), FakeClock()).synchronise(-1)


def test_keda_style_controller_follows_total_lag_with_hpa_rules() -> None:
    clock = FakeClock()
    keda = KedaController(ControllerConfig(capacity=CAPACITY, max_replicas=8), clock, 1000.0)
    assert keda.step(None).action is Action.WAIT
    keda.synchronise(2)

    def step(at: float, total_lag: float) -> tuple[Action, int]:
        clock.now = at
        lags = {TopicPartition("t", 0): total_lag}
        decision = keda.step(Observation(at, speeds(2), lags))
        return decision.action, decision.desired

    # ceil(50,000 / 1000) = 50, capped at --max-replicas: 8; from 2 an HPA without
    # behavior (as KEDA creates it) goes up to at most max(2x, 4) per decision: 4, then 8.
    assert step(0, 50_000) == (Action.SCALE_UP, 4)
    assert step(14, 50_000) == (Action.HOLD, 4)  # the HPA decides every 15 s
    assert step(15, 50_000) == (Action.SCALE_UP, 8)
    assert step(30, 8400) == (Action.HOLD, 8)  # 1.05 of the target: within 10 %
    assert step(45, 5000) == (Action.HOLD, 8)  # 300 s stabilisation: the window's highest
    assert step(340, 100) == (Action.SCALE_DOWN, 5)  # the window is 40-340 s: 5 from 45 s
    assert step(360, 100) == (Action.SCALE_DOWN, 1)
    clock.now = 460
    stale = keda.step(Observation(360, speeds(2), {}))
    assert stale.action is Action.HOLD and "old" in stale.reason
    with pytest.raises(ValueError, match="lag_threshold must be a finite number > 0"):
        KedaRule(0.0)


def test_keda_counts_records_when_the_speeds_are_bytes() -> None:
    clock = FakeClock()
    keda = KedaController(ControllerConfig(capacity=CAPACITY, max_replicas=8), clock, 1000.0)
    keda.synchronise(1)
    tp = TopicPartition("t", 0)
    # 3000 records behind, 300,000 bytes of log: lagThreshold is in records.
    observation = Observation(0.0, speeds(1), {tp: 300_000.0}, record_lags={tp: 3000.0})
    assert keda.step(observation).desired == 3


def test_a_scale_up_waits_for_the_group_to_take_in_the_one_before() -> None:
    reasons = run(
        [
            Step(0, 3, Action.SCALE_UP, 3, stable=True, members=2),
            # Rebalancing, or not every new consumer joined yet: its lag is not yet the truth.
            Step(10, 5, Action.HOLD, 3, stable=False, members=3),
            Step(11, 5, Action.HOLD, 3, stable=True, members=2),
            Step(12, 5, Action.SCALE_UP, 5, stable=True, members=3),  # taken in: next step
            Step(13, 6, Action.HOLD, 5, stable=None, members=None),  # unknown: settle time only
            Step(20, 6, Action.SCALE_UP, 6, stable=None, members=None),
            # No member at all after a scale-up: none joined (not "nothing to wait for").
            Step(30, 7, Action.HOLD, 6, stable=False, members=0),
        ],
        start=2,
        scale_up_settle_s=5,
    )
    assert "has not taken that in yet (3 member(s), rebalancing" in reasons[1]
    assert "has not taken that in yet (2 member(s), stable" in reasons[2]
    assert "has not taken that in yet (0 member(s), rebalancing" in reasons[-1]


def test_consumers_not_joining_hold_every_scale_up_until_they_join() -> None:
    # What sidecar.join_watch found (members exiting at start) holds a scale-up for as long
    # as it lasts, past the bounded wait for a group to take a scale-up in.
    failing = "consumers are not joining the group: 0 of 3 joined, for 2 s"
    reasons = run(
        [
            Step(0, 3, Action.SCALE_UP, 3, stable=True, members=2),
            Step(10, 5, Action.HOLD, 3, stable=False, members=0, join_problem=failing),
            Step(10 + GROUP_SETTLE_LIMIT_S, 5, Action.HOLD, 3, members=0, join_problem=failing),
            Step(100, 5, Action.SCALE_UP, 5, stable=True, members=3),  # joined: sizing again
        ],
        start=2,
    )
    assert reasons[1].endswith(f"held: {failing}") and reasons[2].endswith(f"held: {failing}")


def test_a_group_that_never_takes_in_a_scale_up_holds_it_for_a_bounded_time() -> None:
    # Members that joined but read nothing (given no partition): after the limit the controller
    # acts again. Members that never join are sidecar.join_watch's (test_sidecar_join_watch).
    run(
        [
            Step(0, 3, Action.SCALE_UP, 3, stable=True, members=2),
            Step(GROUP_SETTLE_LIMIT_S - 1, 4, Action.HOLD, 3, stable=True, members=2),
            Step(GROUP_SETTLE_LIMIT_S, 4, Action.SCALE_UP, 4, stable=True, members=2),
        ],
        start=2,
    )


def test_a_scale_down_does_not_wait_for_the_group() -> None:
    run(
        [
            Step(0, 1, Action.HOLD, 3, stable=False, members=1),
            Step(30, 1, Action.SCALE_DOWN, 1, stable=False, members=1),
        ],
        start=3,
        scale_down_window_s=30,
    )


def test_a_scale_up_waits_while_the_group_rebalances_for_another_cause() -> None:
    # Every member there (a member's re-plan request, not our scale-up): wait for the round.
    reasons = run(
        [
            Step(0, 3, Action.HOLD, 3, stable=True, members=3),
            Step(1, 4, Action.HOLD, 3, stable=False, members=3),
            Step(2, 4, Action.HOLD, 3, stable=False, members=3),
            Step(3, 4, Action.SCALE_UP, 4, stable=True, members=3),
        ],
        start=3,
    )
    assert "the group has been rebalancing for 1 s" in reasons[2]
    # A group with no member is not stable (Empty) but has no round under way.
    run([Step(0, 2, Action.SCALE_UP, 2, stable=False, members=0)], start=0)


def test_a_group_that_never_settles_holds_a_scale_up_for_a_bounded_time() -> None:
    limit = GROUP_SETTLE_LIMIT_S
    reasons = run(
        [
            Step(0, 3, Action.HOLD, 3, stable=False, members=3),
            Step(limit - 1, 4, Action.HOLD, 3, stable=False, members=3),
            Step(limit, 4, Action.SCALE_UP, 4, stable=False, members=3),
            # Stable in between: the next round is counted from its own start.
            Step(2 * limit, 4, Action.HOLD, 4, stable=True, members=4),
            Step(2 * limit + 1, 5, Action.HOLD, 4, stable=False, members=4),
            Step(2 * limit + 9, 5, Action.HOLD, 4, stable=False, members=4),
        ],
        start=3,
    )
    assert "the group has been rebalancing for 8 s" in reasons[-1]


def test_no_scale_down_within_the_window_after_a_scale_up() -> None:
    reasons = run(
        [
            Step(0, 6, Action.SCALE_UP, 6),
            Step(10, 2, Action.HOLD, 6),  # the load falls 10 s after the scale-up
            Step(60, 2, Action.HOLD, 6),  # 4 surplus consumers for 50 s: due, but too soon
            Step(119, 2, Action.HOLD, 6),
            Step(120, 2, Action.SCALE_DOWN, 2),  # the window since the scale-up has passed
        ],
        start=5,
        scale_down_window_s=120,
    )
    assert "scaled up 60 s ago" in reasons[2]


# -- measured, not assumed ---------------------------------------------------------------------
def test_a_measured_capacity_in_the_observation_sizes_instead_of_the_declared_one() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY), clock)
    controller.synchronise(6)
    # 6 partitions at C each: 6 consumers declared; measured 2C each packs them into 3.
    decision = controller.step(Observation(0.0, speeds(6), capacity=2 * CAPACITY))
    assert decision.demand == 3 and f"of {2 * CAPACITY:.0f}" in decision.reason


def test_a_scale_up_waits_for_joined_members_of_our_assignor_to_start_reading() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY), clock)
    controller.synchronise(0)
    assert controller.step(Observation(0.0, speeds(2))).desired == 2

    def joined(at: float, full: int, reading: int, ours: bool = True) -> Decision:
        clock.now = at
        return controller.step(
            Observation(
                at,
                speeds(full),
                group_stable=True,
                group_members=2,
                reading_members=reading,
                members_report=ours,
            )
        )

    # Joined, stable, not committing yet: the backlog of their start-up is theirs to drain.
    held = joined(10.0, 4, reading=0)
    assert held.action is Action.HOLD and "has not taken that in" in held.reason
    assert joined(12.0, 4, reading=2).desired == 4  # both reading: the load is real
    # Members that do not report (another assignor): joined and stable is all there is.
    clock.now = 100.0
    other = Controller(ControllerConfig(capacity=CAPACITY), clock)
    other.synchronise(0)
    assert other.step(Observation(100.0, speeds(2))).desired == 2
    clock.now = 110.0
    observation = Observation(
        110.0, speeds(4), group_stable=True, group_members=2, reading_members=0
    )
    assert other.step(observation).desired == 4


def _sized_then_measured(measured: float) -> tuple[list[Decision], float]:
    """A count sized with half the capacity (8 partitions at 0.3 C: one per consumer of
    C/2), then each round measured at ``measured``; the decisions at 10, 30, 40 and 60 s, and
    the second at which it scaled down (inf: never within 200 s)."""
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY, scale_down_window_s=120), clock)
    controller.synchronise(2)
    load = {TopicPartition("t", p): 0.3 * CAPACITY if p < 8 else 0.0 for p in range(12)}
    assert controller.step(Observation(0.0, load, capacity=CAPACITY / 2)).desired == 8
    decisions: list[Decision] = []
    down = float("inf")
    for at in range(10, 200, 5):
        clock.now = float(at)
        decision = controller.step(Observation(clock.now, load, capacity=measured))
        if at in (10, 30, 40, 60):
            decisions.append(decision)
        if decision.action is Action.SCALE_DOWN:
            down = min(down, float(at))
    return decisions, down


def test_a_count_sized_with_a_capacity_measured_far_off_comes_down_after_a_quarter_window() -> None:
    decisions, down = _sized_then_measured(CAPACITY)
    first, at_30, at_40, _ = decisions
    # Measured C: 3 are needed. Not a load that fell and may come back: no surplus to add
    # up and no "no reversal within the window" after the scale-up, a quarter window only.
    assert first.action is Action.HOLD and first.demand == 3
    assert f"sized with a capacity of {CAPACITY / 2:.0f}" in first.reason
    assert at_30.action is Action.HOLD
    assert (at_40.action, at_40.desired) == (Action.SCALE_DOWN, 3)
    assert down == 40.0


def test_a_capacity_that_moved_less_than_a_quarter_keeps_the_window_rules() -> None:
    decisions, down = _sized_then_measured(CAPACITY / 2 * 1.2)
    # 4 of 0.6 C are needed: the 4 surplus add up a window's worth in 30 s, but the window
    # since the scale-up must pass.
    assert all(d.action is Action.HOLD for d in decisions)
    assert "scaled up 60 s ago" in decisions[-1].reason
    assert down == 120.0


def test_a_scale_up_waits_for_members_reading_and_goes_on_once_they_all_are() -> None:
    clock = FakeClock()
    controller = Controller(ControllerConfig(capacity=CAPACITY), clock)
    controller.synchronise(1)
    assert controller.step(Observation(0.0, speeds(2), reading_members=1)).desired == 2
    clock.now = 10.0
    held = controller.step(Observation(10.0, speeds(4), reading_members=1))
    assert held.action is Action.HOLD and "has not taken that in" in held.reason
    clock.now = 12.0
    went = controller.step(Observation(12.0, speeds(4), reading_members=2))
    assert (went.action, went.desired) == (Action.SCALE_UP, 4)


def ceiling_controller() -> tuple[FakeClock, Controller]:
    """A controller at 2 consumers whose backlog barely adds to demand."""
    clock = FakeClock()
    config = ControllerConfig(capacity=CAPACITY, drain_seconds=1e6, scale_up_settle_s=5)
    controller = Controller(config, clock)
    controller.synchronise(2)
    return clock, controller


def run_phase(
    clock: FakeClock,
    controller: Controller,
    seconds: range,
    full: int,
    members: int,
    drained: int,
    committed: int,
    lag: float = 1_000.0,
    saturated: int | None = None,
) -> tuple[int, Decision]:
    """One observation a second, ``drained`` records committed each, ``saturated`` of the
    ``members`` measured behind (None: not known); stops at the first decision that is not
    a hold. Returns the committed total and the last decision."""
    decision = None
    for t in seconds:
        clock.now = float(t)
        lags = dict.fromkeys(speeds(PARTITIONS), lag)
        observation = Observation(
            clock.now,
            speeds(full),
            lags,
            committed_total=committed,
            reading_members=members,
            saturated_members=saturated,
        )
        decision = controller.step(observation)
        committed += drained
        if decision.action is not Action.HOLD:
            break
    assert decision is not None
    return committed, decision


def test_when_more_consumers_drain_no_more_the_group_goes_back_to_the_best_count() -> None:
    clock, controller = ceiling_controller()
    # 2 consumers with a backlog waiting drain 100/s; then the speeds ask for 4.
    committed, held = run_phase(clock, controller, range(0, 40), 1, 2, 100, 0)
    assert (held.action, held.desired) == (Action.HOLD, 2)
    committed, up = run_phase(clock, controller, range(40, 41), 3, 2, 90, committed)
    assert (up.action, up.desired) == (Action.SCALE_UP, 4)
    # 4 reading drain 90/s (a shared sink): measured, back to 2.
    committed, final = run_phase(clock, controller, range(41, 120), 3, 4, 90, committed)
    assert (final.action, final.desired) == (Action.SCALE_DOWN, 2), final
    assert "limited downstream" in final.reason and controller.drain_ceiling.limit() == 2
    _, again = run_phase(clock, controller, range(121, 122), 3, 2, 90, committed)
    assert (again.action, again.desired) == (Action.HOLD, 2)
    assert "at most 2" in again.reason


def test_a_group_keeping_up_with_a_small_backlog_sets_no_drain_ceiling() -> None:
    clock, controller = ceiling_controller()
    # A lag of 240 records is paid off in seconds: the drain is the load, not a limit.
    committed, _ = run_phase(clock, controller, range(0, 100), 1, 2, 100, 0, lag=20.0)
    committed, up = run_phase(clock, controller, range(100, 101), 3, 2, 100, committed, 20.0)
    assert up.desired == 4
    run_phase(clock, controller, range(101, 200), 3, 4, 100, committed, lag=20.0)
    assert controller.drain_ceiling.drains == {} and controller.drain_ceiling.limit() is None


def test_added_members_left_without_work_set_no_drain_ceiling() -> None:
    clock, controller = ceiling_controller()
    committed, _ = run_phase(clock, controller, range(0, 40), 1, 2, 100, 0)
    committed, up = run_phase(clock, controller, range(40, 41), 3, 2, 100, committed)
    assert up.desired == 4
    # 4 asked, 2 committing (the others got no partitions), draining what 2 did.
    run_phase(clock, controller, range(41, 200), 3, 2, 100, committed)
    assert 4 not in controller.drain_ceiling.drains and controller.drain_ceiling.limit() is None


def test_added_members_given_a_small_share_set_no_drain_ceiling() -> None:
    clock, controller = ceiling_controller()
    committed, _ = run_phase(clock, controller, range(0, 40), 1, 2, 100, 0, saturated=2)
    committed, up = run_phase(clock, controller, range(40, 41), 3, 2, 100, committed, saturated=2)
    assert up.desired == 4
    # 4 reading, draining what 2 did, but only 2 of them behind: the others got too little
    # work to say anything of a limit downstream.
    run_phase(clock, controller, range(41, 200), 3, 4, 100, committed, saturated=2)
    assert 4 not in controller.drain_ceiling.drains and controller.drain_ceiling.limit() is None
    # All 4 behind and draining no more: that is a limit.
    run_phase(clock, controller, range(200, 260), 3, 4, 100, committed, saturated=4)
    assert controller.drain_ceiling.limit() == 2
