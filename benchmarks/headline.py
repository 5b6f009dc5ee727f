"""``make bench-headline``: the benchmarks behind the README's headline figures, re-run on the
code as it is, one after another, on Apache Kafka: partition pause through scale events,
consume throughput, the Spark sink against Spark alone and Structured Streaming, and one
consumer's memory. Each writes its usual results file (its first lines name the machine,
the broker and the code commit); ``results/headline.md`` lists them with the commit each
measured and how long each took.

Run it before a stop whose change touches what they measure; ``--baseline REV`` adds the
columnar-path SDK of another commit to the throughput run, side by side; ``--trace DIR``
keeps the pause run's member logs (where each hand-over's time went). Settings are chosen so the
whole set takes at most 30 minutes on a 2-core machine; ``--only`` runs a subset by name
(its rows name the machine and the run they came from, so a set put together from several
runs says so instead of adding their minutes up as one); ``--render`` rewrites the page from
``results/headline.json`` alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import consume_throughput, consumer_memory, cooperative_rebalance, spark_sink
from benchmarks.support.machine import code_at_start, machine_info, require_committed_code
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
        "--render", action="store_true", help="rewrite headline.md from headline.json only"
    )
    parser.add_argument(
        "--trace",
        default="",
        help="a directory for the pause run's member logs and ownership events (its --trace)",
    )
    args = parser.parse_args(argv)
    index = RESULTS / "headline.json"
    if args.render:
        kept = {r["name"]: r for r in json.loads(index.read_text())["rows"]}
        return int(_write([kept[n] for n in names if n in kept]) > BUDGET_S / 60)
    require_committed_code()
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
    rows: dict[str, dict[str, Any]] = {}
    if index.exists() and set(chosen) != set(names):
        rows = {r["name"]: r for r in json.loads(index.read_text())["rows"]}
    failed = False
    this_run = machine_info()
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
            "command": f"python -m {headline.run.__module__} {shlex.join(argv_used)}",
            "results": headline.results,
            "exit": status,
            "minutes": round((time.monotonic() - begun) / 60, 2),
            "code": code_at_start(),
            "date_utc": machine_info()["date_utc"],
            "machine": f"{this_run['cpu']}, {this_run['cores']} cores",
            "run": this_run["date_utc"],
        }
    ordered = [rows[n] for n in names if n in rows]
    index.write_text(json.dumps({"rows": ordered}, indent=1) + "\n")
    return int(failed or _write(ordered) > BUDGET_S / 60)


_MACHINE_LINE = re.compile(r"^Machine: (.+?), Python [^;]+; run (.+?) UTC, code (\S+?)\.$", re.M)


def _measured(row: dict[str, Any]) -> tuple[str, str, str]:
    """The machine, code and time a row's results file names (what its figures are), else
    what the row recorded."""
    path = RESULTS / row["results"]
    found = _MACHINE_LINE.search(path.read_text()) if path.exists() else None
    if found is None:
        return row.get("machine", "?"), row["code"], row["date_utc"]
    return found.group(1), found.group(3), found.group(2)


def _write(ordered: Sequence[dict[str, Any]]) -> float:
    """Write ``results/headline.md`` for ``ordered``; the minutes of one whole run of the
    set (0 when its rows come from several runs: their sum is no run's time)."""
    runs = sorted({r["run"] for r in ordered})
    lines = [
        "# Headline benchmarks",
        "",
        "| benchmark | command | results | machine | code | ended (UTC) | exit | minutes |",
        "|---|---|---|---|---|---|---:|---:|",
    ]
    for r in ordered:
        machine, code, ended = _measured(r)
        lines.append(
            f"| {r['name']} | `{r['command']}` | [{r['results']}]({r['results']}) | {machine} "
            f"| {code} | {ended} | {r['exit']} | {r['minutes']:.1f} |"
        )
    total = float(sum(r["minutes"] for r in ordered))
    if len(runs) == 1 and len(ordered) == len(HEADLINES):
        within = "within" if total <= BUDGET_S / 60 else "OVER"
        lines += [
            "",
            f"One run of the set: {total:.1f} minutes ({within} the "
            f"{BUDGET_S // 60}-minute budget).",
        ]
    else:
        total = 0.0
        lines += [
            "",
            f"These rows come from {len(runs)} runs (`--only` re-runs): no whole run of "
            "the set is timed here.",
        ]
    (RESULTS / "headline.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return total


if __name__ == "__main__":
    raise SystemExit(main())
