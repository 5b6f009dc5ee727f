"""CPU of one sidecar cycle at 1k and 10k partitions: speed windows (30 samples each),
the snapshot (built, encoded, validated), and the controller's plan with the default
heuristic. Offsets are synthetic, so only our own work is measured, not Kafka round trips.
``python -m benchmarks.sidecar_cycle``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence

from assignor import DEFAULT_HEURISTIC, TopicPartition
from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from contract.snapshot import PartitionStat, Snapshot, decode
from sidecar.controller import Controller, ControllerConfig, Observation
from sidecar.speed import SpeedTracker

WINDOW_SAMPLES = 30


def cycle_costs(partitions: int, cycles: int, seed: int) -> dict[str, float]:
    """Median CPU milliseconds per cycle of each stage, after the window has filled."""
    rng = random.Random(seed)
    tps = [TopicPartition(f"topic-{i % 10}", i // 10) for i in range(partitions)]
    rates = {tp: rng.uniform(0, 200) for tp in tps}
    offsets = dict.fromkeys(tps, 0)
    tracker = SpeedTracker(window_s=WINDOW_SAMPLES, min_span_s=3)
    capacity = 2000.0
    clock = [0.0]
    controller = Controller(ControllerConfig(capacity=capacity), lambda: clock[0])
    controller.synchronise(1)
    costs: dict[str, list[float]] = {"observe": [], "speeds": [], "snapshot": [], "controller": []}
    for step in range(WINDOW_SAMPLES + cycles):
        clock[0] = float(step)
        for tp in tps:
            offsets[tp] += int(rates[tp] * rng.uniform(0.8, 1.2))
        t0 = time.process_time()
        tracker.observe(clock[0], offsets)
        t1 = time.process_time()
        speeds = tracker.speeds()
        t2 = time.process_time()
        snapshot = Snapshot(
            "g",
            step,
            0.0,
            "records/s",
            {tp: PartitionStat(s, 0.0, offsets[tp]) for tp, s in speeds.items()},
        )
        decode(snapshot.encode())
        t3 = time.process_time()
        controller.step(Observation(clock[0], speeds))
        t4 = time.process_time()
        if step >= WINDOW_SAMPLES:
            for name, cost in zip(costs, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                costs[name].append(cost * 1000)
    result = {name: statistics.median(values) for name, values in costs.items()}
    result["total"] = sum(result.values())
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/sidecar_cycle.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for partitions in (1000, 10000):
        costs = cycle_costs(partitions, args.cycles, args.seed)
        rows.append({"partitions": partitions, **costs})
        print(partitions, {k: round(v, 1) for k, v in costs.items()}, flush=True)
    lines = [
        "# Sidecar CPU per cycle (median ms of process time)",
        "",
        machine_line(),
        f"{WINDOW_SAMPLES}-sample speed windows, default heuristic ({DEFAULT_HEURISTIC}), "
        f"median of {args.cycles} cycles after the window filled, seed {args.seed}. Kafka "
        "round trips are not included (they are I/O, not our CPU).",
        "",
        "| partitions | observe | speeds | snapshot | controller | total ms | CPU at 1 s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['partitions']} | {r['observe']:.1f} | {r['speeds']:.1f} | "
            f"{r['snapshot']:.1f} | {r['controller']:.1f} | {r['total']:.1f} | "
            f"{r['total'] / 10:.1f} % |"
        )
    publish(
        "sidecar_cycle",
        "\n".join(lines),
        {"args": vars(args), "rows": rows},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
