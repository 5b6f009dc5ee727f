"""Rules every heuristic obeys (DESIGN.md section 2), checked on generated inputs."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import HEURISTIC_NAMES, TopicPartition, get_heuristic
from assignor.binpool import EPSILON

# Balanced heuristics ignore capacity when the members are fixed; the packers never may.
COUNT_BALANCED = {"sticky", "lag-aware"}
IDS = [f"c{i}" for i in range(8)] + ["x", "y", "pod-a"]

partitions = st.builds(TopicPartition, st.sampled_from(["a", "b", "c"]), st.integers(0, 15))
speed_values = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.6),  # some above C = 1
)


@st.composite
def problems(draw: st.DrawFn) -> dict[str, object]:
    speeds = draw(st.dictionaries(partitions, speed_values, max_size=40))
    capacity = draw(st.sampled_from([1.0, 1.0, 0.7, 2.5]))
    known = list(speeds) + draw(st.lists(partitions, max_size=5))  # some vanished
    previous = {tp: draw(st.sampled_from(IDS)) for tp in known if draw(st.booleans())}
    members = draw(
        st.one_of(st.none(), st.lists(st.sampled_from(IDS), min_size=1, max_size=8, unique=True))
    )
    remove_first = None
    if members and draw(st.booleans()):
        remove_first = draw(st.permutations(members)).copy()[: draw(st.integers(0, len(members)))]
    return {
        "speeds": speeds,
        "capacity": capacity,
        "previous": previous,
        "members": members,
        "remove_first": remove_first,
    }


def loads(
    assignment: dict[TopicPartition, str], speeds: dict[TopicPartition, float]
) -> dict[str, list[float]]:
    held: dict[str, list[float]] = {}
    for tp, owner in assignment.items():
        held.setdefault(owner, []).append(speeds[tp])
    return held


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), name=st.sampled_from(HEURISTIC_NAMES))
def test_every_partition_exactly_once_and_within_capacity(
    problem: dict[str, object], name: str
) -> None:
    speeds: dict[TopicPartition, float] = problem["speeds"]  # type: ignore[assignment]
    capacity: float = problem["capacity"]  # type: ignore[assignment]
    members: list[str] | None = problem["members"]  # type: ignore[assignment]
    result = get_heuristic(name).assign(
        speeds,
        capacity=capacity,
        previous=problem["previous"],  # type: ignore[arg-type]
        members=members,
        remove_first=problem["remove_first"],  # type: ignore[arg-type]
    )
    assert set(result) == set(speeds)  # every partition once; vanished ones dropped
    if members is not None:
        assert set(result.values()) <= set(members)
    capacity_applies = members is None or (
        name not in COUNT_BALANCED and len(members) >= len(speeds)
    )
    if capacity_applies:
        for owner, held in loads(result, speeds).items():
            assert len(held) == 1 or sum(held) <= capacity * (1 + EPSILON) * (1 + 1e-9), (
                owner,
                held,
            )


@settings(max_examples=40, deadline=None)
@given(problem=problems(), name=st.sampled_from(HEURISTIC_NAMES), seed=st.integers(0, 10_000))
def test_deterministic_whatever_the_input_order(
    problem: dict[str, object], name: str, seed: int
) -> None:
    speeds: dict[TopicPartition, float] = problem["speeds"]  # type: ignore[assignment]
    previous: dict[TopicPartition, str] = problem["previous"]  # type: ignore[assignment]
    shuffled_keys = list(speeds)
    random.Random(seed).shuffle(shuffled_keys)
    kwargs = {
        "capacity": problem["capacity"],
        "members": problem["members"],
        "remove_first": problem["remove_first"],
    }
    first = get_heuristic(name).assign(speeds, previous=previous, **kwargs)  # type: ignore[arg-type]
    second = get_heuristic(name).assign(
        {tp: speeds[tp] for tp in shuffled_keys},
        previous=dict(reversed(list(previous.items()))),
        **kwargs,  # type: ignore[arg-type]
    )
    assert first == second


@settings(max_examples=60, deadline=None)
@given(problem=problems(), name=st.sampled_from(HEURISTIC_NAMES))
def test_members_removed_first_are_emptied_first(problem: dict[str, object], name: str) -> None:
    members: list[str] | None = problem["members"]  # type: ignore[assignment]
    if members is None:
        members = IDS[:5]
    remove_first: list[str] = problem["remove_first"] or []  # type: ignore[assignment]
    result = get_heuristic(name).assign(
        problem["speeds"],
        capacity=problem["capacity"],  # type: ignore[arg-type]
        previous=problem["previous"],
        members=members,
        remove_first=remove_first,  # type: ignore[arg-type]
    )
    kept = [m for m in members if m not in remove_first]
    priority = kept + list(reversed(remove_first))
    used = set(result.values())
    # The members in use are exactly the first len(used) in keep-priority order.
    assert used == set(priority[: len(used)])


@settings(max_examples=30, deadline=None)
@given(problem=problems(), name=st.sampled_from(HEURISTIC_NAMES))
def test_new_ids_are_lowest_unused_or_current_owner(problem: dict[str, object], name: str) -> None:
    speeds: dict[TopicPartition, float] = problem["speeds"]  # type: ignore[assignment]
    previous: dict[TopicPartition, str] = problem["previous"]  # type: ignore[assignment]
    result = get_heuristic(name).assign(speeds, capacity=problem["capacity"], previous=previous)  # type: ignore[arg-type]
    owners_before = {previous[tp] for tp in speeds if tp in previous}
    for owner in set(result.values()) - owners_before:
        assert owner.startswith("c") and owner[1:].isdigit(), owner
