"""Revocation: with a sink that fences lost partitions a member gives them up without waiting
for its writes in flight, and the table still holds every record once."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
from prometheus_client import REGISTRY

from assignor import TopicPartition
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.sink import CallbackSink, FencingSink, PartitionsFenced
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import ThreadedMember, group_stable, member_config, wait_until

Key = tuple[str, int, int]


class FencedTable:
    """A table in memory shared by several members' sinks, fenced as the lake tables are:
    asking where a partition resumes claims it for the asking sink; a later write of it by
    any other sink is refused, the rest of that write is kept."""

    def __init__(self) -> None:
        self.rows: Counter[Key] = Counter()
        self.owners: dict[tuple[str, int], object] = {}
        self.lock = threading.Lock()

    def keys(self) -> set[Key]:
        with self.lock:
            return set(self.rows)

    def duplicates(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.rows.values())


class FencedMemorySink:
    """One member's sink into a :class:`FencedTable`; its writes wait for ``gate`` if set."""

    def __init__(self, table: FencedTable, *, fences: bool = True) -> None:
        self.table = table
        self.fences = fences
        self.gate: threading.Event | None = None
        self.write_waiting = threading.Event()
        self.claimed: set[tuple[str, int]] = set()  # by its last resume_offsets

    async def write(self, topic: str, table: pa.Table) -> None:
        gate = self.gate
        if gate is not None:
            self.write_waiting.set()
            assert await asyncio.to_thread(gate.wait, 120), "the test never opened the gate"
        columns = table.select(["partition", "offset"]).to_pydict()
        rows = list(zip(columns["partition"], columns["offset"], strict=True))
        with self.table.lock:
            lost = {
                p for p, _ in rows if self.table.owners.setdefault((topic, p), self) is not self
            }
            for p, offset in rows:
                if p not in lost:
                    self.table.rows[(topic, p, offset)] += 1
        if lost:
            taken = {p for p in lost if (topic, p) in self.claimed}
            self.claimed -= {(topic, p) for p in lost}
            raise PartitionsFenced(
                frozenset(TopicPartition(topic, p) for p in lost),
                frozenset(TopicPartition(topic, p) for p in taken),
            )

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        found: dict[TopicPartition, int] = {}
        with self.table.lock:
            for tp in partitions:
                self.table.owners[(tp.topic, tp.partition)] = self
                self.claimed.add((tp.topic, tp.partition))
                stored = [o for (t, p, o) in self.table.rows if (t, p) == tp]
                if stored:
                    found[tp] = max(stored) + 1
        return found

    def fences_lost_partitions(self) -> bool:
        return self.fences


def group_count(metric: str, group: str) -> float:
    """A consumer counter's value for ``group`` (0 before its first increment)."""
    return REGISTRY.get_sample_value(f"autoscaler_consumer_{metric}_total", {"group": group}) or 0.0


def released(group: str) -> float:
    return group_count("partitions_released", group)


def both_read(members: Sequence[ThreadedMember], partitions: int) -> bool:
    """Every partition assigned to exactly one member, and each member reads some."""
    return group_stable(members, partitions) and all(
        m.consumer is not None and m.consumer.assigned for m in members
    )


def test_a_member_releases_revoked_partitions_while_its_write_is_still_in_flight(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(4)
    group = f"g-{topic}"
    table = FencedTable()
    first_sink, second_sink = FencedMemorySink(table), FencedMemorySink(table)
    first_sink.gate = threading.Event()  # the first member's writes hang until it opens
    produced = {(topic, p, o) for p, o in produce_tracked(kafka, topic, 400, 4)}
    first = ThreadedMember(member_config(kafka, group, [topic], "sink-0"), first_sink).start()
    second: ThreadedMember | None = None
    try:
        assert first_sink.write_waiting.wait(30)
        second = ThreadedMember(member_config(kafka, group, [topic], "sink-1"), second_sink)
        second.start()
        # The group hands partitions to the second member although the first one's write of
        # them has not ended: the revocation did not wait for it.
        assert wait_until(lambda: both_read([first, second], 4), timeout_s=60)
        assert not first_sink.gate.is_set() and released(group) >= 1
        first_sink.gate.set()
        produced |= {(topic, p, o) for p, o in produce_tracked(kafka, topic, 400, 4)}
        assert wait_until(lambda: table.keys() >= produced, timeout_s=60)
    finally:
        if first_sink.gate is not None:
            first_sink.gate.set()
        first.stop()
        if second is not None:
            second.stop()
    assert table.keys() == produced and table.duplicates() == 0
    assert released(group) >= 1


def test_a_partition_whose_claim_another_writer_overwrote_is_claimed_again(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    # A member that lost a partition while its claim waited for a lock (or one paused past
    # its session) can claim it after its next owner did. The group still gives it to this
    # member: it claims it again and reads it from where the table is, instead of having
    # every batch of it refused until the next rebalance.
    topic = topic_factory(2)
    group = f"g-{topic}"
    table = FencedTable()
    produced = {(topic, p, o) for p, o in produce_tracked(kafka, topic, 200, 2)}
    member = ThreadedMember(member_config(kafka, group, [topic], "sink-0"), FencedMemorySink(table))
    member.start()
    try:
        assert wait_until(lambda: table.keys() >= produced, timeout_s=60)
        with table.lock:
            table.owners[(topic, 0)] = object()  # the late claim of a member gone since
        produced |= {(topic, p, o) for p, o in produce_tracked(kafka, topic, 200, 2)}
        assert wait_until(lambda: table.keys() >= produced, timeout_s=60)
    finally:
        member.stop()
    assert table.keys() == produced and table.duplicates() == 0
    assert group_count("partitions_reclaimed", group) >= 1


def test_revoked_partitions_are_flushed_unless_the_sink_fences_and_release_is_on() -> None:
    def releases(config: ConsumerConfig, sink: object) -> bool:
        assert isinstance(sink, (FencedMemorySink, CallbackSink))
        return AutoscalingConsumer(config, sink)._releases_revoked

    kafka = "127.0.0.1:9"  # nothing connects: the consumers are only built
    config = member_config(kafka, "g-modes", ["t"], "sink-0")
    flush = member_config(kafka, "g-modes", ["t"], "sink-0", revoke_mode="flush")
    table = FencedTable()
    assert isinstance(FencedMemorySink(table), FencingSink)
    assert not isinstance(CallbackSink(print), FencingSink)
    assert releases(config, FencedMemorySink(table))
    assert not releases(flush, FencedMemorySink(table))
    assert not releases(config, FencedMemorySink(table, fences=False))
    assert not releases(config, CallbackSink(print))
