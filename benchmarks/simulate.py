"""Our policy against KEDA-style scaling, in the simulator (sidecar.simulation), same traces.

Per trace: our default policy (the sidecar's defaults and heuristic), and KEDA-style over
lagThreshold 100..100,000 (log-spaced) with eager range and with cooperative-sticky
assignment. Target: every KEDA setting whose p99 lag is no worse than ours uses at least
1/0.6 of our consumer-seconds. Also a 10,000-partition run to show the simulator scales.
``python -m benchmarks.simulate``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from assignor import DEFAULT_HEURISTIC
from benchmarks.support.machine import machine_line
from benchmarks.support.report import RESULTS, publish
from sidecar.controller import ControllerConfig
from sidecar.simulation import (
    KedaPolicy,
    OurPolicy,
    Rates,
    Result,
    bursty,
    diurnal,
    oracle_consumer_seconds,
    random_walk,
    simulate,
    spikes,
)

CAPACITY = 1000.0
THRESHOLDS = (100, 300, 1000, 3000, 10_000, 30_000, 100_000)
TARGET_RATIO = 1 / 0.6
ORACLE_TARGET = 1.25
MEASURED = RESULTS / "cooperative_rebalance_apache.json"
UNCALIBRATED_S = 3.0
PEER_PROTOCOLS = {
    "ours": "cooperative (ours)",
    "coop-sticky": "librdkafka cooperative-sticky",
    "eager-range": "eager-range",
}


CALIBRATION_PROFILE = "client defaults"


def pause_per_partition(summary: list[dict[str, Any]], protocol: str, partitions: int) -> float:
    """Seconds a partition paused per scale event, from the measured pause benchmark at
    client-default timings: the cooperative protocols pause the partitions that moved, eager
    ones pause every partition."""
    events = [
        r
        for r in summary
        if r["protocol"] == protocol
        and r["profile"] == CALIBRATION_PROFILE
        and r["scenario"].startswith(("scale-out", "scale-in"))
    ]
    eager = protocol.startswith("eager")
    per_event = [
        r["pause_partition_s"] / (partitions if eager else max(1.0, r["moved"])) for r in events
    ]
    return float(sum(per_event) / len(per_event))


def calibration() -> tuple[dict[str, float], str]:
    """Rebalance pause per policy, measured on Apache Kafka by the cooperative rebalance
    benchmark when its results are present; else the uncalibrated 3 s for all."""
    if not MEASURED.is_file():
        pauses = dict.fromkeys(PEER_PROTOCOLS, UNCALIBRATED_S)
        return pauses, f"Rebalance pause {UNCALIBRATED_S:g} s per moved partition (not calibrated)"
    measured = json.loads(MEASURED.read_text())
    partitions = 100
    pauses = {
        policy: pause_per_partition(measured["summary"], protocol, partitions)
        for policy, protocol in PEER_PROTOCOLS.items()
    }
    text = (
        "Rebalance pause per moved partition calibrated on Apache Kafka "
        f"({MEASURED.name}, {CALIBRATION_PROFILE} timings, scale-out and scale-in of 10 "
        f"members, run {measured['machine']['date_utc']} UTC): ours {pauses['ours']:.2f} s, "
        f"KEDA with cooperative-sticky {pauses['coop-sticky']:.2f} s, KEDA with eager range "
        f"{pauses['eager-range']:.2f} s (every partition)"
    )
    return pauses, text


def traces(partitions: int, seed: int) -> dict[str, Rates]:
    """Fresh, seeded traces (each call starts them over)."""
    return {
        "paper random walk": random_walk(partitions, CAPACITY, 5, seed),
        "diurnal": diurnal(partitions, CAPACITY, 1800, seed),
        "spikes": spikes(partitions, CAPACITY, seed),
        "bursty": bursty(partitions, CAPACITY, seed),
    }


def ours(partitions: int) -> OurPolicy:
    """Our default policy: the sidecar's default controller settings."""
    defaults = ControllerConfig(capacity=CAPACITY)
    return OurPolicy(
        DEFAULT_HEURISTIC,
        CAPACITY,
        partitions,
        scale_down_window_s=defaults.scale_down_window_s,
        drain_seconds=defaults.drain_seconds,
    )


def verdict(mine: Result, keda: list[Result]) -> tuple[bool, list[str]]:
    """Whether every KEDA run with p99 lag <= ours used >= 1/0.6 of our consumer-seconds."""
    lines, ok = [], True
    for r in keda:
        if r.lag_p99 <= mine.lag_p99:
            ratio = r.consumer_seconds / mine.consumer_seconds
            ok &= ratio >= TARGET_RATIO
            lines.append(
                f"{r.policy}: p99 lag {r.lag_p99:,.0f} <= ours, consumer-seconds x{ratio:.2f}"
            )
    return ok, lines


