"""The leader's side of cooperative rebalancing (pure): what is withheld, the group's mode."""

from __future__ import annotations

import random

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given
from hypothesis import strategies as st

from assignor.cooperative import (
    COOPERATIVE,
    EAGER,
    decode_assignment_data,
    decode_awaiting,
    decode_handover,
    decode_members,
    decode_one_round,
    encode_assignment_data,
    give_moving,
    gives_partitions,
    group_mode,
    holds_sync_back,
    mark_released,
    released_generation,
    releases_supported,
    withhold_moving,
)
from assignor.group_plan import SpeedView
from assignor.member_data import MemberData, decode_member_data
from assignor.plugin import MemberState, PluginStats, build_assignor
from assignor.types import TopicPartition
from assignor.validation import MAX_GROUP_JSON_CHARS
from contract.capacity import CapacityReport
from contract.capacity import decode as decode_capacity_report


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def holder(
    *owned: int,
    cooperative: bool = True,
    holding: bool = True,
    releases: bool = False,
    awaiting: tuple[int, ...] = (),
) -> MemberData:
    return MemberData(
        "m",
        "repair",
        10.0,
        3,
        tuple(tp(p) for p in owned),
        cooperative,
        holding and cooperative,
        releases=releases,
        awaiting=tuple(tp(p) for p in awaiting),
    )


def test_member_data_carries_protocol_flags_and_reads_old_members_as_eager() -> None:
    data = holder(1, 2)
    decoded = decode_member_data(data.encode())
    assert decoded == data and decoded is not None and decoded.holding
    old = b'{"v":1,"owned":{"t":[1]},"generation":2,"identity":"a","heuristic":"repair"}'
    legacy = decode_member_data(old)
    assert legacy is not None and not legacy.cooperative and not legacy.holding
    assert decode_member_data(old[:-1] + b',"coop":"yes"}') is None  # flags must be booleans


def test_leaving_flag_round_trips_and_must_be_a_boolean() -> None:
    leaving = MemberData("m", "repair", 10.0, 3, (tp(1),), True, True, leaving=True)
    decoded = decode_member_data(leaving.encode())
    assert decoded is not None and decoded.leaving
    assert decode_member_data(leaving.encode().replace(b'"leaving":true', b'"leaving":1')) is None
    old = b'{"v":1,"owned":{"t":[1]},"generation":2,"identity":"a","heuristic":"repair"}'
    legacy = decode_member_data(old)
    assert legacy is not None and not legacy.leaving  # older members stay


class _FourPartitions:
    @staticmethod
    def partitions_for_topic(topic: str) -> set[int]:
        return {0, 1, 2, 3}


def _joined(data: MemberData) -> ConsumerProtocolMemberMetadata:
    return ConsumerProtocolMemberMetadata(0, ["t"], data.encode())


def test_a_leaving_member_is_planned_nothing_and_what_it_reads_waits_for_the_hand_over() -> None:
    def member(identity: str, *owned: int, leaving: bool = False) -> MemberData:
        return MemberData(
            identity, "repair", 10.0, 3, tuple(tp(p) for p in owned), True, True, leaving
        )

    stats = PluginStats()
    leader = build_assignor(MemberState("a", "repair", 10.0), lambda: None, stats)
    joined = {
        "a": _joined(member("a", 0, 1)),
        "b": _joined(member("b", 2, 3, leaving=True)),
        "c": _joined(member("c")),
    }
    result = leader.assign(_FourPartitions(), joined)
    assert result["b"].partitions() == []  # the leaving member gets nothing
    # It still reads 2 and 3 this round: nobody receives them before it revokes them.
    received = {p for m in ("a", "c") for _, ps in result[m].assignment for p in ps}
    assert received == {0, 1}
    assert stats.withheld == 2
    assert all(decode_handover(a.user_data) for a in result.values())
    assert leader.hold_sync_back  # withholds, gives nothing: every sync answered first
    # Next round: it has left; the others share all four.
    after = {"a": _joined(member("a", 0, 1)), "c": _joined(member("c"))}
    final = leader.assign(_FourPartitions(), after)
    shares = [len(a.partitions()) for a in final.values()]
    assert sorted(shares) == [2, 2] and not decode_handover(final["a"].user_data)
    assert not leader.hold_sync_back  # gives 2 and 3 to their new owners at once


