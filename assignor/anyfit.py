"""The classic any-fit family (next/first/best/worst fit, online and decreasing), with the
paper's Sec. IV-C adaptation applied by :class:`assignor.binpool.BinPool` when a bin opens."""

from __future__ import annotations

from assignor.base import Heuristic
from assignor.binpool import Fit, decreasing
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem


class AnyFit(Heuristic):
    """Places partitions one by one with a fit rule; ``sort`` makes it the decreasing variant."""

    def __init__(self, name: str, fit: Fit, sort: bool) -> None:
        self.name = name
        self.fit = fit
        self.sort = sort

    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        pool = self.new_pool(problem)
        # Online variants take partitions in canonical (topic, partition) order.
        order = decreasing(problem.speeds, problem.speeds) if self.sort else sorted(problem.speeds)
        for tp in order:
            pool.place(tp, self.fit)
        return pool.assignment()


ANY_FIT = {
    name: AnyFit(name, fit, sort)
    for name, fit, sort in [
        ("nf", Fit.NEXT, False),
        ("nfd", Fit.NEXT, True),
        ("ff", Fit.FIRST, False),
        ("ffd", Fit.FIRST, True),
        ("bf", Fit.BEST, False),
        ("bfd", Fit.BEST, True),
        ("wf", Fit.WORST, False),
        ("wfd", Fit.WORST, True),
    ]
}
