"""Partition pause through scale events, side by side in one run on one cluster: aiokafka
eager (range, sticky), our cooperative mode, and the clients a user would pick instead:
confluent-kafka with ``partition.assignment.strategy=cooperative-sticky`` (librdkafka's
KIP-429) and confluent-kafka with ``group.protocol=consumer`` (KIP-848, the broker assigns;
Apache Kafka only).

Ours runs twice: with its default one-round hand-over and with ``handover="two-round"``
(the old owner revokes in one round, the next round hands over), so the two designs are
compared in the same run. ``--baseline REV`` adds ours at another commit (its members run
that commit's code, benchmark module included), right after ours at each timing profile.

A topic of 100 partitions gets a steady paced load; 10 members read it, each in a process
of its own, as consumers run in production. Per protocol, three
scenarios: scale-out 10 -> 11, scale-in 11 -> 10, and a rolling restart of the 10 members.
Every member logs when it starts and stops reading partitions (ours: when it stops reading a
revoked partition, before flushing and committing it, and when its resume stage lets a new
one be read, after the old owner's release; the others: their rebalance callbacks); the
pause of a partition is the time inside the scenario's window when no member read it,
summed over partitions. The window closes once no ownership changed for a heartbeat interval
and a second (a KIP-848 group looks settled half-way through its reconciliation). Each
protocol runs on a broker of its own, started fresh, so none
inherits another's topics, groups or heap (on two cores, what ran before changed the pauses
of what ran after by a third).
Next to it, the pause predicted from what moved (the Rscore view): partitions that changed
owner times the protocol's measured round time; records re-delivered (an offset read again),
split into partitions that moved in the window and partitions that did not.

``python -m benchmarks.cooperative_rebalance --cluster apache`` (or ``embedded``) writes
``results/cooperative_rebalance_<cluster>.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import multiprocessing
import statistics
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from confluent_kafka import Consumer, Producer

from assignor import TopicPartition
from assignor.broker import ASSIGNOR_NAME, CONTROL_INSTANCE_PREFIX
from assignor.group_plan import FALLBACK_HEURISTIC
from assignor.registry import get_heuristic
from benchmarks.support.kip848_members import kafka_topic_id
from benchmarks.support.machine import (
    add_cluster_option,
    baseline_checkout,
    broker_line,
    imports_from,
    machine_info,
    machine_line,
)
from benchmarks.support.polling import wait_for
from benchmarks.support.report import RESULTS, publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer, OwnershipEvent
from consumer_sdk.sink import CallbackSink, Record
from contract.broker_plans import encode_plan, plans_topic_for
from local_kafka.clusters import ClusterKind, KafkaCluster, kafka_cluster
from local_kafka.paced_load import PacedLoad

PARTITIONS = 100
MEMBERS = 10


@dataclass(frozen=True)
class Timings:
    """Group timings every protocol runs with: classic members set them as client options,
    KIP-848 members get them from the broker (group.consumer.* node settings)."""

    name: str
    session_ms: int
    heartbeat_ms: int

    def broker_settings(self) -> dict[str, str]:
        return {
            "group.consumer.session.timeout.ms": str(self.session_ms),
            "group.consumer.heartbeat.interval.ms": str(self.heartbeat_ms),
        }


# What users run (aiokafka's defaults: 10 s session, 3 s heartbeat; the same for every
# protocol), and short timings that make every rebalance fast. The embedded broker only
# takes the short ones: it completes a rebalance after session - 1 s.
DEFAULTS = Timings("client defaults", 10_000, 3_000)
FAST = Timings("fast", 1_500, 100)
PROFILES = {ClusterKind.APACHE: (DEFAULTS, FAST), ClusterKind.EMBEDDED: (FAST,)}
# The embedded broker's SyncGroup race needs the leader to answer late; Apache Kafka does not.
LEADER_DELAY_S = {ClusterKind.EMBEDDED: 0.1}
OURS = "cooperative (ours)"
OURS_TWO_ROUND = "cooperative two-round (ours)"  # no comma: --protocols splits on them
LIBRDKAFKA = "librdkafka cooperative-sticky"
KIP848 = "KIP-848 consumer protocol"
# KIP-848 members (confluent-kafka, no code of ours) choosing our broker-side assignor, with
# the benchmark publishing the plans the sidecar would (assignor/broker).
KIP848_OURS = "KIP-848 + autoscaler"
# KIP-848 members named as a StatefulSet names them (group.instance.id) with Kafka's default
# assignor: what the autoscaler row's static members would get without it.
KIP848_STATIC = "KIP-848 uniform static members"
STATIC = {KIP848_OURS, KIP848_STATIC}
PROTOCOLS = (
    "eager-range",
    "eager-sticky",
    OURS,
    OURS_TWO_ROUND,
    LIBRDKAFKA,
    KIP848,
    KIP848_OURS,
    KIP848_STATIC,
)
# The embedded broker does not implement the KIP-848 ConsumerGroupHeartbeat API.
UNSUPPORTED = {ClusterKind.EMBEDDED: {KIP848, KIP848_OURS, KIP848_STATIC}}


@dataclass
class Ownership:
    """Thread-safe log of (time, member, +1/-1, partitions) and of offsets read again."""

    events: list[tuple[float, str, int, frozenset[int]]] = field(default_factory=list)
    redelivered: list[tuple[float, int, int]] = field(default_factory=list)
    """(time, partition, records) read again: offsets some member had read before."""
    read: dict[int, set[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def change(
        self, member: str, sign: int, partitions: Iterable[int], at: float | None = None
    ) -> None:
        chosen = frozenset(partitions)
        if chosen:
            with self.lock:
                self.events.append((time.monotonic() if at is None else at, member, sign, chosen))

    def count(self, offsets: Mapping[int, Sequence[int]], at: float | None = None) -> None:
        """Log records read at ``at`` (now if None): partition -> offsets. Members report
        from their own processes, so reports of one partition may arrive out of order:
        an offset counts as read again only if it was read before, whatever came between."""
        when = time.monotonic() if at is None else at
        with self.lock:
            for partition, read in offsets.items():
                seen = self.read.setdefault(partition, set())
                again = sum(1 for offset in read if offset in seen)
                if again:
                    self.redelivered.append((when, partition, again))
                seen.update(read)


class OwnershipReports:
    """A member process's side of the log: each change, count and owned set goes to the
    benchmark process through ``queue``, stamped with this process's monotonic clock (one
    clock for every process of the machine)."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def change(
        self, member: str, sign: int, partitions: Iterable[int], at: float | None = None
    ) -> None:
        chosen = sorted(partitions)
        if chosen:
            self._queue.put(
                ("change", time.monotonic() if at is None else at, member, sign, chosen)
            )

    def count(self, offsets: Mapping[int, Sequence[int]]) -> None:
        if offsets:
            self._queue.put(("count", time.monotonic(), {p: list(o) for p, o in offsets.items()}))

    def owned(self, partitions: set[int]) -> None:
        self._queue.put(("owned", sorted(partitions)))


