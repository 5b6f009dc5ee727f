"""Share groups (KIP-932) on a skewed load, on Apache Kafka with our broker assignors:
``python -m benchmarks.share_groups`` (about 20 minutes; seeded).

One partition is written at ``HOT`` consumers' capacity C, the others at ``COLD`` C each.
Every consumer is a plain confluent-kafka program (``examples/``) that works
``1 / C`` seconds per record. Rows, one after another, each on a topic of its own:

* a consumer group (KIP-848) sized by ours: at most one member per partition, so the hot
  partition is read at C and its lag grows whatever the count;
* a share group of ceil(total / C) + 1 members with Kafka's simple assignor, not sized;
* a share group sized by ours, with the simple assignor (the loads go to a topic the
  brokers do not read);
* a share group sized by ours, with our weighted share assignor.

Figures per row: members (most, at the end), each partition's lag at the end and the hot
one's growth over the second half, end-to-end latency p50/p99 (write to work done), and
records unread at the end and read more than once (at-least-once delivery underneath).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.support.machine import machine_line
from benchmarks.support.rate_writer import RateWriter
from benchmarks.support.report import RESULTS, publish
from benchmarks.support.share_members import read_from_the_start
from contract.local_ports import free_port
from contract.share_loads import SHARE_LOADS_TOPIC
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.processes import processes_mentioning
from sidecar.monitor import Monitor

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = 100.0  # records/s one consumer works through (C)
PARTITIONS = 8
HOT = 4.5  # the hot partition's speed, in C
COLD = 0.3  # each other partition's speed, in C
SAMPLE_S = 2.0
PNG = RESULTS / "share_groups.png"
UNREAD_LOADS_TOPIC = "_autoscaler_share_loads_unread"  # no broker reads it: simple assignor


@dataclass(frozen=True)
class Row:
    """One way of consuming the skewed load."""

    name: str
    share: bool  # a share group (else a KIP-848 consumer group)
    sized: bool  # our sidecar sizes it (else a fixed count)
    weighted: bool  # the brokers' share assignor gets our loads


ROWS = (
    Row("consumer group (KIP-848), sized by ours", share=False, sized=True, weighted=False),
    Row("share group, fixed size, simple assignor", share=True, sized=False, weighted=False),
    Row("share group sized by ours, simple assignor", share=True, sized=True, weighted=False),
    Row("share group sized by ours, weighted assignor", share=True, sized=True, weighted=True),
)


@dataclass
class Outcome:
    """What one row measured."""

    row: str
    members_max: int = 0
    members_end: int = 0
    lag_end: dict[int, float] = field(default_factory=dict)
    hot_lag_growth_per_s: float = 0.0  # over the run's second half
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    written: int = 0
    read: int = 0
    unread_at_end: int = 0
    read_twice: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)


def rates() -> list[float]:
    """Records/s per partition."""
    return [HOT * CAPACITY] + [COLD * CAPACITY] * (PARTITIONS - 1)


def fixed_size() -> int:
    """ceil(total / C) + 1: the members the issue allows ours."""
    return math.ceil(sum(rates()) / CAPACITY) + 1


def consumer_command(row: Row, bootstrap: str, topic: str, out: Path) -> str:
    """The consumer program the row's members run, writing into ``out``."""
    program = ROOT / "examples" / ("share_consumer.py" if row.share else "kip848_consumer.py")
    words = [sys.executable, str(program), "--bootstrap-servers", bootstrap]
    words += ["--group", f"g-{topic}", "--topic", topic, "--records-per-second", f"{CAPACITY:g}"]
    command = " ".join(shlex.quote(word) for word in words)
    if not row.share:
        command += " --instance-id {identity}"
    return command + f" --out {shlex.quote(str(out))}/{{identity}}.jsonl"


