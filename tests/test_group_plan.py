"""The leader's group decision (pure): heuristic vote, capacity, owners, removal, fallback."""

from __future__ import annotations

import pytest

from assignor import TopicPartition, get_heuristic
from assignor.backlog import DrainRule
from assignor.group_plan import (
    SpeedView,
    choose_heuristic,
    overloads,
    plan_group,
    previous_owners,
    removal_order,
)
from assignor.member_data import MemberData, decode_member_data

T = "orders"


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


def member(
    identity: str,
    heuristic: str = "repair",
    capacity: float | None = 10.0,
    generation: int = 1,
    owned: tuple[TopicPartition, ...] = (),
) -> MemberData:
    return MemberData(identity, heuristic, capacity, generation, owned)


def test_member_data_round_trip_and_garbage() -> None:
    data = member("sink-1", owned=(tp(0), tp(2), TopicPartition("b", 1)))
    assert decode_member_data(data.encode()) == MemberData(
        "sink-1", "repair", 10.0, 1, (TopicPartition("b", 1), tp(0), tp(2))
    )
    for garbage in (
        b"",
        b"\x00\x01garbage",
        b"[]",
        b'{"v": 2}',
        b'{"v":1,"owned":{"t":[-1]},"generation":1,"identity":"a","heuristic":"x"}',
        b'{"v":1,"owned":[],"generation":1,"identity":"a","heuristic":"x"}',
        b'{"v":1,"owned":{},"generation":1,"identity":"a","heuristic":"x","capacity":-3}',
    ):
        assert decode_member_data(garbage) is None, garbage


def test_heuristic_vote_is_majority_then_alphabetical() -> None:
    assert (
        choose_heuristic(
            {"a": member("a", "mbf"), "b": member("b", "repair"), "c": member("c", "repair")}
        )
        == "repair"
    )
    assert choose_heuristic({"a": member("a", "mwf"), "b": member("b", "mbf")}) == "mbf"
    assert choose_heuristic({"a": member("a", "bogus"), "b": None}) is None


def test_claims_of_a_stale_generation_do_not_count() -> None:
    # "old" missed a round (its membership lapsed while it still read): none of its claims
    # count, the one nobody else makes included, as Kafka's CooperativeStickyAssignor has it.
    owners = previous_owners(
        {
            "old": member("x", generation=3, owned=(tp(0), tp(1))),
            "new": member("y", generation=4, owned=(tp(0),)),
            "joining": member("z", generation=-1, owned=()),
        }
    )
    assert owners == {tp(0): "new"}
    # Claims of one generation all count; the lowest member id wins a tie.
    same = previous_owners(
        {
            "b": member("x", generation=4, owned=(tp(0), tp(1))),
            "a": member("y", generation=4, owned=(tp(0),)),
        }
    )
    assert same == {tp(0): "a", tp(1): "b"}


def test_removal_order_highest_ordinal_first() -> None:
    order = removal_order(
        {"m1": "sink-2", "m2": "sink-10", "m3": "sink-0", "m4": "alpha", "m5": "beta"}
    )
    assert order == ["m2", "m1", "m3", "m5", "m4"]


def test_plan_follows_the_heuristic_with_fresh_speeds() -> None:
    speeds = {tp(p): s for p, s in enumerate([6.0, 5.0, 4.0, 3.0, 2.0])}
    members = {"m-a": member("sink-0"), "m-b": member("sink-1"), "m-c": member("sink-2")}
    plan = plan_group(members, {m: {T} for m in members}, {T: set(range(5))}, SpeedView(speeds))
    assert plan.fallback_reason is None and plan.heuristic == "repair"
    loads = {m: sum(speeds[t] for t in tps) for m, tps in plan.assignment.items()}
    assert sorted(loads.values()) == [0.0, 10.0, 10.0]  # 20 of load in two consumers of 10
    assert plan.assignment["m-c"] == []  # sink-2, the highest ordinal, is emptied
    expected = get_heuristic("repair").assign(
        speeds, capacity=10.0, members=["m-a", "m-b", "m-c"], remove_first=["m-c", "m-b", "m-a"]
    )
    assert {t: m for m, tps in plan.assignment.items() for t in tps} == expected


def test_a_measured_capacity_in_the_snapshot_packs_instead_of_the_declared_ones() -> None:
    speeds = {tp(p): s for p, s in enumerate([6.0, 5.0, 4.0, 3.0, 2.0])}
    members = {"m-a": member("sink-0"), "m-b": member("sink-1"), "m-c": member("sink-2")}
    view = SpeedView(speeds, capacity=20.0)  # members declare 10; measured twice that
    plan = plan_group(members, {m: {T} for m in members}, {T: set(range(5))}, view)
    assert plan.capacity == 20.0
    loads = sorted(sum(speeds[t] for t in tps) for tps in plan.assignment.values())
    assert loads == [0.0, 0.0, 20.0]  # all of it in one consumer of 20


REPACK_SPEEDS = {tp(p): s for p, s in enumerate([3.0, 7.0, 6.0, 3.0, 4.0, 3.0, 4.0])}
REPACK_OWNERS = {"m0": (tp(4), tp(5), tp(6)), "m1": (tp(1),), "m2": (tp(0), tp(2), tp(3))}


