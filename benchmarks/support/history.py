"""A history checker for exactly once (benchmarks and tests): what producers had
acknowledged, and which of their transactions committed, against what a sink or table
holds.

In the spirit of Kafka's ``tests/kafkatest`` and Jepsen's transaction tests: the producer
side is a client the project did not write (confluent-kafka, librdkafka), which logs every
acknowledged record with its (partition, offset) and the outcome of the transaction it was
written in; the verdict counts, per (topic, partition, offset), aborted records that landed,
committed ones missing and any landed twice.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

Offset = tuple[str, int, int]  # topic, partition, offset


@dataclass
class History:
    """What producers wrote, as the brokers acknowledged it."""

    committed: set[Offset] = field(default_factory=set)
    aborted: set[Offset] = field(default_factory=set)
    # A transaction whose commit or abort did not return: its records may be either.
    unknown: set[Offset] = field(default_factory=set)


@dataclass(frozen=True)
class Verdict:
    """Aborted records that landed, committed ones missing, and records landed twice."""

    aborted_landed: frozenset[Offset]
    missing: frozenset[Offset]
    duplicated: frozenset[Offset]
    unexpected: frozenset[Offset]

    @property
    def exactly_once(self) -> bool:
        """Every committed record once, nothing else."""
        return not (self.aborted_landed or self.missing or self.duplicated or self.unexpected)

    def __str__(self) -> str:
        def some(offsets: frozenset[Offset]) -> str:
            return ", ".join(f"{t}:{p}@{o}" for t, p, o in sorted(offsets)[:5])

        return (
            f"{len(self.aborted_landed)} aborted landed ({some(self.aborted_landed)}), "
            f"{len(self.missing)} missing ({some(self.missing)}), "
            f"{len(self.duplicated)} duplicated ({some(self.duplicated)}), "
            f"{len(self.unexpected)} never acknowledged ({some(self.unexpected)})"
        )


def check(history: History, landed: Iterable[Offset]) -> Verdict:
    """The verdict on ``landed`` (every row a sink or table holds, duplicates included)."""
    counts = Counter(landed)
    present = set(counts)
    known = history.committed | history.aborted | history.unknown
    return Verdict(
        aborted_landed=frozenset(present & history.aborted),
        missing=frozenset(history.committed - present),
        duplicated=frozenset(o for o, n in counts.items() if n > 1),
        unexpected=frozenset(present - known),
    )


class _Sent:
    """What the brokers acknowledged of one transaction."""

    def __init__(self) -> None:
        self.acked: set[Offset] = set()
        self.failures: list[KafkaError] = []

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.failures.append(err)
        else:
            self.acked.add((msg.topic(), msg.partition(), msg.offset()))


def produce_transactions(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    transactions: int,
    records_each: int,
    abort_every: int = 3,
    compression: str = "zstd",
    history: History | None = None,
) -> History:
    """``transactions`` transactions of ``records_each`` records round-robin over
    ``partitions``, with confluent-kafka's transactional producer; every ``abort_every``-th
    is aborted. Returns (or adds to) the history of what was acknowledged in each."""
    history = history if history is not None else History()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"history-{uuid.uuid4().hex[:12]}",
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    counter = itertools.count()
    for number in range(transactions):
        sent = _Sent()
        producer.begin_transaction()
        for _ in range(records_each):
            i = next(counter)
            producer.produce(
                topic,
                key=str(i).encode(),
                value=b"x" * 100,
                partition=i % partitions,
                on_delivery=sent.on_delivery,
            )
        assert producer.flush(30) == 0
        assert not sent.failures, sent.failures
        if abort_every and number % abort_every == abort_every - 1:
            producer.abort_transaction(30)
            history.aborted |= sent.acked
        else:
            producer.commit_transaction(30)
            history.committed |= sent.acked
    return history
