"""What one Delta append costs the Spark session that commits it, by checkpoint interval.

A consumer commits once per batch and table, so a Delta table it writes gets many small
commits, and Delta writes a checkpoint of the whole table state every
``delta.checkpointInterval`` commits (a Spark job run inside the commit that reaches it).
Each setting is measured in a process of its own (one local session per process), the
settings alternating over the rounds: ``--appends`` appends of ``--rows`` 200-byte rows
(a batch of the 60-second demo's size), then ``--big`` appends of 16 MiB batches, through
the sink's session and the sink's append (Arrow batch, ``userMetadata`` carrying offsets).
Reported: wall time per commit and the JVM's CPU seconds per commit (its /proc counters),
over the appends after the first third (the JVM compiles its hot paths during those).
Settings: the checkpoint interval, and who writes the files: Spark, every batch split in two
Arrow batches (``all``: two Spark tasks, two files: what the sink did for every batch
before) or only those from ``SPLIT_FROM_BYTES`` on (``sized``: the sink's rule for Spark's
writer); or pyarrow, one file per batch committed by the session's Delta (``arrow``: the
sink's default in a local session, :mod:`consumer_sdk.lake.delta.files`). Python CPU: this
process's own seconds per commit (pyarrow's encoding runs here).

``python -m benchmarks.delta_commit_cost``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.spark_sink import arrow_batches
from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from consumer_sdk.lake import spark_sink
from consumer_sdk.lake.arrow_batch import with_ingest_date
from consumer_sdk.lake.delta.files import DeltaFileCommitter, write_data_file
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_root

INTERVAL_SETTING = "spark.databricks.delta.properties.defaults.checkpointInterval"
VALUE_SIZE = 200
BIG_BATCH = 16 * 1024 * 1024


def jvm_pid() -> int:
    """The local session's JVM: this process's child running java."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if parent == str(os.getpid()) and b"java" in command:
            return int(entry.name)
    raise RuntimeError("no JVM child found")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


WRITERS = {
    "all": "Spark, every batch split in two",
    "sized": f"Spark, split from {spark_sink.SPLIT_FROM_BYTES >> 20} MiB",
    "arrow": "pyarrow, one file, Delta commit",
}