def sidecar(
    row: Row, bootstrap: str, topic: str, command: str, work: Path
) -> subprocess.Popen[str]:
    """Our sidecar sizing the row's group with the local scaler."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AUTOSCALER_BOOTSTRAP_SERVERS": bootstrap,
        "AUTOSCALER_GROUP": f"g-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": f"{CAPACITY:g}",
        "AUTOSCALER_INTERVAL": "1",
        "AUTOSCALER_SCALER": "local",
        "AUTOSCALER_CONSUMER_COMMAND": command,
        "AUTOSCALER_MAX_REPLICAS": str(4 * fixed_size()),
        "AUTOSCALER_HTTP_PORT": str(free_port()),
        "AUTOSCALER_LOCK_FILE": str(work / "lock"),
        "AUTOSCALER_SNAPSHOT_TOPIC": f"speeds-{topic}",
    }
    if row.share:
        env["AUTOSCALER_GROUP_TYPE"] = "share"
        if not row.weighted:
            env["AUTOSCALER_SHARE_LOADS_TOPIC"] = UNREAD_LOADS_TOPIC
    else:
        env["AUTOSCALER_GROUP_PROTOCOL"] = "consumer"
    log = (work / "sidecar.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli"], env=env, cwd=ROOT, stderr=log, text=True
    )


async def sample(monitor: Monitor, out: Path) -> tuple[dict[int, float], int]:
    """Each partition's lag, and the consumer processes writing into ``out``."""
    reading = await monitor.poll()
    members = sum(
        any(word.endswith("_consumer.py") for word in words)
        for words in processes_mentioning(str(out)).values()
    )
    return {tp.partition: lag for tp, lag in reading.lags().items()}, members


def run_row(row: Row, kafka: ApacheKafka, duration_s: float, work: Path) -> Outcome:
    """The row on a topic of its own; the outcome."""
    topic = f"skew-{free_port()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    bootstrap = kafka.bootstrap_servers
    if row.share:
        read_from_the_start(bootstrap, f"g-{topic}")
    out = work / topic
    out.mkdir(parents=True)
    command = consumer_command(row, bootstrap, topic, out)
    writer = RateWriter(bootstrap, topic, rates())
    writer.start()
    processes: list[subprocess.Popen[str]] = []
    if row.sized:
        processes.append(sidecar(row, bootstrap, topic, command, out))
    else:
        for i in range(fixed_size()):
            line = command.replace("{identity}", f"member-{i}")
            processes.append(subprocess.Popen(shlex.split(line), cwd=ROOT, text=True))
    outcome = Outcome(row.name)
    monitor = Monitor(
        bootstrap, f"g-{topic}", [topic], group_type="share" if row.share else "consumer"
    )

    async def watch() -> None:
        await monitor.start()
        try:
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < duration_s:
                lags, members = await sample(monitor, out)
                outcome.samples.append({"at": round(elapsed, 1), "lags": lags, "members": members})
                await asyncio.sleep(SAMPLE_S)
        finally:
            await monitor.stop()

    try:
        asyncio.run(watch())
    finally:
        writer.finish()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
    summarise(outcome, writer.written, out, duration_s)
    return outcome


