"""The sidecar's plans for KIP-848 groups, without a broker: what the plan gives whom, when
the group reads as planned, and the scaler that removes a member only once it is emptied."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from assignor.broker import ASSIGNOR_CLASS
from assignor.group_plan import SpeedView
from assignor.metrics import consumer_loads
from assignor.types import TopicPartition
from sidecar.broker_plans.group import ASSIGNORS_CONFIG, assignor_problem
from sidecar.broker_plans.planning import BrokerPlan, holds, plan_members, still_reading
from sidecar.broker_plans.scaler import EMPTY_WITHIN_S, EmptyFirstScaler
from sidecar.config import parse_args
from sidecar.join_watch import MemberFailure
from sidecar.scalers.local import LocalScaler
from tests.sdk_helpers import wait_until

SPEEDS = (60.0, 35.0, 30.0, 25.0, 20.0, 15.0, 10.0, 5.0)
CAPACITY = 100.0
TOPICS = {"orders": set(range(len(SPEEDS)))}


def tp(p: int) -> TopicPartition:
    return TopicPartition("orders", p)


VIEW = SpeedView({tp(p): s for p, s in enumerate(SPEEDS)})


def loads(plan: BrokerPlan) -> dict[str, float]:
    speeds = {tp(p): s for p, s in enumerate(SPEEDS)}
    return consumer_loads(plan.assignment, speeds)


def test_the_wanted_members_share_every_partition_none_above_capacity() -> None:
    plan = plan_members(
        ["c-0", "c-1", "c-2"], {}, TOPICS, VIEW, capacity=CAPACITY, heuristic="repair"
    )
    assert sorted(plan.assignment) == [tp(p) for p in range(len(SPEEDS))]
    assert set(plan.members) == {"c-0", "c-1", "c-2"}
    assert all(load <= CAPACITY for load in loads(plan).values())


def test_a_member_not_wanted_is_named_with_nothing_and_its_partitions_move() -> None:
    owned = {"c-0": {tp(0), tp(1)}, "c-1": {tp(2), tp(3)}, "c-2": {tp(4), tp(5), tp(6), tp(7)}}
    plan = plan_members(["c-0", "c-1"], owned, TOPICS, VIEW, capacity=CAPACITY, heuristic="repair")
    assert plan.members[-1] == "c-2" and plan.by_member()["c-2"] == frozenset()
    assert not holds(plan, owned)
    assert still_reading(plan, owned) == ["c-2"]
    for member in ("c-0", "c-1"):  # what they read stays theirs
        assert owned[member] <= plan.by_member()[member]
    emptied = {**{m: plan.by_member()[m] for m in ("c-0", "c-1")}, "c-2": frozenset()}
    assert holds(plan, emptied) and still_reading(plan, emptied) == []


def test_a_group_missing_a_planned_member_does_not_hold_the_plan() -> None:
    plan = plan_members(["c-0", "c-1"], {}, TOPICS, VIEW, capacity=CAPACITY, heuristic="repair")
    assert not holds(plan, {})  # nobody there yet
    first = {"c-0": plan.by_member()["c-0"]}
    assert not holds(plan, first)  # c-1 has not joined
    assert holds(plan, {**first, "c-1": plan.by_member()["c-1"]})


def test_a_group_that_fits_keeps_its_partitions() -> None:
    # 65, 65 and 70 at 75 each: three members are needed, and each fits where it is.
    owned = {"c-0": {tp(0), tp(7)}, "c-1": {tp(1), tp(2)}, "c-2": {tp(3), tp(4), tp(5), tp(6)}}
    plan = plan_members(list(owned), owned, TOPICS, VIEW, capacity=75.0, heuristic="repair")
    assert holds(plan, owned)
    assert plan.group_plan.planned_rscore == 0


def test_a_plan_needs_a_member() -> None:
    with pytest.raises(ValueError, match="wanted must name at least one member"):
        plan_members([], {}, TOPICS, VIEW, capacity=CAPACITY, heuristic="repair")


def test_a_broker_without_our_assignor_is_one_line_naming_what_to_add() -> None:
    assert assignor_problem(f"uniform,range,{ASSIGNOR_CLASS}") is None
    assert assignor_problem("autoscaler, uniform") is None
    for listed in ("uniform,range", "", None):
        line = assignor_problem(listed)
        assert line is not None and "\n" not in line
        assert ASSIGNORS_CONFIG in line and ASSIGNOR_CLASS in line


class Inner:
    """A scaler that records what it was told."""

    def __init__(self, replicas: int) -> None:
        self.running = replicas
        self.calls: list[int] = []

    def replicas(self) -> int:
        return self.running

    def scale(self, replicas: int) -> None:
        self.calls.append(replicas)
        self.running = replicas

    def problems(self) -> list[str]:
        return []

    def failing_members(self) -> list[MemberFailure]:
        return []

    def member_words(self) -> list[MemberFailure]:
        return []

    def close(self) -> None:
        pass


class Planner:
    """The part of the planner the scaler asks."""

    def __init__(self) -> None:
        self.reading: list[str] = []
        self.assignor_problem: str | None = None
        self.problem: str | None = None

    def unemptied(self) -> list[str]:
        return self.reading

    def stop(self) -> None:
        pass


def test_a_scale_down_waits_until_the_members_removed_are_empty() -> None:
    inner, planner, now = Inner(3), Planner(), [0.0]
    scaler = EmptyFirstScaler(inner, planner, clock=lambda: now[0])  # type: ignore[arg-type]
    planner.reading = ["c-2"]
    scaler.scale(2)
    assert inner.calls == [] and scaler.replicas() == 2  # asked, not yet done
    planner.reading = []
    assert scaler.replicas() == 2 and inner.calls == [2]
    scaler.scale(4)  # a scale-up goes through at once
    assert inner.calls == [2, 4]


def test_a_member_never_emptied_is_stopped_after_a_while() -> None:
    inner, planner, now = Inner(2), Planner(), [0.0]
    scaler = EmptyFirstScaler(inner, planner, clock=lambda: now[0])  # type: ignore[arg-type]
    planner.reading = ["c-1"]
    scaler.scale(1)
    now[0] = EMPTY_WITHIN_S - 1
    assert scaler.replicas() == 1 and inner.calls == []
    now[0] = EMPTY_WITHIN_S
    assert scaler.replicas() == 1 and inner.calls == [1]


def test_the_local_scaler_puts_the_identity_in_the_command(tmp_path: Path) -> None:
    script = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
    scaler = LocalScaler(
        [sys.executable, "-c", script, str(tmp_path / "{identity}.txt"), "id={identity}"],
        identity_prefix="kip",
        env=dict(os.environ),
    )
    try:
        scaler.scale(2)
        assert wait_until(lambda: len(list(tmp_path.glob("*.txt"))) == 2)
        assert wait_until(lambda: (tmp_path / "kip-1.txt").read_text() == "id=kip-1")
    finally:
        scaler.close()


def test_members_are_named_as_the_scaler_names_them() -> None:
    base = ["--bootstrap-servers", "k:9092", "--group", "g", "--topics", "t", "--capacity", "9"]
    local = parse_args([*base, "--group-protocol", "consumer", "--identity-prefix", "kip"], {})
    assert local.member_name(3) == "kip-3"
    statefulset = parse_args(
        [*base, "--group-protocol", "consumer", "--scaler", "kubernetes"],
        {"AUTOSCALER_WORKLOAD_KIND": "statefulset", "AUTOSCALER_WORKLOAD_NAME": "sinks"},
    )
    assert statefulset.member_name(0) == "sinks-0"