def plot(runs: dict[str, list[Result]], path: Any) -> None:
    """Consumer-seconds vs p99 lag per trace: the KEDA curves and our point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    for ax, (trace, results) in zip(axes.flat, runs.items(), strict=True):
        for label, coop in (("KEDA eager range", False), ("KEDA cooperative-sticky", True)):
            curve = [
                r for r in results if r.policy.startswith("keda") and ("coop" in r.policy) == coop
            ]
            ax.plot(
                [r.lag_p99 for r in curve],
                [r.consumer_seconds for r in curve],
                "-o",
                ms=3,
                label=label,
            )
        mine = next(r for r in results if r.policy.startswith("ours"))
        ax.scatter(
            [mine.lag_p99],
            [mine.consumer_seconds],
            color="tab:red",
            s=60,
            zorder=3,
            label=mine.policy,
        )
        ax.set_xscale("log")
        ax.set_title(trace)
        ax.set_xlabel("p99 total lag (records)")
        ax.set_ylabel("consumer-seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Cost vs lag: KEDA-style lagThreshold sweep (100..100,000) and our policy")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/simulate.{md,json,png}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--duration", type=int, default=1800)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--large", type=int, default=10_000, help="partitions of the scale run")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    runs: dict[str, list[Result]] = {}
    defaults = ControllerConfig(capacity=CAPACITY)
    pauses, calibration_text = calibration()
    lines = [
        f"# Simulator: our policy vs KEDA-style, {args.partitions} partitions, "
        f"C = {CAPACITY:g} records/s, {args.duration} s per run, seed {args.seed}",
        "",
        machine_line(),
        f"{calibration_text}; the simulator's clock ticks in seconds, so a pause of p s stops a "
        "partition for ceil(p) ticks, at least one. Speeds measured over "
        "30 s. Lag in records (total over partitions) and seconds (total lag / arrival rate).",
        f"Ours: the sidecar's defaults (scale-down window {defaults.scale_down_window_s:g} s, "
        f"drain {defaults.drain_seconds:g} s); the assignor packs speed + backlog by the same "
        "drain rule; lag allowance 0 (simulated consumers commit as they read, no batch wait).",
        "",
    ]
    verdicts = {}
    oracles: dict[str, float] = {}
    for trace in traces(args.partitions, args.seed):
        results = [
            simulate(
                traces(args.partitions, args.seed)[trace],
                args.partitions,
                CAPACITY,
                ours(args.partitions),
                args.duration,
                rebalance_s=pauses["ours"],
            )
        ]
        for cooperative in (False, True):
            for threshold in THRESHOLDS:
                policy = KedaPolicy(threshold, args.partitions, cooperative)
                results.append(
                    simulate(
                        traces(args.partitions, args.seed)[trace],
                        args.partitions,
                        CAPACITY,
                        policy,
                        args.duration,
                        rebalance_s=pauses["coop-sticky" if cooperative else "eager-range"],
                    )
                )
        runs[trace] = results
        ok, notes = verdict(results[0], results[1:])
        verdicts[trace] = ok
        oracle = oracle_consumer_seconds(
            traces(args.partitions, args.seed)[trace], CAPACITY, args.duration
        )
        oracles[trace] = oracle
        notes.append(
            f"oracle (ceil(total speed / C) every second, the packing lower bound): "
            f"{oracle:,.0f} consumer-s; ours uses x{results[0].consumer_seconds / oracle:.2f} "
            f"of it (target <= {ORACLE_TARGET:g})"
        )
        lines += [
            f"## {trace}: target {'holds' if ok else 'BROKEN'}",
            "",
            "| policy | consumer-s | lag p50 | lag p99 | lag max | p50 s | p99 s | max s "
            "| rebalances | Rscore | paused partition-s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            lines.append(
                f"| {r.policy} | {r.consumer_seconds:,.0f} | {r.lag_p50:,.0f} | {r.lag_p99:,.0f} "
                f"| {r.lag_max:,.0f} | {r.lag_seconds_p50:.1f} | {r.lag_seconds_p99:.1f} "
                f"| {r.lag_seconds_max:.1f} | {r.rebalances} | {r.total_rscore:.1f} "
                f"| {r.paused_partition_seconds:,.0f} |"
            )
        lines += ["", *(f"- {n}" for n in notes), ""]
        print(f"{trace}: {'holds' if ok else 'BROKEN'}", flush=True)
    started = time.perf_counter()
    big = simulate(
        random_walk(args.large, CAPACITY, 5, args.seed),
        args.large,
        CAPACITY,
        ours(args.large),
        300,
        rebalance_s=pauses["ours"],
    )
    lines += [
        f"Scale: {args.large} partitions, 300 s of the random walk with our policy ran in "
        f"{time.perf_counter() - started:.0f} s ({big.rebalances} rebalances, peak "
        f"{max(big.replicas)} consumers)."
    ]
    if not args.no_write:
        plot(runs, RESULTS / "simulate.png")
    publish(
        "simulate",
        "\n".join(lines),
        {
            "args": vars(args),
            "verdicts": verdicts,
            "oracle_consumer_seconds": oracles,
            "runs": {
                t: [
                    {k: v for k, v in asdict(r).items() if k not in ("replicas", "lag")} for r in rs
                ]
                for t, rs in runs.items()
            },
        },
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
