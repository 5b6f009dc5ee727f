"""Memory of a consumer across repeated backlogs: does what it holds after each drain grow?

In the hour under faults (benchmarks.soak) the consumer's anonymous memory rose 5.45 MiB per
10 minutes (1.64 in its second half) while it swung 125-212 MiB with the backlogs each fault
left it. An hour of such swings cannot tell a leak from a working set. Here consumer processes
(the SDK's program: ``consumer_sdk.cli``'s sink, glibc's mmap threshold pinned), one per
allocator setting, each drain ``--cycles`` backlogs of ``--burst-mib``, produced while they run
and faster than they read. The settings run side by side: each round produces a backlog for
every setting in turn (the order rotating each round), so a noisy neighbour on the machine
falls on all of them alike. After each drain, once idle for ``--idle-secs`` and after a
garbage collection, a consumer reports its anonymous memory (``RssAnon``), its RSS, the pages
freed lazily (``MADV_FREE``: counted in RSS until the kernel needs them), the bytes Arrow's
pool holds, the objects Python's collector tracks, what glibc's allocator holds allocated and
keeps freed (``mallinfo2``: the gRPC client's and the record path's native memory, and
Arrow's when its pool is ``system``) and, with ``--traced``, the memory Python's allocation
tracer sees with the source lines that grew most since the first drain. A leak grows with
every drain; a working set comes back to the same level.

Settings (``--settings``, comma-separated; default all): ``default`` (Arrow's own pool,
nothing given back), ``system`` (Arrow's buffers on glibc), ``given_back`` (after each report
glibc's heaps and Arrow's pool are trimmed on the consumer's event-loop thread, where the
consumer program's ``give_back_every`` trims each minute, and the memory reported again),
``given_back_by_thread`` (the same trim from a thread of its own, as the program did before:
mimalloc gives back only the caches of the thread that asks).

Sinks: ``null`` (the records are discarded after the record path), ``spark`` (Delta tables
through one Spark Connect server started here, as the soak's consumers wrote).
``python -m benchmarks.consumer_backlogs [--sink null|spark] [--cycles 30] [--burst-mib 64]
[--settings default,system,given_back,given_back_by_thread] [--traced]`` writes
``results/consumer_backlogs_<sink>[_traced].*``.
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
import threading
import time
import tracemalloc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.consume_throughput import fill
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import RESULTS, publish, row
from local_kafka.clusters import ClusterKind, kafka_cluster

PARTITIONS = 12
VALUE_BYTES = 200
MIB = 1024 * 1024
DRAIN_TIMEOUT_S = 900.0
TOP_SITES = 6
GIVE_BACK_WHERE = ("", "loop", "thread")


@dataclass(frozen=True)
class Setting:
    """One consumer's allocator setting."""

    name: str
    description: str
    arrow_pool: str | None = None  # None: Arrow's own default
    give_back: str = ""  # after each report: "" never, "loop" on the event loop, "thread"


SETTINGS = {
    s.name: s
    for s in (
        Setting("default", "Arrow's own pool, nothing given back"),
        Setting("system", "Arrow's buffers on glibc (ARROW_DEFAULT_MEMORY_POOL=system)", "system"),
        Setting(
            "given_back",
            "Arrow's own pool; after each drain glibc's heaps and the pool are trimmed on the "
            "consumer's event-loop thread (where the consumer program trims each minute)",
            give_back="loop",
        ),
        Setting(
            "given_back_by_thread",
            "Arrow's own pool; after each drain the same trim runs in a thread of its own, as "
            "the consumer program did until it gave back on its event loop",
            give_back="thread",
        ),
    )
}


