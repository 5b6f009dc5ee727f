"""The walk's load written by confluent-kafka's transactional producer: a transaction per
second, every ``abort_every``-th aborted, through whatever the brokers go through. What each
transaction's records became (committed, aborted, or unknown when the producer had to be
replaced mid-commit) is kept for the checker, which then reads the log with
``read_committed`` to learn what Kafka holds as committed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as Partition

from examples.load import TICK_S, LoadGenerator, RateWalk

TRANSACTION_TICKS = 10
"""Ticks of TICK_S per transaction: one a second."""
CALL_TIMEOUT_S = 30.0
SETTLE_S = 180.0
"""How long a commit or abort is retried before the producer is replaced."""
Record = tuple[int, int]  # (partition, offset)
T = TypeVar("T")


@dataclass
class TransactionOutcomes:
    """The acknowledged records of every transaction, by what became of it."""

    committed: set[Record] = field(default_factory=set)
    aborted: set[Record] = field(default_factory=set)
    unknown: set[Record] = field(default_factory=set)
    transactions: dict[str, int] = field(
        default_factory=lambda: {"committed": 0, "aborted": 0, "unknown": 0}
    )

    def add(self, outcome: str, records: Iterable[Record]) -> None:
        """One finished transaction's records."""
        getattr(self, outcome).update(records)
        self.transactions[outcome] += 1


class TransactionalLoad(LoadGenerator):
    """Produces the walk's rates in transactions of ``TRANSACTION_TICKS`` ticks until
    ``duration_s`` or :meth:`stop`; every ``abort_every``-th transaction is aborted on
    purpose. ``acked`` holds the committed records only (what a table must hold at least)."""

    def __init__(
        self,
        bootstrap: str,
        walk: RateWalk,
        value_bytes: int = 200,
        *,
        abort_every: int = 5,
        transactional_id: str = "soak-load",
    ) -> None:
        super().__init__(bootstrap, walk, value_bytes)
        self.abort_every = abort_every
        self.transactional_id = transactional_id
        self.outcomes = TransactionOutcomes()
        self.replaced = 0  # producers replaced after a fatal error or a commit that never settled
        self._sent: set[Record] = set()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self._sent.add((msg.partition(), msg.offset()))
        else:
            self.failed += 1

    def _producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.transactional_id,
                "linger.ms": 10,
                "compression.type": "zstd",
            }
        )
        # Fences the producer it replaces, and settles that one's last transaction.
        self._retrying(lambda: producer.init_transactions(CALL_TIMEOUT_S))
        return producer

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call`` again while it fails with a retriable error, up to ``SETTLE_S``."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                return call()
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise
                self._halt.wait(1.0)

    def _finish(self, producer: Producer, abort: bool) -> str:
        """Commit (or abort) the open transaction; what became of it."""
        if not abort:
            try:
                self._retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S))
                return "committed"
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
        self._retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S))
        return "aborted"

    def run(self) -> None:
        producer = self._producer()
        number = 0
        while not self._halt.is_set() and self.elapsed() < self.walk.duration_s:
            self._sent = set()
            try:
                producer.begin_transaction()
                self._produce_ticks(producer)
                abort = bool(self.abort_every) and number % self.abort_every == self.abort_every - 1
                outcome = self._finish(producer, abort)
            except KafkaException:
                # Fatal, or a commit that did not settle: whether that transaction committed
                # is for the log to say (the checker reads it); a new producer with the same
                # transactional.id fences this one.
                producer.flush(0)
                outcome = "unknown"
                self.replaced += 1
                producer = self._producer()
            self.outcomes.add(outcome, self._sent)
            if outcome == "committed":
                self.acked |= {("", p, o) for p, o in self._sent}
            number += 1

    def _produce_ticks(self, producer: Producer) -> None:
        for _ in range(TRANSACTION_TICKS):
            if self._halt.is_set() or self.elapsed() >= self.walk.duration_s:
                return
            self.produce_tick(producer)
            self._halt.wait(TICK_S)


def committed_in_log(bootstrap: str, topic: str, partitions: int) -> set[Record]:
    """Every (partition, offset) a ``read_committed`` reader finds in ``topic`` from its
    start to its end: the records of committed transactions."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"committed-in-log-{topic}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    found: set[Record] = set()
    try:
        reader.assign([Partition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        while len(at_end) < partitions:
            for message in reader.consume(10_000, timeout=10.0):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if partition is None:
                    continue
                if error is not None:
                    at_end.add(partition)
                elif offset is not None:
                    found.add((partition, offset))
    finally:
        reader.close()
    return found