def _delayed(
    base: type[AbstractPartitionAssignor], delay_s: float
) -> type[AbstractPartitionAssignor]:
    """A per-member copy of an aiokafka assignor whose leader answers ``delay_s`` late (the
    embedded broker's SyncGroup race) and whose class state is its own."""

    class Delayed(base):
        @classmethod
        def assign(cls, cluster: Any, members: Mapping[str, Any]) -> Any:
            time.sleep(delay_s)
            return super().assign(cluster, members)

    return Delayed


@dataclass(frozen=True)
class MemberSpec:
    """Who a member is and how it reads: what its process is started with."""

    name: str
    protocol: str
    kafka: str
    topic: str
    delay_s: float
    timings: Timings
    trace_dir: str | None = None
    """Where the member writes its log (``--trace``), stamped with the shared monotonic
    clock; None: no log."""


def trace_to(directory: str, name: str) -> None:
    """Log this process's INFO lines (the SDK's and aiokafka's group coordinator's) to
    ``directory/name.log``, each stamped with the monotonic clock the ownership log uses."""

    class Stamp(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.mono = time.monotonic()
            return True

    handler = logging.FileHandler(Path(directory) / f"{name}.log")
    handler.addFilter(Stamp())
    handler.setFormatter(logging.Formatter("%(mono).3f %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


class Member:
    """One group member, run in a process of its own (:func:`run_member`): consumers run
    one per process in production, and eleven event loops sharing one interpreter's lock
    timed that lock, not the protocol (librdkafka's threads do not take it)."""

    def __init__(self, spec: MemberSpec, log: OwnershipReports, stop: Any):
        self.name, self.protocol, self.kafka, self.topic = (
            spec.name,
            spec.protocol,
            spec.kafka,
            spec.topic,
        )
        self.log, self.delay_s, self.timings = log, spec.delay_s, spec.timings
        self._owned: set[int] = set()
        self._stop = stop
        if spec.trace_dir is not None:
            trace_to(spec.trace_dir, spec.name)

    @property
    def owned(self) -> set[int]:
        """The partitions assigned to this member now (a copy)."""
        return set(self._owned)

    @owned.setter
    def owned(self, partitions: set[int]) -> None:
        if partitions != self._owned:
            self._owned = set(partitions)
            self.log.owned(self._owned)

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        if self.protocol in (OURS, OURS_TWO_ROUND):
            await self._run_sdk()
        elif self.protocol in (LIBRDKAFKA, KIP848, *STATIC):
            self._run_confluent()
        elif self.protocol in ("eager-range", "eager-sticky"):
            await self._run_plain()
        else:
            raise ValueError(f"unknown protocol {self.protocol!r}")

    def _run_confluent(self) -> None:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.kafka,
            "group.id": f"bench-{self.topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,
        }
        if self.protocol in (KIP848, *STATIC):
            settings["group.protocol"] = "consumer"
        if self.protocol in STATIC:
            settings["group.instance.id"] = self.name  # as a StatefulSet names its pods
        if self.protocol == KIP848_OURS:
            settings["group.remote.assignor"] = ASSIGNOR_NAME
        elif self.protocol == LIBRDKAFKA:
            settings.update(
                {
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": self.timings.session_ms,
                    "heartbeat.interval.ms": self.timings.heartbeat_ms,
                }
            )
        consumer = Consumer(settings)

        def assigned(_consumer: Any, partitions: list[Any]) -> None:
            self.log.change(self.name, +1, (tp.partition for tp in partitions))
            self.owned |= {tp.partition for tp in partitions}

        def revoked(_consumer: Any, partitions: list[Any]) -> None:
            self.log.change(self.name, -1, (tp.partition for tp in partitions))
            self.owned -= {tp.partition for tp in partitions}

        consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            while not self._stop.is_set():
                offsets: dict[int, list[int]] = {}
                for message in consumer.consume(500, 0.2):
                    partition, offset = message.partition(), message.offset()
                    if message.error() is None and partition is not None and offset is not None:
                        offsets.setdefault(partition, []).append(offset)
                self.log.count(offsets)
        finally:
            consumer.close()
            self.log.change(self.name, -1, self.owned)
            self.owned = set()

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
            session_timeout_ms=self.timings.session_ms,
            heartbeat_interval_ms=self.timings.heartbeat_ms,
            fetch_max_wait_ms=100,
            partition_assignment_strategy=(_delayed(base, self.delay_s),),
        )
        consumer.subscribe([self.topic], listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                self.log.count({tp.partition: [r.offset for r in v] for tp, v in batch.items()})
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
            session_timeout_ms=self.timings.session_ms,
            heartbeat_interval_ms=self.timings.heartbeat_ms,
            leader_delay_secs=self.delay_s,
            wait_time_secs=0.2,
            replan_after_secs=0,
            handover="two-round" if self.protocol == OURS_TWO_ROUND else "one-round",
        )

        def write(topic: str, records: Sequence[Record]) -> None:
            offsets: dict[int, list[int]] = {}
            for r in records:
                offsets.setdefault(r.partition, []).append(r.offset)
            self.log.count(offsets)

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


def run_member(spec: MemberSpec, queue: Any, stop: Any) -> None:
    """A member process's body: run until ``stop``, then say so on ``queue``."""
    try:
        Member(spec, OwnershipReports(queue), stop).run()
    finally:
        queue.put(("done",))


class MemberProcess:
    """The benchmark's handle on a member process: its owned partitions and log entries
    arrive through a queue, read by a thread of its own."""

    def __init__(self, spec: MemberSpec, log: Ownership, tree: Path | None = None):
        context = multiprocessing.get_context("spawn")
        self.name, self._log, self._tree = spec.name, log, tree
        self.owned: set[int] = set()
        self._queue: Any = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=run_member, args=(spec, self._queue, self._stop), name=spec.name
        )
        self._reader = threading.Thread(target=self._receive, name=f"{spec.name}-reports")

    def start(self) -> MemberProcess:
        with imports_from(self._tree):
            self._process.start()
        self._reader.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self._reader.join(10)
        if self._reader.is_alive():  # the process died before saying it was done
            self._queue.put(("done",))
            self._reader.join(10)

    def _receive(self) -> None:
        while True:
            report = self._queue.get()
            if report[0] == "done":
                return
            if report[0] == "change":
                _, at, member, sign, partitions = report
                self._log.change(member, sign, partitions, at)
            elif report[0] == "count":
                self._log.count(report[2], report[1])
            else:
                self.owned = set(report[1])


