"""aiokafka's fetcher held to a byte budget (consumer_sdk.kafka_client.fetch_budget), on both
Kafka legs:
behind a consumer that takes nothing it stops at the budget (without one it holds a fetch of
every partition), and every record still arrives once when the consumer reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Producer

from consumer_sdk.kafka_client.columnar_fetch import COLUMNAR, install
from consumer_sdk.kafka_client.fetch_budget import held_bytes, limit_fetch_ahead, wake_fetcher
from consumer_sdk.records.fetch_sizes import MIN_FETCH_BYTES, PARTITION_FETCH_BYTES

PARTITIONS = 8
PER_PARTITION = 400
VALUE = b"v" * 1000  # 8 x 400 x 1 KB: 3.2 MB
# A partition's records fit in one or two producer batches, under one 1 MiB ask.
LARGEST_BATCH = PER_PARTITION * (len(VALUE) + 64)
BUDGET = 256 * 1024


def filled_topic(bootstrap: str, topic_factory: Callable[..., str], prefix: str) -> str:
    """A new topic holding PER_PARTITION records of VALUE in each partition."""
    topic = topic_factory(PARTITIONS, prefix=prefix)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": LARGEST_BATCH}
    )
    for i in range(PER_PARTITION):
        for partition in range(PARTITIONS):
            producer.produce(topic, partition=partition, value=VALUE, key=str(i).encode())
    assert producer.flush(30) == 0
    return topic


class HeldAfterFetches:
    """Wraps one fetcher's fetch requests: the bytes it holds after each response."""

    def __init__(self, fetcher: Any) -> None:
        self.after_each: list[int] = []
        self.started = 0
        self._fetcher = fetcher
        original = fetcher._proc_fetch_request

        async def recorded(*args: Any) -> Any:
            self.started += 1
            result = await original(*args)
            self.after_each.append(self.held())
            return result

        fetcher._proc_fetch_request = recorded

    def held(self) -> int:
        return held_bytes(self._fetcher._records.values())

    def idle(self) -> bool:
        return not self._fetcher._in_flight

    def partitions_held(self) -> int:
        return len(self._fetcher._records)


async def until(condition: Callable[[], bool]) -> None:
    """Await ``condition`` (checked as the event loop turns), up to 30 s."""
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)


async def columnar_consumer(bootstrap: str) -> AIOKafkaConsumer:
    """A started consumer on the columnar fetch, asking each partition for 1 MiB."""
    install()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
        fetch_max_bytes=16 * 1024 * 1024,
        key_deserializer=COLUMNAR,
    )
    await consumer.start()
    return consumer


async def read_all(consumer: AIOKafkaConsumer) -> int:
    """Records read until every partition's are in (at most 60 s)."""
    read = 0
    async with asyncio.timeout(60):
        while read < PARTITIONS * PER_PARTITION:
            for chunks in (await consumer.getmany(timeout_ms=500)).values():
                read += sum(chunk.count for chunk in chunks)
    return read


async def hold_then_read(
    bootstrap: str, topic: str, budget: int | None
) -> tuple[int, int, int, int]:
    """Assign every partition, take nothing until the fetcher stops, then read everything:
    (bytes held when it stopped, most held after any fetch, records read, brokers)."""
    consumer = await columnar_consumer(bootstrap)
    try:
        if budget is not None:
            assert limit_fetch_ahead(consumer, budget)
        fetches = HeldAfterFetches(consumer._fetcher)
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        if budget is not None:
            await until(lambda: fetches.idle() and fetches.held() >= budget)
        else:
            await until(lambda: fetches.idle() and fetches.partitions_held() == PARTITIONS)
        held_when_stopped = fetches.held()
        read = await read_all(consumer)
        brokers = len(consumer._client.cluster.brokers())
        return held_when_stopped, max(fetches.after_each), read, brokers
    finally:
        await consumer.stop()


def budgeted_bound(brokers: int) -> int:
    """A response (one per broker) may exceed its share by the floor and one record batch."""
    return BUDGET + brokers * (MIN_FETCH_BYTES + LARGEST_BATCH)


def test_a_budgeted_fetcher_stops_at_its_budget_and_loses_nothing(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = filled_topic(kafka, topic_factory, "budget")
    held, most, read, brokers = asyncio.run(hold_then_read(kafka, topic, BUDGET))
    bound = budgeted_bound(brokers)
    assert BUDGET <= held <= bound
    assert most <= bound
    assert read == PARTITIONS * PER_PARTITION


def test_without_a_budget_the_fetcher_holds_every_partition(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = filled_topic(kafka, topic_factory, "unbudgeted")
    held, _, read, brokers = asyncio.run(hold_then_read(kafka, topic, None))
    assert held > budgeted_bound(brokers)
    assert read == PARTITIONS * PER_PARTITION


def test_a_budget_is_one_consumers_own(kafka: str, topic_factory: Callable[..., str]) -> None:
    """A consumer never given a budget fetches as aiokafka does while another consumer in
    the process has one."""
    topic = filled_topic(kafka, topic_factory, "untouched")

    async def both() -> tuple[int, int]:
        other = AIOKafkaConsumer(bootstrap_servers=kafka)
        await other.start()
        try:
            assert limit_fetch_ahead(other, BUDGET)
            held, _, _, brokers = await hold_then_read(kafka, topic, None)
            return held, brokers
        finally:
            await other.stop()

    held, brokers = asyncio.run(both())
    assert held > budgeted_bound(brokers)


async def grow_budget_then_read(bootstrap: str, topic: str) -> tuple[int, int, int, int]:
    """A budget asked before each fetch, 0 at first: once the fetcher has planned fetches
    and dropped them, the budget grows and the fetcher is woken. The fetcher's own poll
    interval is made longer than the test's patience, so only the wake-up can start the
    fetch. Returns (bytes held under the 0 budget, fetches sent under it, bytes held once
    woken, records read)."""
    consumer = await columnar_consumer(bootstrap)
    try:
        budget = [0]
        asked: list[int] = []

        def current() -> int:
            asked.append(budget[0])
            return budget[0]

        assert limit_fetch_ahead(consumer, current)
        consumer._fetcher._fetcher_timeout = 120.0
        fetches = HeldAfterFetches(consumer._fetcher)
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await until(lambda: bool(asked))
        held_at_zero, sent_at_zero = fetches.held(), fetches.started
        budget[0] = BUDGET
        wake_fetcher(consumer)
        await until(lambda: fetches.idle() and fetches.held() >= BUDGET)
        held_when_woken = fetches.held()
        read = await read_all(consumer)
        return held_at_zero, sent_at_zero, held_when_woken, read
    finally:
        await consumer.stop()


def test_a_budget_that_grows_wakes_the_fetcher(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = filled_topic(kafka, topic_factory, "grown")
    held_at_zero, sent_at_zero, held_when_woken, read = asyncio.run(
        grow_budget_then_read(kafka, topic)
    )
    assert (held_at_zero, sent_at_zero) == (0, 0)
    assert held_when_woken >= BUDGET
    assert read == PARTITIONS * PER_PARTITION
