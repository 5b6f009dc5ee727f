"""Transactional producers the project did not write (confluent-kafka, zstd, every third
transaction aborted) read by the SDK: only committed records reach the sink, on both record
paths, and the group's committed offsets reach each partition's end past the last marker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from assignor import TopicPartition as Partition
from benchmarks.support.history import History, check, produce_transactions
from consumer_sdk.sink import CallbackSink, Record
from sidecar.monitor import Monitor, Reading
from tests.sdk_helpers import SeenRecords, ThreadedMember, member_config, wait_until
from tests.test_sidecar_monitor import FakeClock, produce_per_partition

PARTITIONS = 4
pytestmark = pytest.mark.needs_transactions


def offsets(kafka: str, group: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """The group's committed offset and the high watermark of each partition."""
    reader = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in reader.committed(tps, timeout=10)}
        ends = {
            p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        return committed, ends
    finally:
        reader.close()


def landed(seen: SeenRecords) -> list[tuple[str, int, int]]:
    return [key for key, n in seen.counts.items() for _ in range(n)]


def read_transactions(
    kafka: str,
    topic: str,
    group: str,
    *,
    before: int,
    during: int,
    **overrides: object,
) -> tuple[History, SeenRecords, dict[int, int], dict[int, int]]:
    """``before`` transactions written before one member starts, ``during`` while it reads;
    waits until the group's commits reach every partition's end."""
    history = produce_transactions(kafka, topic, PARTITIONS, transactions=before, records_each=50)
    seen = SeenRecords()

    def write(_topic: str, records: Sequence[Record]) -> None:
        seen.write(_topic, records)

    member = ThreadedMember(
        member_config(kafka, group, [topic], "txn-0", **overrides), CallbackSink(write)
    ).start()
    state: dict[str, dict[int, int]] = {}
    try:
        produce_transactions(
            kafka, topic, PARTITIONS, transactions=during, records_each=50, history=history
        )

        def drained() -> bool:
            state["committed"], state["ends"] = offsets(kafka, group, topic)
            return state["committed"] == state["ends"]

        wait_until(drained, timeout_s=60)
    finally:
        member.stop()
    return history, seen, state["committed"], state["ends"]


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_only_committed_transactions_land_and_commits_reach_the_end(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    topic = topic_factory(PARTITIONS, prefix="txn")
    history, seen, committed, ends = read_transactions(
        kafka, topic, f"g-{topic}", before=30, during=30, record_path=record_path
    )
    verdict = check(history, landed(seen))
    assert len(history.aborted) == 1000 and len(history.committed) == 2000
    assert verdict.exactly_once, str(verdict)
    # Each partition ends in a transaction marker no record carries the offset of.
    assert committed == ends, f"committed {committed}, partitions end at {ends}"


def test_read_uncommitted_is_there_for_who_asks_and_commits_still_reach_the_end(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(PARTITIONS, prefix="txn")
    history, seen, committed, ends = read_transactions(
        kafka, topic, f"g-{topic}", before=3, during=3, isolation_level="read_uncommitted"
    )
    verdict = check(history, landed(seen))
    assert verdict.aborted_landed == history.aborted and len(history.aborted) == 100
    assert not verdict.missing and not verdict.duplicated, str(verdict)
    assert committed == ends, f"committed {committed}, partitions end at {ends}"


def test_the_sidecar_measures_lag_to_the_last_stable_offset_and_flags_a_transaction_left_open(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(PARTITIONS, prefix="txn")
    group = f"g-{topic}"
    history, seen, committed, ends = read_transactions(kafka, topic, group, before=6, during=0)
    assert committed == ends and check(history, landed(seen)).exactly_once
    clock = FakeClock()
    stuck = Producer({"bootstrap.servers": kafka, "transactional.id": f"stuck-{topic}"})
    stuck.init_transactions(30)

    async def run() -> list[Reading]:
        monitor = Monitor(kafka, group, [topic], clock=clock)
        await monitor.start()
        readings = [await monitor.poll()]  # drained: nothing open, nothing to read
        try:
            stuck.begin_transaction()
            for _ in range(200):
                stuck.produce(topic, value=b"open" * 10, partition=0)
            assert stuck.flush(30) == 0
            produce_per_partition(kafka, topic, {0: 100})  # written behind the open one
            for _ in range(2):
                clock.now += 5.0
                readings.append(await monitor.poll())
            stuck.commit_transaction(30)
            clock.now += 5.0
            readings.append(await monitor.poll())
        finally:
            await monitor.stop()
        return readings

    drained, first, second, ended = asyncio.run(run())
    p0 = Partition(topic, 0)
    assert set(drained.lags().values()) == {0.0} and not drained.open_transactions
    # Open: the records after the last stable offset are not lag, and not yet flagged...
    assert first.end_offsets[p0] == ends[0] + 300 and first.stable_offsets[p0] == ends[0]
    assert set(first.lags().values()) == {0.0} and not first.open_transactions
    # ... and at the second reading that finds it open they are.
    assert set(second.lags().values()) == {0.0}
    assert second.open_transactions[p0].stable == ends[0]
    assert second.open_transactions[p0].waiting == 300  # its records and those behind them
    assert any(f"{topic}:0: a transaction is open" in p for p in second.problems)
    # Committed: readable, so lag; no longer open.
    assert ended.lags()[p0] >= 300 and not ended.open_transactions