class BrokerPlans:
    """The sidecar's part in the KIP-848 + autoscaler row: before each scale event, the plan
    for the members the group will have, packed by the same ``sticky`` heuristic our own
    members fall back to without speeds (so both rows move the same partitions), published
    for the broker's assignor. A member to be removed is emptied first: a control member
    joining makes the coordinator assign, the member then stops owning nothing."""

    def __init__(self, kafka: KafkaCluster, topic: str) -> None:
        self.kafka, self.topic, self.group = kafka, topic, f"bench-{topic}"
        kafka.broker_handle().create_topic(plans_topic_for(self.group), 1, 1)
        self.topic_ids = {topic: kafka_topic_id(kafka.bootstrap_servers, topic)}
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
        self.controls = 0

    def publish(self, current: Mapping[int, str], names: Sequence[str], emptied: str = "") -> None:
        """Publish the plan for ``names`` (plus ``emptied``, given nothing) from ``current``."""
        speeds = {TopicPartition(self.topic, p): 1.0 for p in range(PARTITIONS)}
        previous = {TopicPartition(self.topic, p): owner for p, owner in current.items()}
        plan = get_heuristic(FALLBACK_HEURISTIC).assign(
            speeds, capacity=float(PARTITIONS), previous=previous, members=list(names)
        )
        members = [*names, emptied] if emptied else list(names)
        key, value = encode_plan(
            self.group, plan, members, self.topic_ids, written_ms=int(time.time() * 1000)
        )
        self.producer.produce(plans_topic_for(self.group), value=value, key=key)
        assert self.producer.flush(30) == 0, "the plan was not written"

    def empty_then_stop(self, victim: MemberProcess, start: Any) -> None:
        """Kick the coordinator with a control member until ``victim`` owns nothing, then
        stop it and the control member."""
        self.controls += 1
        control = start(f"{CONTROL_INSTANCE_PREFIX}-{self.controls}")
        wait_for(lambda: not victim.owned, 60)
        victim.stop()
        control.stop()


