"""The interface every heuristic implements, and the steps they all share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from assignor.binpool import BinPool
from assignor.members import settle_members
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem, check_speeds, make_problem


class Heuristic(ABC):
    """Assigns partitions to consumers. Subclasses implement :meth:`pack`."""

    name: str = ""

    def assign(
        self,
        speeds: Mapping[TopicPartition, float],
        *,
        capacity: float,
        previous: Mapping[TopicPartition, str] | None = None,
        members: Sequence[str] | None = None,
        remove_first: Sequence[str] | None = None,
        lags: Mapping[TopicPartition, float] | None = None,
    ) -> Assignment:
        """Assign every partition of ``speeds`` to exactly one consumer.

        ``previous`` is last round's assignment (vanished partitions are dropped). With
        ``members=None`` consumers are opened as needed (ids ``c0, c1, ...``, reusing a
        partition's current consumer id when it can); with ``members`` the partitions go to
        exactly those ids: overload is spread evenly when there are too few, and the spare
        members get nothing, ``remove_first`` ones (first to be removed first) emptied first.
        ``lags`` (per-partition backlog) is used by lag-aware heuristics only.
        """
        problem = make_problem(speeds, capacity, previous, members, remove_first)
        checked_lags = check_speeds(lags, "lags") if lags is not None else None
        if not problem.speeds:
            return {}
        result = self.pack(problem, checked_lags)
        if problem.members is not None:
            result = settle_members(result, problem)
        return result

    @abstractmethod
    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        """Compute the assignment of a validated, non-empty problem."""

    def new_pool(self, problem: Problem) -> BinPool:
        """An empty pool for ``problem``."""
        return BinPool(problem.capacity, problem.speeds, problem.members, problem.previous)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