def parse_settings(spec: str) -> list[Setting]:
    """``--settings``: comma-separated names of ``SETTINGS``, each once."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if not names or unknown or len(set(names)) != len(names):
        raise ValueError(
            f"--settings takes distinct names among {', '.join(SETTINGS)}, got {spec!r}"
        )
    return [SETTINGS[n] for n in names]


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


def give_back_from_a_thread() -> None:
    """Trim glibc's heaps and Arrow's pool from a new thread (not the one that allocated)."""
    from consumer_sdk.allocator import give_back_free_memory

    worker = threading.Thread(target=give_back_free_memory, name="give-back-memory")
    worker.start()
    worker.join()


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
        member_identity=args.identity,
        wait_time_secs=2.0,
        writes_in_flight=1,
    )
    consumer = AutoscalingConsumer(config, parse_sink(args.sink, args.identity))
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
                sample["outside_glibc_mib"] = (
                    sample["anon_mib"] - sample["heap_allocated_mib"] - sample["heap_kept_free_mib"]
                )
            if args.give_back:
                if args.give_back == "loop":
                    give_back_free_memory()
                else:
                    give_back_from_a_thread()
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
    """The children's environment for ``sink``: for ``spark``, a Spark Connect server's."""
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


def allocator_environment(setting: Setting) -> dict[str, str]:
    """The child's environment choosing Arrow's memory pool (none: Arrow's default)."""
    return {} if setting.arrow_pool is None else {"ARROW_DEFAULT_MEMORY_POOL": setting.arrow_pool}


def read_line(stream: IO[str], timeout_s: float) -> str:
    """One line of the child's output, or an error after ``timeout_s``."""
    ready, _, _ = select.select([stream], [], [], timeout_s)
    if not ready:
        raise TimeoutError(f"the consumer reported no drain within {timeout_s:.0f} s")
    return stream.readline()


def rotated(items: Sequence[Any], by: int) -> list[Any]:
    """``items`` starting at ``by`` (mod their number): each round starts with another."""
    if not items:
        return []
    k = by % len(items)
    return [*items[k:], *items[:k]]


@dataclass
class Child:
    """One setting's consumer process, its topic and the records produced to it so far."""

    setting: Setting
    topic: str
    process: subprocess.Popen[str]
    produced: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def drain(self, bootstrap: str, burst_mib: int, idle_secs: float) -> dict[str, Any]:
        """Produce a backlog, have the consumer drain it, and return its report (with the
        seconds from the first record produced to the last handed to the sink)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        started = time.monotonic()
        self.produced += fill(bootstrap, self.topic, VALUE_BYTES, burst_mib, PARTITIONS)
        self.process.stdin.write(f"drain {self.produced}\n")
        self.process.stdin.flush()
        sample: dict[str, Any] = json.loads(read_line(self.process.stdout, DRAIN_TIMEOUT_S))
        sample["backlog_s"] = time.monotonic() - started - idle_secs
        self.samples.append(sample)
        return sample

    def stop(self) -> None:
        """Ask the consumer to stop; kill it if it has not within two minutes."""
        try:
            if self.process.poll() is None and self.process.stdin is not None:
                self.process.stdin.write("stop\n")
                self.process.stdin.flush()
                self.process.wait(120)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def start_child(
    args: argparse.Namespace, setting: Setting, bootstrap: str, topic: str, env: dict[str, str]
) -> Child:
    """Start ``setting``'s consumer process on ``topic``."""
    identity = f"backlogs-{setting.name}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.consumer_backlogs",
            "--child",
            f"--bootstrap={bootstrap}",
            f"--topic={topic}",
            f"--group=backlogs-{topic}",
            f"--identity={identity}",
            f"--sink={args.sink}",
            f"--idle-secs={args.idle_secs}",
            f"--give-back={setting.give_back}",
            *(["--traced"] if args.traced else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, **allocator_environment(setting)},
    )
    return Child(setting, topic, process)