def owners(members: Iterable[MemberProcess]) -> dict[int, str]:
    return {p: m.name for m in members for p in m.owned}


def settled(members: list[MemberProcess], timeout_s: float = 60.0) -> bool:
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


def quiet_since(log: Ownership, quiet_s: float, cap_s: float = 30.0) -> float:
    """Wait until no member's ownership changed for ``quiet_s`` (at most ``cap_s``); now."""
    end = time.monotonic() + cap_s
    while (now := time.monotonic()) < end:
        with log.lock:
            last = max((at for at, *_ in log.events[-50:]), default=float("-inf"))
        if now - last >= quiet_s:
            return now
        time.sleep(0.05)
    return time.monotonic()


def scenario(
    name: str, log: Ownership, members: list[MemberProcess], act: Any, *, tail_s: float = 2.0
) -> dict[str, Any]:
    """Run ``act`` (which changes ``members``), wait until settled, measure the window. The
    window closes once no ownership changed for ``tail_s``: a KIP-848 group can look settled
    (every partition owned, every member owning some) half-way through its reconciliation,
    with moves still to come a heartbeat later."""
    before = owners(members)
    start = time.monotonic()
    act()
    ok = settled(members)
    end = quiet_since(log, tail_s)
    after = owners(members)
    moved = sum(before.get(p) != owner for p, owner in after.items())
    with log.lock:
        touched = {p for at, _, _, ps in log.events if start <= at <= end for p in ps}
        again = [(p, n) for at, p, n in log.redelivered if start <= at <= end]
    return {
        "redelivered": sum(n for _, n in again),
        "redelivered_unmoved": sum(n for p, n in again if p not in touched),
        "scenario": name,
        "start": start,
        "end": end,
        "settled": ok,
        "window_s": end - start,
        "settle_s": end - tail_s - start,
        "moved": moved,
        "pause_partition_s": pause_seconds(log, start, end),
    }


