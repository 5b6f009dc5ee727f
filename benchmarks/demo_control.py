"""The demo's control loop, side by side: ``make demo``'s defaults (``--capacity auto``)
beside the same run sizing with the declared capacity (``--declared-capacity``).

Each run is ``python -m examples.demo --no-live`` on the embedded broker (its defaults: 150 s
of load sized to a 2-core machine, x2.5 in the middle third, one Spark Connect server every
consumer writes through);
the verdict comes from its per-second samples (``examples.demo_verdict``): the group's drain
by consumer count while a backlog waited, the peak count against what that drain says the
high phase needs (target: at most one more), the lag at the end of the high phase against its
peak in that phase (target: at most half), and every record landed once.

``python -m benchmarks.demo_control [--duration 150]`` writes ``results/demo_control.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from examples.demo_verdict import judge

ROOT = Path(__file__).parent.parent
RUNS: tuple[tuple[str, list[str]], ...] = (
    ("--capacity auto (the default)", []),
    ("declared 1000 records/s", ["--declared-capacity"]),
)


def run_demo(flags: Sequence[str], duration: float, seed: int) -> dict[str, Any]:
    """One demo run; its verdict, peak and what landed."""
    out = Path(tempfile.mkdtemp(prefix="demo-control-"))
    command = [sys.executable, "-m", "examples.demo", "--no-live", "--output", str(out)]
    command += ["--duration", str(duration), "--seed", str(seed), *flags]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    samples_path = next(out.glob("*/samples.json"))
    samples = json.loads(samples_path.read_text())
    verdict = judge(samples, duration)
    landed = [line for line in finished.stdout.splitlines() if "records produced" in line]
    return {
        "exit_code": finished.returncode,
        "landed": landed[-1].strip() if landed else "no summary line",
        "peak": verdict.peak,
        "drains": {str(n): round(d, 1) for n, d in sorted(verdict.drains.items())},
        "needed": verdict.needed,
        "best": verdict.best,
        "bound": verdict.bound,
        "high_rate": round(verdict.high_rate, 1),
        "high_peak_lag": verdict.high_peak_lag,
        "high_end_lag": verdict.high_end_lag,
        "verdict": verdict.lines(),
        "run_dir": str(samples_path.parent),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo both ways, one after the other, and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows = {name: run_demo(flags, args.duration, args.seed) for name, flags in RUNS}
    lines = [
        "# The demo's control loop: measured capacity beside the declared one",
        "",
        machine_line(),
        "Broker: the embedded broker (librdkafka's mock cluster, 3 brokers). Command: "
        f"`python -m examples.demo --no-live --duration {args.duration:g} --seed {args.seed}` "
        "(the defaults of `make demo`), and the same with `--declared-capacity`; one after "
        "the other. Drain: records produced minus the lag's growth, over the seconds a count "
        "held with more than 2,000 records of lag (the lag includes records in the consumers' "
        "batches, so a count that held only while the lag was low has no drain).",
        "",
        "| run | peak consumers | target (need + 1) | high-phase load (rec/s) | lag peak in high "
        "phase | lag at its end | landed |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['peak']} | {row['bound'] if row['bound'] is not None else '-'} | "
            f"{row['high_rate']:,.0f} | {row['high_peak_lag']:,.0f} | "
            f"{row['high_end_lag']:,.0f} | {row['landed']} |"
        )
    for name, row in rows.items():
        lines += ["", f"{name}:", *(f"- {line}" for line in row["verdict"])]
    publish("demo_control", "\n".join(lines), {"runs": rows}, write=not args.no_write)
    return 0 if all(row["exit_code"] == 0 for row in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
