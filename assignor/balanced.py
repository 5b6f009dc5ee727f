"""Count-balanced baselines: ``sticky`` (CooperativeSticky-like) and ``lag-aware`` (KAFKA-5337).

Neither looks at capacity while assigning; with ``members=None`` they use the smallest
number of consumers (from the lower bound up) for which no consumer exceeds C, unless it
holds a single partition faster than C.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from assignor.base import Heuristic
from assignor.binpool import EPSILON, group_by_owner
from assignor.metrics import lower_bound
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem

Builder = Callable[[Sequence[str]], Assignment]


def within_capacity(
    assignment: Assignment, speeds: dict[TopicPartition, float], capacity: float
) -> bool:
    """No consumer above capacity, except one holding a single partition."""
    load: dict[str, float] = {}
    count: dict[str, int] = {}
    for tp, owner in assignment.items():
        load[owner] = load.get(owner, 0.0) + speeds[tp]
        count[owner] = count.get(owner, 0) + 1
    return all(load[m] <= capacity * (1 + EPSILON) or count[m] == 1 for m in load)


def smallest_feasible(problem: Problem, build: Builder, ids: Sequence[str]) -> Assignment:
    """Build with the first 1, 2, ... ids (from the lower bound) until capacity holds."""
    start = max(1, lower_bound(problem.speeds, problem.capacity))
    for n in range(start, len(problem.speeds) + 1):
        assignment = build(ids[:n])
        if within_capacity(assignment, problem.speeds, problem.capacity):
            return assignment
    # Nothing balanced fits: one partition per consumer always respects the capacity rule.
    return {tp: ids[i] for i, tp in enumerate(sorted(problem.speeds))}


def candidate_ids(problem: Problem) -> list[str]:
    """Current owners (most partitions first), then fresh ``cN`` ids: as many as partitions."""
    owned = group_by_owner(problem.previous)
    ids = sorted(owned, key=lambda m: (-len(owned[m]), m))
    taken = set(ids)
    fresh = (f"c{i}" for i in itertools.count() if f"c{i}" not in taken)
    ids.extend(itertools.islice(fresh, max(0, len(problem.speeds) - len(ids))))
    return ids


class Sticky(Heuristic):
    """Partition counts differ by at most one; as many partitions as possible stay put."""

    name = "sticky"

    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        def build(members: Sequence[str]) -> Assignment:
            return self.balance(problem, members)

        if problem.members is not None:
            return build(problem.members)
        return smallest_feasible(problem, build, candidate_ids(problem))

    @staticmethod
    def balance(problem: Problem, members: Sequence[str]) -> Assignment:
        """Count-balanced sticky assignment over exactly ``members``."""
        rank = {m: i for i, m in enumerate(members)}
        owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
        unassigned: list[TopicPartition] = []
        for tp in sorted(problem.speeds):
            # "" is never a member id: partitions without a current member go to unassigned.
            owned.get(problem.previous.get(tp, ""), unassigned).append(tp)
        base, extra = divmod(len(problem.speeds), len(members))
        # The members owning most get the +1 quotas: fewer moves.
        by_owned = sorted(members, key=lambda m: (-len(owned[m]), rank[m]))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_owned)}
        result: Assignment = {}
        for member in members:
            keep = owned[member][: quota[member]]
            unassigned.extend(owned[member][quota[member] :])
            result.update(dict.fromkeys(keep, member))
        heap = [(len(owned[m][: quota[m]]), rank[m], m) for m in members]
        heap = [entry for entry in heap if entry[0] < quota[entry[2]]]
        heapq.heapify(heap)
        for tp in sorted(unassigned):
            held, order, member = heapq.heappop(heap)
            result[tp] = member
            if held + 1 < quota[member]:
                heapq.heappush(heap, (held + 1, order, member))
        return result


class LagAware(Heuristic):
    """KAFKA-5337: per topic, partitions by decreasing lag, each to the consumer with the
    fewest partitions of that topic, ties by least total lag (all topics, the KIP's
    ``consumerTotalLags``), then fewest partitions in all. Ignores ``previous``.
    Without ``lags`` the speeds stand in for them (backlog grows with speed)."""

    name = "lag-aware"

    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        weights = {
            tp: (lags or {}).get(tp, problem.speeds[tp] if lags is None else 0.0)
            for tp in problem.speeds
        }

        def build(members: Sequence[str]) -> Assignment:
            return self.balance(weights, members)

        if problem.members is not None:
            return build(problem.members)
        ids = [f"c{i}" for i in range(len(problem.speeds))]
        return smallest_feasible(problem, build, ids)

    @staticmethod
    def balance(lags: dict[TopicPartition, float], members: Sequence[str]) -> Assignment:
        """The KIP's per-topic lag balancing over exactly ``members``."""
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in lags:
            by_topic.setdefault(tp.topic, []).append(tp)
        result: Assignment = {}
        total_lag = dict.fromkeys(members, 0.0)
        total_count = dict.fromkeys(members, 0)
        for topic in sorted(by_topic):
            heap = [(0, total_lag[m], total_count[m], rank, m) for rank, m in enumerate(members)]
            for tp in sorted(by_topic[topic], key=lambda tp: (-lags[tp], tp)):
                count, _, _, rank, member = heapq.heappop(heap)
                result[tp] = member
                total_lag[member] += lags[tp]
                total_count[member] += 1
                heapq.heappush(
                    heap, (count + 1, total_lag[member], total_count[member], rank, member)
                )
        return result
