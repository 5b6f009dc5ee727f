"""Raw consume throughput: confluent-kafka, aiokafka, and our SDK with a no-op sink, on the
same data, in the same run, alternating rounds, on Apache Kafka or the embedded broker.

Per value size, one topic of 32 partitions is filled (well under the mock's 5 MiB per
partition retention), then each client reads it all in a fresh group. Time runs from the
moment partitions are assigned to the last record (group join excluded).
``python -m benchmarks.consume_throughput --cluster apache`` (or ``embedded``) writes
``results/consume_throughput_<cluster>.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from confluent_kafka import Consumer, Producer

from benchmarks.support.machine import (
    add_cluster_option,
    baseline_checkout,
    broker_line,
    machine_line,
)
from benchmarks.support.report import publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.kafka_client.columnar_fetch import COLUMNAR, install
from consumer_sdk.records.native_decoder import native_available
from consumer_sdk.sink import CallbackSink, Record
from local_kafka.clusters import ClusterKind, kafka_cluster

PARTITIONS = 32
MIB = 1024 * 1024


def text_values(value_size: int, count: int = 1024, seed: int = 7) -> list[bytes]:
    """``count`` distinct values of ``value_size`` bytes of text-like data (a small alphabet,
    words of varied length): lz4 and zstd shrink them about as much as logs or JSON, not a
    thousandfold as they would one repeated byte."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    values = []
    for _ in range(count):
        text = ""
        while len(text) < value_size:
            text += rng.choice(words) + rng.choice(' ,":{}0123456789')
        values.append(text[:value_size].encode())
    return values


def fill(
    bootstrap: str,
    topic: str,
    value_size: int,
    total_mib: int,
    partitions: int = PARTITIONS,
    compression: str = "none",
) -> int:
    """Produce ``total_mib`` MiB of values evenly over ``partitions`` (one repeated byte
    uncompressed, as before; text-like values when compressed); return the count."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.kbytes": 512 * 1024,
            "compression.type": compression,
        }
    )
    values = [b"x" * value_size] if compression == "none" else text_values(value_size)
    count = total_mib * MIB // value_size
    for i in range(count):
        value = values[i % len(values)]
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("not all records acknowledged")
    return count


def run_confluent(bootstrap: str, topic: str, group: str, expected: int) -> float:
    """Seconds from assignment to the last record, confluent-kafka tuned for the embedded
    broker (docs/architecture.md section 7)."""
    assigned_at: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 4 * MIB,
            "fetch.max.bytes": 64 * MIB,
        }
    )
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned_at.append(time.perf_counter()))
    seen = 0
    try:
        while seen < expected:
            for message in consumer.consume(10000, timeout=0.5):
                if message.error() is None:
                    seen += 1
        return time.perf_counter() - assigned_at[0]
    finally:
        consumer.close()


class _Stamp(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.at: float | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned and self.at is None:
            self.at = time.perf_counter()


def run_aiokafka(
    bootstrap: str, topic: str, group: str, expected: int, columnar: bool = False
) -> float:
    """Seconds from assignment to the last record with aiokafka's getmany; with
    ``columnar``, fetched as Arrow columns (consumer_sdk.kafka_client.columnar_fetch), no record
    objects."""

    async def go() -> float:
        stamp = _Stamp()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_partition_fetch_bytes=4 * MIB,
            fetch_max_bytes=64 * MIB,
            **({"key_deserializer": COLUMNAR} if columnar else {}),
        )
        consumer.subscribe([topic], listener=stamp)
        await consumer.start()
        seen = 0
        try:
            while seen < expected:
                batch = await consumer.getmany(timeout_ms=500)
                if columnar:
                    seen += sum(c.count for chunks in batch.values() for c in chunks)
                else:
                    seen += sum(len(records) for records in batch.values())
            assert stamp.at is not None
            return time.perf_counter() - stamp.at
        finally:
            await consumer.stop()

    return asyncio.run(go())


def run_sdk(
    bootstrap: str,
    topic: str,
    group: str,
    expected: int,
    record_path: str = "records",
    fetch_max_bytes: int | None = None,
    marks: list[tuple[float, int]] | None = None,
) -> float:
    """Seconds from assignment to the last record through AutoscalingConsumer, no-op sink
    (it counts records: on the columnar path that builds none); ``fetch_max_bytes`` None:
    the SDK's default; ``marks`` gets (time, records so far) at every write."""

    async def go() -> float:
        seen = 0
        done = asyncio.Event()

        def write(_topic: str, records: Sequence[Record]) -> None:
            nonlocal seen
            seen += len(records)
            if marks is not None:
                marks.append((time.perf_counter(), seen))
            if seen >= expected:
                done.set()

        config = ConsumerConfig(
            bootstrap_servers=bootstrap,
            group=group,
            topics=(topic,),
            capacity=1.0,
            member_identity="bench-0",
            wait_time_secs=0.25,
            batch_bytes=16 * MIB,
            record_path=record_path,
            fetch_max_bytes=fetch_max_bytes,
        )
        consumer = AutoscalingConsumer(config, CallbackSink(write))
        await consumer.start()
        runner = asyncio.create_task(consumer.run_async())
        while not consumer.assigned:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        await done.wait()
        elapsed = time.perf_counter() - started
        consumer.request_stop()
        await runner
        return elapsed

    return asyncio.run(go())


