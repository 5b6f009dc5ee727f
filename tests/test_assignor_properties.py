"""Rules every heuristic obeys (docs/architecture.md section 3), checked on generated inputs."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import HEURISTIC_NAMES, Assignment, TopicPartition, get_heuristic
from assignor.binpool import EPSILON

# Balanced heuristics ignore capacity when the members are fixed; the packers never may.
COUNT_BALANCED = {"sticky", "lag-aware"}
IDS = [f"c{i}" for i in range(8)] + ["x", "y", "pod-a"]


@dataclass
class Case:
    """One generated assignment problem."""

    speeds: dict[TopicPartition, float]
    capacity: float
    previous: dict[TopicPartition, str]
    members: list[str] | None
    remove_first: list[str] | None

    def run(self, name: str, **overrides: object) -> Assignment:
        arguments: dict[str, object] = {
            "capacity": self.capacity,
            "previous": self.previous,
            "members": self.members,
            "remove_first": self.remove_first,
        }
        arguments.update(overrides)
        speeds = arguments.pop("speeds", self.speeds)
        return get_heuristic(name).assign(speeds, **arguments)  # type: ignore[arg-type]


partitions = st.builds(TopicPartition, st.sampled_from(["a", "b", "c"]), st.integers(0, 15))
speed_values = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.6),  # some above C = 1
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    speeds = draw(st.dictionaries(partitions, speed_values, max_size=40))
    capacity = draw(st.sampled_from([1.0, 1.0, 0.7, 2.5]))
    known = list(speeds) + draw(st.lists(partitions, max_size=5))  # some vanished
    previous = {tp: draw(st.sampled_from(IDS)) for tp in known if draw(st.booleans())}
    member_lists = st.lists(st.sampled_from(IDS), min_size=1, max_size=8, unique=True)
    members = draw(st.one_of(st.none(), member_lists))
    remove_first = None
    if members and draw(st.booleans()):
        remove_first = draw(st.permutations(members))[: draw(st.integers(0, len(members)))]
    return Case(speeds, capacity, previous, members, remove_first)


def loads(assignment: Assignment, speeds: dict[TopicPartition, float]) -> dict[str, list[float]]:
    held: dict[str, list[float]] = {}
    for tp, owner in assignment.items():
        held.setdefault(owner, []).append(speeds[tp])
    return held


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), name=st.sampled_from(HEURISTIC_NAMES))
def test_every_partition_exactly_once_and_within_capacity(case: Case, name: str) -> None:
    result = case.run(name)
    assert set(result) == set(case.speeds)  # every partition once; vanished ones dropped
    if case.members is not None:
        assert set(result.values()) <= set(case.members)
    capacity_applies = case.members is None or (
        name not in COUNT_BALANCED and len(case.members) >= len(case.speeds)
    )
    if capacity_applies:
        bound = case.capacity * (1 + EPSILON) * (1 + 1e-9)
        for owner, held in loads(result, case.speeds).items():
            assert len(held) == 1 or sum(held) <= bound, (owner, held)


@settings(max_examples=40, deadline=None)
@given(case=cases(), name=st.sampled_from(HEURISTIC_NAMES), seed=st.integers(0, 10_000))
def test_deterministic_whatever_the_input_order(case: Case, name: str, seed: int) -> None:
    shuffled = list(case.speeds)
    random.Random(seed).shuffle(shuffled)
    first = case.run(name)
    second = case.run(
        name,
        speeds={tp: case.speeds[tp] for tp in shuffled},
        previous=dict(reversed(list(case.previous.items()))),
    )
    assert first == second


@settings(max_examples=60, deadline=None)
@given(case=cases(), name=st.sampled_from(HEURISTIC_NAMES))
def test_members_removed_first_are_emptied_first(case: Case, name: str) -> None:
    members = case.members if case.members is not None else IDS[:5]
    remove_first = case.remove_first or []
    result = case.run(name, members=members, remove_first=remove_first)
    kept = [m for m in members if m not in remove_first]
    priority = kept + list(reversed(remove_first))
    used = set(result.values())
    # The members in use are exactly the first len(used) in keep-priority order.
    assert used == set(priority[: len(used)])


@settings(max_examples=30, deadline=None)
@given(case=cases(), name=st.sampled_from(HEURISTIC_NAMES))
def test_new_ids_are_lowest_unused_or_current_owner(case: Case, name: str) -> None:
    result = case.run(name, members=None, remove_first=None)
    owners_before = {case.previous[tp] for tp in case.speeds if tp in case.previous}
    for owner in set(result.values()) - owners_before:
        assert owner.startswith("c") and owner[1:].isdigit(), owner
