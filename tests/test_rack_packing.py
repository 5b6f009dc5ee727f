"""Rack-aware packing (assignor.racks): locality, the consumer budget, the fallbacks."""

from __future__ import annotations

import json
import random

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.structs import BrokerMetadata, PartitionMetadata
from hypothesis import given, settings
from hypothesis import strategies as st

from assignor import Repair, TopicPartition, bins_used
from assignor.group_plan import SpeedView, plan_group
from assignor.member_data import MemberData, decode_member_data
from assignor.metrics import consumer_loads
from assignor.plugin import partition_racks
from assignor.racks import (
    RackAwareRepair,
    RackLayout,
    cross_rack_share,
    cross_rack_speed,
    flow_targets,
    layout_problem,
)
from assignor.racks.packing import Room
from assignor.racks.pool import RackPool
from assignor.validation import make_problem
from sidecar.controller import Action, Controller, ControllerConfig, Observation

C = 100.0
RACKS = ("a", "b", "c")
PLANNERS = [RackAwareRepair(), RackAwareRepair("rack-flow", targets=flow_targets)]


def tp(n: int) -> TopicPartition:
    return TopicPartition("t", n)


Racks = dict[TopicPartition, frozenset[str]]


def random_case(seed: int, count: int, local: int) -> tuple[dict[TopicPartition, float], Racks]:
    rng = random.Random(seed)
    speeds = {tp(i): rng.uniform(0, C) for i in range(count)}
    racks = {p: frozenset(rng.sample(RACKS, local)) for p in speeds}
    return speeds, racks


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: p.name)
def test_local_room_means_no_byte_crosses(planner: RackAwareRepair) -> None:
    speeds = {tp(i): 30.0 for i in range(6)}
    racks = {tp(i): frozenset({"a" if i < 3 else "b"}) for i in range(6)}
    plan = planner.plan(speeds, capacity=C, layout=RackLayout(racks))
    assert plan.fallback is None
    assert set(plan.assignment) == set(speeds)
    assert cross_rack_speed(plan.assignment, speeds, plan.consumer_racks, racks) == 0.0
    assert sorted(plan.consumer_racks.values()) == ["a", "b"]


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: p.name)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 60), local=st.integers(1, 2))
def test_sizing_stays_within_one_consumer_of_the_rack_blind_plan(
    planner: RackAwareRepair, seed: int, count: int, local: int
) -> None:
    speeds, racks = random_case(seed, count, local)
    first = planner.plan(speeds, capacity=C, layout=RackLayout(racks))
    drifted = {p: min(C, s * random.Random(seed + 1).uniform(0.8, 1.2)) for p, s in speeds.items()}
    layout = RackLayout(racks, first.consumer_racks)
    plan = planner.plan(drifted, capacity=C, layout=layout, previous=first.assignment)
    problem = make_problem(drifted, C, first.assignment, None, None)
    assert bins_used(plan.assignment) <= bins_used(Repair().pack(problem, None)) + 1
    assert set(plan.assignment) == set(drifted)
    assert set(plan.assignment.values()) == set(plan.consumer_racks)
    assert max(consumer_loads(plan.assignment, drifted).values()) <= C * (1 + 1e-9)


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: p.name)
def test_fewer_bytes_cross_than_rack_blind(planner: RackAwareRepair) -> None:
    speeds, racks = random_case(7, 200, 1)
    plan = planner.plan(speeds, capacity=C, layout=RackLayout(racks))
    blind = Repair().assign(speeds, capacity=C)
    spread = {c: RACKS[int(c[1:]) % 3] for c in set(blind.values())}
    aware = cross_rack_share(plan.assignment, speeds, plan.consumer_racks, racks)
    rack_blind = cross_rack_share(blind, speeds, spread, racks)
    assert aware < rack_blind / 4, (aware, rack_blind)


def test_members_keep_their_racks_and_only_members_are_used() -> None:
    speeds, racks = random_case(3, 40, 1)
    members = [f"m{i}" for i in range(30)]
    member_racks = {m: RACKS[i % 3] for i, m in enumerate(members)}
    plan = RackAwareRepair().plan(
        speeds, capacity=C, layout=RackLayout(racks, member_racks), members=members
    )
    assert plan.fallback is None
    assert set(plan.assignment.values()) <= set(members)
    assert all(plan.consumer_racks[c] == member_racks[c] for c in plan.consumer_racks)