def steady_rate(marks: Sequence[tuple[float, int]]) -> float | None:
    """Records/s from the end of the first batch to the end of the last but one, over
    (time, records so far) marks: without the pipeline's start nor the last batch, which may
    be partial and wait out ``wait_time_secs`` (a topic that ends exactly at a batch
    boundary has no such wait, so end to end alone depends on the topic's size). Shared
    with benchmarks.spark_sink."""
    if len(marks) < 3:
        return None
    (start, before), (end, after) = marks[0], marks[-2]
    return (after - before) / (end - start)


# A client's run: seconds end to end, and records/s in steady state (the SDK's only).
Run = tuple[float, float | None]


def raw(client: Callable[[str, str, str, int], float]) -> Callable[[str, str, str, int], Run]:
    """A raw client's run (no batches, so no steady state apart from end to end)."""
    return lambda bootstrap, topic, group, expected: (
        client(bootstrap, topic, group, expected),
        None,
    )


def sdk(**options: Any) -> Callable[[str, str, str, int], Run]:
    """An SDK run with ``options`` for run_sdk, and its steady rate."""

    def run(bootstrap: str, topic: str, group: str, expected: int) -> Run:
        marks: list[tuple[float, int]] = []
        seconds = run_sdk(bootstrap, topic, group, expected, marks=marks, **options)
        return seconds, steady_rate(marks)

    return run


_BASELINE_RUN = """
import json, sys
from benchmarks.consume_throughput import run_sdk, steady_rate
marks = []
seconds = run_sdk(*sys.argv[1:4], int(sys.argv[4]), record_path="columns", marks=marks)
print(json.dumps([seconds, steady_rate(marks)]))
"""


def baseline_sdk(tree: Path) -> Callable[[str, str, str, int], Run]:
    """The columnar-path SDK of another commit (a child process in its work tree)."""

    def run(bootstrap: str, topic: str, group: str, expected: int) -> Run:
        done = subprocess.run(
            [sys.executable, "-c", _BASELINE_RUN, bootstrap, topic, group, str(expected)],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            check=True,
        )
        seconds, steady = json.loads(done.stdout.strip().splitlines()[-1])
        return float(seconds), steady

    return run


