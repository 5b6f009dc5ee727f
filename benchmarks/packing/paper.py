"""Reproduce the paper's experiment: every heuristic on the paper's streams.

Per delta and heuristic: mean bins / lower bound, CBS (over the compared set) and mean
Rscore; a markdown table, JSON, and a Pareto-front PNG per delta (bins vs Rscore) with the
headroom curve of our heuristic. ``python -m benchmarks.packing.paper`` (``--quick`` for a
short run).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from assignor import (
    DEFAULT_HEURISTIC,
    HEURISTIC_NAMES,
    Heuristic,
    Repair,
    bins_used,
    cbs,
    get_heuristic,
    lower_bound,
    rscore,
)
from assignor.types import Assignment
from benchmarks.support.machine import machine_line
from benchmarks.support.report import RESULTS, publish
from benchmarks.support.streams import Measurement, paper_stream

CAPACITY = 100.0
DELTAS = (0, 5, 10, 15, 20, 25)
HEADROOMS = (0.02, 0.05, 0.1, 0.15, 0.2)
CBS_SHOWN = 0.3


@dataclass
class Row:
    """One heuristic on one stream."""

    delta: int
    heuristic: str
    bins_ratio: float
    cbs: float
    mean_rscore: float
    mean_bins: float


def run_stream(
    heuristic: Heuristic, stream: Sequence[Measurement]
) -> tuple[list[int], list[float]]:
    """Bins and Rscore of each measurement, each round starting from the last one's result."""
    previous: Assignment = {}
    bins: list[int] = []
    scores: list[float] = []
    for speeds in stream:
        new = heuristic.assign(speeds, capacity=CAPACITY, previous=previous)
        bins.append(bins_used(new))
        scores.append(rscore(previous, new, speeds, CAPACITY))
        previous = new
    return bins, scores


def knob_heuristics() -> list[Heuristic]:
    """Our heuristic at several headroom settings (the curve on the Pareto plot)."""
    return [Repair(name=f"repair-h{round(h * 100)}", headroom=h) for h in HEADROOMS]


def evaluate(partitions: int, measurements: int, deltas: Sequence[int], seed: int) -> list[Row]:
    """Run every heuristic and knob setting on one stream per delta."""
    rows: list[Row] = []
    heuristics = [get_heuristic(n) for n in HEURISTIC_NAMES] + knob_heuristics()
    for delta in deltas:
        stream = paper_stream(partitions, measurements, delta, CAPACITY, seed + delta)
        bounds = [lower_bound(m, CAPACITY) for m in stream]
        bins: dict[str, list[int]] = {}
        scores: dict[str, list[float]] = {}
        for heuristic in heuristics:
            bins[heuristic.name], scores[heuristic.name] = run_stream(heuristic, stream)
        # CBS is over the paper's compared set plus ours at its default setting.
        cbs_all = cbs({n: bins[n] for n in HEURISTIC_NAMES})
        cbs_knob = {
            h.name: cbs({**{n: bins[n] for n in HEURISTIC_NAMES}, h.name: bins[h.name]})[h.name]
            for h in knob_heuristics()
        }
        for heuristic in heuristics:
            name = heuristic.name
            series = bins[name]
            rows.append(
                Row(
                    delta=delta,
                    heuristic=name,
                    bins_ratio=sum(b / lb for b, lb in zip(series, bounds, strict=True))
                    / len(series),
                    cbs={**cbs_all, **cbs_knob}[name],
                    mean_rscore=sum(scores[name]) / len(scores[name]),
                    mean_bins=sum(series) / len(series),
                )
            )
    return rows