def test_a_crossing_partition_comes_home_when_its_rack_has_room() -> None:
    speeds = {tp(0): 40.0, tp(1): 40.0}
    racks = {tp(0): frozenset({"a"}), tp(1): frozenset({"b"})}
    members = ["ma", "mb"]
    layout = RackLayout(racks, {"ma": "a", "mb": "b"})
    previous = {tp(0): "mb", tp(1): "mb"}  # tp(0) crosses from b
    plan = RackAwareRepair().plan(
        speeds, capacity=C, layout=layout, previous=previous, members=members
    )
    assert plan.assignment == {tp(0): "ma", tp(1): "mb"}


def test_a_crossing_partition_without_room_at_home_stays_put() -> None:
    speeds = {tp(0): 40.0, tp(1): 90.0, tp(2): 10.0}
    racks = {tp(0): frozenset({"a"}), tp(1): frozenset({"a"}), tp(2): frozenset({"b"})}
    layout = RackLayout(racks, {"ma": "a", "mb": "b"})
    previous = {tp(0): "mb", tp(1): "ma", tp(2): "mb"}
    plan = RackAwareRepair().plan(
        speeds, capacity=C, layout=layout, previous=previous, members=["ma", "mb"]
    )
    assert plan.assignment == previous


def test_flow_sends_the_flexible_class_where_the_strict_one_leaves_room() -> None:
    speeds = {tp(0): 60.0, tp(1): 70.0}
    racks = {tp(0): frozenset({"a", "c"}), tp(1): frozenset({"c"})}
    pool = RackPool(C, speeds, None, {})
    pool.open_in("ma", "a")
    pool.open_in("mc", "c")
    targets = flow_targets(pool, [tp(1), tp(0)], racks, Room(C, 0, {}))
    assert targets == {tp(1): "c", tp(0): "a"}


def test_flow_leaves_what_fits_nowhere_to_the_greedy_rules() -> None:
    speeds = {tp(0): 80.0, tp(1): 70.0}
    racks = {tp(0): frozenset({"a"}), tp(1): frozenset({"a"})}
    pool = RackPool(C, speeds, None, {})
    pool.open_in("ma", "a")
    targets = flow_targets(pool, [tp(0), tp(1)], racks, Room(C, 0, {}))
    assert targets == {tp(0): "a"}


@pytest.mark.parametrize(
    ("partition_racks", "member_racks", "members", "reason"),
    [
        ({tp(0): frozenset()}, {}, None, "partition t:0 has no rack"),
        ({tp(0): frozenset({""})}, {}, None, "partition t:0 has no rack"),
        ({}, {}, None, "partition t:0 has no rack"),
        ({tp(0): frozenset({"a"}), tp(1): frozenset({"a"})}, {}, None, "rack 'a' alone"),
        (
            {tp(0): frozenset({"a"}), tp(1): frozenset({"b"})},
            {"m0": "a"},
            ["m0", "m1"],
            "member 'm1' has no rack",
        ),
        (
            {tp(0): frozenset({"a"}), tp(1): frozenset({"b"})},
            {"m0": "a", "m1": "z"},
            ["m0", "m1"],
            "member 'm1' is in rack 'z', where no partition lives",
        ),
        (
            {tp(0): frozenset({"a"}), tp(1): frozenset({"b"})},
            {"m0": "a", "m1": "a"},
            ["m0", "m1"],
            "every member is in rack 'a'",
        ),
    ],
)
def test_a_layout_it_cannot_use_gives_the_rack_blind_plan_and_says_why(
    partition_racks: Racks, member_racks: dict[str, str], members: list[str] | None, reason: str
) -> None:
    speeds = {tp(0): 60.0, tp(1): 50.0}
    layout = RackLayout(partition_racks, member_racks)
    assert reason in (layout_problem(layout, sorted(speeds), members) or "")
    plan = RackAwareRepair().plan(speeds, capacity=C, layout=layout, members=members)
    assert plan.fallback is not None and reason in plan.fallback
    assert "\n" not in plan.fallback
    assert plan.assignment == Repair().assign(speeds, capacity=C, members=members)


def test_bad_speeds_are_refused_as_every_heuristic_refuses_them() -> None:
    with pytest.raises(ValueError, match="capacity must be a finite number > 0"):
        RackAwareRepair().plan({tp(0): 1.0}, capacity=0, layout=RackLayout({}))


# the group's leader -------------------------------------------------------------------


def member(identity: str, rack: str | None, owned: tuple[TopicPartition, ...] = ()) -> MemberData:
    return MemberData(identity, "repair", C, 1, owned, rack=rack)


