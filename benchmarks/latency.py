"""assign() latency at scale: 10,000 partitions over 10 topics, 200 members.

The previous assignment is given (our default heuristic's packing of the first speeds), the
speeds have drifted, and every heuristic re-assigns; aiokafka's StickyPartitionAssignor gets
the same members and previous assignment (as its user_data) in the same run. Reports the
median wall time of several runs. ``python -m benchmarks.latency``.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from assignor import (
    DEFAULT_HEURISTIC,
    HEURISTIC_NAMES,
    Assignment,
    TopicPartition,
    bins_used,
    get_heuristic,
    rscore,
)
from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish

CAPACITY = 100.0


def make_input(
    topics: int, partitions_per_topic: int, members: int, seed: int
) -> tuple[dict[TopicPartition, float], Assignment, list[str]]:
    """Drifted speeds, the previous assignment, and the member ids.

    Mean demand is ~85 % of the members' capacity, so the group is neither idle nor short.
    """
    rng = random.Random(seed)
    ids = [f"member-{i:03d}" for i in range(members)]
    total = topics * partitions_per_topic
    mean = 0.85 * members * CAPACITY / total
    first = {
        TopicPartition(f"topic-{t}", p): rng.uniform(0, 2 * mean)
        for t in range(topics)
        for p in range(partitions_per_topic)
    }
    previous = get_heuristic(DEFAULT_HEURISTIC).assign(first, capacity=CAPACITY, members=ids)
    drifted = {tp: max(0.0, s * (1 + rng.uniform(-0.2, 0.2))) for tp, s in first.items()}
    return drifted, previous, ids


def time_runs(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds over ``repeats`` calls, and the last result."""
    durations = []
    result: Any = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations), result


class _Cluster:
    """The slice of aiokafka's ClusterMetadata its sticky assignor reads."""

    def __init__(self, speeds: dict[TopicPartition, float]) -> None:
        self._partitions: dict[str, set[int]] = {}
        for tp in speeds:
            self._partitions.setdefault(tp.topic, set()).add(tp.partition)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._partitions.get(topic)

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self._partitions)


def aiokafka_sticky(
    speeds: dict[TopicPartition, float], previous: Assignment, ids: list[str]
) -> Callable[[], Assignment]:
    """A call running aiokafka's StickyPartitionAssignor on the same input."""
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
        StickyAssignorUserDataV1,
        StickyPartitionAssignor,
    )
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

    topics = sorted({tp.topic for tp in speeds})
    owned: dict[str, dict[str, list[int]]] = {m: {} for m in ids}
    for tp, member in previous.items():
        owned[member].setdefault(tp.topic, []).append(tp.partition)
    metadata = {
        m: ConsumerProtocolMemberMetadata(
            StickyPartitionAssignor.version,
            topics,
            StickyAssignorUserDataV1(list(owned[m].items()), 1).encode(),
        )
        for m in ids
    }
    cluster = _Cluster(speeds)

    def run() -> Assignment:
        result = StickyPartitionAssignor.assign(cluster, metadata)
        return {
            TopicPartition(topic, p): member
            for member, assignment in result.items()
            for topic, partitions in assignment.assignment
            for p in partitions
        }

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/latency.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=1000)
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--aiokafka-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    speeds, previous, ids = make_input(
        args.topics, args.partitions_per_topic, args.members, args.seed
    )
    rows: list[dict[str, Any]] = []

    def record(name: str, seconds: float, result: Assignment) -> None:
        rows.append(
            {
                "heuristic": name,
                "median_ms": seconds * 1000,
                "bins": bins_used(result),
                "rscore": rscore(previous, result, speeds, CAPACITY),
            }
        )
        print(f"{name:>16}: {seconds * 1000:10.1f} ms", flush=True)

    for name in HEURISTIC_NAMES:
        call = functools.partial(
            get_heuristic(name).assign, speeds, capacity=CAPACITY, previous=previous, members=ids
        )
        seconds, result = time_runs(call, args.repeats)
        record(name, seconds, result)
    seconds, result = time_runs(aiokafka_sticky(speeds, previous, ids), args.aiokafka_repeats)
    record("aiokafka-sticky", seconds, result)

    ours = next(r for r in rows if r["heuristic"] == DEFAULT_HEURISTIC)
    theirs = rows[-1]
    speedup = theirs["median_ms"] / ours["median_ms"]
    lines = [
        f"# assign() latency: {len(speeds)} partitions over {args.topics} topics, "
        f"{len(ids)} members, previous given, speeds drifted ±20 %",
        "",
        machine_line(),
        f"Median of {args.repeats} runs ({args.aiokafka_repeats} for aiokafka), seed {args.seed}.",
        "",
        "| heuristic | median ms | consumers used | Rscore |",
        "|---|---:|---:|---:|",
    ]
    for row in sorted(rows, key=lambda r: r["median_ms"]):
        mark = " **(default)**" if row["heuristic"] == DEFAULT_HEURISTIC else ""
        lines.append(
            f"| {row['heuristic']}{mark} | {row['median_ms']:.1f} | {row['bins']} | "
            f"{row['rscore']:.2f} |"
        )
    lines += [
        "",
        f"Default heuristic ({DEFAULT_HEURISTIC}) is {speedup:.0f}x faster than "
        "aiokafka's StickyPartitionAssignor on the same input.",
    ]
    publish(
        "latency",
        "\n".join(lines),
        {"args": vars(args), "rows": rows, "speedup_vs_aiokafka_sticky": speedup},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