def markdown(rows: Sequence[Row], header: str) -> str:
    """One table per delta, sorted by CBS then Rscore."""
    lines = [header, ""]
    for delta in sorted({r.delta for r in rows}):
        lines += [
            f"### delta = {delta}",
            "",
            "| heuristic | mean bins / lower bound | CBS | mean Rscore | mean bins |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in sorted(
            (r for r in rows if r.delta == delta), key=lambda r: (r.cbs, r.mean_rscore)
        ):
            mark = " **(default)**" if r.heuristic == DEFAULT_HEURISTIC else ""
            lines.append(
                f"| {r.heuristic}{mark} | {r.bins_ratio:.4f} | {r.cbs:.4f} | "
                f"{r.mean_rscore:.4f} | {r.mean_bins:.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


def _draw_panel(ax: Any, rows: Sequence[Row], delta: int) -> None:
    """One delta: CBS vs mean Rscore (like the paper's Fig. 9), our headroom curve as a line,
    algorithms far off the chart listed in the title."""
    subset = [r for r in rows if r.delta == delta]
    near = [r for r in subset if r.cbs <= CBS_SHOWN]
    x_max = 1.1 * max(r.mean_rscore for r in near)
    for r in near:
        if r.heuristic.startswith("repair-h") or r.mean_rscore > x_max:
            continue
        ours = r.heuristic == DEFAULT_HEURISTIC
        colour = "tab:red" if ours else ("tab:blue" if r.heuristic[0] == "m" else "tab:gray")
        ax.scatter(r.mean_rscore, r.cbs, color=colour, s=30 if ours else 18, zorder=3)
        ax.annotate(
            r.heuristic,
            (r.mean_rscore, r.cbs),
            fontsize=8,
            xytext=(3, 3),
            textcoords="offset points",
        )
    curve = sorted(
        (r for r in subset if r.heuristic.startswith("repair")), key=lambda r: r.mean_rscore
    )
    ax.plot(
        [r.mean_rscore for r in curve],
        [r.cbs for r in curve],
        "-o",
        color="tab:red",
        ms=3,
        lw=1,
        label="repair, headroom 0, 2, 5, 10, 15, 20 %",
    )
    far = sorted(r.heuristic for r in subset if r.cbs > CBS_SHOWN or r.mean_rscore > x_max)
    ax.set_title(
        f"delta = {delta}" + (f"   (off chart: {', '.join(far)})" if far else ""), fontsize=10
    )
    ax.set_xlim(0, x_max)
    ax.set_ylim(-0.005, CBS_SHOWN)
    ax.set_xlabel("mean Rscore per measurement (lower is better)")
    ax.set_ylabel("CBS (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")


def plot(rows: Sequence[Row], directory: Path) -> None:
    """The Pareto plot ``paper_pareto.png``: one panel per delta > 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deltas = sorted({r.delta for r in rows if r.delta > 0})
    columns = 3
    fig, axes = plt.subplots(
        (len(deltas) + columns - 1) // columns, columns, figsize=(15, 9.5), squeeze=False
    )
    for ax, delta in zip(axes.flat, deltas, strict=False):
        _draw_panel(ax, rows, delta)
    for ax in list(axes.flat)[len(deltas) :]:
        ax.set_visible(False)
    fig.suptitle("Paper streams: consumers (CBS) vs disruption (Rscore); red = ours", fontsize=12)
    fig.tight_layout()
    fig.savefig(directory / "paper_pareto.png", dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write results (or print only, with --quick)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--measurements", type=int, default=500)
    parser.add_argument("--seed", type=int, default=20260422)
    parser.add_argument("--quick", action="store_true", help="P=40, N=60, print only")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from paper.json")
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads((RESULTS / "paper.json").read_text())
        plot([Row(**r) for r in data["rows"]], RESULTS)
        return 0
    if args.quick:
        args.partitions, args.measurements = 40, 60
    rows = evaluate(args.partitions, args.measurements, DELTAS, args.seed)
    header = (
        f"# Paper reproduction: P = {args.partitions}, N = {args.measurements}, "
        f"C = {CAPACITY:g}, seed {args.seed}\n\n{machine_line()}"
    )
    data = {
        "partitions": args.partitions,
        "measurements": args.measurements,
        "seed": args.seed,
        "rows": [asdict(r) for r in rows],
    }
    publish("paper", markdown(rows, header), data, write=not args.quick)
    if not args.quick:
        plot(rows, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
