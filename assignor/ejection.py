"""Fitting a partition into full consumers by ejecting smaller ones (pure planning).

When a partition of speed ``s`` fits in no consumer, a consumer ``y`` can still take it if
up to ``max_eject`` of its smaller partitions leave for other consumers where they fit.
This is a one-level ejection chain; it saves a consumer at the price of moving the ejected
partitions, which are always slower than the one placed.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field

from assignor.types import TopicPartition

# Only this many of a consumer's slowest partitions are considered for ejection: keeps the
# search bounded (pairs of 10) on consumers holding hundreds of partitions.
EJECT_CANDIDATES = 10
# Only this many hosts (those closest to fitting the partition) are tried: at the paper's
# scale that is all of them; at 10k partitions it keeps a tight repack near 0.2 s.
EJECT_HOSTS = 64


@dataclass
class Move:
    """Partition ``tp`` goes from consumer ``source`` to ``target``."""

    tp: TopicPartition
    source: str
    target: str


@dataclass
class Layout:
    """A scratch copy of loads and contents that plans are tried against."""

    speeds: dict[TopicPartition, float]
    bound: float
    load: dict[str, float]
    items: dict[str, list[TopicPartition]] = field(default_factory=dict)

    def apply(self, move: Move) -> None:
        """Record ``move`` in this layout."""
        speed = self.speeds[move.tp]
        self.load[move.source] -= speed
        self.items[move.source].remove(move.tp)
        self.load[move.target] += speed
        self.items[move.target].append(move.tp)

    def best_fit(self, speed: float, exclude: str | None = None) -> str | None:
        """Fullest consumer (not ``exclude``) that takes ``speed`` within the bound."""
        chosen: str | None = None
        for consumer, load in self.load.items():
            fits = consumer != exclude and load + speed <= self.bound
            if fits and (chosen is None or load > self.load[chosen]):
                chosen = consumer
        return chosen


class _Residuals:
    """Consumers sorted by free room, for best-fit look-ups by bisection."""

    def __init__(self, layout: Layout) -> None:
        self.entries = sorted((layout.bound - load, c) for c, load in layout.load.items())
        self.rooms = [room for room, _ in self.entries]

    def best_fit(self, speed: float, host: str, taken: dict[str, float]) -> str | None:
        """The fullest consumer other than ``host`` with room for ``speed``, counting
        what ``taken`` already put there."""
        for room, consumer in self.entries[bisect.bisect_left(self.rooms, speed) :]:
            if consumer != host and room - taken.get(consumer, 0.0) >= speed:
                return consumer
        return None


def plan_ejection(
    layout: Layout, tp: TopicPartition, max_eject: int
) -> tuple[str, list[Move]] | None:
    """A consumer that takes ``tp`` after ejecting at most ``max_eject`` slower partitions
    to other consumers, and the ejection moves; None if there is none. ``tp`` itself is not
    in the layout. Among the ``EJECT_HOSTS`` consumers closest to fitting ``tp``, the plan
    ejecting the least speed (the least Rscore) wins."""
    speed = layout.speeds[tp]
    residuals = _Residuals(layout)
    # The least loaded consumers need the least ejected to make room: the cheapest plans.
    hosts = heapq.nsmallest(
        EJECT_HOSTS, layout.load, key=lambda c: (layout.load[c] + speed - layout.bound, c)
    )
    best: tuple[float, str, list[Move]] | None = None
    for host in hosts:
        excess = layout.load[host] + speed - layout.bound
        slower = sorted(
            (z for z in layout.items[host] if layout.speeds[z] < speed),
            key=lambda z: (layout.speeds[z], z),
        )[:EJECT_CANDIDATES]
        for count in range(1, max_eject + 1):
            for combo in itertools.combinations(slower, count):
                ejected = sum(layout.speeds[z] for z in combo)
                if ejected < excess or (best is not None and ejected >= best[0]):
                    continue
                moves = _place_elsewhere(layout, residuals, host, combo)
                if moves is not None:
                    best = (ejected, host, moves)
    return None if best is None else (best[1], best[2])


def _place_elsewhere(
    layout: Layout, residuals: _Residuals, host: str, combo: tuple[TopicPartition, ...]
) -> list[Move] | None:
    taken: dict[str, float] = {}
    moves: list[Move] = []
    for z in sorted(combo, key=lambda z: (-layout.speeds[z], z)):
        speed = layout.speeds[z]
        target = residuals.best_fit(speed, host, taken)
        if target is None:
            return None
        taken[target] = taken.get(target, 0.0) + speed
        moves.append(Move(z, host, target))
    return moves
