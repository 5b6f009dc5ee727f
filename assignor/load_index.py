"""Open bins indexed by load, so every fit rule answers in O(log B) instead of a scan.

Bins carry their opening order (a number that only grows); ties between equal loads go to
the earliest opened bin, as a scan in opening order would choose. Whether an item fits is a
predicate monotone in the load (``load + speed <= bound``, also in floating point), so the
searches below apply that predicate itself at their boundaries and agree exactly with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from sortedcontainers import SortedList

Fits = Callable[[float], bool]
"""Whether an item fits into a bin of the given load."""


class _MinTree:
    """Minimum load over opening orders (a segment tree), for the earliest bin that fits."""

    def __init__(self) -> None:
        self._size = 1
        self._tree = [math.inf, math.inf]

    def set(self, order: int, load: float) -> None:
        while order >= self._size:
            self._grow()
        position = order + self._size
        tree = self._tree
        tree[position] = load
        position //= 2
        while position:
            left, right = tree[2 * position], tree[2 * position + 1]
            smallest = left if left < right else right
            if tree[position] == smallest:
                break  # the minimum above does not change either
            tree[position] = smallest
            position //= 2

    def _grow(self) -> None:
        leaves = self._tree[self._size :]
        self._size *= 2
        self._tree = [math.inf] * (2 * self._size)
        self._tree[self._size : self._size + len(leaves)] = leaves
        for position in range(self._size - 1, 0, -1):
            self._tree[position] = min(self._tree[2 * position], self._tree[2 * position + 1])

    def leftmost(self, fits: Fits) -> int | None:
        """The smallest order whose load fits, or None."""
        tree = self._tree
        if not fits(tree[1]):
            return None
        position = 1
        while position < self._size:
            position = 2 * position if fits(tree[2 * position]) else 2 * position + 1
        return position - self._size


class LoadIndex:
    """Bins by (load, opening order)."""

    def __init__(self) -> None:
        self._sorted = SortedList()
        self._entry: dict[str, tuple[float, int, str]] = {}
        self._by_order: dict[int, str] = {}
        # Built on the first earliest-fit question (first-fit heuristics only), then kept.
        self._first: _MinTree | None = None

    def __len__(self) -> int:
        return len(self._entry)

    def __contains__(self, bin_id: object) -> bool:
        return bin_id in self._entry

    def set(self, bin_id: str, load: float, order: int) -> None:
        """Insert ``bin_id`` with ``load``, or move it to ``load``."""
        old = self._entry.get(bin_id)
        if old is not None:
            self._sorted.remove(old)
        entry = (load, order, bin_id)
        self._entry[bin_id] = entry
        self._sorted.add(entry)
        self._by_order[order] = bin_id
        if self._first is not None:
            self._first.set(order, load)

    def discard(self, bin_id: str) -> None:
        """Forget ``bin_id`` (closed, or set aside for a while)."""
        entry = self._entry.pop(bin_id, None)
        if entry is not None:
            self._sorted.remove(entry)
            del self._by_order[entry[1]]
            if self._first is not None:
                self._first.set(entry[1], math.inf)

    def entries(self) -> Iterator[tuple[float, int, str]]:
        """(load, opening order, bin) from the least loaded up."""
        return iter(self._sorted)

    def position(self, bin_id: str) -> tuple[float, int]:
        """(load, opening order) of ``bin_id``."""
        load, order, _ = self._entry[bin_id]
        return load, order

    def emptiest(self) -> str | None:
        """The least loaded bin (earliest opened on ties)."""
        return self._sorted[0][2] if self._sorted else None

    def ascending(self) -> Iterator[tuple[float, str]]:
        """(load, bin) from the least loaded up."""
        for load, _, bin_id in self._sorted:
            yield load, bin_id

    def _fitting_count(self, fits: Fits, threshold: float) -> int:
        """How many bins, from the least loaded up, ``fits`` (a prefix, since fitting is
        monotone in the load). ``threshold`` is where the boundary is expected
        (``bound - speed``); the predicate settles the last ulp either way."""
        entries = self._sorted
        i = entries.bisect_right((threshold, math.inf))
        while i < len(entries) and fits(entries[i][0]):
            i += 1
        while i > 0 and not fits(entries[i - 1][0]):
            i -= 1
        return int(i)

    def fullest_fitting(self, fits: Fits, threshold: float) -> str | None:
        """The most loaded bin that ``fits`` (earliest opened among equal loads)."""
        i = self._fitting_count(fits, threshold)
        if i == 0:
            return None
        entries = self._sorted
        return str(entries[entries.bisect_left((entries[i - 1][0], -1))][2])

    def descending_fitting(self, fits: Fits, threshold: float) -> Iterator[tuple[float, str]]:
        """(load, bin) of the bins that ``fits``, most loaded first (earliest opened first
        among equal loads)."""
        entries = self._sorted
        i = self._fitting_count(fits, threshold)
        while i > 0:
            load = entries[i - 1][0]
            start = entries.bisect_left((load, -1))
            for j in range(start, i):
                yield load, entries[j][2]
            i = start

    def earliest_fitting(self, fits: Fits) -> str | None:
        """The earliest opened bin that ``fits``."""
        if self._first is None:
            self._first = _MinTree()
            for load, order, _ in self._sorted:
                self._first.set(order, load)
        order = self._first.leftmost(fits)
        return None if order is None else self._by_order[order]
