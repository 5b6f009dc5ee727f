"""The plan for a KIP-848 group, as a pure function: who the members will be, and what each
of them reads. The broker's assignor follows it when it names every member of the group and the
members it names that are not in the group hold nothing."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from assignor.group_plan import GroupPlan, SpeedView, plan_group
from assignor.member_data import MemberData
from assignor.types import Assignment, TopicPartition


@dataclass(frozen=True)
class BrokerPlan:
    """A plan for the broker: each member's partitions (the ones to be removed hold none)."""

    members: tuple[str, ...]
    assignment: Assignment
    group_plan: GroupPlan

    def by_member(self) -> dict[str, frozenset[TopicPartition]]:
        """Member -> its partitions (every member named, with nothing included)."""
        owned: dict[str, set[TopicPartition]] = {member: set() for member in self.members}
        for tp, member in self.assignment.items():
            owned[member].add(tp)
        return {member: frozenset(tps) for member, tps in owned.items()}


def plan_members(
    wanted: Sequence[str],
    owned: Mapping[str, Collection[TopicPartition]],
    topics: Mapping[str, Collection[int]],
    view: SpeedView | None,
    *,
    capacity: float,
    heuristic: str,
) -> BrokerPlan:
    """The plan for the ``wanted`` members (by their ``group.instance.id``; in removal order's
    sense, the highest ordinal goes first) from ``owned``, what the group's members read now
    (present but not wanted: they are named with nothing, so the plan empties them). Every
    partition of ``topics`` goes to a wanted member; stickiness and the packing are
    :func:`assignor.group_plan.plan_group`'s, the rules the classic protocol's leader plans by."""
    if not wanted:
        raise ValueError("wanted must name at least one member")
    members = {
        name: MemberData(
            identity=name,
            heuristic=heuristic,
            capacity=capacity,
            generation=0,
            owned=tuple(sorted(owned.get(name, ()))),
        )
        for name in wanted
    }
    subscriptions = {name: set(topics) for name in wanted}
    partitions = {topic: set(numbers) for topic, numbers in topics.items()}
    plan = plan_group(members, subscriptions, partitions, view)
    assignment = {tp: member for member, tps in plan.assignment.items() for tp in tps}
    leaving = sorted(set(owned) - set(wanted))
    return BrokerPlan((*wanted, *leaving), assignment, plan)


def holds(plan: BrokerPlan, owned: Mapping[str, Collection[TopicPartition]]) -> bool:
    """Whether the group reads exactly as ``plan`` says: every member given partitions is in
    the group reading them, and every other member reads nothing."""
    targets = plan.by_member()
    if any(tps and frozenset(owned.get(m, ())) != tps for m, tps in targets.items()):
        return False
    return all(frozenset(tps) == targets.get(m, frozenset()) for m, tps in owned.items())


def still_reading(plan: BrokerPlan, owned: Mapping[str, Collection[TopicPartition]]) -> list[str]:
    """The members ``plan`` names with nothing that still read some partition."""
    targets = plan.by_member()
    return sorted(m for m, tps in owned.items() if tps and m in targets and not targets[m])