def summarise(
    outcome: Outcome, written: set[tuple[int, int]], out: Path, duration_s: float
) -> None:
    """Fill the outcome's figures from its samples and the consumers' files."""
    members = [s["members"] for s in outcome.samples]
    outcome.members_max, outcome.members_end = (
        max(members, default=0),
        members[-1] if members else 0,
    )
    last = outcome.samples[-1]["lags"] if outcome.samples else {}
    outcome.lag_end = {int(p): float(v) for p, v in last.items()}
    half = [s for s in outcome.samples if s["at"] >= duration_s / 2]
    if len(half) >= 2:
        span = half[-1]["at"] - half[0]["at"]
        grown = half[-1]["lags"].get(0, 0.0) - half[0]["lags"].get(0, 0.0)
        outcome.hot_lag_growth_per_s = grown / span if span > 0 else 0.0
    seen: Counter[tuple[int, int]] = Counter()
    latencies: list[float] = []
    for path in out.glob("*.jsonl"):
        for line in path.read_text().split("\n")[:-1]:
            record = json.loads(line)
            seen[(record["partition"], record["offset"])] += 1
            latencies.append(record["done"] - record["ts"] / 1000)
    latencies.sort()
    if latencies:
        outcome.latency_p50_s = latencies[len(latencies) // 2]
        outcome.latency_p99_s = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    outcome.written, outcome.read = len(written), len(seen)
    outcome.unread_at_end = len(written - set(seen))
    outcome.read_twice = sum(1 for count in seen.values() if count > 1)


def render(outcomes: Sequence[Outcome], kafka: ApacheKafka, duration_s: float) -> str:
    """The results page."""
    total = sum(rates()) / CAPACITY
    lines = [
        "# Share groups on a skewed load",
        "",
        machine_line(),
        f"Broker: Apache Kafka {kafka.version} (KRaft, 1 node, our broker assignors loaded).",
        "",
        f"One partition written at {HOT:g} C, {PARTITIONS - 1} at {COLD:g} C each "
        f"({total:.1f} C in all; C = {CAPACITY:g} records/s, what one consumer works through); "
        f"{duration_s:.0f} s a row, rows one after another. ceil(total / C) + 1 = "
        f"{fixed_size()} members. Lag in records; 'hot lag growth' over the second half.",
        "",
        "| row | members (most / end) | hot partition lag at end | hot lag growth (records/s) "
        "| other partitions' lag at end (max) | e2e latency p50 / p99 (s) | unread at end "
        "| read twice |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        others = max((v for p, v in o.lag_end.items() if p != 0), default=0.0)
        latency = (
            f"{o.latency_p50_s:.1f} / {o.latency_p99_s:.1f}"
            if o.latency_p50_s is not None and o.latency_p99_s is not None
            else "-"
        )
        lines.append(
            f"| {o.row} | {o.members_max} / {o.members_end} | {o.lag_end.get(0, 0.0):,.0f} | "
            f"{o.hot_lag_growth_per_s:+.1f} | {others:,.0f} | {latency} | {o.unread_at_end:,} "
            f"of {o.written:,} | {o.read_twice:,} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """The hot partition's lag and the members over time, a line per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag, members) = plt.subplots(1, 2, figsize=(13, 4.2))
    for row in rows:
        at = [s["at"] for s in row["samples"]]
        lag.plot(at, [s["lags"].get("0", s["lags"].get(0, 0.0)) for s in row["samples"]])
        members.plot(at, [s["members"] for s in row["samples"]], label=row["row"])
    lag.set_xlabel("s")
    lag.set_ylabel("hot partition lag (records)")
    members.set_xlabel("s")
    members.set_ylabel("members")
    members.legend(fontsize=8)
    for ax in (lag, members):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Every row on one broker, one after another."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=240.0, help="seconds a row")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--plot-only", action="store_true", help="draw the PNG again from the committed JSON"
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads((RESULTS / "share_groups.json").read_text())["rows"], PNG)
        return 0
    if not args.duration >= 30:
        parser.error("--duration must be a number of seconds >= 30")
    work = Path(f"/tmp/share-groups-{int(time.time())}")
    with ApacheKafka(broker_assignor=True) as kafka:
        kafka.create_topic(SHARE_LOADS_TOPIC, 1, 1)
        outcomes = [run_row(row, kafka, args.duration, work / str(i)) for i, row in enumerate(ROWS)]
        table = render(outcomes, kafka, args.duration)
    rows = [asdict(o) for o in outcomes]
    data = {
        "rows": rows,
        "args": vars(args),
        "rates": rates(),
        "capacity": CAPACITY,
    }
    publish("share_groups", table, data, write=not args.no_write)
    if not args.no_write:
        plot(rows, PNG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
