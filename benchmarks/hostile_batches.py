"""A producer's hostile batches against a running consumer: memory, liveness, what lands.

Kafka limits a batch by its compressed size. Two batches a producer with write access can
send: 160 records of 1 MiB of zeros (160 MiB once inflated, a few KiB compressed, zstd) and
20 million empty records (zstd, 15 MiB). Both must become one dead-letter row each. And one
just under the bound, which must land: 61,440 records of 1 KiB in one batch (60 MiB once
inflated, zstd), read a piece at a time; beside it the same records in 1 MiB producer
batches, what any producer sends, for the memory that reading them costs anyway.

Apache Kafka validates a batch's records before it stores them: with the 512 MiB heap the
suite gives it, it ran out of memory on the 20 million records (the producer's request timed
out), so here it runs with 4 GiB. The embedded broker sends such a batch cut at the fetch
size rather than whole, so no client can read it there: it runs the others only. Each goes
to its own one-partition topic between 2,000 good records before and 2,000 after, read by
one ``kafka-autoscaler-consumer`` process (JSON-lines sink, the consumer program's
defaults: 16 MiB batches, max_record_batch_bytes 64 MiB). Per batch: the consumer's
resident memory while steady and at its peak (target: at most 128 MiB of growth), whether
it stayed alive, whether every good record after the batch landed, the dead-letter rows and
how many of the batch's own records landed. ``--baseline REV`` runs every batch with the
consumer of another commit too, on the same broker, one after the other.
``python -m benchmarks.hostile_batches``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.support.machine import baseline_checkout, broker_line, machine_line
from benchmarks.support.polling import wait_for
from benchmarks.support.report import publish
from consumer_sdk.records.inflate import ZSTD
from local_kafka.clusters import ClusterKind, KafkaCluster, kafka_cluster

ROOT = Path(__file__).parent.parent
MIB = 1 << 20
GOOD = 2000
BROKER_HEAP_MB = 4096  # Apache Kafka validating 20 million records (see the module doc)


def built_batch(records: int, value: bytes | None, codec: int) -> bytes:
    """One v2 batch of ``records`` records of ``value``, compressed with ``codec``."""
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 31)
    for delta in range(records):
        builder.append(delta, int(time.time() * 1000), None, value, [])
    return bytes(builder.build())


LARGE_RECORDS = 61_440
LARGE_VALUE = b"L" * 1024
UNDER_THE_BOUND = "60 MiB of 1 KiB records in one batch (under the bound)"
IN_PRODUCER_BATCHES = "the same 60 MiB in 1 MiB producer batches"
# name -> (the batches, the brokers it runs on)
HOSTILE: dict[str, tuple[Callable[[], list[bytes]], tuple[ClusterKind, ...]]] = {
    IN_PRODUCER_BATCHES: (
        lambda: [built_batch(1024, LARGE_VALUE, ZSTD)] * (LARGE_RECORDS // 1024),
        (ClusterKind.APACHE, ClusterKind.EMBEDDED),
    ),
    UNDER_THE_BOUND: (
        lambda: [built_batch(LARGE_RECORDS, LARGE_VALUE, ZSTD)],
        (ClusterKind.APACHE, ClusterKind.EMBEDDED),
    ),
    "160 MiB of zeros once inflated": (
        lambda: [built_batch(160, bytes(MIB), ZSTD)],
        (ClusterKind.APACHE, ClusterKind.EMBEDDED),
    ),
    "20 million empty records": (
        lambda: [built_batch(20_000_000, None, ZSTD)],
        (ClusterKind.APACHE,),
    ),
}


def produce_raw(bootstrap: str, topic: str, batch: bytes) -> None:
    """Send ``batch`` as it is to partition 0 of ``topic`` (what a producer's client does
    after building it), and wait for the leader's acknowledgement."""

    async def send() -> None:
        client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
        await client.bootstrap()
        try:
            await client._wait_on_metadata(topic)
            leader = client.cluster.leader_for_partition(TopicPartition(topic, 0))
            request = ProduceRequest(None, -1, 120_000, [(topic, [(0, batch)])])
            response = await client.send(leader, request)
            [(_, [(_, error, *_)])] = response.topics
            if error:
                raise RuntimeError(f"the broker refused the batch: error {error}")
        finally:
            await client.close()

    asyncio.run(send())


def produce_good(bootstrap: str, topic: str, first: int) -> None:
    """``GOOD`` records whose values say their number."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + GOOD):
        producer.produce(topic, value=b"good-%d" % i, partition=0)
    assert producer.flush(30) == 0


def create_topic(bootstrap: str, max_message_bytes: int) -> str:
    """A one-partition topic that takes batches up to ``max_message_bytes`` compressed."""
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 1, 1, config={"max.message.bytes": str(max_message_bytes)})
    for future in admin.create_topics([topic]).values():
        future.result(30)
    return name


class RssSampler:
    """A process's resident memory every 20 ms, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            kib = next(
                int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
            )
            self.samples.append((time.monotonic(), kib * 1024))

    def since(self, start: float) -> list[int]:
        """The samples taken since ``start``, in bytes."""
        return [rss for at, rss in self.samples if at >= start]

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def landed(path: Path) -> tuple[set[int], list[dict[str, Any]], int]:
    """The good records' numbers in the sink's file, the dead letters, and how many of the
    large batch's records landed."""
    good: set[int] = set()
    other: list[dict[str, Any]] = []
    large = 0
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # the last line, half written as it was read
                continue
            value = row["value"] or ""
            if value.startswith("good-"):
                good.add(int(value[5:]))
            elif value == LARGE_VALUE.decode():
                large += 1
            else:
                other.append(row)
    return good, other, large


