"""What the sink's own compaction (``compact_every_commits``) costs the appends and gives the
readers, side by side: per format, two tables written in turn by the sink's append path (one
local Spark session, pyarrow files), one without compaction and one compacted every
``--every`` commits beside the appends.

Per table: the p50 / p99 / max of its appends (what a consumer waits for a commit), the
compactions done, the data files at the end, and how long an engine we did not write takes
to read the whole table (delta-rs or pyiceberg, median of 3). Seeded records made here, no
Kafka. ``python -m benchmarks.lake.compaction`` writes ``results/compaction.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.support.iceberg_tables import iceberg_table
from benchmarks.support.machine import machine_line, require_committed_code
from benchmarks.support.report import publish
from consumer_sdk.lake.compact import data_files
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_root
from consumer_sdk.sink import Record, records_table

FORMATS = ("delta", "iceberg")


def sinks_for(root: Path, table_format: str, every: int) -> dict[str, SparkTableSink]:
    """The uncompacted and the compacted sink of ``table_format`` under ``root``."""
    base = SparkSinkConfig(
        warehouse=str(root / table_format),
        table_format=table_format,
        iceberg_catalog=f"lake_{table_format}",
    )
    return {
        kind: SparkTableSink(
            dataclasses.replace(base, database=f"bench_{every}", compact_every_commits=every)
        )
        for kind, every in (("off", 0), (f"every {every}", every))
    }


def whole_table(config: SparkSinkConfig) -> pa.Table:
    """Table ``t`` of ``config`` as delta-rs or pyiceberg reads it."""
    if config.table_format == "delta":
        return DeltaTable(str(table_root(config, "t"))).to_pyarrow_table()
    loaded = iceberg_table(config, "t")
    if loaded is None:
        raise AssertionError("no Iceberg table t")
    return loaded.scan().to_arrow()


def read_seconds(config: SparkSinkConfig, rows: int) -> float:
    """Median seconds of 3 whole-table reads by delta-rs or pyiceberg."""
    took = []
    for _ in range(3):
        started = time.perf_counter()
        table = whole_table(config)
        took.append(time.perf_counter() - started)
        if table.num_rows != rows:
            raise AssertionError(f"read {table.num_rows} rows of {rows}")
    return statistics.median(took)


def main(argv: Sequence[str] | None = None) -> int:
    """Write both tables of each format in turn; report appends, files and reads."""
    require_committed_code()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=1000, help="commits to each table")
    parser.add_argument("--rows", type=int, default=100, help="records a commit")
    parser.add_argument("--every", type=int, default=100, help="compact_every_commits")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.commits < args.every or args.every < 1 or args.rows < 1:
        parser.error("--every must be >= 1 and <= --commits, --rows >= 1")
    rng = np.random.default_rng(args.seed)
    values = [rng.bytes(int(rng.integers(200, 1800))) for _ in range(args.rows)]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="compaction-") as scratch:
        for table_format in FORMATS:
            sinks = sinks_for(Path(scratch), table_format, args.every)
            appends: dict[str, list[float]] = {kind: [] for kind in sinks}
            for commit in range(args.commits):
                batch = records_table(
                    [
                        Record("t", 0, commit * args.rows + i, 0, None, value)
                        for i, value in enumerate(values)
                    ]
                )
                for kind, sink in sinks.items():
                    started = time.perf_counter()
                    sink.write_blocking("t", batch)
                    if commit:  # the first made the table (and warmed the JVM): untimed
                        appends[kind].append(time.perf_counter() - started)
            for kind, sink in sinks.items():
                lake = sink._lake
                if lake is not None and lake.compaction is not None:
                    lake.compaction.wait()
                compactions = (
                    0
                    if lake is None or lake.compaction is None
                    else len(lake.compaction.compactions)
                )
                took = np.array(appends[kind])
                total = args.commits * args.rows
                rows.append(
                    {
                        "format": table_format,
                        "kind": kind,
                        "append_p50_s": float(np.percentile(took, 50)),
                        "append_p99_s": float(np.percentile(took, 99)),
                        "append_max_s": float(took.max()),
                        "compactions": compactions,
                        "data_files": data_files(sink.open(), sink.config, "t"),
                        "read_s": read_seconds(sink.config, total),
                    }
                )
                print(rows[-1], flush=True)
            for sink in sinks.values():
                asyncio.run(sink.close())
    lines = [
        "# The sink's own compaction: appends and reads side by side",
        "",
        machine_line(),
        f"One local Spark session, the sink's append path (pyarrow files): {args.commits:,} "
        f"commits of {args.rows} records (200-1,800 random bytes, seed {args.seed}) to each of "
        "two tables per format in turn: off (no compaction) and compacted every "
        f"{args.every} commits beside the appends (`compact_every_commits`). Reads: the "
        "whole table by delta-rs or pyiceberg, median of 3. The first commit of each table "
        "(which creates it) is not timed.",
        "",
        "| format | compaction | append p50 (s) | append p99 (s) | append max (s) "
        "| compactions | data files at the end | whole-table read (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['format']} | {r['kind']} | {r['append_p50_s']:.3f} | {r['append_p99_s']:.3f} "
        f"| {r['append_max_s']:.3f} | {r['compactions']} | {r['data_files']:,} "
        f"| {r['read_s']:.3f} |"
        for r in rows
    ]
    publish("compaction", "\n".join(lines), {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
