"""``make bench-headline``: the benchmarks behind the README's headline figures, re-run on the
code as it is, one after another, on Apache Kafka: partition pause through scale events,
consume throughput, the Spark sink against Spark alone and Structured Streaming, and one
consumer's memory. Each writes its usual results file (its first lines name the machine,
the broker and the code commit); ``results/headline.md`` lists them with how long each took.

Run it before a stop whose change touches what they measure. Settings are chosen so the
whole set takes at most 30 minutes on a 2-core machine; ``--only`` runs a subset by name.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks import consume_throughput, consumer_memory, cooperative_rebalance, spark_sink
from benchmarks.machine import machine_line
from benchmarks.report import RESULTS

BUDGET_S = 30 * 60


@dataclass(frozen=True)
class Headline:
    """One benchmark of the set: its name, entry point, arguments and results file."""

    name: str
    run: Callable[[Sequence[str] | None], int]
    argv: tuple[str, ...]
    results: str


HEADLINES = (
    Headline(
        "pause",
        cooperative_rebalance.main,
        ("--cluster", "apache", "--repeats", "3"),
        "cooperative_rebalance_apache.md",
    ),
    Headline(
        "consume-throughput",
        consume_throughput.main,
        ("--cluster", "apache", "--rounds", "3", "--compression", "none,lz4,zstd"),
        "consume_throughput_apache.md",
    ),
    Headline(
        "spark-sink",
        spark_sink.main,
        (
            "--cluster",
            "apache",
            "--mib",
            "64",
            "--rounds",
            "1",
            "--value-sizes",
            "1024",
            "--formats",
            "delta,iceberg",
            "--no-record-path",
        ),
        "spark_sink_apache.md",
    ),
    Headline(
        "memory",
        consumer_memory.main,
        (
            "--cluster",
            "apache",
            "--mib",
            "64",
            "--paths",
            "columns",
            "--allocators",
            "mmap threshold pinned at start (the consumer program's default),default",
        ),
        "consumer_memory_apache.md",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the headline set (or ``--only`` some of it); non-zero if any failed or the set
    ran over its budget."""
    names = [h.name for h in HEADLINES]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=",".join(names), help="comma-separated subset")
    args = parser.parse_args(argv)
    chosen = [n for n in args.only.split(",") if n]
    if not chosen or any(n not in names for n in chosen):
        parser.error(f"--only: a comma-separated subset of {','.join(names)}")
    rows: list[tuple[Headline, int, float]] = []
    started = time.monotonic()
    for headline in HEADLINES:
        if headline.name not in chosen:
            continue
        print(f"== {headline.name}: python -m {headline.run.__module__}", flush=True)
        begun = time.monotonic()
        status = headline.run(list(headline.argv))
        rows.append((headline, status, time.monotonic() - begun))
    total = time.monotonic() - started
    lines = [
        "# Headline benchmarks",
        "",
        machine_line(),
        "",
        "| benchmark | command | results | exit | minutes |",
        "|---|---|---|---:|---:|",
    ]
    for headline, status, seconds in rows:
        command = f"python -m {headline.run.__module__} {' '.join(headline.argv)}"
        lines.append(
            f"| {headline.name} | `{command}` | [{headline.results}]({headline.results}) "
            f"| {status} | {seconds / 60:.1f} |"
        )
    within = "within" if total <= BUDGET_S else "OVER"
    lines += ["", f"Total: {total / 60:.1f} minutes ({within} the {BUDGET_S // 60}-minute budget)."]
    if set(chosen) == set(names):
        (RESULTS / "headline.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return int(any(status for _, status, _ in rows) or total > BUDGET_S)


if __name__ == "__main__":
    raise SystemExit(main())
