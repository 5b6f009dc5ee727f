"""The paper's streams replayed through a real broker: KIP-848 consumers (confluent-kafka, no
code of ours) with our broker-side assignor against the same consumers with the broker's
``uniform`` assignor.

One Apache Kafka node loads our assignor (``assignor/broker``). Per measurement of a paper
stream the benchmark does what the sidecar does: ``repair`` packs the speeds from the last
round's assignment, consumers are opened as it needs them and emptied before they stop, and
the plan goes to the plans topic; a change with no member joining is applied by a control
member joining and leaving. Each round records what the consumers own through the broker
against what ``repair`` planned: bins (consumers holding partitions) and Rscore, equal in
every round if the broker follows the plans. The ``uniform`` row runs as many consumers as
ours holds in each round (the sidecar sizes both alike) and records its bins, Rscore and the
consumers it leaves above capacity (it balances counts, not speeds).
``python -m benchmarks.packing.broker_replay`` writes ``results/broker_replay.{md,json}``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Producer

from assignor import Repair, TopicPartition, bins_used, rscore
from assignor.broker import ASSIGNOR_NAME, CONTROL_INSTANCE_PREFIX
from assignor.metrics import consumer_loads
from assignor.types import Assignment
from benchmarks.support.kip848_members import Kip848Members, kafka_topic_id
from benchmarks.support.machine import broker_line, machine_line
from benchmarks.support.polling import wait_for
from benchmarks.support.report import publish
from benchmarks.support.streams import Measurement, paper_stream
from contract.broker_plans import encode_plan, plans_topic_for
from local_kafka.clusters import ClusterKind, kafka_cluster

CAPACITY = 100.0
SETTLE_S = 60.0


def observed(members: Kip848Members, topic: str) -> Assignment:
    """What the consumers own now, as an assignment."""
    return {TopicPartition(topic, p): name for p, name in members.owners().items()}


def renamed(stream: Sequence[Measurement], topic: str) -> list[Measurement]:
    """The stream's speeds keyed by ``topic``'s partitions."""
    return [{TopicPartition(topic, tp.partition): s for tp, s in m.items()} for m in stream]


def ours_group(topic: str) -> str:
    """The group the sidecar's plans are replayed for."""
    return f"replay-ours-{topic}"


def replay_ours(bootstrap: str, topic: str, stream: Sequence[Measurement]) -> list[dict[str, Any]]:
    """Each round through the broker with our assignor: planned against owned."""
    group = ours_group(topic)
    ids = {topic: kafka_topic_id(bootstrap, topic)}
    producer = Producer({"bootstrap.servers": bootstrap})
    members = Kip848Members(bootstrap, group, topic, assignor=ASSIGNOR_NAME)
    heuristic = Repair()
    planned: Assignment = {}
    held: Assignment = {}
    rounds = []
    try:
        for index, speeds in enumerate(stream):
            started = time.monotonic()
            plan = heuristic.assign(speeds, capacity=CAPACITY, previous=planned)
            needed = sorted(set(plan.values()))
            running = {name.removeprefix(f"{group}-") for name in members.owned}
            gone = sorted(running - set(needed))
            names = {c: f"{group}-{c}" for c in [*needed, *gone]}
            key, value = encode_plan(
                group,
                {tp: names[c] for tp, c in plan.items()},
                [names[c] for c in [*needed, *gone]],
                ids,
                written_ms=int(time.time() * 1000),
            )
            producer.produce(plans_topic_for(group), value=value, key=key)
            assert producer.flush(30) == 0
            expected: dict[str, set[int]] = {names[c]: set() for c in [*needed, *gone]}
            for tp, c in plan.items():
                expected[names[c]].add(tp.partition)
            new = [c for c in needed if names[c] not in members.owned]
            for c in new:
                members.join(names[c])
            changed = observed(members, topic) != {tp: names[c] for tp, c in plan.items()}
            if not new and changed:
                control = f"{CONTROL_INSTANCE_PREFIX}-{group}-{index}"
                members.join(control)
                wait_for(partial(members.holds, {**expected, control: set()}), SETTLE_S)
                members.leave(control)
            settled = wait_for(partial(members.holds, expected), SETTLE_S)
            for c in gone:
                members.leave(names[c])
            now = observed(members, topic)
            rounds.append(
                {
                    "round": index,
                    "settled": settled,
                    "planned_bins": bins_used(plan),
                    "broker_bins": bins_used(now),
                    "planned_rscore": rscore(planned, plan, speeds, CAPACITY),
                    "broker_rscore": rscore(
                        {tp: o.removeprefix(f"{group}-") for tp, o in held.items()},
                        {tp: o.removeprefix(f"{group}-") for tp, o in now.items()},
                        speeds,
                        CAPACITY,
                    ),
                    "same": now == {tp: names[c] for tp, c in plan.items()},
                    "joined": len(new),
                    "left": len(gone),
                    "seconds": time.monotonic() - started,
                }
            )
            planned, held = plan, now
    finally:
        members.close()
    return rounds