def run(
    args: argparse.Namespace, settings: Sequence[Setting]
) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Start the cluster, the sink and a consumer per setting; each round, produce a backlog
    for each consumer in turn and collect what it reports after draining it."""
    with (
        tempfile.TemporaryDirectory(prefix="consumer-backlogs-") as work,
        kafka_cluster(ClusterKind(args.cluster)) as broker,
        sink_environment(args.sink, Path(work)) as environment,
        contextlib.ExitStack() as stops,
    ):
        children: list[Child] = []
        for setting in settings:
            topic = broker.create_topic(PARTITIONS, prefix="backlogs")
            child = start_child(args, setting, broker.bootstrap_servers, topic, environment)
            stops.callback(child.stop)
            children.append(child)
        for cycle in range(1, args.cycles + 1):
            for child in rotated(children, cycle - 1):
                sample = child.drain(broker.bootstrap_servers, args.burst_mib, args.idle_secs)
                print(
                    f"drain {cycle} ({child.setting.name}): anonymous {sample['anon_mib']:.1f} "
                    f"MiB, glibc {sample.get('heap_allocated_mib', 0):.1f} MiB allocated, "
                    f"{sample['backlog_s']:.1f} s",
                    flush=True,
                )
        return {c.setting.name: c.samples for c in children}, broker_line(broker)


COLUMNS = (
    ("cycle", "drain", "d"),
    ("records", "records so far", ",.0f"),
    ("backlog_s", "s to produce and drain", ".1f"),
    ("anon_mib", "anonymous (MiB)", ".1f"),
    ("rss_mib", "RSS (MiB)", ".1f"),
    ("anon_given_back_mib", "anonymous, free pages given back (MiB)", ".1f"),
    ("lazy_free_mib", "lazily freed (MiB)", ".1f"),
    ("arrow_mib", "Arrow pool (MiB)", ".1f"),
    ("heap_allocated_mib", "glibc allocated (MiB)", ".1f"),
    ("heap_kept_free_mib", "glibc kept free (MiB)", ".1f"),
    ("outside_glibc_mib", "outside glibc (MiB)", ".1f"),
    ("objects", "objects tracked", ",d"),
    ("traced_mib", "traced (MiB)", ".1f"),
)


def first_to_last(samples: Sequence[dict[str, Any]], key: str) -> str:
    """``key`` at the first drain and the last (and its range from the second drain), or -."""
    values = [float(s[key]) for s in samples if key in s]
    if not values:
        return "-"
    later = values[1:] or values
    return f"{values[0]:.1f} -> {values[-1]:.1f} ({min(later):.0f}-{max(later):.0f})"


def shown_slopes(samples: Sequence[dict[str, Any]], key: str) -> str:
    """``key``'s slope a drain over all drains after the first / their second half."""
    return " / ".join(f"{v:+.2f}" if v is not None else "-" for v in slopes(samples, key))


def summary(runs: Mapping[str, Sequence[dict[str, Any]]]) -> list[str]:
    """One row per setting: where each figure started and ended, and its slope."""
    lines = [
        row(
            "setting",
            "anonymous (MiB), drain 1 -> last (range from drain 2)",
            "its slope a drain, all / 2nd half",
            "after giving back (MiB)",
            "its slope",
            "glibc allocated (MiB)",
            "its slope",
            "glibc kept free (MiB)",
            "outside glibc (MiB)",
            "s a backlog (median)",
        ),
        "|---|---|---:|---|---:|---|---:|---|---|---:|",
    ]
    for name, samples in runs.items():
        times = [float(s["backlog_s"]) for s in samples if "backlog_s" in s]
        given_back = any("anon_given_back_mib" in s for s in samples)
        lines.append(
            row(
                f"`{name}`",
                first_to_last(samples, "anon_mib"),
                shown_slopes(samples, "anon_mib"),
                first_to_last(samples, "anon_given_back_mib"),
                shown_slopes(samples, "anon_given_back_mib") if given_back else "-",
                first_to_last(samples, "heap_allocated_mib"),
                shown_slopes(samples, "heap_allocated_mib"),
                first_to_last(samples, "heap_kept_free_mib"),
                first_to_last(samples, "outside_glibc_mib"),
                f"{statistics.median(times):.1f}" if times else "-",
            )
        )
    return lines


def drain_table(samples: Sequence[dict[str, Any]]) -> list[str]:
    """One setting's per-drain table (the columns its consumer reported) and its slopes."""
    columns = [
        (key, label, form)
        for key, label, form in COLUMNS
        if any(key in s for s in samples) or key in ("cycle", "records")
    ]
    lines = [row(*(label for _, label, _ in columns)), "|" + "---:|" * len(columns)]
    for s in samples:
        lines.append(row(*(format(s[key], form) if key in s else "-" for key, _, form in columns)))
    lines += ["", "Slope per drain, after the first (all drains / their second half):", ""]
    for key, label, _ in columns:
        if key not in ("cycle", "records", "backlog_s"):
            lines.append(f"- {label}: {shown_slopes(samples, key)}")
    last = samples[-1] if samples else {}
    if last.get("grew_at"):
        sites = ", ".join(f"`{site}` {mib:+.2f}" for site, mib in last["grew_at"])
        lines += ["", f"Traced memory that grew most from the first drain to the last: {sites}."]
    return lines