def test_the_hand_over_round_hands_over_what_the_round_before_planned() -> None:
    def member(identity: str, *owned: int) -> MemberData:
        return MemberData(identity, "repair", 10.0, 3, tuple(tp(p) for p in owned), True, True)

    views = iter(
        [
            {tp(p): 4.0 for p in range(4)},  # round 1: two consumers' worth, evenly spread
            {tp(0): 9.0, tp(1): 0.5, tp(2): 0.5, tp(3): 0.5},  # speeds moved meanwhile
            {tp(0): 9.0, tp(1): 0.5, tp(2): 0.5, tp(3): 0.5},
        ]
    )
    stats = PluginStats()
    leader = build_assignor(MemberState("a", "repair", 10.0), lambda: SpeedView(next(views)), stats)
    first = leader.assign(
        _FourPartitions(), {"a": _joined(member("a", 0, 1, 2, 3)), "b": _joined(member("b"))}
    )
    assert stats.last_plan is not None and decode_handover(first["a"].user_data)
    planned = {m: sorted(tps) for m, tps in stats.last_plan.assignment.items()}
    kept = [p for _, ps in first["a"].assignment for p in ps]
    # The hand-over round: a revoked what it lost, b still owns nothing.
    second = leader.assign(
        _FourPartitions(), {"a": _joined(member("a", *kept)), "b": _joined(member("b"))}
    )
    got = {m: sorted(tp(p) for _, ps in a.assignment for p in ps) for m, a in second.items()}
    assert got == planned and stats.carried == 1 and stats.plans == 1
    assert not decode_handover(second["a"].user_data)  # converged: no third round
    # A member joining in between is a new group: planned again.
    leader.assign(
        _FourPartitions(),
        {
            "a": _joined(member("a", *kept)),
            "b": _joined(member("b")),
            "c": _joined(member("c")),
        },
    )
    assert stats.plans == 2


def test_a_group_of_leaving_members_assigns_nothing_and_fails_nothing() -> None:
    leader = build_assignor(MemberState("a", "repair", 10.0), lambda: None)
    gone = MemberData("a", "repair", 10.0, 3, (tp(0),), True, True, leaving=True)
    result = leader.assign(_FourPartitions(), {"a": _joined(gone)})
    assert result["a"].partitions() == []


def test_a_partition_moving_between_two_holders_is_withheld_from_its_new_owner() -> None:
    members = {"a": holder(0, 1, 2), "b": holder(3), "c": holder()}
    planned = {"a": [tp(0), tp(1)], "b": [tp(3)], "c": [tp(2)]}
    plan = withhold_moving(planned, members)
    assert plan.assignment == {"a": [tp(0), tp(1)], "b": [tp(3)], "c": []}
    assert plan.withheld == {"c": [tp(2)]}
    assert plan.mode == COOPERATIVE


def test_partitions_of_departed_or_eager_members_move_at_once() -> None:
    # "gone" is not in the group; "e" rebalances eagerly, so it stopped reading before joining.
    members = {"a": holder(0), "e": holder(1, cooperative=False)}
    plan = withhold_moving({"a": [tp(1), tp(2)], "e": [tp(0)]}, members)
    assert plan.assignment == {"a": [tp(1), tp(2)], "e": []}
    assert plan.withheld == {"e": [tp(0)]}
    assert plan.mode == EAGER


def test_two_holders_of_one_partition_both_block_its_hand_over_except_to_themselves() -> None:
    members = {"a": holder(5), "b": holder(5), "c": holder()}
    assert withhold_moving({"c": [tp(5)]}, members).withheld == {"c": [tp(5)]}
    # Planned to "a", but "b" still reads it too: it waits one round until "b" let go.
    assert withhold_moving({"a": [tp(5)]}, members).withheld == {"a": [tp(5)]}


