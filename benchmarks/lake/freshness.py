"""Freshness of a Delta table under a steady load: how long a record takes from its producer
to a committed table row, with checkpoints beside the appends (the default) and inside them
(``delta_checkpoint_every=0``, Delta's way), side by side in one run.

Per mode: a fresh topic on the chosen Kafka cluster (Apache Kafka by default), a producer the
project did not write (confluent-kafka) at ``--rate`` records/s spread over the partitions,
and one ``kafka-autoscaler-consumer --sink spark`` process (a local Spark session, Delta, the
demo's batch wait ``--wait``) for ``--duration`` seconds. Visibility latency of a row: the
time of the Delta commit that added its data file (the commit's ``commitInfo.timestamp``)
minus the record's Kafka timestamp, for records produced after ``--warm-up`` seconds; both
clocks are this machine's. Appends: the consumer's own log lines (``appended ... in X s``).
``python -m benchmarks.lake.freshness`` writes ``results/freshness_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.rate_writer import RateWriter
from benchmarks.support.report import publish
from consumer_sdk.lake.delta.history import LOG_DIR
from consumer_sdk.lake.spark_config import SparkSinkConfig, table_name_for
from consumer_sdk.lake.spark_tables import table_root as table_root_of
from local_kafka.clusters import ClusterKind, kafka_cluster

MODES = {"beside": 100, "in-commit": 0}  # mode -> delta_checkpoint_every
_APPENDED = re.compile(r"appended (\d+) row\(s\) and \d+ dead letter\(s\) in ([\d.]+) s")
_CHECKPOINT = re.compile(r"Delta checkpoint at version \d+ written beside the appends")


def commit_latencies(table_root: Path, produced_after_ms: int) -> np.ndarray:
    """Seconds from each row's Kafka timestamp to the commit that added its file, for rows
    produced at or after ``produced_after_ms`` (epoch ms)."""
    latencies: list[np.ndarray] = []
    for commit in sorted((table_root / LOG_DIR).glob("*.json")):
        committed_ms, files = None, []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                committed_ms = int(action["commitInfo"]["timestamp"])
            elif "add" in action:
                files.append(action["add"]["path"])
        if committed_ms is None:
            continue
        for name in files:
            stamps = pq.read_table(table_root / name, columns=["timestamp"], partitioning=None)
            in_ms = pc.cast(stamps.column("timestamp"), pa.timestamp("ms"), safe=False)
            millis = pc.cast(in_ms, pa.int64()).to_numpy(zero_copy_only=False)
            kept = millis[millis >= produced_after_ms]
            latencies.append((committed_ms - kept) / 1000.0)
    return np.concatenate(latencies) if latencies else np.array([])


def run_mode(
    bootstrap: str, topic: str, mode: str, args: argparse.Namespace, warehouse: Path
) -> dict[str, Any]:
    """One consumer process under the load; its table's freshness and its appends."""
    env = {
        **os.environ,
        "AUTOSCALER_BOOTSTRAP_SERVERS": bootstrap,
        "AUTOSCALER_GROUP": f"fresh-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": str(args.rate * 2),
        "AUTOSCALER_WAIT_TIME_SECS": str(args.wait),
        "AUTOSCALER_MEMBER_IDENTITY": "fresh-0",
        "AUTOSCALER_SPARK_WAREHOUSE": str(warehouse),
        "AUTOSCALER_SPARK_DELTA_CHECKPOINT_EVERY": str(MODES[mode]),
    }
    log_path = warehouse / "consumer.log"
    with log_path.open("w") as log_file:
        consumer = subprocess.Popen(
            [str(Path(sys.executable).parent / "kafka-autoscaler-consumer"), "--sink", "spark"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        table_root = table_root_of(SparkSinkConfig(warehouse=str(warehouse)), table_name_for(topic))
        try:
            deadline = time.monotonic() + 180
            while not (table_root / LOG_DIR).exists():  # the consumer made its table
                if consumer.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the consumer did not start:\n{log_path.read_text()}")
                time.sleep(0.5)
            rates = [args.rate / args.partitions] * args.partitions
            writer = RateWriter(bootstrap, topic, rates, value=b"x" * args.value_bytes)
            started_ms = int(time.time() * 1000)
            writer.start()
            time.sleep(args.duration)
            writer.finish()
            time.sleep(args.wait + 10)  # the last batches committed
        finally:
            consumer.send_signal(signal.SIGTERM)
            consumer.wait(120)
    latencies = commit_latencies(table_root, started_ms + int(args.warm_up * 1000))
    said = log_path.read_text()
    appends = [float(s) for _, s in _APPENDED.findall(said)]
    files = sum(1 for _ in table_root.glob("*/*.parquet"))
    return {
        "mode": mode,
        "delta_checkpoint_every": MODES[mode],
        "records": int(latencies.size),
        "p50_s": float(np.percentile(latencies, 50)),
        "p90_s": float(np.percentile(latencies, 90)),
        "p99_s": float(np.percentile(latencies, 99)),
        "max_s": float(latencies.max()),
        "appends": len(appends),
        "append_p99_s": float(np.percentile(appends, 99)) if appends else 0.0,
        "append_max_s": max(appends, default=0.0),
        "appends_over_1s": sum(1 for a in appends if a > 1.0),
        "checkpoints_beside": len(_CHECKPOINT.findall(said)),
        "data_files": files,
        "files_per_hour": files * 3600.0 / args.duration,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run every mode side by side on one cluster; write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s produced")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load a mode")
    parser.add_argument("--warm-up", type=float, default=30.0, help="seconds left out first")
    parser.add_argument("--wait", type=float, default=0.5, help="the batch wait, seconds")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: a comma-separated subset of {','.join(MODES)}")
    rows = []
    with kafka_cluster(ClusterKind(args.cluster)) as kafka:
        broker = broker_line(kafka)
        for mode in modes:
            topic = kafka.create_topic(args.partitions, prefix=f"fresh-{mode}")
            with tempfile.TemporaryDirectory(prefix="freshness-") as scratch:
                rows.append(run_mode(kafka.bootstrap_servers, topic, mode, args, Path(scratch)))
    lines = [
        "# Freshness of a Delta table: checkpoints beside the appends and inside them",
        "",
        machine_line(),
        broker,
        f"One `kafka-autoscaler-consumer --sink spark` (local Spark session, Delta) per mode, "
        f"{args.rate:g} records/s of {args.value_bytes} B over {args.partitions} partitions "
        f"for {args.duration:g} s, batch wait {args.wait:g} s; latency: the commit that added "
        f"a row's file minus its Kafka timestamp, the first {args.warm_up:g} s left out. "
        "Beside: checkpoints every 100 commits written by delta-rs in a thread of the "
        "consumer; in-commit: Delta's checkpoint inside the commit that reaches 100.",
        "",
        "| checkpoints | rows | p50 (s) | p90 (s) | p99 (s) | max (s) | appends | append p99 (s) "
        "| slowest append (s) | appends over 1 s | checkpoints beside | data files | files / h |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['mode']} | {r['records']:,} | {r['p50_s']:.2f} | {r['p90_s']:.2f} "
        f"| {r['p99_s']:.2f} | {r['max_s']:.2f} | {r['appends']:,} | {r['append_p99_s']:.2f} "
        f"| {r['append_max_s']:.2f} | {r['appends_over_1s']} | {r['checkpoints_beside']} "
        f"| {r['data_files']:,} | {r['files_per_hour']:,.0f} |"
        for r in rows
    ]
    publish(f"freshness_{args.cluster}", "\n".join(lines), {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
