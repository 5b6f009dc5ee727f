"""Freshness of Delta and Iceberg tables under a steady load: how long a record takes from
its producer to a committed table row with the consumer's defaults (its freshness bound),
at a fifth and a half of ``--capacity``; for reference, Delta with its checkpoints inside
the commits (``delta_checkpoint_every=0``, Delta's way) instead of beside them; and the peer
users run instead, Kafka Connect with Apache Iceberg's sink (``connect-*`` runs: one task, at
its default commit interval of 5 minutes and at 1 s), with the CPU each side spends.

Per run: a fresh topic on the chosen Kafka cluster (Apache Kafka by default), a producer the
project did not write (confluent-kafka) at the run's share of ``--capacity`` records/s spread
over the partitions, and one ``kafka-autoscaler-consumer --sink spark`` process (a local
Spark session) for ``--duration`` seconds. Visibility latency of a row: the time of the
commit that added its data file (Delta: ``commitInfo.timestamp``; Iceberg: the timestamp of
the snapshot its manifest entry names, read by pyiceberg) minus the record's Kafka timestamp,
for records produced after ``--warm-up`` seconds; both clocks are this machine's; a run ends
once its table holds every acknowledged record. Appends: the consumer's own log lines
(``appended ... in X s``). CPU: user + system seconds of the sink's process tree (the
consumer and its Spark JVM; the Connect worker) over the load. Values are JSON objects (the
Iceberg sink takes nothing else); the SDK stores them as bytes, its default.
``python -m benchmarks.lake.freshness`` writes ``results/freshness_<cluster>.{md,json}``; a
run set with a ``connect-*`` run writes ``results/freshness_peers_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from pyiceberg.table import Table

from benchmarks.support.iceberg_tables import iceberg_table
from benchmarks.support.lake_readers import read_keys
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.process_cpu import tree_cpu_seconds
from benchmarks.support.rate_writer import RateWriter
from benchmarks.support.report import publish
from consumer_sdk.config import DEFAULT_MAX_STALENESS_S
from consumer_sdk.lake.delta.history import LOG_DIR
from consumer_sdk.lake.delta.visibility import file_visibility_s, row_visibility_s
from consumer_sdk.lake.iceberg.catalog import prepare_catalog_file
from consumer_sdk.lake.lake_session import ICEBERG_CATALOG_FILE, ICEBERG_DATA_DIR
from consumer_sdk.lake.spark_config import SparkSinkConfig, table_name_for
from consumer_sdk.lake.spark_tables import table_root as table_root_of
from local_kafka.clusters import ClusterKind, KafkaCluster, kafka_cluster
from local_kafka.kafka_connect import IcebergSinkSettings, KafkaConnectWorker

# A run: table format, where Delta's checkpoints are written (ours) or the commit interval
# (Kafka Connect's Iceberg sink), share of --capacity produced.
RUNS = {
    "delta-0.2": ("delta", "beside", 0.2),
    "delta-0.5": ("delta", "beside", 0.5),
    "iceberg-0.2": ("iceberg", "beside", 0.2),
    "iceberg-0.5": ("iceberg", "beside", 0.5),
    "delta-in-commit-0.5": ("delta", "in-commit", 0.5),
    "connect-iceberg-0.5": ("iceberg", "connect-300s", 0.5),
    "connect-iceberg-1s-0.5": ("iceberg", "connect-1s", 0.5),
}
CONNECT_INTERVAL_MS = {"connect-300s": 300_000, "connect-1s": 1000}


def by_connect(run: str) -> bool:
    """Whether ``run`` measures Kafka Connect's Iceberg sink rather than ours."""
    return RUNS[run][1] in CONNECT_INTERVAL_MS


DEFAULT_RUNS = [run for run in RUNS if not by_connect(run)]
# Ours beside the peer at one load: results/freshness_peers_<cluster>.
PEER_RUNS = ["iceberg-0.5", "connect-iceberg-0.5", "connect-iceberg-1s-0.5"]
CHECKPOINT_EVERY = {"beside": 100, "in-commit": 0}  # -> delta_checkpoint_every
LOGS = Path(tempfile.gettempdir()) / "kafka-autoscaler-freshness"  # each run's sink log
_APPENDED = re.compile(r"appended (\d+) row\(s\) and \d+ dead letter\(s\) in ([\d.]+) s")
_CHECKPOINT = re.compile(r"Delta checkpoint at version \d+ written beside the appends")


def iceberg_commit_latencies(
    table: Table, produced_after_ms: int, column: str = "timestamp"
) -> tuple[np.ndarray, int]:
    """Seconds from each row's Kafka timestamp (``column``) to the snapshot that added its
    file (its manifest entry's snapshot id), for rows produced at or after
    ``produced_after_ms``; and the table's data files."""
    committed = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    entries = table.inspect.entries().to_pylist()
    latencies = [
        file_visibility_s(
            Path(urlparse(e["data_file"]["file_path"]).path),
            committed[e["snapshot_id"]],
            produced_after_ms,
            column,
        )
        for e in entries
        if e["status"] != 2  # 2: deleted
    ]
    return (np.concatenate(latencies) if latencies else np.array([])), len(latencies)


