"""Memory of the embedded broker as data accumulates (it keeps every record in memory).

Hosts the broker in its own process, produces 1 KiB records in steps, and reads the host
process's RSS after each step; the last steps go past the mock's hard-coded per-partition
retention (5 MiB) to show where growth stops. ``python -m benchmarks.embedded_memory``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.support.machine import machine_line
from benchmarks.support.report import publish
from local_kafka.embedded_process import EmbeddedKafkaProcess

MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def produce(bootstrap: str, topic: str, partitions: int, mib: int, value_size: int) -> None:
    """Produce ``mib`` MiB of ``value_size`` values spread evenly over the partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    value = b"x" * value_size
    for i in range(mib * MIB // value_size):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records not acknowledged within 60 s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run and write ``results/embedded_memory.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--step-mib", type=int, default=8)
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with EmbeddedKafkaProcess(brokers=3) as broker:
        broker.create_topic("memory", args.partitions, 1)
        rows.append({"produced_mib": 0, "rss_mib": rss_mib(broker.pid)})
        for step in range(1, args.steps + 1):
            produce(
                broker.bootstrap_servers, "memory", args.partitions, args.step_mib, args.value_size
            )
            rows.append({"produced_mib": step * args.step_mib, "rss_mib": rss_mib(broker.pid)})
            print(rows[-1], flush=True)
    cap = args.partitions * 5
    lines = [
        "# Embedded broker memory as data accumulates",
        "",
        machine_line(),
        f"3 brokers, one topic of {args.partitions} partitions (replication 1), "
        f"{args.value_size} B values; RSS of the broker's own process. Retention is "
        f"hard-coded at 5 MiB per partition ({cap} MiB for this topic).",
        "",
        "| produced MiB | per partition MiB | broker RSS MiB |",
        "|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['produced_mib']} | {row['produced_mib'] / args.partitions:.1f} | "
            f"{row['rss_mib']:.1f} |"
        )
    publish(
        "embedded_memory",
        "\n".join(lines),
        {"args": vars(args), "rows": rows},
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
