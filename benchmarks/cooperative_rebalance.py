"""Partition pause through scale events: aiokafka eager (range, sticky) vs our cooperative
mode, on the embedded broker, in the same run.

A topic of 100 partitions gets a steady paced load; 10 members read it. Per protocol, three
scenarios: scale-out 10 -> 11, scale-in 11 -> 10, and a rolling restart of the 10 members.
Every member logs when it starts and stops owning partitions; the pause of a partition is
the time inside the scenario's window when no member owned it, summed over partitions.
Next to it, the pause predicted from what moved (the Rscore view): partitions that changed
owner times the protocol's measured round time (two rounds for cooperative).

``python -m benchmarks.cooperative_rebalance`` writes
``results/cooperative_rebalance.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from confluent_kafka import Producer

from benchmarks.machine import machine_line
from benchmarks.report import RESULTS, publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer, OwnershipEvent
from consumer_sdk.embedded_process import EmbeddedKafkaProcess
from consumer_sdk.sink import CallbackSink, Record

PARTITIONS = 100
MEMBERS = 10
# Embedded broker timings (DESIGN.md section 6): rebalances complete after session - 1 s.
SESSION_MS, HEARTBEAT_MS, LEADER_DELAY_S = 1500, 100, 0.1
PROTOCOLS = ("eager-range", "eager-sticky", "cooperative")


@dataclass
class Ownership:
    """Thread-safe log of (time, member, +1/-1, partitions) and consumed-record times."""

    events: list[tuple[float, str, int, frozenset[int]]] = field(default_factory=list)
    consumed: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def change(
        self, member: str, sign: int, partitions: Iterable[int], at: float | None = None
    ) -> None:
        chosen = frozenset(partitions)
        if chosen:
            with self.lock:
                self.events.append((time.monotonic() if at is None else at, member, sign, chosen))

    def count(self, records: int) -> None:
        with self.lock:
            self.consumed.append((time.monotonic(), records))


def _delayed(base: type[AbstractPartitionAssignor]) -> type[AbstractPartitionAssignor]:
    """A per-member copy of an aiokafka assignor whose leader answers 100 ms late (the
    embedded broker's SyncGroup race) and whose class state is its own."""

    class Delayed(base):
        @classmethod
        def assign(cls, cluster: Any, members: Mapping[str, Any]) -> Any:
            time.sleep(LEADER_DELAY_S)
            return super().assign(cluster, members)

    return Delayed


class Member:
    """One group member in its own thread and event loop."""

    def __init__(self, name: str, protocol: str, kafka: str, topic: str, log: Ownership):
        self.name, self.protocol, self.kafka, self.topic = name, protocol, kafka, topic
        self.log = log
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=name)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _main(self) -> None:
        if self.protocol == "cooperative":
            await self._run_sdk()
        else:
            await self._run_plain()

    async def _run_plain(self) -> None:
        base = RangePartitionAssignor if self.protocol == "eager-range" else StickyPartitionAssignor
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.log.change(member.name, -1, (tp.partition for tp in revoked))
                member.owned -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.log.change(member.name, +1, (tp.partition for tp in assigned))
                member.owned |= {tp.partition for tp in assigned}

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.kafka,
            group_id=f"bench-{self.topic}",
            enable_auto_commit=True,
            auto_commit_interval_ms=500,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            fetch_max_wait_ms=100,
            partition_assignment_strategy=(_delayed(base),),
        )
        consumer.subscribe([self.topic], listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                self.log.count(sum(len(v) for v in batch.values()))
        finally:
            self.log.change(self.name, -1, self.owned)
            await consumer.stop()

    async def _run_sdk(self) -> None:
        config = ConsumerConfig(
            bootstrap_servers=self.kafka,
            group=f"bench-{self.topic}",
            topics=(self.topic,),
            capacity=1000.0,
            member_identity=self.name,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            leader_delay_secs=LEADER_DELAY_S,
            wait_time_secs=0.2,
            replan_after_secs=0,
        )

        def write(topic: str, records: Sequence[Record]) -> None:
            self.log.count(len(records))

        consumer = AutoscalingConsumer(config, CallbackSink(write))
        seen = 0
        task = asyncio.create_task(consumer.run_async())
        while not self._stop.is_set() and not task.done():
            log = list(consumer.ownership_log)
            seen = self._copy_events(log, seen)
            self.owned = {tp.partition for tp in consumer.assigned}
            await asyncio.sleep(0.05)
        consumer.request_stop()
        await task
        self._copy_events(list(consumer.ownership_log), seen)

    def _copy_events(self, log: list[OwnershipEvent], seen: int) -> int:
        for event in log[seen:]:
            sign = 1 if event.kind == "assigned" else -1
            self.log.change(self.name, sign, (tp.partition for tp in event.partitions), event.at)
        return len(log)


def produce_steadily(kafka: str, topic: str, stop: threading.Event, rate: int) -> None:
    """About ``rate`` records/s of 200 B spread over the partitions, until ``stop``."""
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 20})
    i = 0
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(rate // 10):
            producer.produce(topic, b"x" * 200, partition=i % PARTITIONS)
            i += 1
        producer.poll(0)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    producer.flush(30)


def owners(members: Iterable[Member]) -> dict[int, str]:
    return {p: m.name for m in members for p in m.owned}


def settled(members: list[Member], timeout_s: float = 60.0) -> bool:
    """Every partition owned by exactly one member, every member owning some."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        counts = sum(len(m.owned) for m in members)
        if all(m.owned for m in members) and len(owners(members)) == counts == PARTITIONS:
            return True
        time.sleep(0.05)
    return False


def pause_seconds(log: Ownership, start: float, end: float) -> float:
    """Sum over partitions of the time in [start, end] when no member owned it."""
    with log.lock:
        events = sorted(log.events)
    timeline: dict[int, list[tuple[float, int]]] = {p: [] for p in range(PARTITIONS)}
    for at, _, sign, partitions in events:
        for p in partitions:
            timeline[p].append((at, sign))

    def clipped(a: float, b: float) -> float:
        return max(0.0, min(b, end) - max(a, start))

    total = 0.0
    for changes in timeline.values():
        count, unowned_since = 0, float("-inf")
        for at, sign in changes:
            if count <= 0 < count + sign:
                total += clipped(unowned_since, at)
            elif count + sign <= 0 < count:
                unowned_since = at
            count += sign
        if count <= 0:
            total += clipped(unowned_since, end)
    return total


def scenario(
    name: str, log: Ownership, members: list[Member], act: Any, *, tail_s: float = 2.0
) -> dict[str, Any]:
    """Run ``act`` (which changes ``members``), wait until settled, measure the window."""
    before = owners(members)
    start = time.monotonic()
    act()
    ok = settled(members)
    end = time.monotonic() + tail_s
    time.sleep(tail_s)  # the window closes a little after the group settled
    after = owners(members)
    moved = sum(before.get(p) != owner for p, owner in after.items())
    return {
        "scenario": name,
        "start": start,
        "end": end,
        "settled": ok,
        "window_s": end - start,
        "settle_s": end - tail_s - start,
        "moved": moved,
        "pause_partition_s": pause_seconds(log, start, end),
    }


def run(kafka: Any, protocol: str, rate: int, plot_data: dict[str, Any]) -> list[dict[str, Any]]:
    topic = f"coop-{protocol}-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, PARTITIONS, 1)
    bootstrap = kafka.bootstrap_servers
    log = Ownership()
    stop_load = threading.Event()
    loader = threading.Thread(target=produce_steadily, args=(bootstrap, topic, stop_load, rate))
    loader.start()
    members = [Member(f"m-{i}", protocol, bootstrap, topic, log).start() for i in range(MEMBERS)]
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    try:
        assert settled(members, 120), f"{protocol}: the group of {MEMBERS} never settled"
        time.sleep(2.0)

        def scale_out() -> None:
            members.append(Member("m-extra", protocol, bootstrap, topic, log).start())

        def scale_in() -> None:
            members.pop().stop()

        def rolling_restart() -> None:
            for i in range(MEMBERS):
                members[i].stop()
                members[i] = Member(f"m-{i}-r", protocol, bootstrap, topic, log).start()
                settled(members)

        for name, act in (
            ("scale-out 10->11", scale_out),
            ("scale-in 11->10", scale_in),
            ("rolling restart", rolling_restart),
        ):
            results.append({"protocol": protocol, **scenario(name, log, members, act)})
    finally:
        stop_load.set()
        for m in members:
            m.stop()
        loader.join(60)
    with log.lock:
        last = max(r["end"] for r in results)
        plot_data[protocol] = {
            "consumed": [(at - t0, n) for at, n in log.consumed if at <= last],
            "marks": [(r["start"] - t0, r["scenario"]) for r in results],
        }
    for r in results:  # relative times in the JSON
        r["start"], r["end"] = r["start"] - t0, r["end"] - t0
    return results


def plot(plot_data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(plot_data), 1, figsize=(10, 2.6 * len(plot_data)), sharex=True)
    for ax, (protocol, data) in zip(axes, plot_data.items(), strict=True):
        buckets: dict[int, int] = {}
        for at, n in data["consumed"]:
            buckets[int(at * 2)] = buckets.get(int(at * 2), 0) + n
        xs = sorted(buckets)
        ax.plot([x / 2 for x in xs], [buckets[x] * 2 for x in xs], lw=1)
        for at, label in data["marks"]:
            ax.axvline(at, color="grey", ls="--", lw=0.8)
            ax.text(at, ax.get_ylim()[1] * 0.9, f" {label}", fontsize=8, color="grey")
        ax.set_ylabel("records/s")
        ax.set_title(protocol, fontsize=10)
    axes[-1].set_xlabel("seconds since the members started (load is steady throughout)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every protocol side by side on one embedded broker."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=5000, help="records/s produced")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    plot_data: dict[str, Any] = {}
    with EmbeddedKafkaProcess(brokers=3) as kafka:
        for protocol in PROTOCOLS:
            rows.extend(run(kafka, protocol, args.rate, plot_data))
    round_s = {
        p: min(r["settle_s"] for r in rows if r["protocol"] == p and "out" in r["scenario"])
        for p in PROTOCOLS
    }
    lines = [
        f"# Partition pause through scale events ({PARTITIONS} partitions, {MEMBERS} members, "
        f"{args.rate} records/s)",
        "",
        machine_line(),
        "",
        "| scenario | protocol | moved partitions | pause (partition-s) | predicted from moved "
        "(partition-s) | settled in (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        predicted = r["moved"] * round_s[r["protocol"]]
        r["predicted_partition_s"] = predicted
        lines.append(
            f"| {r['scenario']} | {r['protocol']} | {r['moved']} | "
            f"{r['pause_partition_s']:.1f} | {predicted:.1f} | {r['settle_s']:.1f} |"
        )
    eager = {r["scenario"]: r["pause_partition_s"] for r in rows if r["protocol"] == "eager-sticky"}
    lines += ["", "Eager-sticky pause / cooperative pause:"]
    for r in rows:
        if r["protocol"] == "cooperative" and r["pause_partition_s"] > 0:
            ratio = eager[r["scenario"]] / r["pause_partition_s"]
            lines.append(f"- {r['scenario']}: {ratio:.1f}x")
    publish("cooperative_rebalance", "\n".join(lines), {"rows": rows}, write=not args.no_write)
    if not args.no_write:
        plot(plot_data, RESULTS / "cooperative_rebalance.png")
    return 0 if all(r["settled"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
