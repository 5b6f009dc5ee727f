"""``make bench-headline``: the benchmarks behind the README's headline figures, re-run on the
code as it is, one after another, on Apache Kafka: partition pause through scale events,
consume throughput, the Spark sink against Spark alone and Structured Streaming, and one
consumer's memory. Each writes its usual results file (its first lines name the machine,
the broker and the code commit); ``results/headline.md`` lists them with the commit each
measured and how long each took.

Run it before a stop whose change touches what they measure; ``--baseline REV`` adds the
columnar-path SDK of another commit to the throughput run, side by side; ``--trace DIR``
keeps the pause run's member logs (where each hand-over's time went). Settings are chosen so the
whole set takes at most 30 minutes on a 2-core machine; ``--only`` runs a subset by name.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import consume_throughput, consumer_memory, cooperative_rebalance, spark_sink
from benchmarks.support.machine import code_at_start, machine_info, machine_line
from benchmarks.support.report import RESULTS
from consumer_sdk.records.native_decoder import native_available

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
    """Run the headline set (or ``--only`` some of it, whose rows replace theirs in
    ``results/headline.md``); non-zero if any failed or the set ran over its budget."""
    names = [h.name for h in HEADLINES]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=",".join(names), help="comma-separated subset")
    parser.add_argument(
        "--baseline",
        default="",
        help="a git revision whose columnar-path SDK the throughput run measures side by side",
    )
    parser.add_argument(
        "--trace",
        default="",
        help="a directory for the pause run's member logs and ownership events (its --trace)",
    )
    args = parser.parse_args(argv)
    chosen = [n for n in args.only.split(",") if n]
    if not chosen or any(n not in names for n in chosen):
        parser.error(f"--only: a comma-separated subset of {','.join(names)}")
    if not native_available():
        # A work tree made with `git worktree add` has no build output: its figures would
        # describe the pure-Python fallback, 2.5x slower, not the code users install.
        parser.error(
            "the native record decoder is not built beside consumer_sdk/records/: "
            "run `make jars` (it installs and builds it) in this checkout first"
        )
    index = RESULTS / "headline.json"
    rows: dict[str, dict[str, Any]] = {}
    if index.exists() and set(chosen) != set(names):
        rows = {r["name"]: r for r in json.loads(index.read_text())["rows"]}
    failed = False
    for headline in HEADLINES:
        if headline.name not in chosen:
            continue
        print(f"== {headline.name}: python -m {headline.run.__module__}", flush=True)
        begun = time.monotonic()
        argv_used = list(headline.argv)
        if args.baseline and headline.run is consume_throughput.main:
            argv_used += ["--baseline", args.baseline]
        if args.trace and headline.run is cooperative_rebalance.main:
            argv_used += ["--trace", args.trace]
        status = headline.run(argv_used)
        failed |= status != 0
        rows[headline.name] = {
            "name": headline.name,
            "command": f"python -m {headline.run.__module__} {' '.join(argv_used)}",
            "results": headline.results,
            "exit": status,
            "minutes": round((time.monotonic() - begun) / 60, 2),
            "code": code_at_start(),
            "date_utc": machine_info()["date_utc"],
        }
    ordered = [rows[n] for n in names if n in rows]
    total = sum(r["minutes"] for r in ordered)
    lines = [
        "# Headline benchmarks",
        "",
        machine_line(),
        "",
        "| benchmark | command | results | code | run (UTC) | exit | minutes |",
        "|---|---|---|---|---|---:|---:|",
    ]
    lines += [
        f"| {r['name']} | `{r['command']}` | [{r['results']}]({r['results']}) | {r['code']} "
        f"| {r['date_utc']} | {r['exit']} | {r['minutes']:.1f} |"
        for r in ordered
    ]
    within = "within" if total <= BUDGET_S / 60 else "OVER"
    lines += ["", f"Total: {total:.1f} minutes ({within} the {BUDGET_S // 60}-minute budget)."]
    index.write_text(json.dumps({"rows": ordered}, indent=1) + "\n")
    (RESULTS / "headline.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return int(failed or total > BUDGET_S / 60)


if __name__ == "__main__":
    raise SystemExit(main())
