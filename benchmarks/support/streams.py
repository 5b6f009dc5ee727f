"""The paper's measurement streams (docs/architecture.md section 1), seeded."""

from __future__ import annotations

import random

from assignor import TopicPartition

Measurement = dict[TopicPartition, float]


def paper_stream(
    partitions: int, measurements: int, delta: float, capacity: float, seed: int
) -> list[Measurement]:
    """s_0(p) ~ U[0, C]; s_i(p) = min(C, max(0, s_{i-1}(p) + U[-delta, delta] / 100 * C))."""
    rng = random.Random(seed)
    tps = [TopicPartition("topic", p) for p in range(partitions)]
    current = {tp: rng.uniform(0.0, capacity) for tp in tps}
    stream = [dict(current)]
    for _ in range(measurements - 1):
        for tp in tps:
            step = rng.uniform(-delta, delta) / 100.0 * capacity
            current[tp] = min(capacity, max(0.0, current[tp] + step))
        stream.append(dict(current))
    return stream
