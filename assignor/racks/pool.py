"""A :class:`~assignor.binpool.BinPool` whose bins each sit in a rack.

The bins are indexed by load once per rack (:class:`RackIndex` stands in for the pool's one
index and answers its questions across racks), so "the fullest bin in one of these racks
that fits" costs O(R log B), and keeping the index current costs what it did rack-blind.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Iterator

from assignor.binpool import EPSILON, BinPool
from assignor.load_index import Fits, LoadIndex
from assignor.types import TopicPartition


class RackIndex(LoadIndex):
    """One :class:`LoadIndex` per rack, answering as one index over all of them."""

    def __init__(self, racks: dict[str, str]) -> None:
        super().__init__()
        self._racks = racks  # bin -> rack, owned by the pool
        self.per_rack: dict[str, LoadIndex] = {}

    def rack_index(self, rack: str) -> LoadIndex | None:
        """The index of ``rack``'s bins, if it has any."""
        return self.per_rack.get(rack)

    def __len__(self) -> int:
        return sum(len(index) for index in self.per_rack.values())

    def __contains__(self, bin_id: object) -> bool:
        rack = self._racks.get(bin_id) if isinstance(bin_id, str) else None
        return rack is not None and rack in self.per_rack and bin_id in self.per_rack[rack]

    def set(self, bin_id: str, load: float, order: int) -> None:
        rack = self._racks[bin_id]
        index = self.per_rack.get(rack)
        if index is None:
            index = self.per_rack[rack] = LoadIndex()
        index.set(bin_id, load, order)

    def discard(self, bin_id: str) -> None:
        index = self.per_rack.get(self._racks.get(bin_id, ""))
        if index is not None:
            index.discard(bin_id)

    def _entries(self) -> Iterator[tuple[float, int, str]]:
        # (load, order, bin) ascending across racks; each rack's list is sorted already.
        return heapq.merge(*(index.entries() for index in self.per_rack.values()))

    def emptiest(self) -> str | None:
        return next((bin_id for _, _, bin_id in self._entries()), None)

    def ascending(self) -> Iterator[tuple[float, str]]:
        for load, _, bin_id in self._entries():
            yield load, bin_id

    def fullest_fitting(self, fits: Fits, threshold: float) -> str | None:
        best: tuple[float, int, str] | None = None
        for index in self.per_rack.values():
            chosen = index.fullest_fitting(fits, threshold)
            if chosen is not None:
                load, order = index.position(chosen)
                if best is None or (-load, order) < (-best[0], best[1]):
                    best = (load, order, chosen)
        return None if best is None else best[2]

    def descending_fitting(self, fits: Fits, threshold: float) -> Iterator[tuple[float, str]]:
        def keyed(index: LoadIndex) -> Iterator[tuple[float, int, str]]:
            for load, bin_id in index.descending_fitting(fits, threshold):
                yield -load, index.position(bin_id)[1], bin_id

        for negative, _, bin_id in heapq.merge(*(keyed(i) for i in self.per_rack.values())):
            yield -negative, bin_id

    def earliest_fitting(self, fits: Fits) -> str | None:
        found = (index.earliest_fitting(fits) for index in self.per_rack.values())
        candidates = [
            (index.position(b)[1], b)
            for index, b in zip(self.per_rack.values(), found, strict=True)
            if b is not None
        ]
        return min(candidates)[1] if candidates else None


class RackPool(BinPool):
    """Open bins with their loads and racks."""

    rack: dict[str, str]
    """Bin -> its rack."""

    def _new_index(self) -> LoadIndex:
        # Called by BinPool's constructor: the racks are set up with the index.
        self.rack = {}
        self._count: Counter[str] = Counter()
        self._racks = RackIndex(self.rack)
        return self._racks

    def open_in(self, bin_id: str, rack: str, tps: Iterable[TopicPartition] = ()) -> None:
        """Open ``bin_id`` in ``rack``, empty or holding ``tps``."""
        self.rack[bin_id] = rack
        self.open(bin_id, tps)
        self._count[rack] += 1

    def open(self, bin_id: str, tps: Iterable[TopicPartition] = ()) -> None:
        if bin_id not in self.rack:
            raise AssertionError(f"bin {bin_id} has no rack: open it with open_in")
        super().open(bin_id, tps)

    def close(self, bin_id: str) -> None:
        super().close(bin_id)
        self._count[self.rack.pop(bin_id)] -= 1

    def choose_in(self, speed: float, racks: Collection[str], limit: float) -> str | None:
        """The fullest open bin in one of ``racks`` that ``speed`` fits below ``limit``
        (the earliest opened among equal loads), or None."""
        bound = limit * (1 + EPSILON)

        def fits(load: float) -> bool:
            return load + speed <= bound

        if len(racks) == 1:  # the common case (a partition local to its leader's rack)
            (rack,) = racks
            index = self._racks.rack_index(rack)
            return None if index is None else index.fullest_fitting(fits, bound - speed)
        best: tuple[float, int, str] | None = None
        for rack in racks:
            index = self._racks.rack_index(rack)
            chosen = None if index is None else index.fullest_fitting(fits, bound - speed)
            if chosen is None:
                continue
            key = (-self.load[chosen], self._order[chosen], chosen)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def bins_in(self, rack: str) -> int:
        """How many bins are open in ``rack``."""
        return self._count[rack]