def run_one(
    kafka: KafkaCluster, name: str, work: Path, code: tuple[str, Path] = ("this", ROOT)
) -> dict[str, Any]:
    """One hostile batch between good records; what the consumer (of ``code``: a name and
    its tree) did."""
    batches = HOSTILE[name][0]()
    bootstrap = kafka.bootstrap_servers
    broker = broker_line(kafka).removeprefix("Broker: ").rstrip(".")
    if kafka.kind is ClusterKind.APACHE:
        topic = create_topic(bootstrap, max(4 * MIB, 2 * max(len(b) for b in batches)))
        broker += f", {BROKER_HEAP_MB} MiB heap"
    else:  # the embedded broker has no topic settings (nor CreateTopics)
        topic = kafka.create_topic(1, prefix="hostile")
    out = work / f"{topic}.jsonl"
    produce_good(bootstrap, topic, 0)
    env = {
        **os.environ,
        "PYTHONPATH": str(code[1]),
        "AUTOSCALER_BOOTSTRAP_SERVERS": bootstrap,
        "AUTOSCALER_GROUP": f"g-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": "1000",
        "AUTOSCALER_WAIT_TIME_SECS": "0.5",
    }
    consumer = subprocess.Popen(
        [sys.executable, "-m", "consumer_sdk.cli", "--sink", f"jsonl:{out}"],
        env=env,
        cwd=code[1],
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = RssSampler(consumer.pid)
    try:
        assert wait_for(lambda: len(landed(out)[0]) >= GOOD, 120, 0.1), "the good records before"
        time.sleep(2)  # settle: the steady size is read over the next two seconds
        steady_from = time.monotonic()
        time.sleep(2)
        steady = statistics.median(sampler.since(steady_from))
        hostile_from = time.monotonic()
        for batch in batches:
            produce_raw(bootstrap, topic, batch)
        produce_good(bootstrap, topic, GOOD)
        after_landed = wait_for(lambda: len(landed(out)[0]) >= 2 * GOOD, 180, 0.1)
        alive = consumer.poll() is None
        peak = max(sampler.since(hostile_from), default=0)
    finally:
        sampler.stop()
        if consumer.poll() is None:
            consumer.send_signal(signal.SIGTERM)
        _, stderr = consumer.communicate(timeout=60)
    good, other, large = landed(out)
    return {
        "broker": broker,
        "code": code[0],
        "batch": name,
        "compressed_bytes": sum(len(b) for b in batches),
        "steady_rss_mib": round(steady / MIB, 1),
        "peak_rss_mib": round(peak / MIB, 1),
        "growth_mib": round((peak - steady) / MIB, 1),
        "alive": alive,
        "good_after_landed": len([n for n in good if n >= GOOD]),
        "all_after_landed": after_landed,
        "dead_letter_rows": len(other),
        "batch_records_landed": large,
        "exit_code": consumer.returncode,
        "refusal_logged": next((line for line in stderr.splitlines() if "refused" in line), ""),
    }


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The markdown report."""
    lines = [
        "# Hostile producer batches against a running consumer",
        "",
        machine_line(),
        f"One `kafka-autoscaler-consumer` (defaults: 16 MiB batches, max_record_batch_bytes "
        f"64 MiB), {GOOD} good records before and after each batch. Target: growth <= 128 MiB, "
        "alive, every record after the batch lands.",
        "",
        "| broker | consumer code | batch | compressed | steady RSS | peak RSS | growth | alive "
        "| good records after it | dead-letter rows | its records landed | exit |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['broker']} | {r['code']} | {r['batch']} "
            f"| {r['compressed_bytes'] / MIB:.2f} MiB "
            f"| {r['steady_rss_mib']} MiB "
            f"| {r['peak_rss_mib']} MiB | **{r['growth_mib']} MiB** | {r['alive']} "
            f"| {r['good_after_landed']} / {GOOD} | {r['dead_letter_rows']} "
            f"| {r['batch_records_landed']} | {r['exit_code']} |"
        )
    lines += ["", "What the consumer logged:", ""]
    lines += [
        f"- {r['broker']}, {r['code']}, {r['batch']}: `{r['refusal_logged'].strip()}`"
        for r in runs
        if r["refusal_logged"]
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every hostile batch on the brokers it reaches; non-zero if a target was missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--baseline", default="", help="a git revision whose consumer runs every batch too"
    )
    args = parser.parse_args(argv)
    codes = [("this", ROOT)]
    if args.baseline:
        codes.append((f"at {args.baseline}", baseline_checkout(args.baseline)))
    runs: list[dict[str, Any]] = []
    for kind in (ClusterKind.APACHE, ClusterKind.EMBEDDED):
        with (
            kafka_cluster(kind, apache_heap_mb=BROKER_HEAP_MB) as kafka,
            TemporaryDirectory() as work,
        ):
            for name, (_, kinds) in HOSTILE.items():
                if kind in kinds:
                    runs.extend(run_one(kafka, name, Path(work), code) for code in codes)
    publish("hostile_batches", table(runs), {"runs": runs}, write=not args.no_write)
    missed = [
        r
        for r in runs
        if r["code"] == "this"
        and (
            r["growth_mib"] > 128
            or not r["alive"]
            or not r["all_after_landed"]
            or (
                r["batch"] in (UNDER_THE_BOUND, IN_PRODUCER_BATCHES)
                and r["batch_records_landed"] < LARGE_RECORDS
            )
        )
    ]
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
