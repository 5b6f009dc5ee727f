"""Rack-aware packing on the paper's streams: cross-rack bytes, consumers and Rscore.

Three racks; each partition's leader drawn at random (seeded). Two fetch modes: from the
leader only (a partition is local to one rack) and from followers (KIP-392) with replication
factor 2 (local to two of the three; with RF 3 over three racks every rack holds a replica,
every fetch stays local and rack-awareness has nothing to do). Rows per mode:

* sizing (the sidecar's call, consumers opened as needed): the rack-blind repair, its
  consumers spread over the racks in turn (a zone-spread workload), against the greedy
  rack-aware repair and the same with min-cost-flow targets;
* members (the group's plugin, a fixed group spread over the racks): the same three.

Then the plan's time at 10,000 partitions and 200 members. Targets (issue 54): cross-rack
<= 10 % of bytes, at most one consumer more than rack-blind, mean Rscore within 1.1x, and
the 10,000 x 200 plan in <= 100 ms. ``python -m benchmarks.packing.rack_packing`` writes
``results/rack_packing.{md,json}``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from assignor import Repair, TopicPartition, bins_used, rscore
from assignor.racks import RackAwareRepair, RackLayout, cross_rack_share, flow_targets
from assignor.types import Assignment
from assignor.validation import make_problem
from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from benchmarks.support.streams import Measurement, paper_stream

CAPACITY = 100.0
RACKS = ("a", "b", "c")
FETCH_MODES = {"leader only": 1, "followers, RF 2": 2}
TARGET_CROSS, TARGET_EXTRA_CONSUMERS, TARGET_RSCORE_RATIO, TARGET_PLAN_S = 0.10, 1.0, 1.1, 0.1
Racks = dict[TopicPartition, frozenset[str]]
PlanResult = tuple[Assignment, dict[str, str], bool]
"""The assignment, its consumers' racks, and whether the plan fell back to rack-blind."""
Plan = Callable[[Measurement, Assignment, dict[str, str]], PlanResult]


def draw_racks(tps: Sequence[TopicPartition], local: int, seed: int) -> Racks:
    """Each partition local to ``local`` of the racks, drawn at random."""
    rng = random.Random(seed)
    return {tp: frozenset(rng.sample(RACKS, local)) for tp in tps}


def spread(consumers: Sequence[str]) -> dict[str, str]:
    """Consumers over the racks in turn (sorted, so the same ids get the same racks)."""
    return {c: RACKS[i % len(RACKS)] for i, c in enumerate(sorted(consumers))}


def planners(racks: Racks, members: Sequence[str] | None) -> dict[str, Plan]:
    """The three contenders as functions of (speeds, previous, consumer racks)."""
    blind = Repair()
    member_racks = spread(members) if members is not None else {}

    def rack_blind(speeds: Measurement, previous: Assignment, _: dict[str, str]) -> PlanResult:
        new = blind.assign(speeds, capacity=CAPACITY, previous=previous, members=members)
        if members is not None:
            return new, member_racks, False
        return new, {c: RACKS[int(c[1:]) % len(RACKS)] for c in set(new.values())}, False

    def aware(heuristic: RackAwareRepair) -> Plan:
        def plan(speeds: Measurement, previous: Assignment, known: dict[str, str]) -> PlanResult:
            layout = RackLayout(racks, member_racks if members is not None else known)
            result = heuristic.plan(
                speeds, capacity=CAPACITY, layout=layout, previous=previous, members=members
            )
            return result.assignment, result.consumer_racks, result.fallback is not None

        return plan

    return {
        "rack-blind repair": rack_blind,
        "rack-aware greedy": aware(RackAwareRepair()),
        "rack-aware flow": aware(RackAwareRepair("rack-flow", targets=flow_targets)),
    }


