"""What a long run of small commits leaves in an Iceberg table's metadata, side by side: a
table as the sink created them before 2026-12-07 (Iceberg's defaults: every metadata file
kept, no snapshot expiry) against one as it creates them now (the last 20 metadata files
kept, snapshots past ``--keep-secs`` expired beside the appends every 100 commits).

One process, one local Spark session, the sink's own append path (pyarrow files committed by
the session's Iceberg): ``--commits`` batches of ``--rows`` records to each table in turn,
so both see the same machine at the same moments. Every ``--window`` commits it records,
per table: the latest metadata file's size, how many metadata files there are and their
bytes, the snapshots the table lists, and the p50 / p99 of its appends in the window. The
retention is shortened (``--keep-secs``, default 60 s against the sink's 900 s) so that
expiry happens within a run of minutes. No Kafka: the appends are the sink's, the records
made here. ``python -m benchmarks.lake.iceberg_metadata`` writes
``results/iceberg_metadata.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.support.iceberg_tables import iceberg_table
from benchmarks.support.machine import machine_line, require_committed_code
from benchmarks.support.report import publish
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_identifier
from consumer_sdk.sink import Record, records_table

# The properties tables were created with before the sink kept fewer metadata files.
LEGACY_UNSET = (
    "write.metadata.delete-after-commit.enabled",
    "write.metadata.previous-versions-max",
)
KINDS = ("before", "now")


def sink_for(warehouse: Path, kind: str, keep_secs: float) -> SparkTableSink:
    """A sink writing one table of ``kind`` under ``warehouse``."""
    config = SparkSinkConfig(
        warehouse=str(warehouse / kind),
        database="bench",
        iceberg_catalog=f"lake_{kind}",
        table_format="iceberg",
        iceberg_keep_snapshots_secs=keep_secs if kind == "now" else 0,
    )
    return SparkTableSink(config)


def metadata_files(warehouse: Path) -> dict[Path, os.stat_result]:
    """Every metadata file of the tables under ``warehouse``, with its stat (a file deleted
    by a commit while listed is left out)."""
    found = {}
    for path in warehouse.rglob("*.metadata.json"):
        with contextlib.suppress(FileNotFoundError):
            found[path] = path.stat()
    return found


def window_row(
    kind: str, commits: int, warehouse: Path, config: SparkSinkConfig, appends: list[float]
) -> dict[str, Any]:
    """What ``kind``'s table holds after ``commits``, and its appends of the last window."""
    files = metadata_files(warehouse)
    latest = max(files.values(), key=lambda stat: stat.st_mtime_ns)
    table = iceberg_table(config, "t")
    return {
        "kind": kind,
        "commits": commits,
        "latest_metadata_kb": latest.st_size / 1e3,
        "metadata_files": len(files),
        "metadata_mb": sum(stat.st_size for stat in files.values()) / 1e6,
        "snapshots": len(table.snapshots()) if table is not None else 0,
        "append_p50_s": float(np.percentile(appends, 50)),
        "append_p99_s": float(np.percentile(appends, 99)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Write to both tables in turn; report every window."""
    require_committed_code()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=1500, help="commits to each table")
    parser.add_argument("--rows", type=int, default=10, help="records a commit")
    parser.add_argument("--window", type=int, default=300, help="commits between reports")
    parser.add_argument("--keep-secs", type=float, default=60.0, help="snapshot retention")
    args = parser.parse_args(argv)
    if args.commits < args.window or args.window < 100 or args.rows < 1:
        parser.error("--window must be >= 100 and <= --commits, --rows >= 1")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="iceberg-metadata-") as scratch:
        root = Path(scratch)
        sinks = {kind: sink_for(root, kind, args.keep_secs) for kind in KINDS}
        appends: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for commit in range(1, args.commits + 1):
            records = [
                Record(
                    "t", 0, commit * args.rows + i, int(time.time() * 1000), b"k", b"v" * 100, ()
                )
                for i in range(args.rows)
            ]
            for kind, sink in sinks.items():
                started = time.monotonic()
                sink.write_blocking("t", records_table(records))
                appends[kind].append(time.monotonic() - started)
                if commit == 1 and kind == "before":
                    properties = ", ".join(f"'{p}'" for p in LEGACY_UNSET)
                    identifier = table_identifier(sink.config, "t")
                    sink.open().sql(f"ALTER TABLE {identifier} UNSET TBLPROPERTIES ({properties})")
            if commit % args.window == 0:
                for kind, sink in sinks.items():
                    window = appends[kind][-args.window :]
                    rows.append(window_row(kind, commit, root / kind, sink.config, window))
                    print(rows[-1], flush=True)
        for sink in sinks.values():  # an expiry still running ends before the folder goes
            asyncio.run(sink.close())
    lines = [
        "# Iceberg metadata over a long run of small commits",
        "",
        machine_line(),
        f"One local Spark session, the sink's append path: {args.commits:,} commits of "
        f"{args.rows} records to each of two tables in turn. before: Iceberg's defaults (every "
        "metadata file kept, no expiry), as the sink created tables until 2026-12-07; now: the "
        f"last 20 metadata files kept and snapshots older than {args.keep_secs:g} s expired "
        "beside the appends every 100 commits (the sink's default retention is 900 s). Append "
        f"times: p50 / p99 of the last {args.window} commits.",
        "",
        "| commits | table | latest metadata.json (KB) | metadata files | their MB "
        "| snapshots listed | append p50 (s) | append p99 (s) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['commits']:,} | {r['kind']} | {r['latest_metadata_kb']:,.0f} "
        f"| {r['metadata_files']:,} | {r['metadata_mb']:,.1f} | {r['snapshots']:,} "
        f"| {r['append_p50_s']:.3f} | {r['append_p99_s']:.3f} |"
        for r in rows
    ]
    publish("iceberg_metadata", "\n".join(lines), {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
