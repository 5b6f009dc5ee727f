"""Modified Any Fit (the paper's Algorithm 1): MWF, MBF, MWFP, MBFP.

Walk the current consumers sorted by cumulative (or max partition) speed, decreasing. Each
one's partitions, smallest first, move into bins already open while they fit; at the first
that does not, this consumer is opened and keeps its remaining partitions, biggest first,
while they fit. What is left, and new partitions, is placed at the end, decreasing, by the
fit rule.
"""

from __future__ import annotations

from collections.abc import Callable

from assignor.base import Heuristic
from assignor.binpool import Fit, decreasing, group_by_owner
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem

ConsumerKey = Callable[[list[float]], float]


class ModifiedAnyFit(Heuristic):
    """Algorithm 1 with a fit rule and a consumer sort key."""

    def __init__(self, name: str, fit: Fit, consumer_key: ConsumerKey) -> None:
        self.name = name
        self.fit = fit
        self.consumer_key = consumer_key

    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        speeds = problem.speeds
        pool = self.new_pool(problem)
        owned = group_by_owner(problem.previous)
        walk = sorted(owned, key=lambda c: (-self.consumer_key([speeds[tp] for tp in owned[c]]), c))
        unassigned = [tp for tp in speeds if tp not in problem.previous]
        for consumer in walk:
            pset = decreasing(owned[consumer], speeds)
            while pset:  # smallest first, into bins already open
                chosen = pool.choose(speeds[pset[-1]], self.fit)
                if chosen is None:
                    break
                pool.add(chosen, pset.pop())
            if not pset:
                continue
            pool.open(consumer)
            while pset and pool.fits(consumer, speeds[pset[0]]):  # biggest first, stay here
                pool.add(consumer, pset.pop(0))
            unassigned.extend(pset)
        for tp in decreasing(unassigned, speeds):
            pool.place(tp, self.fit)
        return pool.assignment()


def _cumulative(values: list[float]) -> float:
    return sum(values)


def _max_partition(values: list[float]) -> float:
    return max(values)


MODIFIED_ANY_FIT = {
    name: ModifiedAnyFit(name, fit, key)
    for name, fit, key in [
        ("mwf", Fit.WORST, _cumulative),
        ("mbf", Fit.BEST, _cumulative),
        ("mwfp", Fit.WORST, _max_partition),
        ("mbfp", Fit.BEST, _max_partition),
    ]
}
