"""Where the demo's lag sits: table commits per phase of a demo run, beside the lag.

The consumers commit offsets after the table commit, so the lag the sidecar shows includes
every record still in a consumer's pipeline: the batch filling and the batch being written.
At a steady arrival rate that part is at most about rate x 2 x (seconds per table commit)
with one write in flight, whatever the number of consumers; what is above it is backlog.

This reads a finished demo run (its ``samples.json`` and ``sidecar.log``) and reports, per
third of the run (before, during and after the step up), the table commits the consumers
made (how many a second, rows each, seconds each) beside the lag, and that estimate of the
pipeline's share.

``python -m benchmarks.demo_pipeline RUN_DIR [RUN_DIR ...] [--name NAME]`` (run dirs from
``python -m examples.demo --output DIR``; needs samples taken at this version, which carry
the wall-clock time ``at``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish

# "2026-11-25 20:59:08,007 [sink-1] consumer_sdk.lake.lake_writer demo-orders: appended 232
# row(s) and 0 dead letter(s) in 0.97 s (...)"
_COMMIT = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[(?P<member>[^\]]+)\] "
    r"consumer_sdk\.lake\.lake_writer (?P<topic>\S+): appended (?P<rows>\d+) row\(s\) and "
    r"(?P<dead>\d+) dead letter\(s\) in (?P<seconds>[\d.]+) s"
)
PHASES = ("before the step", "step up", "after the step")


@dataclass(frozen=True)
class TableCommit:
    """One table commit a consumer logged: when it ended (epoch seconds), its rows and how
    long it took."""

    at: float
    member: str
    topic: str
    rows: int
    seconds: float


def table_commits(lines: Iterable[str]) -> list[TableCommit]:
    """The table commits in a sidecar log (its consumers' lines; timestamps in local time,
    as Python's logging writes them)."""
    found = []
    for line in lines:
        match = _COMMIT.match(line)
        if match is None:
            continue
        at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        rows = int(match["rows"]) + int(match["dead"])
        found.append(
            TableCommit(at, match["member"], match["topic"], rows, float(match["seconds"]))
        )
    return found


def phase_summary(
    samples: Sequence[dict[str, float]], commits: Sequence[TableCommit], duration_s: float
) -> list[dict[str, Any]]:
    """Per third of the load (the demo's walk steps up in the second), what the samples and
    the commits ending in it show. ``samples`` carry ``t`` (seconds of load) and ``at``
    (epoch seconds)."""
    if not samples:
        return []
    origin = samples[0]["at"] - samples[0]["t"]
    rows = []
    for index, name in enumerate(PHASES):
        start, end = duration_s * index / 3, duration_s * (index + 1) / 3
        inside = [s for s in samples if start <= s["t"] < end]
        done = [c for c in commits if start <= c.at - origin < end]
        if not inside:
            continue
        span = end - start
        rate = statistics.fmean(s["rate"] for s in inside)
        seconds = statistics.fmean(c.seconds for c in done) if done else 0.0
        rows.append(
            {
                "phase": name,
                "from_s": start,
                "to_s": end,
                "arrivals_per_s": rate,
                "consumers": statistics.fmean(s["running"] for s in inside),
                "lag_mean": statistics.fmean(s["lag"] for s in inside),
                "lag_last": inside[-1]["lag"],
                "commits_per_s": len(done) / span,
                "rows_per_commit": statistics.fmean(c.rows for c in done) if done else 0.0,
                "commit_s": seconds,
                "rows_per_s": sum(c.rows for c in done) / span,
                # a batch fills while the one before it is written (one write in flight):
                # just before a write lands, a consumer holds that batch and the next one,
                # about two writes' worth of arrivals
                "pipeline_lag": rate * 2 * seconds,
            }
        )
    return rows


def report(runs: Sequence[tuple[str, list[dict[str, Any]]]]) -> str:
    """One markdown table, a row per phase of each run."""
    lines = [
        "| run | phase | arrivals/s | consumers | lag mean | lag at end | commits/s | "
        "rows/commit | s/commit | rows/s landed | "
        "in the pipelines, at most (rate x 2 x s/commit) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, phases in runs:
        for p in phases:
            lines.append(
                f"| {name} | {p['phase']} ({p['from_s']:.0f}-{p['to_s']:.0f} s) | "
                f"{p['arrivals_per_s']:,.0f} | {p['consumers']:.1f} | {p['lag_mean']:,.0f} | "
                f"{p['lag_last']:,.0f} | {p['commits_per_s']:.1f} | "
                f"{p['rows_per_commit']:,.0f} | {p['commit_s']:.2f} | {p['rows_per_s']:,.0f} | "
                f"{p['pipeline_lag']:,.0f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Report on finished demo runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="demo output directories")
    parser.add_argument("--duration", type=float, default=60.0, help="the runs' --duration")
    parser.add_argument("--name", default="", help="write results/<name>.{md,json}")
    parser.add_argument("--note", default="", help="a line on the runs (their code, command)")
    args = parser.parse_args(argv)
    runs = []
    for run in args.runs:
        samples = json.loads((run / "samples.json").read_text())
        if not samples or "at" not in samples[0]:
            parser.error(f"{run}: samples.json has no 'at' (made before this version)")
        with (run / "sidecar.log").open() as log:
            commits = table_commits(log)
        runs.append((run.name, phase_summary(samples, commits, args.duration)))
    title = "# Where the demo's lag sits: table commits per third of the run"
    header = "\n\n".join(line for line in (title, machine_line(), args.note) if line)
    publish(
        args.name or "demo_pipeline",
        header + "\n\n" + report(runs),
        {"runs": [{"run": name, "phases": phases} for name, phases in runs]},
        write=bool(args.name),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