def json_values(size: int) -> Callable[[int], bytes]:
    """The n-th record's value: a JSON object of about ``size`` bytes."""
    pad = "x" * max(0, size - 30)
    return lambda n: json.dumps({"n": n, "payload": pad}).encode()


def start_ours(
    bootstrap: str, topic: str, run: str, args: argparse.Namespace, warehouse: Path
) -> subprocess.Popen[bytes]:
    """One ``kafka-autoscaler-consumer --sink spark`` with the run's settings."""
    table_format, checkpoints, _ = RUNS[run]
    env = {
        **os.environ,
        "AUTOSCALER_BOOTSTRAP_SERVERS": bootstrap,
        "AUTOSCALER_GROUP": f"fresh-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": str(args.capacity),
        "AUTOSCALER_MEMBER_IDENTITY": "fresh-0",
        "AUTOSCALER_SPARK_WAREHOUSE": str(warehouse),
        "AUTOSCALER_SPARK_TABLE_FORMAT": table_format,
        "AUTOSCALER_SPARK_DELTA_CHECKPOINT_EVERY": str(CHECKPOINT_EVERY[checkpoints]),
    }
    if args.wait is not None:  # otherwise the consumer's defaults: the freshness bound
        env["AUTOSCALER_WAIT_TIME_SECS"] = str(args.wait)
    with (warehouse / "consumer.log").open("w") as log_file:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "kafka-autoscaler-consumer"), "--sink", "spark"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


def connect_worker(
    bootstrap: str, topic: str, control_topic: str, run: str, config: SparkSinkConfig
) -> KafkaConnectWorker:
    """A Kafka Connect worker whose Iceberg sink writes ``topic`` to the table (and catalog)
    the SDK would, so both are read the same way."""
    prepare_catalog_file(config.warehouse_path / ICEBERG_CATALOG_FILE)
    settings = IcebergSinkSettings(
        topics=(topic,),
        database=config.database,
        table=table_name_for(topic),
        catalog_name=config.iceberg_catalog,
        catalog_file=config.warehouse_path / ICEBERG_CATALOG_FILE,
        warehouse=config.warehouse_path / ICEBERG_DATA_DIR,
        commit_interval_ms=CONNECT_INTERVAL_MS[RUNS[run][1]],
        control_topic=control_topic,
    )
    return KafkaConnectWorker(
        bootstrap, settings.connector_properties(), config.warehouse_path / "connect"
    )


