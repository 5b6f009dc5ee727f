"""Repair-and-consolidate: our rebalance-aware heuristic (the default).

The paper's heuristics rebuild the packing every round, so even consumers that are fine see
their partitions shuffled. Repair starts from the current assignment instead:

1. shed: every current consumer keeps the subset of its partitions with the largest total
   speed that fits in C, so the speed it sheds (the Rscore it costs) is the least possible;
2. place: the shed and the new partitions, fastest first, go to the fullest consumer they
   fit in below ``(1 - headroom) * C``; if none, to a full consumer that can make room by
   ejecting up to two slower partitions to others (the cheapest such plan); only then is a
   consumer opened;
3. consolidate: while the count is above the lower bound, the lightest consumer whose
   partitions can all be placed elsewhere (same rules) is emptied. Consumers are emptied
   only when that lowers the count.

``headroom`` is the knob: moved partitions are placed below ``(1 - headroom) * C``, leaving
room for the next drift (fewer moves later) at the price of more consumers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from assignor.base import Heuristic
from assignor.binpool import EPSILON, BinPool, Fit, decreasing, group_by_owner
from assignor.ejection import Move, plan_ejection
from assignor.metrics import lower_bound
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem

# Up to this many partitions on one consumer, the kept subset is found exactly.
EXACT_SUBSET_LIMIT = 10
# Consolidation tries to empty this many of the lightest consumers before giving up.
CONSOLIDATION_ATTEMPTS = 8


def keep_most(
    tps: list[TopicPartition], speeds: dict[TopicPartition, float], capacity: float
) -> list[TopicPartition]:
    """The subset of ``tps`` with the largest total speed that fits in ``capacity``.

    A partition faster than C stays alone where it is (it cannot share, and moving it costs
    the most). Exact up to ``EXACT_SUBSET_LIMIT`` partitions; beyond, the cheapest single
    partition or pair that clears the overload is shed, else the slowest ones greedily.
    """
    bound = capacity * (1 + EPSILON)
    total = sum(speeds[tp] for tp in tps)
    if total <= bound:
        return list(tps)
    ordered = decreasing(tps, speeds)
    if speeds[ordered[0]] > bound:
        return [ordered[0]]
    if len(ordered) <= EXACT_SUBSET_LIMIT:
        return _keep_exact(ordered, speeds, bound)
    shed = _cheapest_shed(ordered, speeds, total - bound)
    return [tp for tp in ordered if tp not in shed]


def _keep_exact(
    ordered: list[TopicPartition], speeds: dict[TopicPartition, float], bound: float
) -> list[TopicPartition]:
    # Reachable sums, each with the first subset (in decreasing order) that reaches it.
    best: dict[float, tuple[int, ...]] = {0.0: ()}
    for index, tp in enumerate(ordered):
        speed = speeds[tp]
        for total, subset in list(best.items()):
            candidate = total + speed
            if candidate <= bound and candidate not in best:
                best[candidate] = (*subset, index)
    return [ordered[i] for i in best[max(best)]]


def _cheapest_shed(
    ordered: list[TopicPartition], speeds: dict[TopicPartition, float], excess: float
) -> set[TopicPartition]:
    """Partitions to shed, totalling at least ``excess``, as little speed as this finds: the
    cheapest single partition, else the cheapest pair (first in ``ordered`` order on ties),
    else the slowest ones greedily. O(k log k) for k partitions."""
    values = [speeds[tp] for tp in ordered]  # decreasing
    best: tuple[float, tuple[TopicPartition, ...]] | None = None
    for tp, speed in zip(ordered, values, strict=True):  # one partition
        if speed >= excess and (best is None or speed < best[0]):
            best = (speed, (tp,))
    pair = _cheapest_pair(values, excess)
    if pair is not None and (best is None or pair[0] < best[0]):
        best = (pair[0], (ordered[pair[1]], ordered[pair[2]]))
    if best is not None:
        return set(best[1])
    shed: set[TopicPartition] = set()
    for tp in reversed(ordered):  # slowest first until the overload is gone
        if excess <= 0:
            break
        shed.add(tp)
        excess -= speeds[tp]
    return shed


def _cheapest_pair(values: list[float], excess: float) -> tuple[float, int, int] | None:
    """The smallest ``values[i] + values[j] >= excess`` over i < j of a decreasing list, as
    (sum, i, j), the first (i, j) in order among equal sums; None if no pair reaches it.

    For each i the sums over j > i only shrink as j grows, so the pairs reaching ``excess``
    are a prefix of j: its last one gives i's smallest sum, and a second search finds the
    first j with that same sum (floating-point sums of different values can be equal)."""
    count = len(values)
    best: tuple[float, int, int] | None = None
    for i in range(count - 1):
        first = values[i]
        if first + values[i + 1] < excess:
            continue  # no j reaches it
        last = _last_reaching(values, i + 1, count, first, excess, strict=False)
        total = first + values[last]
        if best is not None and total >= best[0]:
            continue
        j = _last_reaching(values, i + 1, last + 1, first, total, strict=True) + 1
        best = (total, i, j)
    return best


def _last_reaching(
    values: list[float], low: int, high: int, base: float, threshold: float, *, strict: bool
) -> int:
    """The last j in [low, high) with ``base + values[j]`` >= ``threshold`` (> if
    ``strict``), true on a prefix of a decreasing list; low - 1 if on none."""
    while low < high:
        middle = (low + high) // 2
        total = base + values[middle]
        if total > threshold or (not strict and total == threshold):
            low = middle + 1
        else:
            high = middle
    return low - 1


class Repair(Heuristic):
    """Repair the previous assignment, then consolidate when that lowers the count."""

    def __init__(
        self,
        name: str = "repair",
        headroom: float = 0.0,
        max_eject: int = 2,
        consolidate: bool = True,
    ) -> None:
        if not 0.0 <= headroom < 1.0:
            raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
        if max_eject not in (0, 1, 2, 3):
            raise ValueError(f"max_eject must be in [0, 3], got {max_eject!r}")
        self.name = name
        self.headroom = headroom
        self.max_eject = max_eject
        self.consolidate = consolidate

    def pack(self, problem: Problem, lags: dict[TopicPartition, float] | None) -> Assignment:
        speeds = problem.speeds
        pool = self.new_pool(problem)
        moving = [tp for tp in speeds if tp not in problem.previous]
        for consumer, tps in group_by_owner(problem.previous).items():
            kept = keep_most(tps, speeds, problem.capacity)
            pool.open(consumer, kept)
            kept_set = set(kept)
            moving.extend(tp for tp in tps if tp not in kept_set)
        limit = problem.capacity * (1.0 - self.headroom)
        for tp in decreasing(moving, speeds):
            if not self._place_in_open(pool, tp, limit):
                pool.place(tp, Fit.BEST, limit)  # opens a consumer, or spreads overload
        if self.consolidate:
            self._consolidate(pool, limit)
        return pool.assignment()

    def _place_in_open(self, pool: BinPool, tp: TopicPartition, limit: float) -> bool:
        """Put ``tp`` into an open consumer, directly or by ejection; False if impossible."""
        planned = fit_or_eject(pool, pool.speeds[tp], limit, self.max_eject)
        if planned is None:
            return False
        host, moves = planned
        apply_moves(pool, moves)
        pool.add(host, tp)
        return True

    def _consolidate(self, pool: BinPool, limit: float) -> None:
        def place(tp: TopicPartition) -> tuple[str, list[Move]] | None:
            return fit_or_eject(pool, pool.speeds[tp], limit, self.max_eject)

        consolidate_pool(pool, lower_bound(pool.speeds, pool.capacity), place)


Placement = Callable[[TopicPartition], "tuple[str, list[Move]] | None"]
"""Where a partition of a consumer being emptied goes: (host, ejection moves), or None."""


def fit_or_eject(
    pool: BinPool, speed: float, limit: float, max_eject: int
) -> tuple[str, list[Move]] | None:
    """The fullest consumer ``speed`` fits in below ``limit`` (no moves), else one that
    takes it after ejecting up to ``max_eject`` slower partitions, and those moves; None if
    neither exists."""
    direct = pool.choose(speed, Fit.BEST, limit)
    if direct is not None:
        return direct, []
    return plan_ejection(pool, speed, limit, max_eject, pool.slowest_placed)


def apply_moves(pool: BinPool, moves: list[Move]) -> None:
    """Carry out ``moves`` in order."""
    for move in moves:
        pool.remove(move.source, move.tp)
        pool.add(move.target, move.tp)


def consolidate_pool(pool: BinPool, floor: int, place: Placement) -> None:
    """While more than ``floor`` consumers are open, empty one of the
    ``CONSOLIDATION_ATTEMPTS`` lightest whose partitions ``place`` can all put elsewhere."""
    while len(pool.load) > floor:
        lightest = [c for _, c in itertools.islice(pool.ascending(), CONSOLIDATION_ATTEMPTS)]
        if not any(try_empty(pool, c, place) for c in lightest):
            return


def try_empty(pool: BinPool, victim: str, place: Placement) -> bool:
    """Move all of ``victim``'s partitions where ``place`` says (fastest first) and close
    it, or change nothing."""
    pool.set_aside(victim)
    saved: dict[str, float] = {}  # exact loads of touched consumers, put back on failure
    applied: list[Move] = []
    for tp in decreasing(list(pool.items[victim]), pool.speeds):
        planned = place(tp)
        if planned is None:
            apply_moves(pool, [Move(m.tp, m.target, m.source) for m in reversed(applied)])
            pool.set_loads(saved)
            pool.restore(victim)
            return False
        host, moves = planned
        for move in [*moves, Move(tp, victim, host)]:
            for consumer in (move.source, move.target):
                saved.setdefault(consumer, pool.load[consumer])
            apply_moves(pool, [move])
            applied.append(move)
    pool.close(victim)
    return True
