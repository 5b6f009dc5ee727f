"""Rack-aware repair: the default heuristic's rules, with every move preferring a consumer in
a rack the partition is local to.

1. shed, as :class:`~assignor.repair.Repair` does: each consumer keeps the most speed of its
   local partitions that fits; then the ones that crossed a rack, fastest first, go back to
   their rack where it has room, else stay where they are (so two full consumers holding
   each other's partitions swap them);
2. place the shed and new partitions, fastest first: the fullest consumer in a local rack
   they fit in (a rack chosen by a :data:`TargetRule` first, if one is given), else a new
   consumer in a local rack while the count allows, else the consumer they left if they
   still fit there, else the fullest consumer anywhere (ejecting up to two slower
   partitions, as repair does), and only then a new consumer past the budget;
3. consolidate to the lower bound moving partitions only into local racks, then, while the
   count is above the budget, into any rack.

The budget is the count the caller fixed (its members), or, when consumers are opened as
needed, one more than the rack-blind repair opens from this state (two more than it opens
from scratch at most): locality costs at most one consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from assignor.binpool import decreasing, group_by_owner
from assignor.ejection import Move
from assignor.members import settle_members
from assignor.metrics import bins_used, lower_bound
from assignor.racks.layout import RackLayout, layout_problem
from assignor.racks.pool import RackPool
from assignor.repair import Repair, apply_moves, consolidate_pool, fit_or_eject, keep_most
from assignor.types import Assignment, TopicPartition
from assignor.validation import Problem, make_problem

RACK_AWARE_BASE = "repair"
"""The heuristic the rack-aware packing extends: the group's leader and the sidecar pack
with racks only when it is the one chosen."""
# Ejection chains as the rack-blind repair's (up to two slower partitions leave a consumer).
MAX_EJECT = 2

Racks = Mapping[TopicPartition, frozenset[str]]


@dataclass(frozen=True)
class RackPlan:
    """An assignment with the rack of every consumer it uses."""

    assignment: Assignment
    consumer_racks: dict[str, str]
    """Rack of each consumer that holds a partition (of the members, or of a new one)."""
    fallback: str | None = None
    """Why the plan is the rack-blind one (one line), or None."""


TargetRule = Callable[
    [RackPool, Sequence[TopicPartition], Racks, "Room"], dict[TopicPartition, str]
]
"""Chooses a rack for some of the partitions about to be placed (fastest first)."""


@dataclass(frozen=True)
class Room:
    """What may still be opened: consumers past the open ones, and spare members per rack."""

    limit: float
    new_consumers: int
    """Consumers that may still open in any rack (consumers opened as needed)."""
    spare_members: Mapping[str, int]
    """Members not yet holding anything, per rack (fixed members)."""


class RackAwareRepair:
    """Repair with a rack preference; :meth:`plan` returns the assignment and the racks."""

    def __init__(
        self, name: str = "rack-greedy", headroom: float = 0.0, targets: TargetRule | None = None
    ) -> None:
        self.name = name
        self.blind = Repair(headroom=headroom)
        self.headroom = headroom
        self.targets = targets

    def plan(
        self,
        speeds: Mapping[TopicPartition, float],
        *,
        capacity: float,
        layout: RackLayout,
        previous: Mapping[TopicPartition, str] | None = None,
        members: Sequence[str] | None = None,
        remove_first: Sequence[str] | None = None,
    ) -> RackPlan:
        """Assign every partition of ``speeds`` to one consumer, preferring local racks.

        ``layout.member_racks`` gives each member's rack (with ``members``) or last round's
        consumers' racks (without: consumers open as needed, each in the rack that needs it;
        a previous consumer of unknown rack is put in the rack most of its speed is local to).
        ``remove_first`` orders the members as for every heuristic: idle members are the
        first ones to be removed. A layout that cannot steer the plan gives the rack-blind
        repair, and the reason.
        """
        problem = make_problem(speeds, capacity, previous, members, remove_first)
        if not problem.speeds:
            return RackPlan({}, {})
        reason = layout_problem(layout, list(problem.speeds), problem.members)
        if reason is not None:
            return self._rack_blind(problem, layout, reason)
        racks = {tp: frozenset(layout.partition_racks[tp]) for tp in problem.speeds}
        budget = self._budget(problem)
        pool, away = self._shed(problem, layout, racks)
        limit = problem.capacity * (1.0 - self.headroom)
        self._bring_home(pool, away, problem, layout, racks, limit, budget)
        placed = pool.assignment()
        order = decreasing([tp for tp in problem.speeds if tp not in placed], problem.speeds)
        targets: dict[TopicPartition, str] = {}
        if self.targets is not None:
            targets = self.targets(
                pool, order, racks, self._room(pool, problem, layout, budget, limit)
            )
        for tp in order:
            self._place(pool, problem, layout, tp, racks[tp], targets.get(tp), limit, budget)
        floor = lower_bound(problem.speeds, problem.capacity)
        self._consolidate(pool, racks, limit, floor, local_only=True)
        self._consolidate(pool, racks, limit, max(floor, budget), local_only=False)
        if len(pool.load) > max(floor, budget):
            return self._rack_blind(
                problem, layout, "the rack-aware plan needs more consumers than the budget"
            )
        used = {c: pool.rack[c] for c, tps in pool.items.items() if tps}
        return RackPlan(pool.assignment(), used)

    def _rack_blind(self, problem: Problem, layout: RackLayout, reason: str) -> RackPlan:
        """The rack-blind repair's plan; a consumer of no known rack is put in the rack most
        of its speed is local to, where its partitions have racks."""
        assignment = self.blind.pack(problem, None)
        if problem.members is not None:
            assignment = settle_members(assignment, problem)
        consumer_racks: dict[str, str] = {}
        for consumer, tps in group_by_owner(assignment).items():
            rack = layout.member_racks.get(consumer) or _likeliest_rack(
                tps, problem.speeds, layout.partition_racks
            )
            if rack:
                consumer_racks[consumer] = rack
        return RackPlan(assignment, consumer_racks, reason)

    # steps ----------------------------------------------------------------------------
    def _budget(self, problem: Problem) -> int:
        """The most consumers the plan may use: the members, or one more than the rack-blind
        repair opens from this state, and never more than two past what it opens from
        scratch: anchored to the current state alone, the count ratchets up round after
        round (each round's rack-blind count starting from the last round's, one higher)."""
        if problem.members is not None:
            return len(problem.members)
        from_here = bins_used(self.blind.pack(problem, None))
        fresh = Problem(problem.speeds, problem.capacity, {}, None)
        return min(from_here + 1, bins_used(self.blind.pack(fresh, None)) + 2)

    def _shed(
        self, problem: Problem, layout: RackLayout, racks: dict[TopicPartition, frozenset[str]]
    ) -> tuple[RackPool, list[TopicPartition]]:
        """The pool after each consumer kept the most of its local partitions that fits, and
        the partitions it held across a rack."""
        pool = RackPool(problem.capacity, problem.speeds, problem.members, problem.previous)
        away: list[TopicPartition] = []
        for consumer, tps in group_by_owner(problem.previous).items():
            rack = layout.member_racks.get(consumer) or _likeliest_rack(tps, problem.speeds, racks)
            # Partitions that cross a rack are placed again, local first: whatever room the
            # shortage of an earlier round left in their own rack, they take it back.
            local = [tp for tp in tps if rack in racks[tp]]
            kept = keep_most(local, problem.speeds, problem.capacity)
            pool.open_in(consumer, rack, kept)
            away.extend(tp for tp in tps if rack not in racks[tp])
        return pool, away

    def _bring_home(
        self,
        pool: RackPool,
        away: list[TopicPartition],
        problem: Problem,
        layout: RackLayout,
        racks: Racks,
        limit: float,
        budget: int,
    ) -> None:
        """Partitions that crossed a rack, fastest first, go to a local consumer with room
        (an idle member of a local rack, with members), else back where they were (no move for
        nothing); those that fit neither are placed with the rest."""
        for tp in decreasing(away, problem.speeds):
            speed = problem.speeds[tp]
            host = pool.choose_in(speed, racks[tp], limit)
            if host is None and problem.members is not None and len(pool.load) < budget:
                host = self._open_local(pool, problem, layout, tp, sorted(racks[tp]), False)
            owner = problem.previous[tp]
            if host is None and pool.fits(owner, speed, limit):
                host = owner
            if host is not None:
                pool.add(host, tp)

    @staticmethod
    def _room(
        pool: RackPool, problem: Problem, layout: RackLayout, budget: int, limit: float
    ) -> Room:
        if problem.members is None:
            return Room(limit, max(0, budget - len(pool.load)), {})
        spare: dict[str, int] = {}
        for member in problem.members:
            if not pool.is_open(member):
                rack = layout.member_racks[member]
                spare[rack] = spare.get(rack, 0) + 1
        return Room(limit, 0, spare)

    def _place(
        self,
        pool: RackPool,
        problem: Problem,
        layout: RackLayout,
        tp: TopicPartition,
        local: frozenset[str],
        target: str | None,
        limit: float,
        budget: int,
    ) -> None:
        speed = problem.speeds[tp]
        host = None if target is None else pool.choose_in(speed, (target,), limit)
        if host is None:
            host = pool.choose_in(speed, local if target is None else local - {target}, limit)
        if host is not None:  # the common case: room in a local rack
            pool.add(host, tp)
            return
        preferred = sorted(local) if target is None else [target, *sorted(local - {target})]
        if len(pool.load) < budget:
            host = self._open_local(pool, problem, layout, tp, preferred, target is not None)
        owner = problem.previous.get(tp)
        if (
            host is None
            and owner is not None
            and pool.is_open(owner)
            and pool.fits(owner, speed, limit)
        ):
            host = owner  # no local room: staying where it was costs no move
        if host is None:
            planned = fit_or_eject(pool, speed, limit, MAX_EJECT)
            if planned is not None:
                host, moves = planned
                apply_moves(pool, moves)
        if host is None:
            host = self._open_local(pool, problem, layout, tp, preferred, target is not None)
        if host is None and problem.members is not None:
            spare = next((m for m in problem.members if not pool.is_open(m)), None)
            if spare is not None:
                pool.open_in(spare, layout.member_racks[spare])
                host = spare
        pool.add(host if host is not None else pool.least_loaded(), tp)

    @staticmethod
    def _open_local(
        pool: RackPool,
        problem: Problem,
        layout: RackLayout,
        tp: TopicPartition,
        preferred: list[str],
        targeted: bool,
    ) -> str | None:
        if problem.members is None:
            # The target rack, else the local rack with the fewest consumers (spreads zones).
            rack = preferred[0] if targeted else min(preferred, key=lambda r: (pool.bins_in(r), r))
            new = pool.new_id(problem.previous.get(tp))
            assert new is not None
            pool.open_in(new, rack)
            return new
        for rack in preferred:
            spare = next(
                (
                    m
                    for m in problem.members
                    if not pool.is_open(m) and layout.member_racks[m] == rack
                ),
                None,
            )
            if spare is not None:
                pool.open_in(spare, rack)
                return spare
        return None

    @staticmethod
    def _consolidate(
        pool: RackPool,
        racks: dict[TopicPartition, frozenset[str]],
        limit: float,
        floor: int,
        *,
        local_only: bool,
    ) -> None:
        """Empty consumers while more than ``floor`` are open: their partitions go to a
        local rack, or, unless ``local_only``, anywhere as repair places them."""

        def place(tp: TopicPartition) -> tuple[str, list[Move]] | None:
            speed = pool.speeds[tp]
            local = pool.choose_in(speed, racks[tp], limit)
            if local is not None:
                return local, []
            return None if local_only else fit_or_eject(pool, speed, limit, MAX_EJECT)

        consolidate_pool(pool, floor, place)


def _likeliest_rack(
    tps: Sequence[TopicPartition],
    speeds: Mapping[TopicPartition, float],
    racks: Mapping[TopicPartition, frozenset[str]],
) -> str:
    """The rack most of ``tps``' speed is local to ('' if none has a rack)."""
    weight: dict[str, float] = {}
    for tp in tps:
        for rack in racks.get(tp, ()):
            if isinstance(rack, str) and rack:
                weight[rack] = weight.get(rack, 0.0) + speeds[tp]
    return min(weight, key=lambda r: (-weight[r], r)) if weight else ""