def run_label(protocol: str, baseline: tuple[str, Path] | None) -> str:
    """How a run is named in the results: the protocol, and the commit for a baseline."""
    return f"{protocol} at {baseline[0]}" if baseline is not None else protocol


def run(
    kafka: KafkaCluster,
    protocol: str,
    timings: Timings,
    rate: int,
    repeats: int,
    trace_dir: Path | None = None,
    baseline: tuple[str, Path] | None = None,
) -> list[dict[str, Any]]:
    """One protocol on a fresh topic: ``repeats`` scale-outs 10->11 each followed by a
    scale-in 11->10, then a rolling restart of the 10 members. ``trace_dir``: members log
    there, and the ownership log and the scenarios' windows go to ``events.json``.
    ``baseline``: (revision, its work tree) whose code the members run instead."""
    label = run_label(protocol, baseline)
    tree = baseline[1] if baseline is not None else None
    topic = kafka.create_topic(PARTITIONS, prefix="coop")
    bootstrap = kafka.bootstrap_servers
    delay_s = LEADER_DELAY_S.get(kafka.kind, 0.0)
    log = Ownership()

    def member(name: str) -> MemberProcess:
        trace = str(trace_dir) if trace_dir is not None else None
        spec = MemberSpec(name, protocol, bootstrap, topic, delay_s, timings, trace)
        return MemberProcess(spec, log, tree).start()

    plans = BrokerPlans(kafka, topic) if protocol == KIP848_OURS else None
    load = PacedLoad(bootstrap, topic, rate, PARTITIONS, value_bytes=200).start()
    if plans is not None:
        plans.publish({}, [f"m-{i}" for i in range(MEMBERS)])
    members = [member(f"m-{i}") for i in range(MEMBERS)]
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    try:
        assert settled(members, 120), f"{protocol}: the group of {MEMBERS} never settled"
        time.sleep(2.0)

        def rolling_restart() -> None:
            for i in range(MEMBERS):
                members[i].stop()
                # Static members (the plans name them) come back as themselves.
                members[i] = member(f"m-{i}" if protocol in STATIC else f"m-{i}-r")
                settled(members)

        def scale_out(k: int) -> None:
            name = f"m-extra-{k}"
            if plans is not None:
                plans.publish(owners(members), [m.name for m in members] + [name])
            members.append(member(name))

        def scale_in() -> None:
            if plans is None:
                members.pop().stop()
                return
            victim = members.pop()
            plans.publish(owners([*members, victim]), [m.name for m in members], victim.name)
            plans.empty_then_stop(victim, member)

        steps: list[tuple[str, Any]] = []
        for k in range(repeats):
            steps.append(("scale-out 10->11", lambda k=k: scale_out(k)))
            steps.append(("scale-in 11->10", scale_in))
        steps.append(("rolling restart", rolling_restart))
        for name, act in steps:
            results.append(
                {
                    "protocol": label,
                    "profile": timings.name,
                    # Quiet for a heartbeat and a second: KIP-848 moves come with heartbeats.
                    **scenario(name, log, members, act, tail_s=timings.heartbeat_ms / 1000 + 1),
                }
            )
    finally:
        load.stop()
        for m in members:
            m.stop()
    if trace_dir is not None:
        with log.lock:
            events = [(at, m, sign, sorted(ps)) for at, m, sign, ps in sorted(log.events)]
        trace = {"protocol": label, "profile": timings.name, "scenarios": results}
        (trace_dir / "events.json").write_text(json.dumps({**trace, "events": events}))
    for r in results:  # relative times in the JSON
        r["start"], r["end"] = r["start"] - t0, r["end"] - t0
    return results


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    """Pause (partition-seconds, log scale) per scenario and protocol, a panel per profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(r["profile"] for r in summary))
    scenarios = list(dict.fromkeys(r["scenario"] for r in summary))
    protocols = list(dict.fromkeys(r["protocol"] for r in summary))
    fig, axes = plt.subplots(1, len(profiles), figsize=(6.5 * len(profiles), 4.2), squeeze=False)
    width = 0.8 / len(protocols)
    for ax, profile in zip(axes[0], profiles, strict=True):
        pause = {
            (r["protocol"], r["scenario"]): r["pause_partition_s"]
            for r in summary
            if r["profile"] == profile
        }
        for i, protocol in enumerate(protocols):
            heights = [max(pause.get((protocol, sc), 0.0), 1e-2) for sc in scenarios]
            ax.bar([x + i * width for x in range(len(scenarios))], heights, width, label=protocol)
        ax.set_xticks([x + width * (len(protocols) - 1) / 2 for x in range(len(scenarios))])
        ax.set_xticklabels(scenarios)
        ax.set_yscale("log")
        ax.set_ylabel("partition pause (partition-s, log)")
        ax.set_title(f"timings: {profile}")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per profile, protocol and scenario: the mean over its repetitions."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["profile"], r["protocol"], r["scenario"]), []).append(r)
    summary = []
    for (profile, protocol, scenario_name), runs in groups.items():
        mean = {
            key: sum(r[key] for r in runs) / len(runs)
            for key in ("moved", "pause_partition_s", "settle_s")
        }
        pauses = [r["pause_partition_s"] for r in runs]
        summary.append(
            {
                "profile": profile,
                "protocol": protocol,
                "scenario": scenario_name,
                "runs": len(runs),
                **mean,
                "pauses": pauses,
                "pause_min": min(pauses),
                "pause_max": max(pauses),
                "pause_per_moved_s": mean["pause_partition_s"] / max(1.0, mean["moved"]),
                "redelivered": sum(r["redelivered"] for r in runs),
                "redelivered_unmoved": sum(r["redelivered_unmoved"] for r in runs),
                "settled": all(r["settled"] for r in runs),
            }
        )
    return summary


def overlapping(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two summaries' ranges of pause over their runs overlap (both ran twice or more)."""
    if min(a["runs"], b["runs"]) < 2:
        return False
    return bool(a["pause_min"] <= b["pause_max"] and b["pause_min"] <= a["pause_max"])