def test_a_round_gives_what_a_member_did_not_read_yet() -> None:
    members = {"a": holder(0, 1), "b": holder()}
    assert not gives_partitions({"a": [tp(0), tp(1)], "b": []}, members)
    assert gives_partitions({"a": [tp(0)], "b": [tp(1)]}, members)
    assert gives_partitions({"a": [tp(0), tp(1)], "c": [tp(2)]}, members)  # a new member


def test_the_sync_is_held_back_only_in_rounds_that_withhold_and_give_nothing() -> None:
    members = {"a": holder(0, 1), "b": holder()}
    moving = withhold_moving({"a": [tp(0)], "b": [tp(1)]}, members)  # 1 moves a -> b
    assert moving.withheld and not gives_partitions(moving.assignment, members)
    assert holds_sync_back(moving, members)
    # The hand-over round (a revoked 1): gives 1 to b, withholds nothing.
    after = {"a": holder(0), "b": holder()}
    handing = withhold_moving({"a": [tp(0)], "b": [tp(1)]}, after)
    assert not holds_sync_back(handing, after)
    # A round that gives one partition and withholds another: its new owner would wait.
    mixed = withhold_moving({"a": [tp(0), tp(2)], "b": [tp(1)]}, members)
    assert mixed.withheld and gives_partitions(mixed.assignment, members)
    assert not holds_sync_back(mixed, members)


def test_group_mode_needs_every_member_cooperative() -> None:
    assert group_mode({"a": holder(), "b": holder()}) == COOPERATIVE
    assert group_mode({"a": holder(), "b": None}) == EAGER
    assert group_mode({}) == EAGER


def test_assignment_data_round_trip_and_unreadable_means_eager() -> None:
    for mode in (COOPERATIVE, EAGER):
        assert decode_assignment_data(encode_assignment_data(mode)) == mode
    for junk in (b"", None, b"not json", b"[1]", b'{"mode":"other"}'):
        assert decode_assignment_data(junk) == EAGER


def test_a_round_that_withholds_announces_the_hand_over_round() -> None:
    data = encode_assignment_data(COOPERATIVE, handover=True)
    assert decode_handover(data) and decode_assignment_data(data) == COOPERATIVE
    assert not decode_handover(encode_assignment_data(COOPERATIVE))
    for junk in (b"", None, b"not json", b"[1]", b'{"handover":"yes"}'):
        assert not decode_handover(junk)


def test_assignment_data_says_how_many_members_the_plan_is_for() -> None:
    data = encode_assignment_data(COOPERATIVE, handover=True, members=4)
    assert decode_members(data) == 4 and decode_assignment_data(data) == COOPERATIVE
    assert decode_members(encode_assignment_data(EAGER)) is None  # an older leader
    for junk in (b"", None, b"not json", b"[1]", b'{"members":"4"}', b'{"members":-1}'):
        assert decode_members(junk) is None


RandomRound = tuple[dict[str, MemberData], dict[str, list[TopicPartition]], list[TopicPartition]]


def random_round(seed: int, releases: bool) -> RandomRound:
    """Up to 6 members holding random partitions of up to 30 (some eager unless they all
    release), and a random plan for them."""
    rng = random.Random(seed)
    names = [f"m{i}" for i in range(rng.randint(1, 6))]
    partitions = [tp(p) for p in range(rng.randint(0, 30))]
    owned: dict[str, list[int]] = {m: [] for m in names}
    for p in range(len(partitions)):
        if rng.random() < 0.8:
            owned[rng.choice(names)].append(p)
    members = {
        m: holder(*ps, cooperative=releases or rng.random() < 0.8, releases=releases)
        for m, ps in owned.items()
    }
    planned: dict[str, list[TopicPartition]] = {m: [] for m in names}
    for t in partitions:
        planned[rng.choice(names)].append(t)
    return members, planned, partitions


