"""Kafka -> SDK -> Spark table throughput, next to the raw client and Spark alone, one run.

Per value size (200 B, 1 KiB) one topic of 48 partitions is filled on the embedded broker.
For each Spark mode (local session, Spark Connect server on 127.0.0.1) and batch size
(4/16/64 MiB), in the same run:

- **sdk -> table**: one AutoscalingConsumer with SparkTableSink reads the whole topic in a
  fresh group into a fresh table; time from assignment to the last row published;
- **spark alone**: the same Spark session writes Arrow batches of the same rows and size as
  staged Parquet (what the sink asks of Spark), no Kafka, no publish, one after another
  (the issue's baseline), and again with two batches at once (the SDK's default
  ``writes_in_flight``: how much of the SDK's rate comes from overlapping Spark jobs);
- **raw client**: aiokafka reading the same topic (once per value size).

MiB/s counts value bytes. ``python -m benchmarks.spark_sink [--mib N]``.
"""

from __future__ import annotations

import argparse
import asyncio
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

from benchmarks.consume_throughput import fill, run_aiokafka
from benchmarks.machine import machine_line
from benchmarks.report import publish
from consumer_sdk.arrow_batch import ValueCodec, to_arrow
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.embedded_process import EmbeddedKafkaProcess
from consumer_sdk.sink import Record
from consumer_sdk.spark_config import SparkSinkConfig
from consumer_sdk.spark_connect import SparkConnectServer
from consumer_sdk.spark_sink import SparkTableSink

PARTITIONS = 64
MIB = 1024 * 1024
ALONE = "spark alone"
ALONE_2 = "spark alone, 2 at once"


class CountingSink(SparkTableSink):
    """The real sink, plus an event once ``expected`` rows are in the table, and when each
    write ended with how many rows were in by then."""

    def __init__(self, config: SparkSinkConfig, expected: int) -> None:
        super().__init__(config)
        self.expected = expected
        self.done = asyncio.Event()
        self.marks: list[tuple[float, int]] = []

    async def write(self, topic: str, records: Sequence[Record]) -> None:
        await super().write(topic, records)
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


def steady_rate(marks: Sequence[tuple[float, int]]) -> float | None:
    """Rows/s from the end of the first batch to the end of the last but one: without the
    first fetch and the pipeline's start (first batch), nor the last batch (it may be
    partial and wait ``wait_time_secs``)."""
    if len(marks) < 3:
        return None
    (start, rows_before), (end, rows_after) = marks[0], marks[-2]
    return (rows_after - rows_before) / (end - start)


