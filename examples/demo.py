"""The embedded end-to-end demo at this stage of the project (``make demo``).

1. starts the embedded Kafka broker (3 brokers) in its own process;
2. produces records with skewed per-partition volumes and reads them all back, checking
   that every record arrived exactly once;
3. treats each partition's volume as its write speed and shows how our default heuristic
   and the paper's MBF pack them onto consumers, and what a drift costs each (Rscore);
4. prints the paper reproduction table (a short run; the full one is committed in
   benchmarks/results/paper.md).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Sequence

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from assignor import (
    DEFAULT_HEURISTIC,
    TopicPartition,
    bins_used,
    get_heuristic,
    lower_bound,
    rscore,
)
from benchmarks import paper
from consumer_sdk.embedded_process import EmbeddedKafkaProcess

TOPIC = "demo-events"


def produce(bootstrap: str, partitions: int, records: int, seed: int) -> Counter[int]:
    """Produce ``records`` 1 KiB records, partition chosen with skewed weights."""
    rng = random.Random(seed)
    weights = [rng.uniform(0.1, 1.0) for _ in range(partitions)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "acks": "all"})
    per_partition: Counter[int] = Counter()
    value = b"x" * 1024
    for i in range(records):
        partition = rng.choices(range(partitions), weights)[0]
        while True:
            try:
                producer.produce(TOPIC, key=str(i).encode(), value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        per_partition[partition] += 1
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("some records were not acknowledged within 60 s")
    return per_partition


def consume_all(bootstrap: str, expected: int, deadline_s: float) -> Counter[bytes]:
    """Read the topic from the start until ``expected`` records or the deadline."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "demo",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.subscribe([TOPIC])
    seen: Counter[bytes] = Counter()
    end = time.monotonic() + deadline_s
    try:
        while sum(seen.values()) < expected and time.monotonic() < end:
            for message in consumer.consume(1000, timeout=0.2):
                if message.error() is not None:
                    raise RuntimeError(f"consume error: {message.error()}")
                seen[message.key() or b""] += 1
    finally:
        consumer.close()
    return seen


def show_packing(console: Console, counts: Counter[int], seed: int) -> None:
    """Pack partition volumes with our heuristic and MBF, then after a drift."""
    speeds = {TopicPartition(TOPIC, p): float(n) for p, n in sorted(counts.items())}
    capacity = 1.05 * max(speeds.values()) * 1.5
    rng = random.Random(seed)
    drifted = {tp: max(0.0, s * rng.uniform(0.7, 1.3)) for tp, s in speeds.items()}
    table = Table(title=f"Packing {len(speeds)} partitions (capacity {capacity:.0f} records)")
    for column in ("heuristic", "consumers", "lower bound", "after drift", "Rscore of drift"):
        table.add_column(column, justify="right" if column != "heuristic" else "left")
    for name in (DEFAULT_HEURISTIC, "mbf", "mwf", "bfd"):
        heuristic = get_heuristic(name)
        first = heuristic.assign(speeds, capacity=capacity)
        second = heuristic.assign(drifted, capacity=capacity, previous=first)
        table.add_row(
            name + (" (default)" if name == DEFAULT_HEURISTIC else ""),
            str(bins_used(first)),
            str(lower_bound(speeds, capacity)),
            str(bins_used(second)),
            f"{rscore(first, second, drifted, capacity):.2f}",
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit 1 if any record was lost or duplicated."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    if args.records < 1 or args.partitions < 1:
        parser.error("--records and --partitions must be >= 1")
    console = Console()
    with EmbeddedKafkaProcess(brokers=3) as broker:
        console.rule("[bold]1. embedded Kafka broker")
        console.print(f"bootstrap servers: {broker.bootstrap_servers} (broker pid {broker.pid})")
        broker.create_topic(TOPIC, args.partitions, 3)
        console.rule("[bold]2. produce and consume")
        started = time.monotonic()
        counts = produce(broker.bootstrap_servers, args.partitions, args.records, args.seed)
        produced_s = time.monotonic() - started
        seen = consume_all(broker.bootstrap_servers, args.records, deadline_s=60)
        consumed_s = time.monotonic() - started - produced_s
        duplicates = sum(n - 1 for n in seen.values() if n > 1)
        missing = args.records - len(seen)
        console.print(
            f"produced {args.records} records of 1 KiB in {produced_s:.1f} s; consumed "
            f"{sum(seen.values())} in {consumed_s:.1f} s: {missing} missing, "
            f"{duplicates} duplicated"
        )
    console.rule("[bold]3. packing partitions by write speed")
    show_packing(console, counts, args.seed)
    console.rule("[bold]4. paper reproduction (short run: P = 40, N = 60)")
    rows = paper.evaluate(partitions=40, measurements=60, deltas=(5, 15, 25), seed=args.seed)
    console.print(Markdown(paper.markdown(rows, "Mean over the stream, per delta")))
    console.print("Full run (P = 100, N = 500): benchmarks/results/paper.md and paper_pareto.png")
    return 0 if missing == 0 and duplicates == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
