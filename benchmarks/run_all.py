"""``make bench``: every benchmark, one after another (not in parallel: timings are noisy
enough on shared machines). Results land in benchmarks/results/."""

from __future__ import annotations

from types import ModuleType

from benchmarks import (
    consume_throughput,
    cooperative_rebalance,
    delta_commit_cost,
    embedded_memory,
    latency,
    sidecar_cycle,
    simulate,
    spark_sink,
)
from benchmarks.lake import freshness
from benchmarks.packing import paper, planner_scale, rack_packing
from benchmarks.share_groups import __main__ as share_groups
from benchmarks.share_groups import table_kills as share_table_kills


def main() -> int:
    """Run all benchmarks; non-zero if any failed."""
    status = 0
    runs: list[tuple[ModuleType, list[str]]] = [
        (module, [])
        for module in (
            paper,
            latency,
            planner_scale,
            rack_packing,
            embedded_memory,
            consume_throughput,
            spark_sink,
            freshness,
        )
    ]
    runs.append((freshness, ["--runs", ",".join(freshness.PEER_RUNS)]))
    runs += [
        (module, [])
        for module in (
            delta_commit_cost,
            cooperative_rebalance,
            sidecar_cycle,
            simulate,
            share_groups,
            share_table_kills,
        )
    ]
    for module, argv in runs:
        print(f"== {module.__name__} {' '.join(argv)}".rstrip(), flush=True)
        status |= module.main(argv)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
