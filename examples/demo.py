"""``make demo``: the autoscaler end to end on this machine, in about three minutes.

An embedded Kafka (3 brokers; ``--kafka apache``: one Apache Kafka node started from its jars,
where the sidecar measures bytes/s through DescribeLogDirs), 2 topics x 12 partitions, load
whose per-partition rates
follow the paper's random walk with a step up and a step down, the sidecar (local scaler,
default heuristic) starting and stopping SDK consumer processes, each writing what it reads
into Spark tables (one Delta table per topic in a local warehouse) through a Spark Connect
server the demo starts on 127.0.0.1, so consumers stay light Python processes. A live view
shows speeds, desired and actual consumers, lag and each plan's Rscore. At the end: rows in
the tables counted with Spark and compared with what was produced (every record exactly
once), plots of consumers and lag over time. ``--secured`` (with ``--kafka apache``): SASL_SSL
with SCRAM and ACLs, the sidecar and the consumers as two users (examples.demo_secured).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from assignor import TopicPartition
from consumer_sdk.lake.delta.visibility import row_visibility_s
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_root
from consumer_sdk.sink import Record, records_table
from contract.local_ports import free_port
from examples.demo_secured import SecuredDemo
from examples.demo_verdict import judge
from examples.demo_view import moved, plain_line, screen
from examples.load import LoadGenerator, RateWalk
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind, kafka_cluster

ROOT = Path(__file__).parent.parent
TOPICS = ("demo-orders", "demo-clicks")
SPEEDS_TOPIC = "demo.autoscaler.speeds"
PARTITIONS = 12
CAPACITY = 1000.0  # records/s one demo consumer is declared to drain
# The load, sized to what a 2-core machine drains: every consumer writes through one Spark
# Connect server, and there a consumer drains about 800 records/s (measured: 2 consumers
# 1,549-1,669/s, 4 consumers 3,116-3,242/s; benchmarks/results/demo_control.md at ea021f8).
# The walk at scale 1 steps up to about 3,160 records/s, which 4 consumers only just drain:
# the lag grew through the whole high phase. At 0.75 the step is about 2,370 records/s: 3
# consumers' drain, so the sidecar has a count that pays the backlog off within the phase.
# A larger machine drains more: raise --load-scale.
DEFAULT_LOAD_SCALE = 0.75
WALK_LOW, WALK_HIGH = 20.0, 120.0  # records/s a partition at scale 1 (the paper's walk)
VALUE_BYTES = 200
# On Apache Kafka the sidecar measures bytes/s of log growth: a 200-byte value takes about
# 210 bytes in a record batch (length, offset and timestamp deltas, no key) plus its share of
# the 61-byte batch header, so the same consumer drains about 1000 x 230 bytes/s.
LOG_BYTES_PER_RECORD = 230


def fetch_status(port: int) -> dict[str, Any]:
    """The sidecar's /status, or {} while it is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as page:
            return dict(json.loads(page.read()))
    except OSError:
        return {}


DEMO_TABLE_FORMAT = "delta"
DEFAULT_BATCH_WAIT_S = 0.5


def read_tables(spark_remote: str, warehouse: Path) -> Counter[tuple[str, int, int]]:
    """(topic, partition, offset) -> times it is in the tables, counted by Spark."""
    config = SparkSinkConfig(
        warehouse=str(warehouse), spark_remote=spark_remote, table_format=DEMO_TABLE_FORMAT
    )
    session = SparkTableSink(config).open()
    rows: Counter[tuple[str, int, int]] = Counter()
    for topic in TOPICS:
        root = table_root(config, config.table_for(topic))
        if not root.exists():
            continue
        counted = (
            session.read.format(config.table_format)
            .load(str(root))
            .groupBy("topic", "partition", "offset")
            .count()
            .collect()
        )
        for row in counted:
            rows[(row["topic"], int(row["partition"]), int(row["offset"]))] = int(row["count"])
    session.stop()  # before the server goes: a dangling client retries for minutes at exit
    return rows


def freshness_line(warehouse: Path) -> str:
    """The tables' freshness: p50, p99 and max of each row's commit time minus its Kafka
    timestamp, over every demo table (read from their Delta logs)."""
    config = SparkSinkConfig(warehouse=str(warehouse), table_format=DEMO_TABLE_FORMAT)
    roots = [table_root(config, config.table_for(topic)) for topic in TOPICS]
    found = [row_visibility_s(root)[0] for root in roots if root.exists()]
    seconds = np.concatenate(found) if found else np.array([])
    if not seconds.size:
        return "freshness: no rows in the tables"
    p50, p99 = np.percentile(seconds, [50, 99])
    return (
        f"freshness, producer to committed row: p50 {p50:.2f} s, p99 {p99:.2f} s, "
        f"max {seconds.max():.2f} s over {seconds.size} rows"
    )