def report(runs: Mapping[str, Sequence[dict[str, Any]]], header: Sequence[str]) -> str:
    """The settings side by side, then each one's per-drain table and slopes."""
    lines = [*header, "", "## Side by side", "", *summary(runs)]
    for name, samples in runs.items():
        description = SETTINGS[name].description if name in SETTINGS else name
        lines += ["", f"## `{name}`: {description}", "", *drain_table(samples)]
    return "\n".join(lines)


def plot(runs: Mapping[str, Sequence[dict[str, Any]]], path: Path) -> None:
    """Each setting's anonymous memory per drain (dashed: after giving back)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, samples in runs.items():
        cycles = [s["cycle"] for s in samples]
        (line,) = ax.plot(
            cycles, [s["anon_mib"] for s in samples], marker="o", markersize=3, label=name
        )
        if all("anon_given_back_mib" in s for s in samples) and samples:
            ax.plot(
                cycles,
                [s["anon_given_back_mib"] for s in samples],
                linestyle="--",
                color=line.get_color(),
                label=f"{name}, given back",
            )
    ax.set_xlabel("backlog drained")
    ax.set_ylabel("anonymous MiB after the drain")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/consumer_backlogs_<sink>.{md,json,png}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--sink", choices=("null", "spark"), default="null")
    parser.add_argument("--cycles", type=int, default=30, help="backlogs drained per setting")
    parser.add_argument("--burst-mib", type=int, default=64, help="MiB of values per backlog")
    parser.add_argument("--idle-secs", type=float, default=3.0, help="idle after each drain")
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"comma-separated allocator settings run side by side, among {', '.join(SETTINGS)}",
    )
    parser.add_argument("--traced", action="store_true", help="Python's allocation tracer on")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--give-back", choices=GIVE_BACK_WHERE, default="", help=argparse.SUPPRESS)
    for hidden in ("bootstrap", "topic", "group", "identity"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cycles < 3 or args.burst_mib < 1 or args.idle_secs < 0:
        parser.error("--cycles >= 3, --burst-mib >= 1 and --idle-secs >= 0")
    if args.child:
        asyncio.run(drain_and_report(args))
        return 0
    try:
        settings = parse_settings(args.settings)
    except ValueError as error:
        parser.error(str(error))
    runs, broker = run(args, settings)
    pools = {n: s[0].get("arrow_pool", "?") for n, s in runs.items() if s}
    header = [
        f"# Consumers across repeated backlogs ({args.sink} sink), allocator settings side by side",
        "",
        machine_line(),
        broker,
        f"{args.cycles} backlogs of {args.burst_mib} MiB ({VALUE_BYTES} B values, "
        f"{PARTITIONS} partitions) per setting, one consumer process per setting; each round "
        "produces a backlog for every setting in turn (the first setting rotating), while its "
        f"consumer runs; after each drain the consumer idles {args.idle_secs:g} s, collects "
        "garbage and reports. Consumers: the SDK's defaults with one write in flight and a 2 s "
        "batch wait (the soak's), glibc's mmap threshold pinned as the consumer program does"
        + (", Python's allocation tracer on" if args.traced else "")
        + ". Arrow's pools: "
        + ", ".join(f"{n} {p}" for n, p in pools.items())
        + ". Seconds a backlog: from its first record produced to its last handed to the "
        "sink (the producer's part is the same for every setting).",
    ]
    name = f"consumer_backlogs_{args.sink}" + ("_traced" if args.traced else "")
    publish(name, report(runs, header), {"runs": runs}, write=not args.no_write)
    if not args.no_write:
        plot(runs, RESULTS / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