CLIENTS: dict[str, Callable[[str, str, str, int], Run]] = {
    "confluent-kafka": raw(run_confluent),
    "aiokafka": raw(run_aiokafka),
    "aiokafka, columnar fetch": raw(functools.partial(run_aiokafka, columnar=True)),
    "sdk (no-op sink)": sdk(),
    "sdk, columnar path (no-op sink)": sdk(record_path="columns"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/consume_throughput_<cluster>.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--mib", type=int, default=128, help="MiB per value size (<= 160)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--sdk-fetch-max-mib",
        default="",
        help="comma-separated fetch_max_bytes values (MiB): a columnar-path SDK row each, "
        "beside the default's",
    )
    parser.add_argument(
        "--compression",
        default="none",
        help="comma-separated producer codecs (none, gzip, snappy, lz4, zstd): topics each",
    )
    parser.add_argument(
        "--clients", default="", help="semicolon-separated client names to run (default: all)"
    )
    parser.add_argument(
        "--baseline",
        default="",
        help="a git revision whose columnar-path SDK runs as one more client, same rounds",
    )
    args = parser.parse_args(argv)
    clients = dict(CLIENTS)
    if args.clients:
        clients = {name: clients[name] for name in args.clients.split(";")}
    if args.baseline:
        tree = baseline_checkout(args.baseline)
        clients[f"sdk, columnar path at {args.baseline} (no-op sink)"] = baseline_sdk(tree)
    for mib in filter(None, args.sdk_fetch_max_mib.split(",")):
        name = f"sdk, columnar path, fetch_max_bytes {float(mib):g} MiB (no-op sink)"
        clients[name] = sdk(record_path="columns", fetch_max_bytes=int(float(mib) * MIB))
    install()
    rows: list[dict[str, Any]] = []
    kind = ClusterKind(args.cluster)
    with kafka_cluster(kind) as broker:
        broker_text = broker_line(broker)
        for compression, value_size in (
            (codec, size) for codec in args.compression.split(",") for size in (200, 1024)
        ):
            topic = broker.create_topic(PARTITIONS, prefix=f"throughput-{value_size}")
            count = fill(
                broker.bootstrap_servers, topic, value_size, args.mib, compression=compression
            )
            timings: dict[str, list[Run]] = {name: [] for name in clients}
            for round_ in range(args.rounds):
                for name, client in clients.items():  # alternating: noise hits all alike
                    label = f"{name}-{compression}-{value_size}-{round_}"
                    group = re.sub(r"[^a-zA-Z0-9._-]", "", label)
                    timings[name].append(client(broker.bootstrap_servers, topic, group, count))
                    took = timings[name][-1][0]
                    print(f"{compression} {value_size} B {name}: {took:.2f} s", flush=True)
            for name, runs in timings.items():
                seconds = [run[0] for run in runs]
                steady = [run[1] for run in runs if run[1] is not None]
                median = statistics.median(seconds)
                rows.append(
                    {
                        "compression": compression,
                        "value_bytes": value_size,
                        "client": name,
                        "records": count,
                        "median_s": median,
                        "mb_per_s": count * value_size / MIB / median,
                        "records_per_s": count / median,
                        "runs_s": seconds,
                        "steady_records_per_s": statistics.median(steady) if steady else None,
                    }
                )
    lines = [
        f"# Consume throughput on {kind.value} Kafka (one consumer, 32 partitions)",
        "",
        machine_line(),
        broker_text,
        f"{args.mib} MiB per value size, median of {args.rounds} alternating rounds; time from "
        "partition assignment to the last record. SDK: 16 MiB batches, 0.25 s wait (the "
        "last partial batch waits it out), no-op sink, commit after every batch. Steady "
        "(SDK only): records/s from its first write to its last but one, without the start "
        "nor the last batch, which waits out the 0.25 s when the topic does not end at a "
        "batch boundary. "
        "Columnar fetch: aiokafka's fetcher handing over Arrow columns decoded natively "
        f"(consumer_sdk.kafka_client.columnar_fetch; native decoder built: {native_available()}).",
        "",
        "Compressed topics (lz4, zstd) hold text-like values (a small alphabet, words of "
        "varied length), the uncompressed ones one repeated byte as before; MiB/s counts "
        "the values as produced.",
        "",
        "| codec | value | client | records | MiB/s | records/s | steady records/s |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['compression']} | {row['value_bytes']} B | {row['client']} | "
            f"{row['records']} | "
            f"{row['mb_per_s']:.1f} | {row['records_per_s']:,.0f} | "
            + (f"{row['steady_records_per_s']:,.0f} |" if row["steady_records_per_s"] else " |")
        )
    publish(
        f"consume_throughput_{kind.value}",
        "\n".join(lines),
        {"args": vars(args), "broker": broker_text, "rows": rows},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
