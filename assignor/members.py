"""Members mode: make the members that will be removed first the ones left empty."""

from __future__ import annotations

from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem


def settle_members(assignment: Assignment, problem: Problem) -> Assignment:
    """Relabel bins so the used members are the first ``k`` in keep-priority order.

    With ``k`` bins in use, a bin held by a member outside the first ``k`` of
    ``problem.members`` moves, whole, to an unused member among them: the one that already
    owned most of its speed. Packing is unchanged; only which member holds each bin.
    """
    assert problem.members is not None
    used = set(assignment.values())
    keep = problem.members[: len(used)]
    keep_set = set(keep)
    misplaced = sorted(used - keep_set, key=problem.members.index)
    if not misplaced:
        return assignment
    free = [m for m in keep if m not in used]
    bins: dict[str, list[TopicPartition]] = {}
    for tp, owner in assignment.items():
        bins.setdefault(owner, []).append(tp)
    relabel: dict[str, str] = {}
    for owner in misplaced:

        def retained(member: str, tps: list[TopicPartition] = bins[owner]) -> float:
            return sum(problem.speeds[tp] for tp in tps if problem.previous.get(tp) == member)

        target = max(free, key=lambda m: (retained(m), -free.index(m)))
        free.remove(target)
        relabel[owner] = target
    return {tp: relabel.get(owner, owner) for tp, owner in assignment.items()}
