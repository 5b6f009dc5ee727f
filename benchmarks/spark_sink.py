"""Kafka -> SDK -> Spark table throughput per table format, next to Spark alone, Spark
Structured Streaming and the raw client, one run.

Per value size (200 B, 1 KiB) one topic is filled on the chosen Kafka cluster (Apache Kafka by
default). For each Spark mode (local session, Spark Connect server on 127.0.0.1), table format
(delta, iceberg, parquet) and batch size, in the same run:

- **sdk -> table**: one AutoscalingConsumer with SparkTableSink reads the whole topic in a
  fresh group into a fresh table; time from assignment to the last row committed (Delta and
  Iceberg: pyarrow writes the data files and the session's Delta or Iceberg commits them,
  through Spark Connect by the server's command plugin, the sink's default; **Spark writes
  the files**: ``file_writer="spark"``, as through a Connect server without the plugin);
- **spark alone**: the same Spark session writes Arrow batches of the same rows and size into
  the same format (Delta/Iceberg: an append each; parquet: staged files, as the sink had
  Spark write them until pyarrow did), no Kafka, one after another, and again with two
  batches at once (the SDK's default ``writes_in_flight``);
- **structured streaming**: what a Spark user would run instead: Spark's Kafka source on the
  same topic into the same format with a checkpoint, ``trigger(availableNow=True)``,
  ``maxOffsetsPerTrigger`` = the records of one batch; time from ``start()`` to the end;
  **one trigger**: the same without ``maxOffsetsPerTrigger`` (the whole topic in one
  micro-batch, Spark's best case). The Kafka source's ``fetch.max.wait.ms`` is
  ``--streaming-fetch-wait-ms`` (10 by default; Kafka's default of 500 makes every task
  that reaches the end of a partition of this idle topic wait that long, about 15 s of a
  64-partition read on 2 cores: an artifact of a topic nobody writes to, not of
  Structured Streaming);
- **raw client**: aiokafka reading the same topic (once per value size).

MiB/s counts value bytes. ``python -m benchmarks.spark_sink [--cluster apache|embedded]``
writes ``results/spark_sink_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.consume_throughput import fill, run_aiokafka, steady_rate
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.lake.arrow_batch import ValueCodec, to_arrow, with_ingest_date
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import descriptor_path, table_identifier, table_root
from consumer_sdk.records import fetch_sizes
from consumer_sdk.sink import Record
from local_kafka.clusters import ClusterKind, kafka_cluster

PARTITIONS = 64
MIB = 1024 * 1024
SDK = "sdk -> table"  # the columnar record path (record_path="columns")
SDK_RECORDS = "sdk -> table, record path"  # record_path="records"
# fetch_sizes.FETCH_WITHIN_BATCH off: the client keeps its whole fetch ahead while a full
# batch waits for a write slot (the SDK before 2026-11-26); --compare-fetch-ahead
SDK_WHOLE_AHEAD = "sdk -> table, whole fetch ahead while a batch waits"
SDK_SPARK_FILES = "sdk -> table, Spark writes the files"  # file_writer="spark"
ALONE = "spark alone"
ALONE_2 = "spark alone, 2 at once"
STREAMING = "structured streaming"
STREAMING_ONE = "structured streaming, one trigger"


class CountingSink(SparkTableSink):
    """The real sink, plus an event once ``expected`` rows are in the table, and when each
    write ended with how many rows were in by then."""

    def __init__(self, config: SparkSinkConfig, expected: int) -> None:
        super().__init__(config)
        self.expected = expected
        self.done = asyncio.Event()
        self.marks: list[tuple[float, int]] = []

    async def write(self, topic: str, table: pa.Table) -> None:
        await super().write(topic, table)
        self._mark()

    async def publish(self, staged: object) -> None:
        await super().publish(staged)
        self._mark()

    def _mark(self) -> None:
        self.marks.append((time.perf_counter(), self.rows_written))
        if self.rows_written >= self.expected:
            self.done.set()


@dataclass(frozen=True)
class Timing:
    """One run: seconds end to end, and rows/s in steady state (None: too few batches)."""

    seconds: float
    steady_rows_per_s: float | None
    files: int | None = None  # data files in the table after the run


def data_files(session: Any, config: SparkSinkConfig, table: str, root: Path) -> int:
    """Data files the table holds now, as its format counts them (Delta: the live files of
    its log; Iceberg: its ``files`` metadata table; parquet: the files on disk)."""
    if config.table_format == "delta":
        return int(session.sql(f"DESCRIBE DETAIL delta.`{root}`").collect()[0]["numFiles"])
    if config.table_format == "iceberg":
        name = f"{table_identifier(config, table)}.`files`"
        return int(session.sql(f"SELECT COUNT(*) AS n FROM {name}").collect()[0]["n"])
    return sum(1 for _ in root.rglob("*.parquet"))


def run_sdk(
    bootstrap: str,
    topic: str,
    sink_config: SparkSinkConfig,
    batch: int,
    count: int,
    record_path: str = "columns",
) -> Timing:
    """Seconds from assignment to the last row in the table; steady-state rows/s."""

    async def go() -> Timing:
        sink = CountingSink(sink_config, count)
        config = ConsumerConfig(
            bootstrap_servers=bootstrap,
            group=f"bench-{uuid.uuid4().hex[:8]}",
            topics=(topic,),
            capacity=1.0,
            member_identity="bench-0",
            batch_bytes=batch,
            wait_time_secs=0.5,
            replan_after_secs=0,
            record_path=record_path,
        )
        consumer = AutoscalingConsumer(config, sink)
        await consumer.start()  # the Spark session starts here, before the clock
        runner = asyncio.create_task(consumer.run_async())
        while not consumer.assigned:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        await sink.done.wait()
        elapsed = time.perf_counter() - started
        table = sink_config.table_for(topic)
        files = await asyncio.to_thread(
            data_files, sink.open(), sink_config, table, table_root(sink_config, table)
        )
        consumer.request_stop()
        await runner
        return Timing(elapsed, steady_rate(sink.marks), files)

    return asyncio.run(go())


def arrow_batches(value_size: int, batch: int, count: int) -> list[pa.Table]:
    """``count`` rows of ``value_size``-byte values as Arrow tables of ``batch`` bytes each."""
    per_batch = max(1, batch // value_size)
    value = b"x" * value_size
    tables = []
    for start in range(0, count, per_batch):
        size = min(per_batch, count - start)
        records = [
            Record("alone", (start + i) * PARTITIONS // count, start + i, 0, None, value)
            for i in range(size)
        ]
        tables.append(to_arrow(records, ValueCodec(), datetime.now(UTC)).rows)
    return tables


def run_spark_alone(sink: SparkTableSink, tables: Sequence[pa.Table], at_once: int = 1) -> Timing:
    """Seconds for Spark to write ``tables`` (built beforehand: this is Spark's share only)
    into a table laid out as the sink's (same format; Delta and Iceberg: partitioned by
    ingest date, the date column added before the clock), ``at_once`` of them in flight."""
    session = sink.open()
    config = sink.config
    name = f"alone_{uuid.uuid4().hex[:8]}"
    target = config.warehouse_path / "spark-alone" / name
    if config.table_format != "parquet":
        sink._ensure_table(name, tables[0].schema)  # created as the sink creates its own
        target = table_root(config, name)
        today = datetime.now(UTC).date()
        tables = [with_ingest_date(t, today) for t in tables]

    def write(i: int) -> None:
        if config.table_format == "parquet":  # as the sink staged files before 2026-11-26
            sink._frame(session, tables[i]).write.mode("error").parquet(str(target / str(i)))
        elif config.table_format == "delta":
            sink._frame(session, tables[i]).write.format("delta").mode("append").save(str(target))
        else:
            sink._frame(session, tables[i]).writeTo(table_identifier(config, name)).append()

    marks: list[tuple[float, int]] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        for i, _ in enumerate(pool.map(write, range(len(tables)))):  # in order, as they end
            marks.append((time.perf_counter(), (marks[-1][1] if marks else 0) + tables[i].num_rows))
    elapsed = time.perf_counter() - started
    files = data_files(session, config, name, target)
    if config.table_format == "iceberg":
        session.sql(f"DROP TABLE {table_identifier(config, name)} PURGE")
    shutil.rmtree(target, ignore_errors=True)
    if config.table_format != "parquet":
        descriptor_path(target, config.table_format).unlink(missing_ok=True)
    return Timing(elapsed, steady_rate(marks), files)


def run_streaming(
    sink: SparkTableSink,
    bootstrap: str,
    topic: str,
    per_trigger: int | None,
    count: int,
    fetch_wait_ms: int,
) -> Timing:
    """Structured Streaming from ``topic`` into a fresh table of the sink's format; seconds
    from ``start()`` to the end of ``availableNow``. ``per_trigger`` None: no
    ``maxOffsetsPerTrigger``, the whole topic in one micro-batch. Steady: rows over the
    trigger times of every micro-batch but the first and the last."""
    session = sink.open()
    config = sink.config
    name = f"streaming_{uuid.uuid4().hex[:8]}"
    checkpoint = config.warehouse_path / "checkpoints" / name
    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.fetch.max.wait.ms", str(fetch_wait_ms))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(per_trigger))
    frame = reader.load().select("topic", "partition", "offset", "timestamp", "key", "value")
    writer = (
        frame.writeStream.format(config.table_format)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    if config.table_format == "iceberg":
        query = writer.toTable(table_identifier(config, name))
    else:
        query = writer.start(str(table_root(config, name)))
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    # The progress reports' properties: in Spark Connect the raw numInputRows key may be
    # empty, the property sums the sources.
    batches = [
        (int(p.numInputRows), float(p.durationMs["triggerExecution"]) / 1000)
        for p in query.recentProgress
        if p.numInputRows
    ]
    read = sum(rows for rows, _ in batches)
    if read != count:
        raise RuntimeError(f"structured streaming read {read} records of {count}")
    middle = batches[1:-1]
    steady = sum(r for r, _ in middle) / sum(t for _, t in middle) if middle else None
    return Timing(elapsed, steady, data_files(session, config, name, table_root(config, name)))


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/spark_sink_<cluster>.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--mib", type=int, default=96, help="MiB per value size (<= 250)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-connect", action="store_true")
    parser.add_argument("--no-local", action="store_true", help="Spark Connect only")
    parser.add_argument("--no-streaming", action="store_true")
    parser.add_argument(
        "--streaming-fetch-wait-ms",
        default="10",
        help="comma-separated fetch.max.wait.ms values for Structured Streaming's Kafka source",
    )
    parser.add_argument(
        "--streaming-one-trigger-only",
        action="store_true",
        help="Structured Streaming's one-trigger read only (its best case), not per batch",
    )
    parser.add_argument(
        "--no-record-path", action="store_true", help="skip the SDK on record_path=records"
    )
    parser.add_argument(
        "--compare-fetch-ahead",
        action="store_true",
        help="add an SDK row whose client keeps its whole fetch ahead while a batch waits",
    )
    parser.add_argument("--value-sizes", default="200,1024", help="comma-separated bytes")
    parser.add_argument("--batch-mib", default="16", help="comma-separated MiB")
    parser.add_argument("--formats", default="delta,iceberg,parquet", help="comma-separated")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--name", default="", help="results file name")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="spark-sink-bench-"))
    warehouse = work / "warehouse"
    modes = [m for m in ("local", "connect") if not getattr(args, f"no_{m}")]
    formats = args.formats.split(",")
    kind = ClusterKind(args.cluster)
    try:
        with kafka_cluster(kind) as broker, SparkConnectServer(warehouse) as server:
            broker_text = broker_line(broker)
            # The process's one local session, with the lake jars whatever format comes first.
            SparkTableSink(SparkSinkConfig(warehouse=str(warehouse))).open()
            for value_size in (int(v) for v in args.value_sizes.split(",")):
                topic = broker.create_topic(args.partitions, prefix=f"spark-{value_size}")
                count = fill(broker.bootstrap_servers, topic, value_size, args.mib, args.partitions)
                raw = [
                    run_aiokafka(broker.bootstrap_servers, topic, f"raw-{value_size}-{r}", count)
                    for r in range(args.rounds)
                ]
                rows.append(
                    _row(
                        value_size,
                        "-",
                        "-",
                        0,
                        "raw aiokafka",
                        count,
                        [Timing(t, None) for t in raw],
                    )
                )
                print(f"{value_size} B raw aiokafka {statistics.median(raw):.2f} s", flush=True)
                for mode in modes:
                    for table_format in formats:
                        rows += _measure_format(
                            args,
                            broker.bootstrap_servers,
                            topic,
                            count,
                            value_size,
                            mode,
                            SparkSinkConfig(
                                warehouse=str(warehouse),
                                database=f"bench_{mode}_{table_format}_{value_size}",
                                spark_remote=server.url if mode == "connect" else "",
                                table_format=table_format,
                            ),
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    publish(
        args.name or f"spark_sink_{args.cluster}",
        _table(rows, args, broker_text),
        {"args": vars(args), "broker": broker_text, "rows": rows},
        write=not args.no_write,
    )
    return 0


def _measure_format(
    args: argparse.Namespace,
    bootstrap: str,
    topic: str,
    count: int,
    value_size: int,
    mode: str,
    config: SparkSinkConfig,
) -> list[dict[str, Any]]:
    """Every path for one Spark mode and table format, rounds alternating."""
    rows: list[dict[str, Any]] = []
    alone_sink = SparkTableSink(config)
    warm_up = arrow_batches(value_size, 4 * MIB, count // 8)
    run_spark_alone(alone_sink, warm_up)  # JIT warm-up
    # The SDK's own first pass in this process (its appends with offsets, the history reads
    # on assignment) warms code Spark alone does not run; a long-lived consumer pays it once.
    warm_config = dataclasses.replace(config, table_template="{topic}_warm_up")
    run_sdk(bootstrap, topic, warm_config, 16 * MIB, count)
    for batch_mib in (int(b) for b in args.batch_mib.split(",")):
        waits = [int(w) for w in args.streaming_fetch_wait_ms.split(",")]
        streaming = [] if args.no_streaming else streaming_paths(waits)
        if args.streaming_one_trigger_only:
            streaming = [path for path in streaming if path[1]]
        runs: dict[str, list[Timing]] = {
            SDK: [],
            SDK_RECORDS: [],
            SDK_SPARK_FILES: [],
            SDK_WHOLE_AHEAD: [],
            ALONE: [],
            ALONE_2: [],
            **{path: [] for path, _, _ in streaming},
        }
        tables = arrow_batches(value_size, batch_mib * MIB, count)
        for r in range(args.rounds):  # alternating: noise hits every path alike
            table_config = dataclasses.replace(config, table_template=f"{{topic}}_{batch_mib}_{r}")
            runs[SDK].append(run_sdk(bootstrap, topic, table_config, batch_mib * MIB, count))
            if not args.no_record_path:
                records_config = dataclasses.replace(
                    config, table_template=f"{{topic}}_{batch_mib}_{r}_records"
                )
                runs[SDK_RECORDS].append(
                    run_sdk(bootstrap, topic, records_config, batch_mib * MIB, count, "records")
                )
            if config.files_by_arrow:
                spark_files = dataclasses.replace(
                    config,
                    table_template=f"{{topic}}_{batch_mib}_{r}_spark_files",
                    file_writer="spark",
                )
                runs[SDK_SPARK_FILES].append(
                    run_sdk(bootstrap, topic, spark_files, batch_mib * MIB, count)
                )
            if args.compare_fetch_ahead:
                whole_ahead = dataclasses.replace(
                    config, table_template=f"{{topic}}_{batch_mib}_{r}_whole_ahead"
                )
                fetch_sizes.FETCH_WITHIN_BATCH = False
                try:
                    runs[SDK_WHOLE_AHEAD].append(
                        run_sdk(bootstrap, topic, whole_ahead, batch_mib * MIB, count)
                    )
                finally:
                    fetch_sizes.FETCH_WITHIN_BATCH = True
            runs[ALONE].append(run_spark_alone(alone_sink, tables))
            runs[ALONE_2].append(run_spark_alone(alone_sink, tables, at_once=2))
            for path, one_trigger, wait in streaming:
                per_trigger = None if one_trigger else max(1, batch_mib * MIB // value_size)
                runs[path].append(
                    run_streaming(alone_sink, bootstrap, topic, per_trigger, count, wait)
                )
            print(
                f"{value_size} B {mode} {config.table_format} {batch_mib} MiB: "
                + ", ".join(f"{path} {t[-1].seconds:.2f} s" for path, t in runs.items() if t),
                flush=True,
            )
        for path, timings in runs.items():
            if timings:
                rows.append(
                    _row(value_size, mode, config.table_format, batch_mib, path, count, timings)
                )
    shutil.rmtree(config.warehouse_path / f"{config.database}.db", ignore_errors=True)
    return rows


def streaming_paths(fetch_waits_ms: Sequence[int]) -> list[tuple[str, bool, int]]:
    """(path name, one trigger?, fetch.max.wait.ms) per Structured Streaming run of a round;
    the wait is named in the path only when several are compared."""
    paths = []
    for wait in fetch_waits_ms:
        suffix = f" (fetch wait {wait} ms)" if len(fetch_waits_ms) > 1 else ""
        paths += [(STREAMING + suffix, False, wait), (STREAMING_ONE + suffix, True, wait)]
    return paths


def _row(
    value_size: int,
    mode: str,
    table_format: str,
    batch_mib: int,
    path: str,
    count: int,
    runs: list[Timing],
) -> dict[str, Any]:
    median = statistics.median(t.seconds for t in runs)
    steady = [t.steady_rows_per_s for t in runs if t.steady_rows_per_s is not None]
    return {
        "value_bytes": value_size,
        "spark": mode,
        "format": table_format,
        "batch_mib": batch_mib,
        "path": path,
        "records": count,
        "median_s": median,
        "mib_per_s": count * value_size / MIB / median,
        "rows_per_s": count / median,
        "steady_mib_per_s": statistics.median(steady) * value_size / MIB if steady else None,
        "runs_s": [t.seconds for t in runs],
        "files": [t.files for t in runs],
        "files_per_batch": (
            statistics.median(t.files for t in runs if t.files is not None)
            / max(1, -(-count * value_size // (batch_mib * MIB)))
            if batch_mib and any(t.files is not None for t in runs)
            else None
        ),
    }


def _table(rows: list[dict[str, Any]], args: argparse.Namespace, broker_text: str) -> str:
    lines = [
        "# Kafka -> SDK -> Spark table per format, per consumer process",
        "",
        machine_line(),
        broker_text,
        f"{args.mib} MiB of values per value size ({args.partitions} partitions), median of "
        f"{args.rounds} alternating rounds after a warm-up (Spark alone, then one SDK pass "
        "over the topic). 'sdk -> table': "
        "SparkTableSink on the columnar record path (record_path=columns; ', record path': "
        "record_path=records, a Record per record; Delta and Iceberg: pyarrow writes the "
        "data files and the session's Delta or Iceberg commits them, through Spark Connect "
        "by the server's command plugin (since 2026-11-27), the default; ', Spark writes "
        "the files': file_writer=spark, as through a Connect server without the plugin; "
        "', whole fetch ahead "
        "while a batch waits': the client goes on fetching ahead while a full batch waits "
        "for a write slot, as the SDK did before 2026-11-26), time from assignment to "
        "the last row committed (exactly-once "
        "commit included; the SDK's defaults: tables created when the consumer starts, "
        "before the clock, and two batches in the sink at once). 'spark alone': the same "
        "session writing the same rows as Arrow batches of the same size into the same "
        "format, no Kafka, one after another; '2 at once': two in flight, as the SDK does. "
        "'structured streaming': Spark's Kafka source into the same format with a "
        "checkpoint, trigger(availableNow), maxOffsetsPerTrigger = one batch's records, time "
        "from start() (query planning included); ', one trigger': no maxOffsetsPerTrigger, "
        "the whole topic in one micro-batch; the Kafka source's fetch.max.wait.ms = "
        f"{args.streaming_fetch_wait_ms} ms (Kafka's default, 500, makes each task that "
        "reaches the end of a partition of an idle topic wait that long). Ratio = path / "
        "spark alone (one after another), 'vs 2' = path / spark alone 2 at once. 'Steady': "
        "from the end of the first batch to the end of the last but one (streaming: rows "
        "over the trigger times of every micro-batch but the first and the last). "
        "'Files/batch': data files in the table after the run (Delta: live files of its "
        "log; Iceberg: its files table; parquet: on disk), median over rounds, per batch "
        "of the given size.",
        "",
        "| value | spark | format | batch | path | MiB/s | rows/s | ratio | vs 2 "
        "| steady MiB/s | steady ratio | files/batch |",
        "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_key = {
        (r["value_bytes"], r["spark"], r["format"], r["batch_mib"], r["path"]): r for r in rows
    }
    for r in rows:
        key = (r["value_bytes"], r["spark"], r["format"], r["batch_mib"])
        ratio = versus_2 = steady_ratio = ""
        alone, alone_2 = by_key.get((*key, ALONE)), by_key.get((*key, ALONE_2))
        if r["spark"] != "-" and r["path"] not in (ALONE, ALONE_2) and alone is not None:
            ratio = f"{r['mib_per_s'] / alone['mib_per_s']:.2f}"
            if alone_2 is not None:
                versus_2 = f"{r['mib_per_s'] / alone_2['mib_per_s']:.2f}"
            if r["steady_mib_per_s"] and alone["steady_mib_per_s"]:
                steady_ratio = f"{r['steady_mib_per_s'] / alone['steady_mib_per_s']:.2f}"
        steady = f"{r['steady_mib_per_s']:.1f}" if r["steady_mib_per_s"] else ""
        batch = f"{r['batch_mib']} MiB" if r["batch_mib"] else "-"
        per_batch = f"{r['files_per_batch']:.1f}" if r.get("files_per_batch") else ""
        lines.append(
            f"| {r['value_bytes']} B | {r['spark']} | {r['format']} | {batch} | {r['path']} | "
            f"{r['mib_per_s']:.1f} | {r['rows_per_s']:,.0f} | {ratio} | {versus_2} | {steady} "
            f"| {steady_ratio} | {per_batch} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