def run_once(
    kafka: KafkaCluster, topic: str, run: str, args: argparse.Namespace, warehouse: Path
) -> dict[str, Any]:
    """One sink process under the load; its table's freshness, its appends and its CPU."""
    table_format, checkpoints, load = RUNS[run]
    connect = by_connect(run)
    rate = args.capacity * load
    config = SparkSinkConfig(warehouse=str(warehouse), table_format=table_format)
    table = table_name_for(topic)
    delta_root = table_root_of(config, table)

    def created() -> bool:
        if table_format == "delta":
            return (delta_root / LOG_DIR).exists()
        return iceberg_table(config, table) is not None

    log_path = warehouse / "consumer.log"
    worker = None
    if connect:
        control = kafka.create_topic(1, prefix="fresh-control")
        worker = connect_worker(kafka.bootstrap_servers, topic, control, run, config)
        worker.start()
        assert worker.process is not None
        sink = worker.process
        log_path = worker.log_file
    else:
        sink = start_ours(kafka.bootstrap_servers, topic, run, args, warehouse)
    try:
        rates = [rate / args.partitions] * args.partitions
        writer = RateWriter(
            kafka.bootstrap_servers, topic, rates, values=json_values(args.value_bytes)
        )
        if not connect:
            deadline = time.monotonic() + 180
            while not created():  # the consumer made its table
                if sink.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the consumer did not start:\n{log_path.read_text()}")
                time.sleep(0.5)
        cpu_before = tree_cpu_seconds(sink.pid)
        started_ms = int(time.time() * 1000)
        writer.start()
        time.sleep(args.duration)
        writer.finish()
        cpu_s = tree_cpu_seconds(sink.pid) - cpu_before
        # Until the table holds every acknowledged record (Connect's sink: its next commit),
        # or 60 s more: a sink that fell behind is reported with what it had not landed.
        patience = 60 + (CONNECT_INTERVAL_MS[checkpoints] / 1000 if connect else 0)
        deadline = time.monotonic() + patience
        landed = 0
        while landed < len(writer.written) and time.monotonic() < deadline:
            time.sleep(1.0)
            landed = read_keys(config, table).num_rows if created() else 0
        if landed < len(writer.written):
            missing = len(writer.written) - landed
            print(f"{run}: {missing} records not in the table {patience:.0f} s on", flush=True)
    finally:
        with contextlib.suppress(OSError):  # the scratch directory goes: keep the log
            shutil.copy(log_path, LOGS / f"{run}.log")
        if worker is not None:
            worker.stop()
        else:
            sink.send_signal(signal.SIGTERM)
            sink.wait(120)
    after_ms = started_ms + int(args.warm_up * 1000)
    if table_format == "delta":
        latencies, files = row_visibility_s(delta_root, after_ms)
    else:
        iceberg = iceberg_table(config, table)
        assert iceberg is not None
        column = "kafka_timestamp" if connect else "timestamp"
        latencies, files = iceberg_commit_latencies(iceberg, after_ms, column)
    said = log_path.read_text(errors="replace")
    appends = [float(s) for _, s in _APPENDED.findall(said)]
    return {
        "run": run,
        "sink": "kafka-connect" if connect else "ours",
        "format": table_format,
        "checkpoints": checkpoints,
        "load": load,
        "rate": rate,
        "records": int(latencies.size),
        "not_landed": len(writer.written) - landed,
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
        "cpu_s": cpu_s,
        "cores": cpu_s / args.duration,
        "records_per_cpu_s": len(writer.written) / cpu_s if cpu_s else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run every chosen configuration side by side on one cluster; write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument(
        "--capacity", type=float, default=5000.0, help="records/s a run's load is a share of"
    )
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load a run")
    parser.add_argument("--warm-up", type=float, default=30.0, help="seconds left out first")
    parser.add_argument(
        "--wait", type=float, default=None, help="a batch wait, seconds (default: the defaults)"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument(
        "--runs",
        default=",".join(DEFAULT_RUNS),
        help=f"comma-separated, of {','.join(RUNS)} (default: every run but Kafka Connect's)",
    )
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or any(r not in RUNS for r in runs):
        parser.error(f"--runs: a comma-separated subset of {','.join(RUNS)}")
    rows = []
    LOGS.mkdir(exist_ok=True)
    with kafka_cluster(ClusterKind(args.cluster)) as kafka:
        broker = broker_line(kafka)
        for run in runs:
            topic = kafka.create_topic(args.partitions, prefix="fresh")
            with tempfile.TemporaryDirectory(prefix="freshness-") as scratch:
                rows.append(run_once(kafka, topic, run, args, Path(scratch)))
    batching = (
        f"batch wait {args.wait:g} s"
        if args.wait is not None
        else f"the consumer's defaults (freshness bound {DEFAULT_MAX_STALENESS_S:g} s)"
    )
    lines = [
        "# Freshness of Delta and Iceberg tables under a steady load",
        "",
        machine_line(),
        broker,
        f"One `kafka-autoscaler-consumer --sink spark` (local Spark session) per run, one after "
        f"another on one broker: a steady load (a share of {args.capacity:g} records/s) of "
        f"{args.value_bytes} B records over {args.partitions} partitions from confluent-kafka "
        f"for {args.duration:g} s, {batching}. Latency: the commit that added a row's file "
        "(Delta: its commitInfo timestamp; Iceberg: the snapshot of its manifest entry) minus "
        f"the row's Kafka timestamp, rows produced in the first {args.warm_up:g} s left out. "
        "Delta checkpoints (every 100 commits) beside: written by delta-rs in a thread of the "
        "consumer; in-commit: by Delta inside the commit that reaches 100. Kafka Connect: a "
        "standalone worker, Apache Iceberg's sink with one task, committing every 300 s (its "
        "default) or 1 s. Appends: the consumer's log lines. CPU: user + system seconds of "
        "the sink's processes over the load (the consumer with its Spark JVM; the worker).",
        "",
        "| sink | format | checkpoints / commits | load | records/s | rows | p50 (s) | p90 (s) "
        "| p99 (s) | max (s) | appends | append p99 (s) | slowest append (s) "
        "| appends over 1 s | checkpoints beside | data files | files / h | CPU cores "
        "| records per CPU-s | not in the table at the end |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---:|---:|",
    ]
    lines += [
        f"| {r['sink']} | {r['format']} "
        f"| {r['checkpoints'] if r['format'] == 'delta' or r['sink'] != 'ours' else '-'} "
        f"| {r['load']:.0%} | {r['rate']:,.0f} | {r['records']:,} | {r['p50_s']:.2f} "
        f"| {r['p90_s']:.2f} | {r['p99_s']:.2f} | {r['max_s']:.2f} | {r['appends']:,} "
        f"| {r['append_p99_s']:.2f} | {r['append_max_s']:.2f} | {r['appends_over_1s']} "
        f"| {r['checkpoints_beside']} | {r['data_files']:,} | {r['files_per_hour']:,.0f} "
        f"| {r['cores']:.2f} | {r['records_per_cpu_s']:,.0f} | {r['not_landed']:,} |"
        for r in rows
    ]
    name = "freshness_peers" if any(by_connect(r) for r in runs) else "freshness"
    publish(f"{name}_{args.cluster}", "\n".join(lines), {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
