"""Memory of one consumer across repeated backlogs: does what it holds after each drain grow?

In the hour under faults (benchmarks.soak) the consumer's anonymous memory rose 5.45 MiB per
10 minutes (1.64 in its second half) while it swung 125-212 MiB with the backlogs each fault
left it. An hour of such swings cannot tell a leak from a working set. Here one consumer
process (the SDK's program: ``consumer_sdk.cli``'s sink, glibc's mmap threshold pinned)
drains ``--cycles`` backlogs of ``--burst-mib`` each, produced while it runs and faster than
it reads. After each drain, once idle for ``--idle-secs`` and after a garbage collection, it
reports its anonymous memory (``RssAnon``), its RSS, the pages freed lazily (``MADV_FREE``:
counted in RSS until the kernel needs them), the bytes Arrow's pool holds, the number of
objects Python's collector tracks, what glibc's allocator holds allocated and keeps freed
(``mallinfo2``: the gRPC client's and the record path's native memory, and Arrow's when
``--arrow-pool system`` routes it there) and, with ``--traced``, the memory Python's
allocation tracer sees, with the source lines that grew most since the first drain. A leak
grows with every drain; a working set comes back to the same level.

Sinks: ``null`` (the records are discarded after the record path), ``spark`` (a Delta table
through a Spark Connect server started here, as the soak's consumers wrote).
``python -m benchmarks.consumer_backlogs [--sink null|spark] [--cycles 30] [--burst-mib 64]
[--arrow-pool jemalloc|mimalloc|system] [--arena-max N] [--give-back] [--traced]``
writes ``results/consumer_backlogs_<sink>[_<pool>][_arenas<N>][_given_back][_traced].*``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks.consume_throughput import fill
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import RESULTS, publish, row
from local_kafka.clusters import ClusterKind, kafka_cluster

PARTITIONS = 12
VALUE_BYTES = 200
MIB = 1024 * 1024
IDENTITY = "backlogs-0"
DRAIN_TIMEOUT_S = 900.0
TOP_SITES = 6


def status_mib(field: str, source: str = "/proc/self/status") -> float:
    """A ``/proc/self/status`` (or ``source``'s) field (kB) in MiB."""
    for line in Path(source).read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in {source}")


def handed_to_sink(group: str) -> float:
    """Records this process's consumer handed to its sink (the SDK's counter)."""
    from consumer_sdk import metrics

    return sum(
        sample.value
        for family in metrics.RECORDS.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("group") == group
    )


def growth_sites(now: tracemalloc.Snapshot, first: tracemalloc.Snapshot) -> list[tuple[str, float]]:
    """The source lines whose traced memory grew most since ``first``, MiB each."""
    return [
        (f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}", s.size_diff / MIB)
        for s in now.compare_to(first, "lineno")[:TOP_SITES]
    ]


async def drain_and_report(args: argparse.Namespace) -> None:
    """The child: a consumer that reports after each drain the parent asks for on stdin
    (``drain N``: until N records were handed to the sink; ``stop``)."""
    import pyarrow as pa

    from consumer_sdk.allocator import give_back_free_memory, heap_usage, pin_mmap_threshold
    from consumer_sdk.cli import parse_sink
    from consumer_sdk.config import ConsumerConfig
    from consumer_sdk.consumer import AutoscalingConsumer

    pin_mmap_threshold()
    if args.traced:
        tracemalloc.start()
    config = ConsumerConfig(
        bootstrap_servers=args.bootstrap,
        group=args.group,
        topics=(args.topic,),
        capacity=1000.0,
        member_identity=IDENTITY,
        wait_time_secs=2.0,
        writes_in_flight=1,
    )
    consumer = AutoscalingConsumer(config, parse_sink(args.sink, IDENTITY))
    await consumer.start()
    runner = asyncio.create_task(consumer.run_async())
    loop = asyncio.get_running_loop()
    first: tracemalloc.Snapshot | None = None
    cycle = 0
    try:
        while (line := await loop.run_in_executor(None, sys.stdin.readline)).startswith("drain"):
            expected = float(line.split()[1])
            while handed_to_sink(args.group) < expected:
                if runner.done():
                    runner.result()  # the consumer ended: say why
                await asyncio.sleep(0.05)
            await asyncio.sleep(args.idle_secs)  # the last batch written and committed
            gc.collect()
            cycle += 1
            sample: dict[str, Any] = {
                "cycle": cycle,
                "records": expected,
                "anon_mib": status_mib("RssAnon"),
                "rss_mib": status_mib("VmRSS"),
                # Pages an allocator gave back with MADV_FREE: resident and counted in
                # RssAnon until the kernel needs them.
                "lazy_free_mib": status_mib("LazyFree", "/proc/self/smaps_rollup"),
                "arrow_mib": pa.total_allocated_bytes() / MIB,
                "objects": len(gc.get_objects()),
                "arrow_pool": pa.default_memory_pool().backend_name,
            }
            heap = heap_usage()
            if heap is not None:
                sample["heap_allocated_mib"] = heap.allocated / MIB
                sample["heap_kept_free_mib"] = heap.kept_free / MIB
            if args.give_back:
                give_back_free_memory()
                sample["anon_given_back_mib"] = status_mib("RssAnon")
            if args.traced:
                sample["traced_mib"] = tracemalloc.get_traced_memory()[0] / MIB
                snapshot = tracemalloc.take_snapshot()
                if first is None:
                    first = snapshot
                else:
                    sample["grew_at"] = growth_sites(snapshot, first)
            print(json.dumps(sample), flush=True)
    finally:
        consumer.request_stop()
        await runner


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope (None with fewer than three points)."""
    if len(points) < 3:
        return None
    return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope


def slopes(samples: Sequence[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    """``key``'s slope per drain over every drain after the first, and over the second half."""
    points = [(s["cycle"], float(s[key])) for s in samples if key in s and s["cycle"] > 1]
    return slope(points), slope(points[len(points) // 2 :])


@contextlib.contextmanager
def sink_environment(sink: str, work: Path) -> Iterator[dict[str, str]]:
    """The child's environment for ``sink``: for ``spark``, a Spark Connect server's."""
    if sink != "spark":
        yield {}
        return
    from consumer_sdk.lake.spark_connect import SparkConnectServer

    warehouse = work / "warehouse"
    warehouse.mkdir()
    with SparkConnectServer(warehouse, log_file=work / "spark-connect.log") as server:
        yield {
            "AUTOSCALER_SPARK_REMOTE": server.url,
            "AUTOSCALER_SPARK_WAREHOUSE": str(warehouse),
            "AUTOSCALER_SPARK_TABLE_FORMAT": "delta",
        }


def allocator_environment(arrow_pool: str | None, arena_max: int | None) -> dict[str, str]:
    """The child's environment choosing Arrow's memory pool and capping glibc's arenas (none:
    the defaults: Arrow's pool, and up to eight arenas per core)."""
    environment = {} if arrow_pool is None else {"ARROW_DEFAULT_MEMORY_POOL": arrow_pool}
    if arena_max is not None:
        environment["MALLOC_ARENA_MAX"] = str(arena_max)
    return environment


def read_line(stream: IO[str], timeout_s: float) -> str:
    """One line of the child's output, or an error after ``timeout_s``."""
    ready, _, _ = select.select([stream], [], [], timeout_s)
    if not ready:
        raise TimeoutError(f"the consumer reported no drain within {timeout_s:.0f} s")
    return stream.readline()


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """Start the cluster, the sink and the consumer; produce each backlog and collect what
    the consumer reports after draining it."""
    samples: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="consumer-backlogs-") as work,
        kafka_cluster(ClusterKind(args.cluster)) as broker,
        sink_environment(args.sink, Path(work)) as environment,
    ):
        topic = broker.create_topic(PARTITIONS, prefix="backlogs")
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.consumer_backlogs",
                "--child",
                f"--bootstrap={broker.bootstrap_servers}",
                f"--topic={topic}",
                f"--group=backlogs-{topic}",
                f"--sink={args.sink}",
                f"--idle-secs={args.idle_secs}",
                *(["--traced"] if args.traced else []),
                *(["--give-back"] if args.give_back else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                **environment,
                **allocator_environment(args.arrow_pool, args.arena_max),
            },
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            total = 0
            for cycle in range(1, args.cycles + 1):
                total += fill(
                    broker.bootstrap_servers, topic, VALUE_BYTES, args.burst_mib, PARTITIONS
                )
                child.stdin.write(f"drain {total}\n")
                child.stdin.flush()
                sample = json.loads(read_line(child.stdout, DRAIN_TIMEOUT_S))
                samples.append(sample)
                print(
                    f"drain {cycle}: anonymous {sample['anon_mib']:.1f} MiB, Arrow "
                    f"{sample['arrow_mib']:.1f} MiB, glibc "
                    f"{sample.get('heap_allocated_mib', 0):.1f} MiB allocated, "
                    f"{sample['objects']} objects",
                    flush=True,
                )
            child.stdin.write("stop\n")
            child.stdin.flush()
            child.wait(120)
        finally:
            if child.poll() is None:
                child.kill()
        return samples, broker_line(broker)


COLUMNS = (
    ("cycle", "drain", "d"),
    ("records", "records so far", ",.0f"),
    ("anon_mib", "anonymous (MiB)", ".1f"),
    ("rss_mib", "RSS (MiB)", ".1f"),
    ("anon_given_back_mib", "anonymous, free pages given back (MiB)", ".1f"),
    ("lazy_free_mib", "lazily freed (MiB)", ".1f"),
    ("arrow_mib", "Arrow pool (MiB)", ".1f"),
    ("heap_allocated_mib", "glibc allocated (MiB)", ".1f"),
    ("heap_kept_free_mib", "glibc kept free (MiB)", ".1f"),
    ("objects", "objects tracked", ",d"),
    ("traced_mib", "traced (MiB)", ".1f"),
)


def report(samples: Sequence[dict[str, Any]], header: Sequence[str]) -> str:
    """The per-drain table and the slopes."""
    columns = [
        (key, label, form)
        for key, label, form in COLUMNS
        if any(key in s for s in samples) or key in ("cycle", "records")
    ]
    lines = [
        *header,
        "",
        row(*(label for _, label, _ in columns)),
        "|" + "---:|" * len(columns),
    ]
    for s in samples:
        lines.append(row(*(format(s[key], form) if key in s else "-" for key, _, form in columns)))
    lines += ["", "Slope per drain, after the first (all drains / their second half):", ""]
    keys = [(key, label) for key, label, _ in columns if key not in ("cycle", "records")]
    for key, label in keys:
        whole, later = slopes(samples, key)
        shown = [f"{v:+.3f}" if v is not None else "-" for v in (whole, later)]
        lines.append(f"- {label}: {shown[0]} / {shown[1]}")
    last = samples[-1] if samples else {}
    if last.get("grew_at"):
        sites = ", ".join(f"`{site}` {mib:+.2f}" for site, mib in last["grew_at"])
        lines += ["", f"Traced memory that grew most from the first drain to the last: {sites}."]
    return "\n".join(lines)


def plot(samples: Sequence[dict[str, Any]], path: Path) -> None:
    """Anonymous memory, Arrow's pool and (when traced) Python's traced memory per drain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    cycles = [s["cycle"] for s in samples]
    for key, label, _ in COLUMNS:
        # The table's MiB columns but RSS (anonymous memory plus mapped files).
        if label.endswith(" (MiB)") and key != "rss_mib" and all(key in s for s in samples):
            series = [s[key] for s in samples]
            ax.plot(cycles, series, marker="o", markersize=3, label=label.removesuffix(" (MiB)"))
    ax.set_xlabel("backlog drained")
    ax.set_ylabel("MiB after the drain")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/consumer_backlogs_<sink>.{md,json,png}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--sink", choices=("null", "spark"), default="null")
    parser.add_argument("--cycles", type=int, default=30, help="backlogs drained")
    parser.add_argument("--burst-mib", type=int, default=64, help="MiB of values per backlog")
    parser.add_argument("--idle-secs", type=float, default=3.0, help="idle after each drain")
    parser.add_argument(
        "--arrow-pool",
        choices=("jemalloc", "mimalloc", "system"),
        help="Arrow's memory pool in the consumer (default: Arrow's own default)",
    )
    parser.add_argument("--arena-max", type=int, help="glibc's MALLOC_ARENA_MAX in the consumer")
    parser.add_argument(
        "--give-back",
        action="store_true",
        help="after each report, trim glibc's heaps and Arrow's pool and report again",
    )
    parser.add_argument("--traced", action="store_true", help="Python's allocation tracer on")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("bootstrap", "topic", "group"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cycles < 3 or args.burst_mib < 1 or args.idle_secs < 0:
        parser.error("--cycles >= 3, --burst-mib >= 1 and --idle-secs >= 0")
    if args.arena_max is not None and args.arena_max < 1:
        parser.error("--arena-max >= 1")
    if args.child:
        asyncio.run(drain_and_report(args))
        return 0
    samples, broker = run(args)
    header = [
        f"# One consumer across repeated backlogs ({args.sink} sink)",
        "",
        machine_line(),
        broker,
        f"{args.cycles} backlogs of {args.burst_mib} MiB ({VALUE_BYTES} B values, "
        f"{PARTITIONS} partitions), each produced while the consumer runs; after each drain "
        f"the consumer idles {args.idle_secs:g} s, collects garbage and reports. Consumer: "
        "the SDK's defaults with one write in flight and a 2 s batch wait (the soak's), "
        "glibc's mmap threshold pinned as the consumer program does"
        + (f", glibc's arenas capped at {args.arena_max}" if args.arena_max else "")
        + (
            "; after each report it trims glibc's heaps and Arrow's pool (malloc_trim, "
            "release_unused) and reports its anonymous memory again"
            if args.give_back
            else ""
        )
        + (", Python's allocation tracer on" if args.traced else "")
        + f". Arrow's pool: {samples[0].get('arrow_pool', '?') if samples else '?'}.",
    ]
    name = (
        f"consumer_backlogs_{args.sink}"
        + (f"_{args.arrow_pool}" if args.arrow_pool else "")
        + (f"_arenas{args.arena_max}" if args.arena_max else "")
        + ("_given_back" if args.give_back else "")
        + ("_traced" if args.traced else "")
    )
    publish(name, report(samples, header), {"samples": samples}, write=not args.no_write)
    if not args.no_write:
        plot(samples, RESULTS / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
