"""Consumers' event-loop stalls on a machine whose cores are oversubscribed.

Three SDK members (real processes, a sync sink that fsyncs every batch) read a six-partition
topic under a steady load while ``--load-factor`` x the cores spin in busy processes beside
them; half way through one member is killed with SIGKILL, the rest stop with SIGTERM at the
end. Per member: the event loop's lateness (p50, p99, worst; heartbeats wait as long),
p99 as a share of the session timeout (target < 20 % at the default), how often the member
lost its membership while alive, and where the loop was during its stalls. Then whether any
record was lost or read twice outside the killed member's uncommitted ones.
``python -m benchmarks.loop_stalls [--cluster embedded]``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.support.cpu_load import oversubscribed, spinners_for
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import publish
from benchmarks.support.sdk_member_process import read_rows, stats_path
from local_kafka.clusters import ClusterKind, kafka_cluster
from local_kafka.paced_load import PacedLoad

ROOT = Path(__file__).parent.parent
MEMBERS = 3
PARTITIONS = 6


def run_once(
    bootstrap: str, topic: str, session_timeout_ms: int, rate: int, seconds: float, work: Path
) -> dict[str, Any]:
    """One run: members up, load for ``seconds`` (one member killed half way), members
    stopped; each survivor's statistics and the delivery check."""
    outs = [work / f"{topic}-member-{i}.txt" for i in range(MEMBERS)]
    members = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.support.sdk_member_process",
                bootstrap,
                f"g-{topic}",
                topic,
                f"sink-{i}",
                str(out),
                str(session_timeout_ms),
            ],
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )
        for i, out in enumerate(outs)
    ]
    load = PacedLoad(bootstrap, topic, rate, PARTITIONS, settings={"acks": "all", "linger.ms": 5})
    produced = load.acked  # complete once the load has stopped
    try:
        load.start()
        time.sleep(seconds / 2)
        members[1].kill()
        time.sleep(seconds / 2)
        load.stop()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if produced <= set().union(*map(read_rows, outs)):
                break
            time.sleep(0.5)
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGTERM)
        for member in members:
            member.wait(60)
    rows = [read_rows(out) for out in outs]
    total = sum(rows, Counter())
    survivors = []
    for i in (0, 2):
        survivors.append({"member": i, **json.loads(stats_path(outs[i]).read_text())})
    return {
        "session_timeout_ms": session_timeout_ms,
        "produced": len(produced),
        "lost": len(produced - set(total)),
        "read_twice_outside_the_killed_member": len(
            {key for key, n in total.items() if n > 1} - set(rows[1])
        ),
        "survivors": survivors,
    }


def table(runs: Sequence[dict[str, Any]], args: argparse.Namespace, broker: str) -> str:
    """The markdown report."""
    lines = [
        f"# Event-loop stalls with the cores oversubscribed {args.load_factor:g}x",
        "",
        machine_line(),
        broker,
        f"{MEMBERS} SDK members (processes, a sync sink fsyncing each batch), {PARTITIONS} "
        f"partitions, {args.rate} records/s for {args.seconds:g} s, member 1 killed half way; "
        f"{spinners_for(args.load_factor)} busy processes beside them.",
        "",
        "| session timeout | member | loop lateness p50 | p99 | worst | p99 / session "
        "| membership lost | where the loop stalled |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        session_s = run["session_timeout_ms"] / 1000
        for m in run["survivors"]:
            sites = ", ".join(f"`{s}` ({n})" for s, n in m["stall_sites"].items()) or "none"
            lines.append(
                f"| {session_s:g} s | {m['member']} | {m['lateness_p50_s'] * 1000:.0f} ms "
                f"| {m['lateness_p99_s'] * 1000:.0f} ms | {m['lateness_worst_s'] * 1000:.0f} ms "
                f"| {100 * m['lateness_p99_s'] / session_s:.1f} % | {m['membership_lost']} "
                f"| {sites} |"
            )
    lines += [
        "",
        "| session timeout | produced | lost | read twice (not the killed member's) |",
        "|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(
            f"| {run['session_timeout_ms'] / 1000:g} s | {run['produced']} | {run['lost']} "
            f"| {run['read_twice_outside_the_killed_member']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; non-zero if a record was lost."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--load-factor", type=float, default=2.0, help="busy processes per core")
    parser.add_argument("--rate", type=int, default=2000, help="records/s produced")
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration per run")
    parser.add_argument(
        "--session-timeouts-ms",
        default="10000,1500",
        help="one run per session timeout (10000 is the SDK's default, 1500 the tests')",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    kind = ClusterKind(args.cluster)
    runs = []
    with kafka_cluster(kind) as kafka, TemporaryDirectory() as work:
        broker = broker_line(kafka)
        for session_ms in (int(s) for s in args.session_timeouts_ms.split(",")):
            topic = kafka.create_topic(PARTITIONS, prefix="stalls")
            with oversubscribed(args.load_factor):
                runs.append(
                    run_once(
                        kafka.bootstrap_servers,
                        topic,
                        session_ms,
                        args.rate,
                        args.seconds,
                        Path(work),
                    )
                )
    suffix = "" if kind is ClusterKind.APACHE else f"_{kind.value}"
    publish(
        f"loop_stalls{suffix}",
        table(runs, args, broker),
        {"args": vars(args), "runs": runs},
        write=not args.no_write,
    )
    return 1 if any(run["lost"] for run in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
