"""Where the SDK's time per record goes: a profile of consuming with a no-op sink.

Fills one topic of 32 partitions with 200 B values, then reads it all with the SDK
(AutoscalingConsumer, CallbackSink that only counts) and with aiokafka's columnar fetch,
each under cProfile, and reports the functions with the most own time, grouped by stage:
fetch and decode (aiokafka), per-record objects (aiokafka's ConsumerRecord, our Record),
batching and bookkeeping (consumer_sdk.records.pending, consumer), the sink, the event loop.
``python -m benchmarks.record_path_profile --cluster apache`` writes
``results/record_path_profile_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.consume_throughput import PARTITIONS, fill, run_aiokafka, run_sdk
from benchmarks.support.machine import add_cluster_option, broker_line, machine_line
from benchmarks.support.report import publish
from consumer_sdk.kafka_client.columnar_fetch import install
from consumer_sdk.records.native_decoder import native_available
from local_kafka.clusters import ClusterKind, kafka_cluster

# Stage of a function, by the first pattern its "file:function" contains.
STAGES: list[tuple[str, str]] = [
    ("record_columns", "columnar decode (ours, native)"),
    ("columnar_fetch", "columnar decode (ours, native)"),
    ("_crecords", "aiokafka record decode"),
    ("default_records", "aiokafka record decode"),
    ("fetcher.py", "aiokafka fetch and ConsumerRecord per record"),
    ("structs.py", "aiokafka fetch and ConsumerRecord per record"),
    ("aiokafka", "aiokafka network, protocol and group"),
    ("pending.py", "SDK: Record per record, batching"),
    ("sink.py", "SDK: sink"),
    ("consumer_sdk", "SDK: consumer loop, commits, metrics"),
    ("benchmarks", "benchmark's no-op sink"),
    ("asyncio", "event loop"),
    ("selectors", "event loop"),
    ("<built-in", "builtins (allocation, socket reads)"),
    ("<method", "builtins (allocation, socket reads)"),
]


def stage_of(key: tuple[str, int, str]) -> str:
    """The stage a profiled function belongs to."""
    name = f"{key[0]}:{key[2]}"
    for pattern, stage in STAGES:
        if pattern in name:
            return stage
    return "other"


def profile(run: Callable[[], float]) -> tuple[float, pstats.Stats]:
    """Run under cProfile; (seconds the run reported, its stats)."""
    profiler = cProfile.Profile()
    profiler.enable()
    seconds = run()
    profiler.disable()
    return seconds, pstats.Stats(profiler)


def summarise(stats: pstats.Stats, records: int, top: int) -> dict[str, Any]:
    """Own time per stage and the top functions, in microseconds per 1,000 records."""
    per_thousand = 1e9 / records  # seconds -> microseconds per 1,000 records
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    stages: dict[str, float] = {}
    functions = []
    for key, (_, calls, own, _cumulative, _) in raw.items():
        stage = stage_of(key)
        stages[stage] = stages.get(stage, 0.0) + own
        functions.append((own, calls, f"{key[0].split('/')[-1]}:{key[1]} {key[2]}", stage))
    functions.sort(reverse=True)
    total = sum(stages.values())
    return {
        "total_us_per_1000": total * per_thousand,
        "stages": {
            stage: {"us_per_1000": own * per_thousand, "share": own / total}
            for stage, own in sorted(stages.items(), key=lambda item: -item[1])
        },
        "top": [
            {
                "function": name,
                "stage": stage,
                "calls_per_1000": calls * 1000 / records,
                "us_per_1000": own * per_thousand,
            }
            for own, calls, name, stage in functions[:top]
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Profile, then write ``results/record_path_profile_<cluster>.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--mib", type=int, default=64, help="MiB of 200 B values")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    install()
    kind = ClusterKind(args.cluster)
    results: dict[str, Any] = {}
    with kafka_cluster(kind) as broker:
        broker_text = broker_line(broker)
        topic = broker.create_topic(PARTITIONS, prefix="profile-200")
        count = fill(broker.bootstrap_servers, topic, 200, args.mib)
        bootstrap = broker.bootstrap_servers
        clients: dict[str, Callable[[str], float]] = {
            "sdk (no-op sink)": lambda group: run_sdk(bootstrap, topic, group, count),
            "sdk, columnar path (no-op sink)": lambda group: run_sdk(
                bootstrap, topic, group, count, record_path="columns"
            ),
            "aiokafka": lambda group: run_aiokafka(bootstrap, topic, group, count),
            "aiokafka, columnar fetch": lambda group: run_aiokafka(
                bootstrap, topic, group, count, columnar=True
            ),
        }
        for index, (name, run) in enumerate(clients.items()):
            plain = run(f"profile-{index}-plain")  # every run reads in a fresh group
            seconds, stats = profile(lambda: run(f"profile-{index}-profiled"))  # noqa: B023
            results[name] = {
                "seconds_unprofiled": plain,
                "records_per_s_unprofiled": count / plain,
                "seconds_profiled": seconds,
                **summarise(stats, count, args.top),
            }
            print(f"{name}: {count / plain:,.0f} records/s unprofiled", flush=True)
    lines = [
        f"# Where the time per record goes: 200 B values on {kind.value} Kafka",
        "",
        machine_line(),
        broker_text,
        f"{count:,} records ({args.mib} MiB) over {PARTITIONS} partitions, one consumer, read "
        "once unprofiled (records/s) and once under cProfile (own time per function, in "
        "microseconds per 1,000 records; cProfile slows Python-heavy code most, so shares, "
        f"not totals, are the finding). Native decoder built: {native_available()}.",
        "",
        "| client | records/s (unprofiled) | profiled µs per 1,000 records |",
        "|---|---:|---:|",
    ]
    for name, result in results.items():
        lines.append(
            f"| {name} | {result['records_per_s_unprofiled']:,.0f} | "
            f"{result['total_us_per_1000']:,.0f} |"
        )
    for name, result in results.items():
        lines += [
            "",
            f"## {name}",
            "",
            "| stage | µs per 1,000 records | share |",
            "|---|---:|---:|",
        ]
        for stage, row in result["stages"].items():
            lines.append(f"| {stage} | {row['us_per_1000']:,.0f} | {row['share']:.0%} |")
        lines += ["", "| function | stage | calls per 1,000 records | µs per 1,000 |"]
        lines.append("|---|---|---:|---:|")
        for row in result["top"]:
            lines.append(
                f"| `{row['function']}` | {row['stage']} | {row['calls_per_1000']:,.1f} | "
                f"{row['us_per_1000']:,.0f} |"
            )
    publish(
        f"record_path_profile_{kind.value}",
        "\n".join(lines),
        {"args": vars(args), "broker": broker_text, "records": count, "results": results},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