def test_a_member_s_rack_travels_in_its_join_data_and_a_bad_one_is_dropped() -> None:
    data = member("sink-0", "eu-west-1a")
    assert decode_member_data(data.encode()) == data
    for bad in ("", "a b", 7, "x" * 256):
        raw = json.loads(data.encode())
        raw["rack"] = bad
        decoded = decode_member_data(json.dumps(raw).encode())
        assert decoded is not None and decoded.rack is None, bad


def test_the_leader_packs_by_rack_when_every_member_declares_one() -> None:
    speeds = {tp(i): 30.0 for i in range(6)}
    racks = {tp(i): frozenset({"a" if i % 2 else "b"}) for i in range(6)}
    members = {"m-a": member("sink-0", "a"), "m-b": member("sink-1", "b")}
    plan = plan_group(
        members, {m: {"t"} for m in members}, {"t": set(range(6))}, SpeedView(speeds), racks
    )
    assert plan.rack_note is None
    assert {tp_ for tp_ in plan.assignment["m-a"]} == {tp(1), tp(3), tp(5)}
    assert {tp_ for tp_ in plan.assignment["m-b"]} == {tp(0), tp(2), tp(4)}


def test_the_leader_is_rack_blind_and_says_why_when_a_member_has_no_rack() -> None:
    speeds = {tp(i): 30.0 for i in range(6)}
    racks = {tp(i): frozenset({"a" if i % 2 else "b"}) for i in range(6)}
    members = {"m-a": member("sink-0", "a"), "m-x": member("sink-1", None)}
    plan = plan_group(
        members, {m: {"t"} for m in members}, {"t": set(range(6))}, SpeedView(speeds), racks
    )
    assert plan.rack_note == "member 'm-x' has no rack"
    blind = plan_group(
        {"m-a": member("sink-0", None), "m-x": member("sink-1", None)},
        {m: {"t"} for m in members},
        {"t": set(range(6))},
        SpeedView(speeds),
        racks,
    )
    assert blind.rack_note is None  # nobody asked for racks: nothing to say
    assert sorted(map(len, plan.assignment.values())) == sorted(map(len, blind.assignment.values()))


def test_partition_racks_come_from_the_leader_or_the_in_sync_replicas() -> None:
    cluster = ClusterMetadata()
    cluster._brokers = {
        n: BrokerMetadata(n, "127.0.0.1", 9090 + n, rack)
        for n, rack in ((1, "a"), (2, "b"), (3, None))
    }
    cluster._partitions = {
        "t": {
            0: PartitionMetadata("t", 0, 1, [1, 2, 3], [1, 2], 0),
            1: PartitionMetadata("t", 1, 3, [3], [3], 0),
        }
    }
    assert partition_racks(cluster, ["t"], follower_fetching=False) == {tp(0): frozenset({"a"})}
    assert partition_racks(cluster, ["t"], follower_fetching=True) == {tp(0): frozenset({"a", "b"})}


# the sidecar's sizing -----------------------------------------------------------------


def test_the_sidecar_sizes_with_racks_leaving_each_rack_room_for_what_it_leads() -> None:
    # Six partitions of 0.4 C, four led in rack a and two in b: rack-blind, three consumers
    # hold them (two each); by rack, a needs two (0.8 + 0.8) and b one.
    speeds = {tp(i): 40.0 for i in range(6)}
    racks = {tp(i): frozenset({"a" if i < 4 else "b"}) for i in range(6)}
    clock = iter(float(t) for t in range(100))
    controller = Controller(ControllerConfig(capacity=C), lambda: next(clock))
    controller.synchronise(1)
    decision = controller.step(Observation(0.0, speeds, partition_racks=racks))
    assert decision.action is Action.SCALE_UP and decision.desired == 3
    assert controller.rack_note is None
    assert sorted(controller.plan_racks.values()) == ["a", "a", "b"]
    for consumer, rack in controller.plan_racks.items():
        held = [p for p, c in controller.plan.items() if c == consumer]
        assert all(rack in racks[p] for p in held)


def test_the_sidecar_is_rack_blind_without_racks_and_says_why_with_bad_ones() -> None:
    speeds = {tp(i): 40.0 for i in range(6)}
    clock = iter(float(t) for t in range(100))
    controller = Controller(ControllerConfig(capacity=C), lambda: next(clock))
    controller.synchronise(1)
    decision = controller.step(Observation(0.0, speeds, partition_racks={tp(0): frozenset({"a"})}))
    assert controller.rack_note == "partition t:1 has no rack"
    assert decision.desired == len(set(Repair().assign(speeds, capacity=C).values()))
    blind = Controller(ControllerConfig(capacity=C), lambda: 0.0)
    blind.synchronise(1)
    blind.step(Observation(0.0, speeds))
    assert blind.rack_note is None and blind.plan_racks == {}