def measure(interval: int, writer: str, appends: int, rows: int, big: int) -> dict[str, Any]:
    """Append to a fresh table with checkpoints every ``interval`` commits, files written as
    ``writer`` says (:data:`WRITERS`); per-commit figures (this process's own session)."""
    if writer == "all":
        spark_sink.SPLIT_FROM_BYTES = 0
    warehouse = tempfile.mkdtemp(prefix="delta-commit-cost-")
    config = SparkSinkConfig(warehouse=warehouse, spark_conf={INTERVAL_SETTING: str(interval)})
    sink = SparkTableSink(config)
    session = sink.open()
    pid = jvm_pid()
    small = arrow_batches(VALUE_SIZE, rows * VALUE_SIZE, rows * appends)
    large = arrow_batches(VALUE_SIZE, BIG_BATCH, BIG_BATCH // VALUE_SIZE * big)
    sink._ensure_table("t", small[0].schema)
    root = table_root(config, "t")
    today = datetime.now(UTC).date()
    committer = DeltaFileCommitter()

    def append_all(tables: Sequence[Any]) -> tuple[list[float], list[float], list[float]]:
        walls, cpus, own_cpus = [], [], []
        for table in tables:
            cpu, own, wall = cpu_seconds(pid), time.process_time(), time.perf_counter()
            if writer == "arrow":
                data = write_data_file(root, table, today)
                committer.commit(session, root, today, [data], "{}")
            else:
                frame = sink._frame(session, with_ingest_date(table, today))
                writing = frame.write.format("delta").mode("append")
                writing.option("userMetadata", "{}").save(str(root))
            walls.append(time.perf_counter() - wall)
            cpus.append(cpu_seconds(pid) - cpu)
            own_cpus.append(time.process_time() - own)
        return walls, cpus, own_cpus

    small_walls, small_cpus, _ = append_all(small)
    large_walls, large_cpus, large_own = append_all(large)
    checkpoints = len(list((root / "_delta_log").glob("*.checkpoint.parquet")))
    skip = appends // 3
    return {
        "interval": interval,
        "writer": WRITERS[writer],
        "small_walls": small_walls[skip:],
        "small_cpus": small_cpus[skip:],
        "small_rows": sum(t.num_rows for t in small[skip:]),
        "large_walls": large_walls,
        "large_cpus": large_cpus,
        "large_python_cpus": large_own,
        "large_rows": sum(t.num_rows for t in large),
        "checkpoints": checkpoints,
    }


def run_child(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    """One setting (``INTERVAL:WRITER``) measured in a fresh process."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.delta_commit_cost",
        "--child",
        setting,
        "--appends",
        str(args.appends),
        "--rows",
        str(args.rows),
        "--big",
        str(args.big),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{setting} failed:\n{done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(last)
    return result


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled figures of one setting's runs."""
    walls = [w for r in runs for w in r["small_walls"]]
    cpus = [c for r in runs for c in r["small_cpus"]]
    large_walls = [w for r in runs for w in r["large_walls"]]
    large_cpus = [c for r in runs for c in r["large_cpus"]]
    large_python = [c for r in runs for c in r["large_python_cpus"]]
    return {
        "interval": runs[0]["interval"],
        "writer": runs[0]["writer"],
        "commits": len(walls),
        "wall_median_s": statistics.median(walls),
        "wall_mean_s": statistics.fmean(walls),
        "wall_max_s": max(walls),
        "cpu_mean_s": statistics.fmean(cpus),
        "small_rows_per_s": sum(r["small_rows"] for r in runs) / sum(walls),
        "large_rows_per_s": sum(r["large_rows"] for r in runs) / sum(large_walls),
        "large_cpu_mean_s": statistics.fmean(large_cpus),
        "large_python_cpu_mean_s": statistics.fmean(large_python),
        "large_wall_median_s": statistics.median(large_walls),
        "checkpoints": sum(r["checkpoints"] for r in runs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--settings",
        default="100:sized,100:arrow",
        help="INTERVAL:WRITER, WRITER one of all, sized (Spark's writer: every batch split in "
        "two, or the sink's rule) or arrow (pyarrow files, Delta commit)",
    )
    parser.add_argument("--appends", type=int, default=60, help="small appends per run")
    parser.add_argument("--rows", type=int, default=2000, help="rows per small append")
    parser.add_argument("--big", type=int, default=4, help="16 MiB appends per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per interval, alternating")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--name", default="delta_commit_cost", help="results file name")
    args = parser.parse_args(argv)
    if args.child is not None:
        interval, writer = args.child.split(":")
        result = measure(int(interval), writer, args.appends, args.rows, args.big)
        print(json.dumps(result))
        return 0
    settings = args.settings.split(",")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in settings}
    for round_ in range(args.rounds):
        for setting in settings:
            print(f"round {round_ + 1}: {setting}", flush=True)
            runs[setting].append(run_child(setting, args))
    rows = [summarize(runs[s]) for s in settings]
    lines = [
        "# Delta commit cost by checkpoint interval and who writes the files (local session, "
        "the sink's append)",
        "",
        machine_line(),
        "Broker: none (Spark only). Spark: local[2], the sink's session defaults.",
        f"Per run: {args.appends} appends of {args.rows:,} rows of {VALUE_SIZE} B (figures "
        f"from the last {args.appends - args.appends // 3}), then {args.big} appends of 16 MiB "
        f"batches; {args.rounds} runs per setting, alternating, one process each. JVM CPU: "
        "the session JVM's user + system seconds per commit (all its threads: tasks, "
        "compiler, GC); Python CPU: this process's (pyarrow encodes here).",
        "",
        "| checkpoint interval | files written by | commits | wall median (s) | wall mean (s) "
        "| wall max (s) | JVM CPU per commit (s) | rows/s, small | rows/s, 16 MiB "
        "| wall per 16 MiB commit, median (s) | JVM CPU per 16 MiB commit (s) "
        "| Python CPU per 16 MiB commit (s) | checkpoints |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['interval']} | {row['writer']} | {row['commits']} "
            f"| {row['wall_median_s']:.3f} "
            f"| {row['wall_mean_s']:.3f} | {row['wall_max_s']:.2f} | {row['cpu_mean_s']:.3f} "
            f"| {row['small_rows_per_s']:,.0f} | {row['large_rows_per_s']:,.0f} "
            f"| {row['large_wall_median_s']:.3f} | {row['large_cpu_mean_s']:.3f} "
            f"| {row['large_python_cpu_mean_s']:.3f} | {row['checkpoints']} |"
        )
    publish(
        args.name,
        "\n".join(lines),
        {"rows": rows, "runs": runs},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