def run_sdk(
    bootstrap: str, topic: str, sink_config: SparkSinkConfig, batch: int, count: int
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
        )
        consumer = AutoscalingConsumer(config, sink)
        await consumer.start()  # the Spark session starts here, before the clock
        runner = asyncio.create_task(consumer.run_async())
        while not consumer.assigned:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        await sink.done.wait()
        elapsed = time.perf_counter() - started
        consumer.request_stop()
        await runner
        return Timing(elapsed, steady_rate(sink.marks))

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
    """Seconds for Spark to stage ``tables`` (built beforehand: this is Spark's share only),
    ``at_once`` of them in flight."""
    session = sink.open()
    target = sink.config.warehouse_path / "spark-alone" / uuid.uuid4().hex
    marks: list[tuple[float, int]] = []

    def stage(i: int) -> None:
        sink._stage(session, tables[i], target / str(i))

    started = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        for i, _ in enumerate(pool.map(stage, range(len(tables)))):  # in order, as they end
            marks.append((time.perf_counter(), (marks[-1][1] if marks else 0) + tables[i].num_rows))
    elapsed = time.perf_counter() - started
    shutil.rmtree(target, ignore_errors=True)
    return Timing(elapsed, steady_rate(marks))


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/spark_sink.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=192, help="MiB per value size (<= 250)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-connect", action="store_true")
    parser.add_argument("--value-sizes", default="200,1024", help="comma-separated bytes")
    parser.add_argument("--batch-mib", default="4,16,64", help="comma-separated MiB")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--name", default="spark_sink", help="results file name")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="spark-sink-bench-"))
    modes = ["local"] if args.no_connect else ["local", "connect"]
    try:
        with (
            EmbeddedKafkaProcess(brokers=3) as broker,
            SparkConnectServer(work / "connect") as server,
        ):
            for value_size in (int(v) for v in args.value_sizes.split(",")):
                topic = f"spark-{value_size}"
                broker.create_topic(topic, args.partitions, 1)
                count = fill(broker.bootstrap_servers, topic, value_size, args.mib, args.partitions)
                raw = [
                    run_aiokafka(broker.bootstrap_servers, topic, f"raw-{value_size}-{r}", count)
                    for r in range(args.rounds)
                ]
                rows.append(
                    _row(value_size, "-", 0, "raw aiokafka", count, [Timing(t, None) for t in raw])
                )
                print(f"{value_size} B raw aiokafka {statistics.median(raw):.2f} s", flush=True)
                for mode in modes:
                    config = SparkSinkConfig(
                        warehouse=str(work / "warehouse"),
                        database=f"bench_{mode}_{value_size}",
                        spark_remote=server.url if mode == "connect" else "",
                        # What the committed figures measured; delta and iceberg are not in
                        # this benchmark yet (Spark alone here writes plain parquet files).
                        table_format="parquet",
                    )
                    alone_sink = SparkTableSink(config)
                    warm_up = arrow_batches(value_size, 4 * MIB, count // 8)
                    run_spark_alone(alone_sink, warm_up)  # JIT warm-up
                    for batch_mib in (int(b) for b in args.batch_mib.split(",")):
                        sdk: list[Timing] = []
                        alone: list[Timing] = []
                        alone_2: list[Timing] = []
                        tables = arrow_batches(value_size, batch_mib * MIB, count)
                        for r in range(args.rounds):  # alternating: noise hits both alike
                            table_config = SparkSinkConfig(
                                warehouse=config.warehouse,
                                database=config.database,
                                table_template=f"{{topic}}_{batch_mib}_{r}",
                                spark_remote=config.spark_remote,
                                table_format=config.table_format,
                            )
                            sdk.append(
                                run_sdk(
                                    broker.bootstrap_servers,
                                    topic,
                                    table_config,
                                    batch_mib * MIB,
                                    count,
                                )
                            )
                            alone.append(run_spark_alone(alone_sink, tables))
                            alone_2.append(run_spark_alone(alone_sink, tables, at_once=2))
                            print(
                                f"{value_size} B {mode} {batch_mib} MiB: sdk "
                                f"{sdk[-1].seconds:.2f} s, spark alone {alone[-1].seconds:.2f} s"
                                f" (2 at once {alone_2[-1].seconds:.2f} s)",
                                flush=True,
                            )
                        for path, runs in (
                            ("sdk -> table", sdk),
                            (ALONE, alone),
                            (ALONE_2, alone_2),
                        ):
                            rows.append(_row(value_size, mode, batch_mib, path, count, runs))
                        shutil.rmtree(
                            config.warehouse_path / f"{config.database}.db", ignore_errors=True
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    publish(
        args.name,
        _table(rows, args),
        {"args": vars(args), "rows": rows},
        write=not args.no_write,
    )
    return 0


def _row(
    value_size: int, mode: str, batch_mib: int, path: str, count: int, runs: list[Timing]
) -> dict[str, Any]:
    median = statistics.median(t.seconds for t in runs)
    steady = [t.steady_rows_per_s for t in runs if t.steady_rows_per_s is not None]
    return {
        "value_bytes": value_size,
        "spark": mode,
        "batch_mib": batch_mib,
        "path": path,
        "records": count,
        "median_s": median,
        "mib_per_s": count * value_size / MIB / median,
        "rows_per_s": count / median,
        "steady_mib_per_s": statistics.median(steady) * value_size / MIB if steady else None,
        "runs_s": [t.seconds for t in runs],
    }


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# Kafka -> SDK -> Spark table, per consumer process",
        "",
        machine_line(),
        f"{args.mib} MiB of values per value size on the embedded broker "
        f"({args.partitions} partitions), median of {args.rounds} alternating rounds after a "
        "warm-up write. 'sdk -> table': SparkTableSink, time from assignment to the last row "
        "published (Parquet, exactly-once publish included; the SDK's defaults: tables "
        "created when the consumer starts, before the clock, and two batches in the sink at "
        "once). 'spark alone': the same session staging the same rows as Arrow batches of the "
        "same size, no Kafka, one after another; '2 at once': two in flight, as the SDK "
        "does. Ratio = sdk / spark alone (one after another), 'vs 2' = sdk / spark alone 2 at "
        "once. 'Steady': from the end of the first batch to the end of the last but one (what "
        "a long-running consumer sustains; leaves out the first fetch, the pipeline's start "
        "and the last batch, which may be partial and wait wait_time_secs), the same batches "
        "for every path.",
        "",
        "| value | spark | batch | path | MiB/s | rows/s | ratio | vs 2 | steady MiB/s "
        "| steady ratio |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_key = {(r["value_bytes"], r["spark"], r["batch_mib"], r["path"]): r for r in rows}
    for r in rows:
        key = (r["value_bytes"], r["spark"], r["batch_mib"])
        ratio = versus_2 = steady_ratio = ""
        alone, alone_2 = by_key.get((*key, ALONE)), by_key.get((*key, ALONE_2))
        if r["path"] == "sdk -> table" and alone is not None:
            ratio = f"{r['mib_per_s'] / alone['mib_per_s']:.2f}"
            if alone_2 is not None:
                versus_2 = f"{r['mib_per_s'] / alone_2['mib_per_s']:.2f}"
            if r["steady_mib_per_s"] and alone["steady_mib_per_s"]:
                steady_ratio = f"{r['steady_mib_per_s'] / alone['steady_mib_per_s']:.2f}"
        steady = f"{r['steady_mib_per_s']:.1f}" if r["steady_mib_per_s"] else ""
        batch = f"{r['batch_mib']} MiB" if r["batch_mib"] else "-"
        lines.append(
            f"| {r['value_bytes']} B | {r['spark']} | {batch} | {r['path']} | "
            f"{r['mib_per_s']:.1f} | {r['rows_per_s']:,.0f} | {ratio} | {versus_2} | {steady} "
            f"| {steady_ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
