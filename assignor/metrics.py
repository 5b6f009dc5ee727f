"""Quality metrics: Rscore (disruption), the bin lower bound, and the Cardinal Bin Score."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from assignor.types import TopicPartition


def rscore(
    previous: Mapping[TopicPartition, str],
    new: Mapping[TopicPartition, str],
    speeds: Mapping[TopicPartition, float],
    capacity: float,
) -> float:
    """Sum of the speeds of partitions whose consumer changed, divided by the capacity.

    Partitions new in ``new`` (absent from ``previous``) did not move and cost nothing.
    """
    if capacity <= 0 or not math.isfinite(capacity):
        raise ValueError(f"capacity must be a finite number > 0, got {capacity!r}")
    moved = sum(speeds[tp] for tp, owner in new.items() if tp in previous and previous[tp] != owner)
    return moved / capacity


def consumer_loads(
    assignment: Mapping[TopicPartition, str], speeds: Mapping[TopicPartition, float]
) -> dict[str, float]:
    """Sum of the speeds of each consumer's partitions (a partition without a speed: 0)."""
    loads: dict[str, float] = {}
    for tp, consumer in assignment.items():
        loads[consumer] = loads.get(consumer, 0.0) + speeds.get(tp, 0.0)
    return loads


def bins_used(assignment: Mapping[TopicPartition, str]) -> int:
    """Number of consumers that hold at least one partition."""
    return len(set(assignment.values()))


def lower_bound(speeds: Mapping[TopicPartition, float], capacity: float) -> int:
    """Fewest consumers any assignment can use: one per partition faster than C, plus
    ceil(rest / C); at least one when there are partitions."""
    if capacity <= 0 or not math.isfinite(capacity):
        raise ValueError(f"capacity must be a finite number > 0, got {capacity!r}")
    if not speeds:
        return 0
    big = sum(1 for s in speeds.values() if s > capacity)
    rest = sum(s for s in speeds.values() if s <= capacity)
    # Tolerance: a total of exactly k*C must not round up to k+1 from float noise.
    return max(1, big + math.ceil(rest / capacity - 1e-9))


def cbs(bins: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Cardinal Bin Score of each algorithm over one stream.

    ``bins[a][i]`` is the bins algorithm ``a`` used at measurement ``i``. CBS(a) is the mean
    over i of (bins_i(a) - min_b bins_i(b)) / min_b bins_i(b), over the algorithms given.
    """
    if not bins:
        return {}
    lengths = {len(series) for series in bins.values()}
    if len(lengths) != 1:
        raise ValueError(f"bins must hold series of equal length, got lengths {sorted(lengths)}")
    (n,) = lengths
    if n == 0:
        return dict.fromkeys(bins, 0.0)
    best = [min(series[i] for series in bins.values()) for i in range(n)]
    return {
        name: sum((series[i] - best[i]) / best[i] for i in range(n) if best[i] > 0) / n
        for name, series in bins.items()
    }