@given(st.integers(min_value=0, max_value=10_000))
def test_no_partition_is_ever_readable_by_two_members(seed: int) -> None:
    members, planned, partitions = random_round(seed, releases=False)
    plan = withhold_moving(planned, members)
    for member, tps in plan.assignment.items():
        for t in tps:  # after this round, only the receiver reads it
            readers = {m for m, d in members.items() if d.holding and t in d.owned} | {member}
            assert readers == {member}
    handed = sorted(t for tps in plan.assignment.values() for t in tps)
    held_back = sorted(t for tps in plan.withheld.values() for t in tps)
    assert sorted(handed + held_back) == sorted(partitions)


def test_one_round_member_data_round_trips_and_is_validated() -> None:
    data = holder(1, 2, releases=True, awaiting=(2,))
    decoded = decode_member_data(data.encode())
    assert decoded == data and decoded is not None and decoded.releases
    assert decoded.awaiting == (tp(2),)
    assert decode_member_data(data.encode().replace(b'"rel":true', b'"rel":1')) is None
    bad = data.encode().replace(b'"awaiting":{"t":[2]}', b'"awaiting":{"t":[-2]}')
    assert decode_member_data(bad) is None
    old = b'{"v":1,"owned":{"t":[1]},"generation":2,"identity":"a","heuristic":"repair"}'
    legacy = decode_member_data(old)
    assert legacy is not None and not legacy.releases and legacy.awaiting == ()


def test_one_round_gives_a_moving_partition_at_once_marked_awaited() -> None:
    members = {
        "a": holder(0, 1, 2, releases=True),
        "b": holder(3, releases=True),
        "c": holder(releases=True),
    }
    planned = {"a": [tp(0), tp(1)], "b": [tp(3), tp(4)], "c": [tp(2)]}
    plan = give_moving(planned, members)
    assert plan.assignment == planned and not plan.withheld
    # 2 is still read by a: c waits for a's release. 4 was read by nobody: b reads it at once.
    assert plan.awaiting == {"c": [tp(2)]}
    assert not holds_sync_back(plan, members)


def test_a_partition_its_owner_still_awaits_is_not_read_by_it() -> None:
    # b was given 5 and still awaits its release: moving 5 on to c waits for nobody but a.
    members = {
        "a": holder(releases=True),
        "b": holder(5, releases=True, awaiting=(5,)),
        "c": holder(releases=True),
    }
    assert give_moving({"c": [tp(5)]}, members).awaiting == {}
    members["a"] = holder(5, releases=True)
    assert give_moving({"c": [tp(5)]}, members).awaiting == {"c": [tp(5)]}
    # A member never awaits what it reads itself, even when another reads it too.
    assert give_moving({"a": [tp(5)]}, members).awaiting == {}


def test_one_round_needs_every_member_able_to_release() -> None:
    assert releases_supported({"a": holder(releases=True), "b": holder(releases=True)})
    assert not releases_supported({"a": holder(releases=True), "b": holder()})
    assert not releases_supported({"a": holder(releases=True), "b": None})
    assert not releases_supported({"a": holder(releases=True, cooperative=False)})
    assert not releases_supported({})


def test_the_leader_hands_over_in_one_round_when_every_member_releases() -> None:
    def member(identity: str, *owned: int, releases: bool = True) -> MemberData:
        return MemberData(
            identity, "repair", 10.0, 3, tuple(tp(p) for p in owned), True, True, False, releases
        )

    stats = PluginStats()
    state = MemberState("a", "repair", 10.0, releases=True)
    leader = build_assignor(state, lambda: None, stats)
    joined = {"a": _joined(member("a", 0, 1, 2, 3)), "c": _joined(member("c"))}
    result = leader.assign(_FourPartitions(), joined)
    given = {m: set(a.partitions()) for m, a in result.items()}
    assert given["a"] | given["c"] == {tp(p) for p in range(4)} and given["c"]
    assert all(decode_one_round(a.user_data) for a in result.values())
    assert not any(decode_handover(a.user_data) for a in result.values())
    assert decode_awaiting(result["c"].user_data) == frozenset(given["c"])
    assert stats.awaited == len(given["c"]) and stats.withheld == 0
    leader.on_assignment(result["a"])
    assert state.one_round and state.awaiting == frozenset()
    # One member that cannot release: what moves waits for a second round, as before.
    joined["c"] = _joined(member("c", releases=False))
    again = build_assignor(MemberState("a", "repair", 10.0), lambda: None).assign(
        _FourPartitions(), joined
    )
    assert not any(decode_one_round(a.user_data) for a in again.values())
    assert again["c"].partitions() == [] and decode_handover(again["c"].user_data)


