"""Memory of one consumer process while its sink is the bottleneck, per record path.

A topic of 32 partitions is filled; then, per record path (``records``, ``columns``) and
``writes_in_flight`` (1, 2), a fresh process runs the SDK's consumer over it into a staging
sink whose publish takes ``--publish-secs`` per batch (a slow table: batches queue behind
it). The bound the consumer keeps is ``writes_in_flight`` batches in the sink plus the one
filling, each at most ``batch_bytes`` as it sits in memory (keys, values, headers and each
record's fixed-width cells); the client fetches ahead only into what they leave, and on the
records path a Python object per record comes on top. Measured per process:
resident memory after a warm-up (the same consumer over a 1 MiB topic first: imports,
client and record path loaded), the peak of the measured run (``VmHWM``, reset after the
warm-up), and the most batches the sink held at once.
``python -m benchmarks.consumer_memory [--cluster apache|embedded]`` writes
``results/consumer_memory_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from assignor import TopicPartition
from benchmarks.consume_throughput import fill
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import publish
from consumer_sdk.allocator import pin_mmap_threshold
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.records import fetch_sizes
from consumer_sdk.records.fetch_sizes import fetch_max_bytes
from local_kafka.clusters import ClusterKind, kafka_cluster

PARTITIONS = 32
PIN_ENV = "AUTOSCALER_BENCH_PIN_MMAP_THRESHOLD"
MIB = 1024 * 1024
BATCH_MIB = 16
WARM_UP_MIB = 1  # what each process consumes before it is measured


def resident_kib(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process, KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class SlowTable:
    """A staging sink whose publish takes ``publish_s``: staged batches wait in it."""

    def __init__(self, publish_s: float) -> None:
        self.publish_s = publish_s
        self.rows = 0
        self.held = 0
        self.most_held = 0
        self.largest_bytes = 0  # of a staged batch, in memory (Arrow buffers)

    def _hold(self, rows: int) -> tuple[str, int]:
        self.held += 1
        self.most_held = max(self.most_held, self.held)
        return ("staged", rows)

    async def stage(self, topic: str, table: pa.Table) -> object:
        self.largest_bytes = max(self.largest_bytes, table.get_total_buffer_size())
        return self._hold(table.num_rows)

    async def publish(self, staged: object) -> None:
        assert isinstance(staged, tuple)
        await asyncio.sleep(self.publish_s)
        self.rows += staged[1]
        self.held -= 1

    async def discard(self, staged: object) -> None:
        self.held -= 1

    async def write(self, topic: str, table: pa.Table) -> None:
        self.rows += table.num_rows

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        return {}


def reset_peak_resident() -> None:
    """Make ``VmHWM`` start again from the current resident memory (Linux clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def child(args: argparse.Namespace) -> None:
    """One consumer over the whole topic; prints its measurements as JSON."""

    if os.environ.get(PIN_ENV):
        pin_mmap_threshold()
    if args.fetch_ahead:
        fetch_sizes.FETCH_AHEAD_BATCHES = args.fetch_ahead
    fetch_sizes.FETCH_WITHIN_BATCH = args.within_batch == "1"

    def config_for(topic: str, group: str) -> ConsumerConfig:
        return ConsumerConfig(
            bootstrap_servers=args.bootstrap,
            group=group,
            topics=(topic,),
            capacity=1.0,
            member_identity="memory-0",
            wait_time_secs=0.25,
            batch_bytes=BATCH_MIB * MIB,
            writes_in_flight=args.depth,
            record_path=args.path,
            fetch_max_bytes=int(args.fetch_mib * MIB) if args.fetch_mib else None,
        )

    async def warm_up() -> None:
        """The same consumer over a topic of WARM_UP_MIB first: its imports, its client and
        its record path are then what the process holds before the measured run."""
        sink = SlowTable(0.0)
        consumer = AutoscalingConsumer(config_for(args.warm_topic, f"{args.group}-warm"), sink)
        await consumer.start()
        runner = asyncio.create_task(consumer.run_async())
        while sink.rows < args.warm_expected:
            await asyncio.sleep(0.01)
        consumer.request_stop()
        await runner

    async def go() -> dict[str, Any]:
        cold_kib = resident_kib("VmRSS")
        await warm_up()
        sink = SlowTable(args.publish_secs)
        consumer = AutoscalingConsumer(config_for(args.topic, args.group), sink)
        baseline_kib = resident_kib("VmRSS")
        reset_peak_resident()
        traced_before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        arrow_peak = 0
        traced_peak = 0
        at_peak: list[tuple[str, float]] = []  # where traced memory was, at its peak
        started = time.perf_counter()
        await consumer.start()
        runner = asyncio.create_task(consumer.run_async())
        while sink.rows < args.expected:
            arrow_peak = max(arrow_peak, pa.total_allocated_bytes())
            if tracemalloc.is_tracing():
                # The peak since the last sample; a snapshot (its own objects are traced)
                # is taken and dropped before the peak is reset, so it never counts.
                window_peak = tracemalloc.get_traced_memory()[1] - traced_before
                if window_peak > traced_peak + 2 * MIB:
                    at_peak = allocation_sites(tracemalloc.take_snapshot())
                traced_peak = max(traced_peak, window_peak)
                tracemalloc.reset_peak()
            await asyncio.sleep(0.005)
        if tracemalloc.is_tracing():
            traced_peak = max(traced_peak, tracemalloc.get_traced_memory()[1] - traced_before)
        elapsed = time.perf_counter() - started
        consumer.request_stop()
        await runner
        return {
            "cold_mib": cold_kib / 1024,
            "baseline_mib": baseline_kib / 1024,
            "peak_mib": resident_kib("VmHWM") / 1024,
            "arrow_peak_mib": arrow_peak / MIB,
            "traced_peak_mib": traced_peak / MIB if tracemalloc.is_tracing() else None,
            "arrow_pool": pa.default_memory_pool().backend_name,
            "traced_at_peak_mib": at_peak,
            "most_batches_in_sink": sink.most_held,
            "batch_in_memory_mib": sink.largest_bytes / MIB,
            "seconds": elapsed,
        }

    print(json.dumps(asyncio.run(go())), flush=True)


# Allocator settings a row can run under (environment of the child process): Arrow's
# default pool (jemalloc or mimalloc as the wheel ships) or the system allocator, and glibc's
# mmap threshold pinned (by default it grows after large frees, so later large buffers come
# from the heap, which keeps freed pages resident).
ALLOCATORS: dict[str, dict[str, str]] = {
    "default": {},
    "arrow system pool": {"ARROW_DEFAULT_MEMORY_POOL": "system"},
    "mmap threshold 128 KiB": {"MALLOC_MMAP_THRESHOLD_": "131072"},
    "mmap threshold 16 KiB": {"MALLOC_MMAP_THRESHOLD_": "16384"},
    "system pool + mmap 128 KiB": {
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_MMAP_THRESHOLD_": "131072",
    },
    # What the SDK's own program does at start (consumer_sdk.allocator): mallopt, in-process.
    "mmap threshold pinned at start (the consumer program's default)": {PIN_ENV: "1"},
    # Python's allocation tracer on (slower): the peak of what Python objects and numpy
    # arrays held, beside Arrow's pool.
    "traced": {"PYTHONTRACEMALLOC": "1"},
}


def allocation_sites(snapshot: tracemalloc.Snapshot, top: int = 8) -> list[tuple[str, float]]:
    """The ``top`` source lines holding the most traced memory, MiB each."""
    stats = snapshot.statistics("lineno")[:top]
    return [
        (f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}", s.size / MIB)
        for s in stats
    ]


def measure(
    bootstrap: str,
    topic: str,
    expected: int,
    path: str,
    depth: int,
    publish_s: float,
    warm_up: tuple[str, int],
    allocator: str = "default",
    fetch_mib: float = 0.0,
    fetch_ahead: float = 0.0,
    within_batch: bool = True,
) -> dict[str, Any]:
    """Run one child process and return its measurements (``warm_up``: the topic it reads
    first and its record count; ``fetch_mib`` 0: the SDK's default fetch_max_bytes;
    ``fetch_ahead`` 0: its default fetch ahead, in batches; ``within_batch``: the fetch
    ahead stops once the batch being built is full, as the SDK does)."""
    group = (
        f"memory-{topic}-{path}-{depth}-{list(ALLOCATORS).index(allocator)}-{fetch_mib:g}"
        f"-{fetch_ahead:g}-{int(within_batch)}"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.consumer_memory",
            "--child",
            f"--bootstrap={bootstrap}",
            f"--topic={topic}",
            f"--group={group}",
            f"--expected={expected}",
            f"--path={path}",
            f"--depth={depth}",
            f"--publish-secs={publish_s}",
            f"--fetch-mib={fetch_mib}",
            f"--fetch-ahead={fetch_ahead}",
            f"--within-batch={int(within_batch)}",
            f"--warm-topic={warm_up[0]}",
            f"--warm-expected={warm_up[1]}",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **ALLOCATORS[allocator]},
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bound_check(row: Mapping[str, Any]) -> str:
    """Whether a row's working set is within its bound; a traced row's counts the tracer's
    own memory, so its traced peak is compared instead."""
    if row["traced_peak_mib"] is not None:
        held = row["traced_peak_mib"]
        return f"traced peak: {'yes' if held <= row['bound_mib'] else 'no'}"
    return "yes" if row["working_mib"] <= row["bound_mib"] else "no"


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/consumer_memory_<cluster>.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--mib", type=int, default=128, help="MiB per value size")
    parser.add_argument("--publish-secs", type=float, default=1.0)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--allocators",
        default="default",
        help=f"comma-separated, of: {', '.join(ALLOCATORS)}",
    )
    parser.add_argument("--paths", default="records,columns", help="record paths")
    parser.add_argument(
        "--fetch-max-mib",
        default="",
        help="comma-separated fetch_max_bytes values in MiB to compare ('' or 0: the SDK's "
        "default)",
    )
    parser.add_argument(
        "--fetch-ahead-batches",
        default="",
        help="comma-separated fetch-ahead sizes in batches to compare ('' or 0: the SDK's "
        f"default, {fetch_sizes.FETCH_AHEAD_BATCHES:g})",
    )
    parser.add_argument(
        "--fetch-within-batch",
        default="1",
        help="comma-separated 1/0: the fetch ahead stops once the batch being built is full "
        "(1, the SDK's default) or stays whole (0, as before 2026-11-26)",
    )
    parser.add_argument("--name", default="", help="results file name")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("bootstrap", "topic", "group", "path", "warm-topic"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    parser.add_argument("--expected", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--warm-expected", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fetch-mib", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--fetch-ahead", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--within-batch", default="1", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    allocators = args.allocators.split(",")
    if unknown := [a for a in allocators if a not in ALLOCATORS]:
        parser.error(f"--allocators: {unknown[0]!r} is not one of {', '.join(ALLOCATORS)}")
    if args.child:
        child(args)
        return 0
    rows: list[dict[str, Any]] = []
    kind = ClusterKind(args.cluster)
    with kafka_cluster(kind) as broker:
        broker_text = broker_line(broker)
        for value_size in (200, 1024):
            topic = broker.create_topic(PARTITIONS, prefix=f"memory-{value_size}")
            count = fill(broker.bootstrap_servers, topic, value_size, args.mib)
            warm_topic = broker.create_topic(PARTITIONS, prefix=f"memory-warm-{value_size}")
            warm_count = fill(broker.bootstrap_servers, warm_topic, value_size, WARM_UP_MIB)
            fetches = [float(f or 0) for f in args.fetch_max_mib.split(",")]
            aheads = [float(f or 0) for f in args.fetch_ahead_batches.split(",")]
            withins = [w == "1" for w in args.fetch_within_batch.split(",")]
            for path, depth, allocator, fetch_mib, ahead, within in itertools.product(
                args.paths.split(","), (1, 2), allocators, fetches, aheads, withins
            ):
                row = measure(
                    broker.bootstrap_servers,
                    topic,
                    count,
                    path,
                    depth,
                    args.publish_secs,
                    (warm_topic, warm_count),
                    allocator,
                    fetch_mib,
                    ahead,
                    within,
                )
                ahead = ahead or fetch_sizes.FETCH_AHEAD_BATCHES
                row.update(
                    within_batch=within,
                    allocator=allocator,
                    fetch_max_mib=fetch_mib or fetch_max_bytes(BATCH_MIB * MIB) / MIB,
                    value_bytes=value_size,
                    record_path=path,
                    writes_in_flight=depth,
                    bound_mib=(depth + 1) * BATCH_MIB,
                    fetch_ahead_batches=ahead,
                    bound_with_fetch_mib=(depth + 1 + ahead) * BATCH_MIB,
                )
                row["working_mib"] = row["peak_mib"] - row["baseline_mib"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    lines = [
        f"# Consumer memory with a slow sink on {kind.value} Kafka",
        "",
        machine_line(),
        broker_text,
        f"{args.mib} MiB per value size, 32 partitions, one consumer process per row; "
        f"{BATCH_MIB} MiB batches, each publish takes {args.publish_secs:g} s, so batches queue "
        "behind the sink. Bound: (writes_in_flight + 1) batches of batch_bytes, a batch "
        "counted as it sits in memory (keys, values, headers, and 34 B of fixed-width cells "
        "a record; until 2026-11-27 keys and values only); the client fetches ahead only "
        "into what those leave. 'Bound with the fetch ahead': writes_in_flight + 1 + the "
        "fetch-ahead budget, the bound before that change. Each process first "
        "consumes a topic of "
        f"{WARM_UP_MIB} MiB with the same settings (warm-up: imports, client, record path), "
        "then the measured topic with a fresh consumer. Working set: peak resident memory "
        "of the measured run minus resident memory after the warm-up; on the records path it "
        "also holds a Python object per record. Cold RSS: before the warm-up. Arrow peak: "
        "the most bytes Arrow's memory pool held at once (sampled "
        "every 5 ms). Traced peak: the most Python objects and numpy arrays held at once "
        "(tracemalloc, on in the 'traced' rows only). Allocator: the child's environment "
        "(ALLOCATORS in the benchmark). Fetch ahead stops at a full batch: 'yes' is the "
        "SDK's (the client fetches only into the room the batch being built has left), 'no' "
        "keeps the whole fetch-ahead budget while the full batch waits for the sink. Largest "
        "batch in memory: the Arrow buffers of the largest batch the sink was given (keys "
        "and values, and offsets, timestamps, partitions, headers; a slice counts its whole "
        "buffers).",
        "",
        "| value | record path | writes in flight | allocator | fetch max (MiB) | "
        "fetch ahead (batches) | fetch ahead stops at a full batch | bound (MiB) | "
        "bound with the fetch ahead (MiB) | most batches in sink | largest batch in memory "
        "(MiB) | cold RSS (MiB) | "
        "RSS after warm-up (MiB) | peak RSS (MiB) | working set (MiB) | working set within "
        "the bound | Arrow peak (MiB) | traced peak (MiB) |",
        "|---:|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['value_bytes']} B | {r['record_path']} | {r['writes_in_flight']} | "
            f"{r['allocator']} ({r['arrow_pool']}) | {r['fetch_max_mib']:g} | "
            f"{r['fetch_ahead_batches']:g} | {'yes' if r['within_batch'] else 'no'} | "
            f"{r['bound_mib']} | {r['bound_with_fetch_mib']:g} | "
            f"{r['most_batches_in_sink']} | {r['batch_in_memory_mib']:.1f} | "
            f"{r['cold_mib']:.0f} | {r['baseline_mib']:.0f} | {r['peak_mib']:.0f} | "
            f"{r['working_mib']:.0f} | "
            f"{bound_check(r)} | "
            f"{r['arrow_peak_mib']:.0f} | "
            + (f"{r['traced_peak_mib']:.0f} |" if r["traced_peak_mib"] is not None else " |")
        )
    traced = [r for r in rows if r.get("traced_at_peak_mib")]
    if traced:
        lines += ["", "Where traced memory was at its highest sample (MiB per source line):", ""]
        for r in traced:
            sites = ", ".join(f"`{site}` {mib:.0f}" for site, mib in r["traced_at_peak_mib"])
            lines.append(
                f"- {r['value_bytes']} B, {r['record_path']}, writes in flight "
                f"{r['writes_in_flight']}, {r['allocator']}: {sites}"
            )
    publish(
        args.name or f"consumer_memory_{kind.value}",
        "\n".join(lines),
        {
            "args": {k: v for k, v in vars(args).items() if v is not None},
            "broker": broker_text,
            "rows": rows,
        },
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