def run_stream(
    plan: Plan, stream: Sequence[Measurement], racks: Racks, check_budget: bool
) -> dict[str, float]:
    """Mean consumers, cross-rack share and Rscore of one planner over a stream; with
    ``check_budget`` also the most it ever used above the rack-blind repair from the same
    state."""
    previous: Assignment = {}
    known: dict[str, str] = {}
    bins, cross, scores, over = [], [], [], []
    fallbacks = 0
    for speeds in stream:
        if check_budget:
            problem = make_problem(speeds, CAPACITY, previous, None, None)
            over_base = bins_used(Repair().pack(problem, None))
        new, known, fell_back = plan(speeds, previous, known)
        fallbacks += fell_back
        bins.append(bins_used(new))
        cross.append(cross_rack_share(new, speeds, known, racks))
        scores.append(rscore(previous, new, speeds, CAPACITY))
        if check_budget:
            over.append(bins[-1] - over_base)
        previous = new
    return {
        "consumers": statistics.fmean(bins),
        "cross_share": statistics.fmean(cross),
        "rscore": statistics.fmean(scores),
        "most_above_blind_same_state": max(over) if over else 0,
        "rack_blind_rounds": fallbacks / len(stream),
    }


def quality(
    partitions: int, measurements: int, delta: float, seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """Every fetch mode x group mode x planner, averaged over ``seeds``."""
    rows: list[dict[str, Any]] = []
    for mode, local in FETCH_MODES.items():
        for group in ("sizing", "members"):
            per: dict[str, list[dict[str, float]]] = {}
            for seed in seeds:
                stream = paper_stream(partitions, measurements, delta, CAPACITY, seed)
                racks = draw_racks(sorted(stream[0]), local, seed + 1)
                members = None
                if group == "members":  # the rack-blind sizing's peak, plus one
                    peak = max(bins_used(Repair().assign(s, capacity=CAPACITY)) for s in stream)
                    members = [f"m{i}" for i in range(peak + 1)]
                for name, plan in planners(racks, members).items():
                    check = group == "sizing" and name != "rack-blind repair"
                    per.setdefault(name, []).append(run_stream(plan, stream, racks, check))
            base = per["rack-blind repair"]
            for name, results in per.items():
                row: dict[str, Any] = {"fetch": mode, "group": group, "planner": name}
                for key in results[0]:
                    row[key] = statistics.fmean(r[key] for r in results)
                row["most_above_blind_same_state"] = max(
                    r["most_above_blind_same_state"] for r in results
                )
                row["extra_consumers"] = row["consumers"] - statistics.fmean(
                    b["consumers"] for b in base
                )
                row["rscore_ratio"] = row["rscore"] / statistics.fmean(b["rscore"] for b in base)
                rows.append(row)
                print(
                    f"{mode} / {group} / {name}: {row['consumers']:.2f} consumers, "
                    f"cross {row['cross_share']:.1%}, Rscore {row['rscore']:.3f}",
                    flush=True,
                )
    return rows


def timing(partitions: int, members: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    """Median plan time with ``members`` fixed members, fresh and after a drift of +-5 % of
    the speeds' top with the previous plan given (speeds uniform up to 0.9 * members * C *
    2 / partitions: about 90 % of the members' capacity)."""
    rng = random.Random(seed)
    top = 0.9 * members * CAPACITY * 2 / partitions
    tps = [TopicPartition(f"t{i % 10}", i // 10) for i in range(partitions)]
    speeds = {tp: rng.uniform(0.0, top) for tp in tps}
    drifted = {tp: max(0.0, s + rng.uniform(-0.05, 0.05) * top) for tp, s in speeds.items()}
    racks = draw_racks(tps, 1, seed + 1)
    ids = [f"m{i}" for i in range(members)]
    rows: list[dict[str, Any]] = []
    for name, plan in planners(racks, ids).items():
        fresh, replan = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            first, known, _ = plan(speeds, {}, {})
            fresh.append(time.perf_counter() - started)
            started = time.perf_counter()
            plan(drifted, first, known)
            replan.append(time.perf_counter() - started)
        rows.append(
            {
                "planner": name,
                "partitions": partitions,
                "members": members,
                "fresh_s": statistics.median(fresh),
                "replan_s": statistics.median(replan),
            }
        )
        print(f"timing {name}: {rows[-1]['fresh_s'] * 1000:.0f} ms", flush=True)
    return rows


def render(
    quality_rows: list[dict[str, Any]], timing_rows: list[dict[str, Any]], args: argparse.Namespace
) -> str:
    """The results page."""
    seeds = ", ".join(map(str, args.seeds))
    lines = [
        f"# Rack-aware packing: P = {args.partitions}, N = {args.measurements}, "
        f"delta = {args.delta:g}, C = {CAPACITY:g}, three racks, seeds {seeds}",
        "",
        machine_line(),
        "",
        "Sizing: consumers opened as needed, each rack-aware one in the rack that needs it "
        "(the rack-blind repair's spread over the racks in turn). Members: a fixed group of "
        "the rack-blind peak + 1, spread over the racks in turn whatever each rack's demand; "
        "'consumers' there counts the members holding partitions (the group's size is the "
        "same for all three). 'above blind, same state': the most consumers a round used "
        "above the rack-blind repair started from the same previous assignment.",
        "",
        "| fetch | group | planner | consumers | vs rack-blind | above blind, same state "
        "| rounds fallen back to rack-blind | cross-rack bytes | mean Rscore "
        "| Rscore / rack-blind |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in quality_rows:
        lines.append(
            f"| {r['fetch']} | {r['group']} | {r['planner']} | {r['consumers']:.2f} | "
            f"{r['extra_consumers']:+.2f} | {r['most_above_blind_same_state']:.0f} | "
            f"{r['rack_blind_rounds']:.1%} | "
            f"{r['cross_share']:.1%} | {r['rscore']:.3f} | {r['rscore_ratio']:.2f}x |"
        )
    lines += [
        "",
        "## Plan time (median of repeats)",
        "",
        "| planner | partitions | members | fresh plan (ms) | re-plan after drift (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in timing_rows:
        lines.append(
            f"| {r['planner']} | {r['partitions']:,} | {r['members']} | "
            f"{r['fresh_s'] * 1000:.1f} | {r['replan_s'] * 1000:.1f} |"
        )
    # The targets hold where each rack's consumers have room: the sizing rows, where the
    # plan opens consumers in the racks that need them.
    aware = [
        r for r in quality_rows if r["planner"] != "rack-blind repair" and r["group"] == "sizing"
    ]
    verdicts = [
        ("cross-rack bytes <= 10 %", max(r["cross_share"] for r in aware), TARGET_CROSS),
        (
            "consumers above rack-blind <= 1",
            max(r["extra_consumers"] for r in aware),
            TARGET_EXTRA_CONSUMERS,
        ),
        (
            "mean Rscore / rack-blind <= 1.1",
            max(r["rscore_ratio"] for r in aware),
            TARGET_RSCORE_RATIO,
        ),
        (
            "10,000 x 200 plan <= 100 ms",
            max(
                max(r["fresh_s"], r["replan_s"])
                for r in timing_rows
                if r["planner"] != "rack-blind repair"
            ),
            TARGET_PLAN_S,
        ),
    ]
    lines += ["", "## Targets (worst rack-aware sizing row; the plan time of either)", ""]
    for label, worst, bound in verdicts:
        lines.append(f"- {label}: worst {worst:.3g}, {'met' if worst <= bound else 'MISSED'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the quality streams and the timing; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--measurements", type=int, default=300)
    parser.add_argument("--delta", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[20261203, 20261204, 20261205])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    quality_rows = quality(args.partitions, args.measurements, args.delta, args.seeds)
    timing_rows = timing(10_000, 200, args.repeats, args.seeds[0])
    table = render(quality_rows, timing_rows, args)
    publish(
        "rack_packing",
        table,
        {"quality": quality_rows, "timing": timing_rows, "args": vars(args)},
        write=not args.no_write,
    )
    return 0 if "MISSED" not in table else 1


if __name__ == "__main__":
    raise SystemExit(main())