def test_a_join_remembers_what_it_said_is_unread_until_that_rounds_assignment() -> None:
    state = MemberState("c", "repair", 10.0, owned=(tp(1), tp(2)), cooperative=True)
    state.awaiting = frozenset({tp(2), tp(9)})  # 9 is no longer owned: not said
    plugin = build_assignor(state, lambda: None)
    sent = decode_member_data(plugin.metadata(["t"]).user_data)
    assert sent is not None and sent.awaiting == (tp(2),)
    assert state.declared_unread == frozenset({tp(2)})
    kept = encode_assignment_data(COOPERATIVE, one_round=True)
    plugin.on_assignment(ConsumerProtocolMemberAssignment(0, [("t", [1, 2])], kept))
    assert state.declared_unread == frozenset() and state.owned == (tp(1), tp(2))


def test_awaited_partitions_round_trip_in_the_assignment_and_junk_awaits_nothing() -> None:
    data = encode_assignment_data(COOPERATIVE, awaiting=[tp(3), tp(1)], one_round=True)
    assert decode_awaiting(data) == {tp(1), tp(3)} and decode_one_round(data)
    assert decode_awaiting(encode_assignment_data(COOPERATIVE)) == frozenset()
    for junk in (b"", None, b"not json", b"[1]", b'{"await":[1]}', b'{"await":{"t":3}}'):
        assert decode_awaiting(junk) == frozenset()
        assert not decode_one_round(junk)
    assert decode_awaiting(b'{"await":{"t":[1,-1,true,"2"]}}') == {tp(1)}


def test_the_release_mark_rides_on_the_capacity_report() -> None:
    report = CapacityReport("member-1", 7, 2, 100.0, 2000.0, 3.5).encode()
    marked = mark_released(report, 12)
    assert released_generation(marked) == 12
    assert decode_capacity_report(marked) == decode_capacity_report(report)  # sidecar unmoved
    assert released_generation(mark_released("", 0)) == 0
    assert released_generation(mark_released("not json", 4)) == 4
    assert released_generation(report) is None
    for junk in (None, "", "rel", '{"rel":-1}', '{"rel":true}', '{"rel":"3"}', "[1]", "{bad"):
        assert released_generation(junk) is None


@given(st.integers(min_value=0, max_value=10_000))
def test_one_round_gives_everything_and_awaits_exactly_what_others_read(seed: int) -> None:
    members, planned, _ = random_round(seed, releases=True)
    plan = give_moving(planned, members)
    assert plan.assignment == planned and not plan.withheld
    for member, tps in plan.assignment.items():
        for t in tps:  # read at once only if nobody else reads it
            others = {m for m, d in members.items() if t in d.owned} - {member}
            assert (t in plan.awaiting.get(member, [])) == bool(others)


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_group_json_nested_too_deeply_reads_as_absent(depth: int) -> None:
    # A member's userdata or commit metadata nested deeper than the parser recurses raised
    # RecursionError, past every ValueError handler: the leader's assign() stopped.
    nested = ("[" * depth + "]" * depth).encode()
    assert decode_member_data(nested) is None
    assert released_generation('{"rel":' + nested.decode() + "}") is None
    assert decode_members(nested) is None and decode_one_round(nested) is False
    assert decode_assignment_data(nested) == EAGER and decode_awaiting(nested) == frozenset()


def test_group_json_beyond_its_size_cap_reads_as_absent() -> None:
    fine = MemberData("m", "repair", None, 1, (tp(0),), True, False, False, False)
    padded = fine.encode()[:-1] + b',"pad":"' + b"x" * MAX_GROUP_JSON_CHARS + b'"}'
    assert decode_member_data(fine.encode()) == fine
    assert decode_member_data(padded) is None