WARM_UP_BATCHES = 24
WARM_UP_ROWS = 2000


def warm_up(spark_remote: str, scratch: Path, batches: int) -> float:
    """Append throwaway batches through the freshly started Spark Connect server (the same
    sink, format and batch shape as the consumers'), then delete them; returns seconds.

    A JVM compiles its hot paths during its first minute or so: measured in this demo, the
    compiler threads took a quarter to most of a core while the load stepped up. A server
    that consumers write to has been running; this one has not."""
    started = time.monotonic()
    config = SparkSinkConfig(
        warehouse=str(scratch), spark_remote=spark_remote, table_format=DEMO_TABLE_FORMAT
    )
    sink = SparkTableSink(config)
    value = b"x" * VALUE_BYTES
    for batch in range(batches):
        first = batch * WARM_UP_ROWS
        records = [
            Record("warm-up", 0, o, 0, None, value) for o in range(first, first + WARM_UP_ROWS)
        ]
        sink.write_blocking("warm-up", records_table(records))
    sink.open().stop()
    shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started


def plot(samples: list[dict[str, float]], path: Path) -> None:
    """Consumers (desired, running, needed for the load), total lag, and the Rscore of each
    re-plan over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    fig, (top, middle, bottom) = plt.subplots(
        3, 1, figsize=(10, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]}
    )
    top.step(t, [s["desired"] for s in samples], where="post", label="desired", lw=3, alpha=0.4)
    top.step(t, [s["running"] for s in samples], where="post", label="running", lw=1.2)
    top.plot(t, [s["rate"] / CAPACITY for s in samples], label="produced / capacity", alpha=0.6)
    top.set_ylabel("consumers")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    middle.plot(t, [s["lag"] for s in samples], color="tab:red")
    middle.set_ylabel("total lag (records)")
    middle.grid(alpha=0.3)
    replans = [(s["t"], s["rscore"]) for s in samples if s.get("replanned")]
    if replans:
        bottom.stem([x for x, _ in replans], [y for _, y in replans], basefmt=" ")
    bottom.set_ylabel("Rscore of re-plan")
    bottom.set_xlabel("seconds")
    bottom.grid(alpha=0.3)
    fig.suptitle("kafka-autoscaler demo: consumers follow the load")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def capacity_settings(kind: ClusterKind, declared: bool) -> dict[str, str]:
    """One consumer's capacity: records/s on the embedded broker, bytes/s on Apache Kafka;
    measured by the consumers (auto, from CAPACITY) unless ``declared``."""
    given = CAPACITY * LOG_BYTES_PER_RECORD if kind is ClusterKind.APACHE else CAPACITY
    unit = "bytes/s" if kind is ClusterKind.APACHE else "records/s"
    if declared:
        return {"AUTOSCALER_CAPACITY": str(given), "AUTOSCALER_CAPACITY_UNIT": unit}
    return {
        "AUTOSCALER_CAPACITY": "auto",
        "AUTOSCALER_CAPACITY_INITIAL": str(given),
        "AUTOSCALER_CAPACITY_UNIT": unit,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit 1 if a produced record is missing from the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of load")
    parser.add_argument("--scale-down-window", type=float, default=20.0)
    parser.add_argument("--output", type=Path, default=ROOT / "demo-output")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--kafka",
        choices=[ClusterKind.EMBEDDED.value, ClusterKind.APACHE.value],
        default=ClusterKind.EMBEDDED.value,
        help="embedded: librdkafka's mock cluster (default); apache: Apache Kafka from its "
        "jars (Java 17), capacity in bytes/s measured by the sidecar",
    )
    parser.add_argument(
        "--declared-capacity",
        action="store_true",
        help=f"size with the declared capacity ({CAPACITY:g} records/s a consumer) instead "
        "of the one the consumers measure (--capacity auto, from that value)",
    )
    parser.add_argument(
        "--secured",
        action="store_true",
        help="with --kafka apache: SASL_SSL (SCRAM) and ACLs; the sidecar and the consumers "
        "authenticate as two users and only the sidecar may write the speeds topic",
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="print a line per second instead of the live screen (automatic when stdout is "
        "not a terminal)",
    )
    parser.add_argument(
        "--local-spark",
        action="store_true",
        help="each consumer starts its own local Spark session (a JVM) instead of using "
        "the demo's Spark Connect server",
    )
    parser.add_argument(
        "--batch-wait",
        type=float,
        default=DEFAULT_BATCH_WAIT_S,
        help="the consumers' WAIT_TIME_SECS: the longest a batch fills before it is written "
        f"(default {DEFAULT_BATCH_WAIT_S:g}); every batch is a table commit per topic",
    )
    parser.add_argument(
        "--warm-up-batches",
        type=int,
        default=WARM_UP_BATCHES,
        help="throwaway batches written through the fresh Spark Connect server before the "
        f"load starts, so its JVM has compiled its hot paths (default {WARM_UP_BATCHES}, "
        "about 25 s; 0: none)",
    )
    parser.add_argument(
        "--load-scale",
        type=float,
        default=DEFAULT_LOAD_SCALE,
        help="the load's size: its random walk's rates times this (default "
        f"{DEFAULT_LOAD_SCALE:g}: a step up to about 2,400 records/s, what 3 consumers drain "
        "through one Spark Connect server on 2 cores; raise it on a larger machine)",
    )
    args = parser.parse_args(argv)
    if not 0.05 <= args.load_scale <= 20:
        parser.error(f"--load-scale must be in [0.05, 20], got {args.load_scale}")
    if not 0 <= args.warm_up_batches <= 1000:
        parser.error(f"--warm-up-batches must be in [0, 1000], got {args.warm_up_batches}")
    if args.duration < 10:
        parser.error(f"--duration must be >= 10 seconds, got {args.duration}")
    if not 0.01 <= args.batch_wait <= 60:
        parser.error(f"--batch-wait must be in [0.01, 60] seconds, got {args.batch_wait}")
    if args.secured and args.kafka != ClusterKind.APACHE.value:
        parser.error("--secured needs --kafka apache (the embedded broker has no TLS or SASL)")
    out = args.output / time.strftime("%Y%m%d-%H%M%S")
    warehouse = out / "warehouse"
    warehouse.mkdir(parents=True)
    console = Console()
    kind = ClusterKind(args.kafka)
    console.print(f"starting {kind.value} Kafka and a Spark Connect server ...")
    secured = SecuredDemo.make(out / "tls") if args.secured else None
    listeners = secured.listeners if secured is not None else None
    with (
        kafka_cluster(kind, apache_secured=listeners) as kafka,
        SparkConnectServer(warehouse) as spark,
    ):
        if args.warm_up_batches:
            console.print("warming the Spark Connect server up ...")
            took = warm_up(spark.url, out / "warm-up", args.warm_up_batches)
            console.print(
                f"{args.warm_up_batches} throwaway batches written and deleted in {took:.0f} s"
            )
        broker = kafka.broker_handle()
        replication = min(3, broker.brokers)
        for topic in TOPICS:
            broker.create_topic(topic, PARTITIONS, replication)
        broker.create_topic(SPEEDS_TOPIC, 1, replication)
        port = free_port()
        consumer = f"{shlex.quote(sys.executable)} -m consumer_sdk.cli --sink spark"
        security: dict[str, str] = {}
        if secured is not None and isinstance(broker, ApacheKafka):
            secured.grant(broker, "demo", TOPICS, SPEEDS_TOPIC)
            security = secured.environment(broker, "sidecar")
            consumer = secured.consumer_command(broker, consumer)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AUTOSCALER_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "AUTOSCALER_GROUP": "demo",
            "AUTOSCALER_TOPICS": ",".join(TOPICS),
            **capacity_settings(kind, args.declared_capacity),
            "AUTOSCALER_SNAPSHOT_TOPIC": SPEEDS_TOPIC,
            "AUTOSCALER_INTERVAL": "1",
            "AUTOSCALER_WINDOW": "8",
            "AUTOSCALER_MIN_WINDOW": "2",
            "AUTOSCALER_SCALE_DOWN_WINDOW": str(args.scale_down_window),
            "AUTOSCALER_DRAIN_SECONDS": "20",
            "AUTOSCALER_MAX_REPLICAS": "12",
            "AUTOSCALER_SCALER": "local",
            "AUTOSCALER_CONSUMER_COMMAND": consumer,
            "AUTOSCALER_IDENTITY_PREFIX": "sink",
            "AUTOSCALER_HTTP_PORT": str(port),
            "AUTOSCALER_LOCK_FILE": str(out / "sidecar.lock"),
            "AUTOSCALER_SESSION_TIMEOUT_MS": "1500",
            "AUTOSCALER_HEARTBEAT_INTERVAL_MS": "100",
            # The embedded broker's SyncGroup race needs a late leader; Apache Kafka does not.
            "AUTOSCALER_LEADER_DELAY_SECS": "0.1" if kind is ClusterKind.EMBEDDED else "0",
            "AUTOSCALER_WAIT_TIME_SECS": str(args.batch_wait),
            "AUTOSCALER_SPARK_WAREHOUSE": str(warehouse),
            "AUTOSCALER_SPARK_TABLE_FORMAT": DEMO_TABLE_FORMAT,
            **security,
        }
        if not args.local_spark:
            env["AUTOSCALER_SPARK_REMOTE"] = spark.url
            # Every consumer commits through this one server, whose cost is per commit, not
            # per row: with one write in flight a consumer's next batch fills while its
            # write runs instead of becoming another commit. Measured in the 60-second demo
            # (benchmarks/results/demo_60s.md): with one, lag peaked 7-11 s into the step
            # and fell for the rest of it (4 runs); with two it stayed level to its end.
            env.setdefault("AUTOSCALER_WRITES_IN_FLIGHT", "1")
        log = (out / "sidecar.log").open("w")
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        walk = RateWalk(
            [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)],
            low=WALK_LOW * args.load_scale,
            high=WALK_HIGH * args.load_scale,
            delta=10,
            duration_s=args.duration,
            seed=args.seed,
        )
        load = LoadGenerator(kafka.bootstrap_servers, walk, value_bytes=VALUE_BYTES)
        load.start()
        samples: list[dict[str, float]] = []
        previous_plan: dict[str, list[str]] = {}
        last_moves: list[str] = []
        plain = args.no_live or not console.is_terminal  # a pipe gets a line per second
        try:
            with Live(
                console=console,
                refresh_per_second=2,
                transient=False,
                auto_refresh=not plain,
            ) as live:
                while load.is_alive() or (
                    samples and samples[-1]["lag"] > 0 and load.elapsed() < args.duration + 60
                ):
                    status = fetch_status(port)
                    elapsed = load.elapsed()
                    rate = sum(walk.current(elapsed).values()) if load.is_alive() else 0
                    decision = status.get("last_decision") or {}
                    plan = status.get("plan") or {}
                    replanned = bool(previous_plan) and plan != previous_plan
                    if replanned:
                        last_moves = moved(previous_plan, plan)
                    previous_plan = plan or previous_plan
                    samples.append(
                        {
                            "t": elapsed,
                            "at": time.time(),  # to line up with the log's table commits
                            "rate": rate,
                            "running": float(status.get("replicas") or 0),
                            "desired": float(decision.get("desired") or 0),
                            "lag": float(sum((status.get("lags") or {}).values())),
                            "rscore": float(decision.get("planned_rscore") or 0),
                            "replanned": float(replanned),
                        }
                    )
                    if plain:
                        print(plain_line(status, elapsed, args.duration, rate), flush=True)
                    else:
                        lines = screen(status, elapsed, args.duration, rate, last_moves, TOPICS)
                        live.update(Text("\n".join(lines)))
                    time.sleep(1.0)
        finally:
            load.stop()
            load.join(60)
            sidecar.send_signal(signal.SIGTERM)  # stops its consumers: flush, commit, leave
            sidecar.wait(60)
            log.close()
        rows = read_tables(spark.url, warehouse)
    produced = load.acked
    missing = produced - set(rows)
    duplicates = sum(n - 1 for n in rows.values())
    plot(samples, out / "consumers_and_lag.png")
    (out / "samples.json").write_text(json.dumps(samples))
    report = Table(title="what landed in the tables")
    for column in ("topic", "produced", "rows", "distinct", "missing", "duplicates"):
        report.add_column(column, justify="left" if column == "topic" else "right")
    for topic in TOPICS:
        topic_rows = {k: n for k, n in rows.items() if k[0] == topic}
        made = {k for k in produced if k[0] == topic}
        report.add_row(
            topic,
            str(len(made)),
            str(sum(topic_rows.values())),
            str(len(topic_rows)),
            str(len(made - set(topic_rows))),
            str(sum(n - 1 for n in topic_rows.values())),
        )
    console.print(report)
    peak = max((s["running"] for s in samples), default=0)
    console.print(
        f"consumers: peak {peak:.0f}, final {samples[-1]['running'] if samples else 0:.0f}; "
        f"{len(produced)} records produced, {len(missing)} missing, {duplicates} duplicated\n"
        f"files: {out} (warehouse/kafka.db/<topic>/ Delta tables, consumers_and_lag.png, "
        "samples.json, sidecar.log)\n"
        f"read them: spark.read.format('delta').load('{warehouse}/kafka.db/demo_orders'), or "
        f"without Spark: deltalake.DeltaTable('{warehouse}/kafka.db/demo_orders')"
    )
    console.print(freshness_line(warehouse))
    console.print("\n".join(["the control loop:", *judge(samples, args.duration).lines()]))
    return 0 if not missing and not duplicates and load.failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
