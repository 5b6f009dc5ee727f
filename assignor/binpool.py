"""Bins (consumers) being filled for the next assignment: loads, fit rules, new-bin ids.

Every heuristic fills a :class:`BinPool`. It applies the rules all heuristics share:

* a new bin takes the partition's current consumer id if that consumer is not open yet (the
  paper's Sec. IV-C adaptation), else the lowest unused id (``c0, c1, ...``), or, when the
  members are fixed, the first unused member in keep-priority order;
* when every member is already open, a partition that fits nowhere goes to the least loaded
  bin (worst fit on residual), which spreads an unavoidable overload evenly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from enum import StrEnum

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

    def open(self, bin_id: str) -> None:
        """Open ``bin_id`` (empty)."""
        if bin_id in self.load:
            raise AssertionError(f"bin {bin_id} is already open")
        self.load[bin_id] = 0.0
        self.items[bin_id] = []

    # filling ----------------------------------------------------------------------------
    def fits(self, bin_id: str, speed: float, limit: float | None = None) -> bool:
        """Whether ``speed`` fits into ``bin_id`` without passing ``limit`` (default C)."""
        bound = self.capacity if limit is None else limit
        return self.load[bin_id] + speed <= bound * (1 + EPSILON)

    def add(self, bin_id: str, tp: TopicPartition) -> None:
        """Put partition ``tp`` into open bin ``bin_id``."""
        self.load[bin_id] += self.speeds[tp]
        self.items[bin_id].append(tp)

    def remove(self, bin_id: str, tp: TopicPartition) -> None:
        """Take partition ``tp`` out of ``bin_id``."""
        self.items[bin_id].remove(tp)
        self.load[bin_id] -= self.speeds[tp]

    def close(self, bin_id: str) -> None:
        """Close an empty bin."""
        if self.items[bin_id]:
            raise AssertionError(f"bin {bin_id} is not empty")
        del self.load[bin_id]
        del self.items[bin_id]
        self._next_index = 0  # a lower "cN" may be free again

    def choose(
        self,
        speed: float,
        fit: Fit,
        limit: float | None = None,
        candidates: Iterable[str] | None = None,
    ) -> str | None:
        """The open bin ``fit`` picks for an item of ``speed``, or None if none fits."""
        if fit is Fit.NEXT:
            last = next(reversed(self.load), None)
            return last if last is not None and self.fits(last, speed, limit) else None
        chosen: str | None = None
        for bin_id in self.load if candidates is None else candidates:
            if not self.fits(bin_id, speed, limit):
                continue
            if fit is Fit.FIRST:
                return bin_id
            if (
                chosen is None
                or (fit is Fit.BEST and self.load[bin_id] > self.load[chosen])
                or (fit is Fit.WORST and self.load[bin_id] < self.load[chosen])
            ):
                chosen = bin_id
        return chosen

    def least_loaded(self) -> str:
        """The open bin with the smallest load (earliest opened on ties)."""
        return min(self.load, key=self.load.__getitem__)

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
