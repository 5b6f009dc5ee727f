"""How the consumer cuts pending records into batches (no broker: the client never starts)."""

from __future__ import annotations

from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.sink import CallbackSink, Record


def consumer_holding(records: list[Record]) -> AutoscalingConsumer:
    """A consumer (never started) whose pending batch holds ``records``."""
    config = ConsumerConfig(bootstrap_servers="127.0.0.1:9", group="g", topics=("t",), capacity=1.0)
    consumer = AutoscalingConsumer(config, CallbackSink(lambda topic, recs: None))
    for r in records:
        consumer._pending.setdefault(KafkaTopicPartition(r.topic, r.partition), []).append(r)
        consumer._pending_bytes += r.size
    return consumer


def records(partitions: int, per_partition: int, value_size: int) -> list[Record]:
    return [
        Record("t", p, o, 0, None, b"x" * value_size)
        for o in range(per_partition)
        for p in range(partitions)
    ]


def offsets_of(batch: dict[KafkaTopicPartition, list[Record]]) -> dict[int, list[int]]:
    return {tp.partition: [r.offset for r in recs] for tp, recs in batch.items()}


def test_batches_stay_within_the_limit_and_take_each_partition_in_order() -> None:
    held = records(3, 10, 100)  # 3,000 bytes
    consumer = consumer_holding(held)
    batches = []
    while consumer._pending_bytes:
        batch = consumer._detach(None, limit=700)
        assert sum(r.size for recs in batch.values() for r in recs) <= 700
        batches.append(batch)
    assert len(batches) == -(-len(held) // 7)  # full batches of 7 records, then the rest
    per_partition: dict[int, list[int]] = {}
    for batch in batches:
        for partition, offsets in offsets_of(batch).items():
            per_partition.setdefault(partition, []).extend(offsets)
    assert per_partition == {p: list(range(10)) for p in range(3)}  # once each, in order
    assert consumer._pending == {}


def test_a_record_larger_than_the_limit_is_a_batch_of_its_own() -> None:
    consumer = consumer_holding([*records(1, 1, 5000), Record("t", 0, 1, 0, None, b"small")])
    first = consumer._detach(None, limit=1000)
    assert offsets_of(first) == {0: [0]}
    assert offsets_of(consumer._detach(None, limit=1000)) == {0: [1]}
    assert consumer._pending_bytes == 0


def test_without_a_limit_the_chosen_partitions_go_whole() -> None:
    consumer = consumer_holding(records(3, 4, 100))
    taken = consumer._detach({KafkaTopicPartition("t", 1)})
    assert offsets_of(taken) == {1: [0, 1, 2, 3]}
    assert consumer._pending_bytes == 800
    assert sorted(tp.partition for tp in consumer._pending) == [0, 2]
