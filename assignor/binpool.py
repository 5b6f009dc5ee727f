"""Bins (consumers) being filled for the next assignment: loads, fit rules, new-bin ids.

Every heuristic fills a :class:`BinPool`. It applies the rules all heuristics share:

* a new bin takes the partition's current consumer id if that consumer is not open yet (the
  paper's Sec. IV-C adaptation), else the lowest unused id (``c0, c1, ...``), or, when the
  members are fixed, the first unused member in keep-priority order;
* when every member is already open, a partition that fits nowhere goes to the least loaded
  bin (worst fit on residual), which spreads an unavoidable overload evenly.

Open bins are indexed by load (:class:`assignor.load_index.LoadIndex`): a fit rule answers in
O(log B), so packing P partitions costs O(P log B), not O(P x B).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from enum import StrEnum

from assignor.load_index import LoadIndex
from assignor.types import Assignment, TopicPartition

# Relative tolerance when comparing loads with the capacity (float sums drift).
EPSILON = 1e-9


class Fit(StrEnum):
    """How an item picks among the open bins it fits into."""

    NEXT = "next"  # only the most recently opened bin
    FIRST = "first"  # the earliest opened bin
    BEST = "best"  # the fullest bin
    WORST = "worst"  # the emptiest bin


class BinPool:
    """Open bins with their loads, in opening order."""

    def __init__(
        self,
        capacity: float,
        speeds: dict[TopicPartition, float],
        members: tuple[str, ...] | None,
        previous: dict[TopicPartition, str],
    ) -> None:
        self.capacity = capacity
        self.speeds = speeds
        self.members = members
        self.previous = previous
        self.load: dict[str, float] = {}
        self.items: dict[str, list[TopicPartition]] = {}
        self._next_index = 0  # lowest "cN" not known to be open
        self._order: dict[str, int] = {}  # opening order: ties go to the earliest opened
        self._opened = 0
        self._index = self._new_index()  # the open bins that fit rules may choose
        self.slowest_placed = float("inf")  # a lower bound of the speeds in the pool

    def _new_index(self) -> LoadIndex:
        """The load index of the open bins (a subclass may index them otherwise)."""
        return LoadIndex()

    # opening ----------------------------------------------------------------------------
    @property
    def bins(self) -> list[str]:
        """Open bin ids in opening order."""
        return list(self.load)

    def is_open(self, bin_id: str) -> bool:
        """Whether ``bin_id`` is open."""
        return bin_id in self.load

    def can_open(self) -> bool:
        """Whether another bin may be opened (always, unless members are fixed and all open)."""
        return self.members is None or len(self.load) < len(self.members)

    def new_id(self, preferred: str | None) -> str | None:
        """Id for a new bin: ``preferred`` if usable and not open, else the lowest unused."""
        usable = preferred is not None and (self.members is None or preferred in self.members)
        if usable and preferred not in self.load:
            return preferred
        if self.members is not None:
            return next((m for m in self.members if m not in self.load), None)
        for index in itertools.count(self._next_index):
            candidate = f"c{index}"
            if candidate not in self.load:
                self._next_index = index
                return candidate
        raise AssertionError("unreachable")

    def open(self, bin_id: str, tps: Iterable[TopicPartition] = ()) -> None:
        """Open ``bin_id``, empty or holding ``tps`` (indexed once, with its final load)."""
        if bin_id in self.load:
            raise AssertionError(f"bin {bin_id} is already open")
        self.load[bin_id] = 0.0
        self.items[bin_id] = []
        for tp in tps:
            speed = self.speeds[tp]
            self.load[bin_id] += speed
            self.items[bin_id].append(tp)
            self.slowest_placed = min(self.slowest_placed, speed)
        self._order[bin_id] = self._opened
        self._opened += 1
        self._index.set(bin_id, self.load[bin_id], self._order[bin_id])

    # filling ----------------------------------------------------------------------------
    def fits(self, bin_id: str, speed: float, limit: float | None = None) -> bool:
        """Whether ``speed`` fits into ``bin_id`` without passing ``limit`` (default C)."""
        bound = self.capacity if limit is None else limit
        return self.load[bin_id] + speed <= bound * (1 + EPSILON)

    def add(self, bin_id: str, tp: TopicPartition) -> None:
        """Put partition ``tp`` into open bin ``bin_id``."""
        speed = self.speeds[tp]
        self.load[bin_id] += speed
        self.items[bin_id].append(tp)
        self.slowest_placed = min(self.slowest_placed, speed)
        self._reindex(bin_id)

    def remove(self, bin_id: str, tp: TopicPartition) -> None:
        """Take partition ``tp`` out of ``bin_id``."""
        self.items[bin_id].remove(tp)
        self.load[bin_id] -= self.speeds[tp]
        self._reindex(bin_id)

    def _reindex(self, bin_id: str) -> None:
        if bin_id in self._index:
            self._index.set(bin_id, self.load[bin_id], self._order[bin_id])

    def set_loads(self, loads: dict[str, float]) -> None:
        """Put back loads saved before moves that were undone (a sum and its difference
        need not give back the same float)."""
        for bin_id, load in loads.items():
            self.load[bin_id] = load
            self._reindex(bin_id)

    def set_aside(self, bin_id: str) -> None:
        """Keep ``bin_id`` open but out of every fit rule's choice until :meth:`restore`."""
        self._index.discard(bin_id)

    def restore(self, bin_id: str) -> None:
        """Let fit rules choose ``bin_id`` again."""
        self._index.set(bin_id, self.load[bin_id], self._order[bin_id])

    def close(self, bin_id: str) -> None:
        """Close an empty bin."""
        if self.items[bin_id]:
            raise AssertionError(f"bin {bin_id} is not empty")
        del self.load[bin_id]
        del self.items[bin_id]
        del self._order[bin_id]
        self._index.discard(bin_id)
        self._next_index = 0  # a lower "cN" may be free again

    def choose(self, speed: float, fit: Fit, limit: float | None = None) -> str | None:
        """The open bin ``fit`` picks for an item of ``speed``, or None if none fits."""
        bound = (self.capacity if limit is None else limit) * (1 + EPSILON)

        def fits(load: float) -> bool:
            return load + speed <= bound

        if fit is Fit.NEXT:
            last = next(reversed(self.load), None)
            return last if last is not None and fits(self.load[last]) else None
        if fit is Fit.FIRST:
            return self._index.earliest_fitting(fits)
        if fit is Fit.BEST:
            return self._index.fullest_fitting(fits, bound - speed)
        emptiest = self._index.emptiest()
        return emptiest if emptiest is not None and fits(self.load[emptiest]) else None

    def fitting_bins(self, speed: float, limit: float) -> Iterator[tuple[float, str]]:
        """(load, bin) of the bins ``speed`` fits into below ``limit``, fullest first."""
        bound = limit * (1 + EPSILON)
        return self._index.descending_fitting(lambda load: load + speed <= bound, bound - speed)

    def ascending(self) -> Iterator[tuple[float, str]]:
        """(load, bin) of the bins fit rules may choose, least loaded first."""
        return self._index.ascending()

    def least_loaded(self) -> str:
        """The open bin with the smallest load (earliest opened on ties)."""
        emptiest = self._index.emptiest()
        if emptiest is None:
            raise AssertionError("no open bin")
        return emptiest

    def place(self, tp: TopicPartition, fit: Fit, limit: float | None = None) -> str:
        """Put ``tp`` where ``fit`` says; open a bin if none fits; spread overload when full."""
        speed = self.speeds[tp]
        chosen = self.choose(speed, fit, limit)
        if chosen is None:
            new = self.new_id(self.previous.get(tp)) if self.can_open() else None
            if new is not None:
                self.open(new)
                chosen = new
            else:
                chosen = self.least_loaded()
        self.add(chosen, tp)
        return chosen

    def assignment(self) -> Assignment:
        """Partition -> bin id for every placed partition."""
        return {tp: bin_id for bin_id, tps in self.items.items() for tp in tps}


def decreasing(
    tps: Iterable[TopicPartition], speeds: dict[TopicPartition, float]
) -> list[TopicPartition]:
    """Partitions by decreasing speed; ties by topic and partition, so results are deterministic."""
    return sorted(tps, key=lambda tp: (-speeds[tp], tp))


def group_by_owner(previous: dict[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
    """Owner -> its partitions (sorted), owners in sorted order."""
    grouped: dict[str, list[TopicPartition]] = {}
    for tp, owner in previous.items():
        grouped.setdefault(owner, []).append(tp)
    return {owner: sorted(grouped[owner]) for owner in sorted(grouped)}