def welch_t(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """How many standard errors ``a``'s mean pause is above ``b``'s (Welch); None with fewer
    than two runs on either side or no spread at all."""
    xs, ys = a.get("pauses", []), b.get("pauses", [])
    if len(xs) < 2 or len(ys) < 2:
        return None
    error = math.sqrt(statistics.variance(xs) / len(xs) + statistics.variance(ys) / len(ys))
    return None if error == 0 else (statistics.mean(xs) - statistics.mean(ys)) / error


def report(summary: list[dict[str, Any]], header: str, reference: str = OURS) -> str:
    """Per profile: the table and ``reference``'s pause against every other protocol's."""
    lines = [header]
    for profile in dict.fromkeys(r["profile"] for r in summary):
        rows = [r for r in summary if r["profile"] == profile]
        lines += [
            "",
            f"## Timings: {profile}",
            "",
            "| scenario | protocol | runs | moved partitions | pause (partition-s) | its range "
            "| pause per moved partition (s) | settled in (s) | re-delivered "
            "| re-delivered, unmoved |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            spread = f"{r['pause_min']:.2f}-{r['pause_max']:.2f}" if r["runs"] > 1 else "-"
            lines.append(
                f"| {r['scenario']} | {r['protocol']} | {r['runs']} | {r['moved']:.1f} | "
                f"{r['pause_partition_s']:.2f} | {spread} | {r['pause_per_moved_s']:.3f} | "
                f"{r['settle_s']:.1f} | {r['redelivered']} | {r['redelivered_unmoved']} |"
            )
        pause = {(r["protocol"], r["scenario"]): r for r in rows}
        lines += [
            "",
            f"Pause of each protocol / pause of {reference} (above 1: {reference} pauses less; "
            "'overlap': the two ranges of runs overlap, so the order may be noise; t: the "
            "difference of the means in standard errors, Welch's, where |t| < 2 cannot order "
            "the two):",
            "",
        ]
        for scenario_name in dict.fromkeys(r["scenario"] for r in rows):
            ours = pause.get((reference, scenario_name))
            ratios = [
                f"{p} {other['pause_partition_s'] / ours['pause_partition_s']:.2f}x"
                + (" overlap" if overlapping(other, ours) else "")
                + (f" t={t:+.1f}" if (t := welch_t(other, ours)) is not None else "")
                for (p, s), other in pause.items()
                if s == scenario_name
                and p != reference
                and ours is not None
                and ours["pause_partition_s"] > 0
            ]
            lines.append(f"- {scenario_name}: " + ", ".join(ratios))
    return "\n".join(lines)


RENDERED = "Table re-rendered"


def reference_of(protocols: Sequence[str]) -> str:
    """The protocol every other is compared with: ours (classic, else broker-side), else the
    last one run."""
    return next((p for p in (OURS, KIP848_OURS) if p in protocols), protocols[-1])


def report_from(paths: Sequence[Path], *, write: bool = True) -> int:
    """Render committed runs' tables again from their rows (the current summary and report:
    ranges, overlap marks, t). One run keeps its header, machine and date; with ``write``,
    its markdown, JSON and plot are rewritten, saying at which code. Several runs are pooled
    (their rows together, each run's machine line in the header) and only printed."""
    runs: list[tuple[Path, dict[str, Any]]] = []
    for path in paths:
        data = json.loads(path.read_text())
        if not isinstance(data.get("rows"), list) or not data["rows"]:
            print(
                f"--report-from: {path} has no rows to render (a results .json of this benchmark)"
            )
            return 2
        runs.append((path, data))
    rows = [row for _, data in runs for row in data["rows"]]
    reference = reference_of(list(dict.fromkeys(r["protocol"] for r in rows)))
    now = machine_info()
    headers = [
        "\n".join(
            line
            for line in path.with_suffix(".md").read_text().split("\n## Timings")[0].splitlines()
            if not line.startswith(RENDERED)
        ).rstrip("\n")
        for path, _ in runs
    ]
    if len(runs) == 1:
        header = headers[0]
    else:
        header = "\n".join(
            [headers[0].splitlines()[0], "", f"Pooled: the rows of {len(runs)} runs."]
            + [
                f"- {path.name}: "
                + next((line for line in text.splitlines() if line.startswith("Machine:")), "")
                for (path, _), text in zip(runs, headers, strict=True)
            ]
        )
        write = False
    header += (
        f"\n{RENDERED} from the run's rows on {now['date_utc']} UTC, code {now['code']} "
        "(python -m benchmarks.cooperative_rebalance --report-from)."
    )
    summary = summarise(rows)
    table = report(summary, header, reference)
    print(table)
    if write:
        path, data = runs[0]
        path.with_suffix(".md").write_text(table + "\n")
        path.write_text(json.dumps({**data, "summary": summary}, indent=1) + "\n")
        plot(summary, path.with_suffix(".png"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run every protocol side by side on one cluster per timing profile."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument("--rate", type=int, default=5000, help="records/s produced")
    parser.add_argument("--repeats", type=int, default=3, help="scale-out/in pairs per run")
    parser.add_argument(
        "--protocols", default=",".join(PROTOCOLS), help="comma-separated subset to run"
    )
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--output",
        help="results name (default cooperative_rebalance_<cluster>): a comparison of a few "
        "protocols beside the full table, e.g. the KIP-848 pair",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help=f"also run {OURS} at this commit (a work tree under .cache/baselines), after ours",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        help="directory for each member's log and the ownership events (one per profile "
        "and protocol, in subdirectories)",
    )
    parser.add_argument(
        "--report-from",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="render a committed result's table again from its rows (this code's report) "
        "and rewrite it; several results are pooled and printed; runs nothing",
    )
    args = parser.parse_args(argv)
    if args.report_from is not None:
        for path in args.report_from:
            if not path.is_file() or not path.with_suffix(".md").is_file():
                parser.error(f"--report-from: a results .json beside its .md, got {path}")
        return report_from(args.report_from, write=not args.no_write)
    kind = ClusterKind(args.cluster)
    asked = [p.strip() for p in args.protocols.split(",") if p.strip()]
    if not asked or any(p not in PROTOCOLS for p in asked):
        parser.error(f"--protocols: a comma-separated subset of {', '.join(PROTOCOLS)}")
    chosen = [p for p in asked if p not in UNSUPPORTED.get(kind, set())]
    runs: list[tuple[str, tuple[str, Path] | None]] = [(p, None) for p in chosen]
    if args.baseline:
        at = (args.baseline, baseline_checkout(args.baseline))
        after = chosen.index(OURS) + 1 if OURS in chosen else len(chosen)
        runs.insert(after, (OURS, at))
    rows: list[dict[str, Any]] = []
    broker = ""
    for timings in PROFILES[kind]:
        for protocol, baseline in runs:
            label = run_label(protocol, baseline)
            with kafka_cluster(
                kind,
                apache_settings=timings.broker_settings(),
                apache_broker_assignor=protocol == KIP848_OURS,
            ) as kafka:
                broker = broker_line(kafka)
                trace_dir = None
                if args.trace is not None:
                    trace_dir = args.trace / f"{timings.name}-{label}".replace(" ", "_")
                    trace_dir.mkdir(parents=True, exist_ok=True)
                rows.extend(
                    run(kafka, protocol, timings, args.rate, args.repeats, trace_dir, baseline)
                )
            print(f"{timings.name} / {label}: done", flush=True)
    skipped = [p for p in PROTOCOLS if p not in chosen]
    profiles = "; ".join(
        f"{t.name}: session {t.session_ms} ms, heartbeat {t.heartbeat_ms} ms"
        for t in PROFILES[kind]
    )
    header = "\n".join(
        [
            f"# Partition pause through scale events ({PARTITIONS} partitions, {MEMBERS} "
            f"members, {args.rate} records/s)",
            "",
            machine_line(),
            broker,
            f"Timings, the same for every protocol ({profiles}). Scale-out and scale-in: mean "
            f"of {args.repeats} runs; re-delivered: summed. Our members run without a speed "
            "snapshot (sticky fallback of the assignor)."
            + (
                f" {KIP848_OURS}: static members (group.instance.id) with our broker-side "
                "assignor; before each event the benchmark publishes the plan the sidecar "
                "would, packed by the same sticky heuristic, and a scale-in first empties the "
                "member through a control member."
                if KIP848_OURS in chosen
                else ""
            )
            + (
                f" {KIP848_STATIC}: the same static members with Kafka's default assignor; "
                "a member that leaves keeps its partitions until the session timeout."
                if KIP848_STATIC in chosen
                else ""
            )
            + (f" Not run on this cluster: {', '.join(skipped)}." if skipped else ""),
        ]
    )
    summary = summarise(rows)
    reference = reference_of(chosen)
    table = report(summary, header, reference)
    name = args.output or f"cooperative_rebalance_{kind.value}"
    publish(
        name, table, {"broker": broker, "summary": summary, "rows": rows}, write=not args.no_write
    )
    if not args.no_write:
        plot(summary, RESULTS / f"{name}.png")
    return 0 if all(r["settled"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