def replay_uniform(
    bootstrap: str, topic: str, stream: Sequence[Measurement], sizes: Sequence[int]
) -> list[dict[str, Any]]:
    """Each round with the broker's ``uniform`` assignor and ``sizes[i]`` consumers."""
    group = f"replay-uniform-{topic}"
    members = Kip848Members(bootstrap, group, topic, static=False)
    partitions = len(stream[0])
    held: Assignment = {}
    rounds = []
    opened = 0
    try:
        for index, (speeds, size) in enumerate(zip(stream, sizes, strict=True)):
            started = time.monotonic()
            while len(members.owned) < size:
                members.join(f"u{opened}")
                opened += 1
            while len(members.owned) > size:
                members.leave(sorted(members.owned, key=lambda n: int(n[1:]))[-1])

            def spread() -> bool:
                owned = [len(p) for p in members.owned.values()]
                return sum(owned) == partitions == len(members.owners()) and all(owned)

            settled = wait_for(spread, SETTLE_S)
            now = observed(members, topic)
            loads = consumer_loads(now, speeds)
            rounds.append(
                {
                    "round": index,
                    "settled": settled,
                    "broker_bins": bins_used(now),
                    "broker_rscore": rscore(held, now, speeds, CAPACITY),
                    "above_capacity": sum(1 for load in loads.values() if load > CAPACITY),
                    "max_load": max(loads.values(), default=0.0) / CAPACITY,
                    "seconds": time.monotonic() - started,
                }
            )
            held = now
    finally:
        members.close()
    return rounds


def mean(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    return sum(float(r[key]) for r in rows) / max(1, len(rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Replay one seeded paper stream through the broker, ours then uniform."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--delta", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=20261204)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.partitions <= 200 or not 2 <= args.rounds <= 1000:
        parser.error("--partitions must be in [1, 200] and --rounds in [2, 1000]")
    stream = paper_stream(args.partitions, args.rounds, args.delta, CAPACITY, args.seed)
    with kafka_cluster(ClusterKind.APACHE, apache_broker_assignor=True) as kafka:
        broker = broker_line(kafka)
        handle = kafka.broker_handle()
        topic = f"replay-{uuid.uuid4().hex[:6]}"
        handle.create_topic(topic, args.partitions, 1)
        handle.create_topic(plans_topic_for(ours_group(topic)), 1, 1)
        speeds = renamed(stream, topic)
        ours = replay_ours(kafka.bootstrap_servers, topic, speeds)
        uniform = replay_uniform(
            kafka.bootstrap_servers, topic, speeds, [r["planned_bins"] for r in ours]
        )
    same = sum(1 for r in ours if r["same"])
    header = [
        f"# The paper's stream through a real broker: P = {args.partitions}, "
        f"{args.rounds} rounds, delta = {args.delta:g}, C = {CAPACITY:g}, seed {args.seed}",
        "",
        machine_line(),
        broker,
        "KIP-848 consumers (confluent-kafka, no code of ours). Ours: `group.remote.assignor="
        "autoscaler`, plans from `repair` published per round as the sidecar would. Uniform: "
        "the broker's default, with as many consumers as ours holds in each round.",
        "",
        "| assignor | rounds settled | mean bins | mean Rscore | rounds with a consumer above C "
        "| mean highest load / C | mean seconds a round |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| repair, planned (Python) | - | {mean(ours, 'planned_bins'):.2f} | "
        f"{mean(ours, 'planned_rscore'):.3f} | - | - | - |",
        f"| autoscaler, through the broker | {sum(r['settled'] for r in ours)}/{len(ours)} | "
        f"{mean(ours, 'broker_bins'):.2f} | {mean(ours, 'broker_rscore'):.3f} | - | - | "
        f"{mean(ours, 'seconds'):.1f} |",
        f"| uniform, through the broker | {sum(r['settled'] for r in uniform)}/{len(uniform)} | "
        f"{mean(uniform, 'broker_bins'):.2f} | {mean(uniform, 'broker_rscore'):.3f} | "
        f"{sum(1 for r in uniform if r['above_capacity'])} | {mean(uniform, 'max_load'):.2f} | "
        f"{mean(uniform, 'seconds'):.1f} |",
        "",
        f"Target (issue 50): bins and Rscore through the broker equal the Python `repair` in "
        f"100 % of rounds: {same}/{len(ours)} rounds owned exactly the plan "
        f"({'met' if same == len(ours) else 'missed'}).",
    ]
    publish(
        "broker_replay",
        "\n".join(header),
        {"broker": broker, "ours": ours, "uniform": uniform},
        write=not args.no_write,
    )
    return 0 if same == len(ours) else 1


if __name__ == "__main__":
    raise SystemExit(main())
