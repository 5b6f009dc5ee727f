"""Fitting a partition into full consumers by ejecting smaller ones (planning on a pool).

When a partition of speed ``s`` fits in no consumer, a consumer ``y`` can still take it if
up to ``max_eject`` of its smaller partitions leave for other consumers where they fit.
This is a one-level ejection chain; it saves a consumer at the price of moving the ejected
partitions, which are always slower than the one placed.

Plans are read off the pool's load index (the consumers fit rules may choose) and change
nothing: the caller applies the returned moves.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from assignor.binpool import EPSILON, BinPool
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


def plan_ejection(
    pool: BinPool, speed: float, limit: float, max_eject: int, slowest_placed: float
) -> tuple[str, list[Move]] | None:
    """A consumer that takes a partition of ``speed`` below ``limit`` after ejecting at most
    ``max_eject`` slower partitions to other consumers, and the ejection moves; None if there
    is none. Among the ``EJECT_HOSTS`` least loaded consumers (the closest to fitting it),
    the plan ejecting the least speed (the least Rscore) wins. ``slowest_placed`` is a lower
    bound of the speeds in the pool: when no partition there is slower, no plan exists."""
    if slowest_placed >= speed or max_eject == 0:
        return None
    bound = limit * (1 + EPSILON)
    best: tuple[float, str, list[Move]] | None = None
    for _, host in itertools.islice(pool.ascending(), EJECT_HOSTS):
        excess = pool.load[host] + speed - bound
        slower = sorted(
            (z for z in pool.items[host] if pool.speeds[z] < speed),
            key=lambda z: (pool.speeds[z], z),
        )[:EJECT_CANDIDATES]
        for count in range(1, max_eject + 1):
            for combo in itertools.combinations(slower, count):
                ejected = sum(pool.speeds[z] for z in combo)
                if ejected < excess or (best is not None and ejected >= best[0]):
                    continue
                moves = _place_elsewhere(pool, limit, host, combo)
                if moves is not None:
                    best = (ejected, host, moves)
    return None if best is None else (best[1], best[2])


def _place_elsewhere(
    pool: BinPool, limit: float, host: str, combo: tuple[TopicPartition, ...]
) -> list[Move] | None:
    """Best-fit targets (not ``host``) for the ejected partitions, counting what earlier
    ones of the same plan already put there; None if one has no target."""
    bound = limit * (1 + EPSILON)
    taken: dict[str, float] = {}
    moves: list[Move] = []
    for z in sorted(combo, key=lambda z: (-pool.speeds[z], z)):
        speed = pool.speeds[z]
        target = next(
            (
                consumer
                for load, consumer in pool.fitting_bins(speed, limit)
                if consumer != host and load + taken.get(consumer, 0.0) + speed <= bound
            ),
            None,
        )
        if target is None:
            return None
        taken[target] = taken.get(target, 0.0) + speed
        moves.append(Move(z, host, target))
    return moves