def test_a_sticky_plan_that_overloads_is_packed_from_scratch_when_that_fits() -> None:
    # 30 of speed in three consumers of 10 fits only as {7,3}, {6,4}, {4,3,3}: starting
    # from where the partitions are, the default heuristic overloads one member.
    members = {m: member(m, owned=owned) for m, owned in REPACK_OWNERS.items()}
    previous = {t: m for m, owned in REPACK_OWNERS.items() for t in owned}
    ids = sorted(members)
    sticky = get_heuristic("repair").assign(
        REPACK_SPEEDS, capacity=10.0, previous=previous, members=ids, remove_first=ids[::-1]
    )
    assert overloads(sticky, REPACK_SPEEDS, 10.0)
    plan = plan_group(
        members, {m: {T} for m in members}, {T: set(range(7))}, SpeedView(REPACK_SPEEDS)
    )
    assert plan.repacked and plan.fallback_reason is None
    placed = sorted(t for tps in plan.assignment.values() for t in tps)
    assert placed == sorted(REPACK_SPEEDS)
    loads = [sum(REPACK_SPEEDS[t] for t in tps) for tps in plan.assignment.values()]
    assert sorted(loads) == [10.0, 10.0, 10.0]
    assert tp(1) in plan.assignment["m1"]  # each consumer goes to who held most of it


def test_no_repack_when_even_a_packing_from_scratch_needs_more_members() -> None:
    speeds = {**REPACK_SPEEDS, tp(7): 5.0}  # 35 of speed: three consumers of 10 cannot
    members = {m: member(m, owned=owned) for m, owned in REPACK_OWNERS.items()}
    plan = plan_group(members, {m: {T} for m in members}, {T: set(range(8))}, SpeedView(speeds))
    assert not plan.repacked
    assert overloads(
        {t: m for m, tps in plan.assignment.items() for t in tps}, speeds, 10.0
    )  # the overload stays until the sidecar adds a member


def test_backlog_consumers_get_partitions_when_the_snapshot_says_how_to_drain() -> None:
    # 9 of speed fits one consumer of 10; partition 0's backlog (300 beyond the 5 s
    # allowance, paid off in 30 s) adds 10: the sidecar sized the group at two.
    speeds = {tp(0): 3.0, tp(1): 3.0, tp(2): 3.0}
    lags = {tp(0): 15.0 + 300.0}
    members = {"m-a": member("sink-0"), "m-b": member("sink-1")}
    subscriptions = {m: {T} for m in members}
    plain = plan_group(members, subscriptions, {T: {0, 1, 2}}, SpeedView(speeds, lags))
    assert sorted(len(tps) for tps in plain.assignment.values()) == [0, 3]
    drained = plan_group(
        members, subscriptions, {T: {0, 1, 2}}, SpeedView(speeds, lags, DrainRule(30.0, 5.0))
    )
    assert all(drained.assignment.values())  # both members read
    alone = next(tps for tps in drained.assignment.values() if tp(0) in tps)
    assert alone == [tp(0)]  # the backlogged partition is not shared with the others
    # What moving costs is still measured on the write speeds alone.
    assert drained.planned_rscore <= sum(speeds.values()) / 10.0


def test_capacity_is_the_smallest_declared() -> None:
    speeds = {tp(0): 6.0, tp(1): 6.0}
    members = {"a": member("a", capacity=20.0), "b": member("b", capacity=10.0)}
    plan = plan_group(members, {m: {T} for m in members}, {T: {0, 1}}, SpeedView(speeds))
    assert plan.capacity == 10.0
    assert sorted(len(tps) for tps in plan.assignment.values()) == [1, 1]


@pytest.mark.parametrize(
    ("members", "view", "reason"),
    [
        ({"a": member("a"), "b": member("b")}, None, "no fresh speed snapshot"),
        ({"a": member("a", capacity=None), "b": None}, SpeedView({}), "no member declares"),
        ({"a": member("a", "bogus")}, SpeedView({}), "no member names a known heuristic"),
    ],
)
def test_falls_back_to_sticky(
    members: dict[str, MemberData | None], view: SpeedView | None, reason: str
) -> None:
    owned = {m: (tp(i),) for i, m in enumerate(members)}
    members = {
        m: (d and MemberData(d.identity, d.heuristic, d.capacity, 1, owned[m]))
        for m, d in members.items()
    }
    plan = plan_group(members, {m: {T} for m in members}, {T: set(range(4))}, view)
    assert plan.heuristic == "sticky"
    assert plan.fallback_reason is not None and reason in plan.fallback_reason
    assigned = [t for tps in plan.assignment.values() for t in tps]
    assert sorted(assigned) == [tp(p) for p in range(4)]
    counts = [len(tps) for tps in plan.assignment.values()]
    assert max(counts) - min(counts) <= 1


def test_undecodable_member_owns_nothing_but_still_gets_work() -> None:
    members = {"good": member("a", owned=(tp(0), tp(1))), "bad": None}
    plan = plan_group(
        members, {m: {T} for m in members}, {T: {0, 1}}, SpeedView({tp(0): 9.0, tp(1): 9.0})
    )
    assert plan.assignment["good"] in ([tp(0)], [tp(1)])
    assert len(plan.assignment["bad"]) == 1


def test_partitions_go_only_to_subscribers() -> None:
    members = {"a": member("a"), "b": member("b")}
    subscriptions = {"a": {"x", "y"}, "b": {"y"}}
    plan = plan_group(
        members,
        subscriptions,
        {"x": {0, 1}, "y": {0}},
        SpeedView(
            {TopicPartition("x", 0): 9.0, TopicPartition("x", 1): 9.0, TopicPartition("y", 0): 9.0}
        ),
    )
    assert {t.topic for t in plan.assignment["b"]} <= {"y"}
    assert sorted(t for tps in plan.assignment.values() for t in tps) == [
        TopicPartition("x", 0),
        TopicPartition("x", 1),
        TopicPartition("y", 0),
    ]
