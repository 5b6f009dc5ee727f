"""Each stage of the consumer's pipeline alone, with a fake client and fake sinks (no Kafka):
fetch -> write -> commit, and the resume stage. The same stages run through the consumer on
both Kafka legs in the SDK tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from aiokafka.errors import KafkaError, RebalanceInProgressError, UnknownMemberIdError
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as KTP
from prometheus_client import REGISTRY

from assignor import TopicPartition
from assignor.cooperative import mark_released, released_generation
from consumer_sdk.pipeline import commit as commit_stage
from consumer_sdk.pipeline.commit import OffsetCommits
from consumer_sdk.pipeline.fetch import BatchFiller
from consumer_sdk.pipeline.resume import ResumeLookups
from consumer_sdk.pipeline.retry import RetryPolicy
from consumer_sdk.pipeline.write import BatchWriter, WriteAbandoned, WrittenBatch
from consumer_sdk.records.pending import Batch, PendingRecords
from consumer_sdk.sink import PartitionsFenced, Record

P0, P1 = KTP("t", 0), KTP("t", 1)
NO_WAIT = RetryPolicy(first_delay_s=0.001, max_delay_s=0.001)


class Coordinator:
    def __init__(self) -> None:
        self.rejoining = False
        self.group_committed: dict[KTP, int] = {}

    async def fetch_committed_offsets(self, partitions: Sequence[KTP]) -> dict[KTP, Any]:
        return {
            tp: OffsetAndMetadata(self.group_committed[tp], "")
            for tp in partitions
            if tp in self.group_committed
        }


class FakeClient:
    """The parts of aiokafka's consumer the stages use, recorded."""

    def __init__(self, assigned: set[KTP] | None = None) -> None:
        self._coordinator = Coordinator()
        self.committed_offsets: list[dict[KTP, Any]] = []
        self.commit_failures = 0
        self.polls: list[Mapping[KTP, Sequence[Any]] | Exception] = []
        self.assigned = set(assigned or ())
        self.paused: set[KTP] = set()
        self.sought: dict[KTP, int] = {}
        self.group_committed: dict[KTP, int] = {}
        self.positions: dict[KTP, int] = {}

    async def commit(self, offsets: dict[KTP, int]) -> None:
        if self.commit_failures:
            self.commit_failures -= 1
            raise RebalanceInProgressError()
        self.committed_offsets.append(dict(offsets))

    async def getmany(
        self, *partitions: KTP, timeout_ms: int = 0, max_records: int | None = None
    ) -> Mapping[KTP, Sequence[Any]]:
        if not self.polls:
            await asyncio.sleep(0)
            return {}
        poll = self.polls.pop(0)
        if isinstance(poll, Exception):
            raise poll
        return poll

    def assignment(self) -> set[KTP]:
        return set(self.assigned)

    def pause(self, *partitions: KTP) -> None:
        self.paused |= set(partitions)

    def resume(self, *partitions: KTP) -> None:
        self.paused -= set(partitions)

    def seek(self, partition: KTP, offset: int) -> None:
        self.sought[partition] = offset

    async def committed(self, partition: KTP) -> int | None:
        return self.group_committed.get(partition)

    async def position(self, partition: KTP) -> int:
        return self.positions[partition]

    async def seek_to_beginning(self, *partitions: KTP) -> None:
        for partition in partitions:
            self.sought[partition] = 0


def records(partition: int, offsets: range, size: int = 10) -> list[Record]:
    return [Record("t", partition, o, 0, None, b"x" * size) for o in offsets]


def batch_of(*parts: tuple[int, range]) -> Batch[KTP]:
    pending: PendingRecords[KTP] = PendingRecords()
    for partition, offsets in parts:
        pending.add(KTP("t", partition), records(partition, offsets))
    return pending.take()


def commits_for(client: FakeClient, owned: set[KTP] | None = None) -> OffsetCommits:
    return OffsetCommits("g-pipeline", lambda: client, lambda: owned or {P0, P1})


# commit ----------------------------------------------------------------------------------
def test_a_failed_commit_is_kept_and_retried_with_the_next_one() -> None:
    async def go() -> FakeClient:
        client = FakeClient()
        client.commit_failures = 1
        commits = commits_for(client)
        await commits.submit({P0: 10})
        await commits.settle()
        assert commits.uncommitted == {P0: 10}
        await commits.submit({P1: 5})
        await commits.settle()
        assert commits.uncommitted == {}
        return client

    assert asyncio.run(go()).committed_offsets == [{P0: 10, P1: 5}]


class HangingClient(FakeClient):
    """A client whose commit never completes (aiokafka retrying with no coordinator)."""

    async def commit(self, offsets: dict[KTP, int]) -> None:
        await asyncio.Event().wait()


def test_a_commit_that_never_completes_is_given_up_and_kept_owed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("consumer_sdk.pipeline.commit.COMMIT_TIMEOUT_S", 0.01)

    async def go() -> OffsetCommits:
        commits = commits_for(HangingClient())
        await commits.submit({P0: 10})
        await commits.settle()  # returns: the next batch's commit is not blocked behind it
        return commits

    assert asyncio.run(go()).uncommitted == {P0: 10}


def test_only_owned_partitions_are_committed_and_a_rejoin_defers_the_commit() -> None:
    async def go() -> tuple[FakeClient, OffsetCommits]:
        client = FakeClient()
        commits = commits_for(client, owned={P1})
        client._coordinator.rejoining = True
        await commits.commit({P0: 3, P1: 4})
        assert commits.uncommitted == {P1: 4} and client.committed_offsets == []
        client._coordinator.rejoining = False
        await commits.before_leaving(timeout_s=5)
        return client, commits

    client, commits = asyncio.run(go())
    assert client.committed_offsets == [{P1: 4}] and commits.uncommitted == {}


def test_a_release_marks_the_flush_commit_or_commits_where_the_next_owner_starts() -> None:
    p2, p3 = KTP("t", 2), KTP("t", 3)

    async def go() -> FakeClient:
        client = FakeClient()
        client._coordinator.group_committed = {p2: 40}
        client.positions = {p3: 0}  # nobody committed it: the reset policy's offset
        commits = OffsetCommits("g-pipeline", lambda: client, lambda: {P0, P1, p2, p3})
        await commits.submit({P0: 10})  # before the revocation: no mark
        await commits.settle()
        commits.releasing([P0, P1, p2, p3], generation=7)
        await commits.submit({P1: 5})  # the revocation's flush: P1 had records pending
        await commits.settle()
        # P0: its last commit (10); p2: never committed by this member, the group's (40).
        await commits.release({P0, P1, p2, p3}, generation=7)
        await commits.submit({P0: 11})  # marks are spent: a later commit carries none
        await commits.settle()
        return client

    first, flush, release, later = asyncio.run(go()).committed_offsets
    assert first == {P0: 10} and later == {P0: 11}
    assert {tp: (m.offset, released_generation(m.metadata)) for tp, m in flush.items()} == {
        P1: (5, 7)
    }
    assert {tp: (m.offset, released_generation(m.metadata)) for tp, m in release.items()} == {
        P0: (10, 7),
        KTP("t", 2): (40, 7),
        KTP("t", 3): (0, 7),
    }


def test_a_release_never_commits_a_position_past_records_it_did_not_write() -> None:
    # After an abandoned write (P0) or records the sink refused (P1), the position is past
    # records read and not written: committing it would lose them.
    async def go() -> FakeClient:
        client = FakeClient()
        client.positions = {P0: 90, P1: 70}
        commits = OffsetCommits("g-pipeline", lambda: client, lambda: {P0, P1})
        commits.releasing([P0], generation=3)
        await commits.release({P0}, generation=3, wrote_all=False)
        commits.forget([P1])  # fenced
        commits.releasing([P1], generation=4)
        await commits.release({P1}, generation=4)
        return client

    assert asyncio.run(go()).committed_offsets == []


def test_a_release_of_records_dropped_unwritten_commits_the_first_of_them() -> None:
    # The revocation dropped what no write took: P0's last commit stands (its dropped
    # records follow it), P1 was never committed by this member and resumes at its first
    # dropped record, not at the group's older offset nor past it at the position.
    async def go() -> FakeClient:
        client = FakeClient()
        client._coordinator.group_committed = {P1: 10}
        client.positions = {P1: 90}
        commits = OffsetCommits("g-pipeline", lambda: client, lambda: {P0, P1})
        await commits.submit({P0: 20})
        await commits.settle()
        commits.releasing([P0, P1], generation=5)
        await commits.release({P0, P1}, generation=5, unwritten={P0: 20, P1: 35})
        return client

    _, release = asyncio.run(go()).committed_offsets
    assert {tp: (m.offset, released_generation(m.metadata)) for tp, m in release.items()} == {
        P0: (20, 5),
        P1: (35, 5),
    }


def test_a_release_never_commits_a_position_past_records_skipped_while_revoking() -> None:
    # Found by the autoscale benchmark: P0, never committed, was revoked 4 s after the group
    # formed; the filler fetched 0-430 of it meanwhile and did not take them, and the
    # release committed the position, 431: nobody ever wrote 0-430. P1 was written up to
    # 12 (owed): what this member wrote stands whatever it skipped after.
    async def go() -> FakeClient:
        client = FakeClient()
        client.positions = {P0: 431, P1: 60}
        commits = OffsetCommits("g-pipeline", lambda: client, lambda: {P0, P1})
        await commits.submit({P1: 12})
        await commits.settle()
        commits.releasing([P0, P1], generation=2)
        skipped = {P0: 0, P1: 12}
        await commits.release({P0, P1}, generation=2, skipped=skipped)
        return client

    *_, release = asyncio.run(go()).committed_offsets
    assert {tp: m.offset for tp, m in release.items()} == {P0: 0, P1: 12}


def test_a_partition_given_up_and_back_is_released_where_the_group_is_not_where_it_was() -> None:
    # Found by the autoscale benchmark: a member released P0 (its commit: 10), got it back,
    # and released it again before reading any of it; its old commit went out with the new
    # mark while another member had read on to 50, and the next owner read 40 records again.
    async def go() -> FakeClient:
        client = FakeClient()
        commits = OffsetCommits("g-pipeline", lambda: client, lambda: {P0, P1})
        await commits.submit({P0: 10})
        await commits.settle()
        commits.releasing([P0], generation=3)
        await commits.release({P0}, generation=3)
        commits.disown([P0])
        client._coordinator.group_committed = {P0: 50}  # another member read on meanwhile
        commits.releasing([P0], generation=6)
        await commits.release({P0}, generation=6)
        return client

    *_, release = asyncio.run(go()).committed_offsets
    assert {tp: (m.offset, released_generation(m.metadata)) for tp, m in release.items()} == {
        P0: (50, 6)
    }


def test_forgotten_partitions_are_never_committed() -> None:
    async def go() -> FakeClient:
        client = FakeClient()
        commits = commits_for(client)
        commits.owe(P0, 7)
        commits.owe(P1, 8)
        assert commits.owes_any([P0])
        commits.forget([P0])
        await commits.commit({})
        return client

    assert asyncio.run(go()).committed_offsets == [{P1: 8}]


# write -----------------------------------------------------------------------------------
class StagingRecorder:
    """A staging sink whose first publish waits until the second batch has staged."""

    def __init__(
        self,
        fail_publish: bool = False,
        fence: frozenset[TopicPartition] = frozenset(),
        gate: bool = True,
        taken: frozenset[TopicPartition] = frozenset(),
    ):
        self.events: list[str] = []
        self.gate = gate
        self.fail_publish = fail_publish
        self.fence = fence
        self.taken = taken
        self.second_staged = asyncio.Event()
        self.stages = 0

    async def stage(self, topic: str, table: pa.Table) -> object:
        self.stages += 1
        self.events.append(f"stage {self.stages}")
        if self.stages == 2:
            self.second_staged.set()
        return self.stages

    async def publish(self, staged: object) -> None:
        if staged == 1 and self.gate:
            await self.second_staged.wait()
        if self.fail_publish:
            raise OSError("table unavailable")
        if self.fence:
            raise PartitionsFenced(self.fence, self.taken)
        self.events.append(f"publish {staged}")

    async def discard(self, staged: object) -> None:
        self.events.append(f"discard {staged}")

    async def write(self, topic: str, table: pa.Table) -> None:
        self.events.append(f"write {table.num_rows}")

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        return {}


def writer_for(
    sink: StagingRecorder,
    client: FakeClient,
    written: list[WrittenBatch],
    stopping: asyncio.Event,
    taken: list[set[KTP]] | None = None,
    on_slot_free: Callable[[], None] = lambda: None,
) -> BatchWriter:
    return BatchWriter(
        sink,
        commits_for(client),
        group="g-pipeline",
        writes_in_flight=2,
        retry=NO_WAIT,
        stopping=stopping,
        on_written=written.append,
        on_taken=(taken if taken is not None else []).append,
        on_slot_free=on_slot_free,
    )


def test_a_batch_stages_while_the_one_before_publishes_and_commits_follow_in_order() -> None:
    async def go() -> tuple[StagingRecorder, FakeClient, list[WrittenBatch]]:
        sink, client, written = StagingRecorder(), FakeClient(), list[WrittenBatch]()
        writer = writer_for(sink, client, written, asyncio.Event())
        first, second = batch_of((0, range(0, 5))), batch_of((0, range(5, 9)), (1, range(0, 2)))
        writer.submit(first)
        writer.submit(second)
        await writer.settle()
        await writer._commits.settle()
        # The writer let go of the fetched rows once the sink had them (held once, not twice).
        assert not first.records and not second.records
        return sink, client, written

    sink, client, written = asyncio.run(go())
    assert sink.events == ["stage 1", "stage 2", "publish 1", "publish 2"]
    assert client.committed_offsets == [{P0: 5}, {P0: 9, P1: 2}]
    assert [dict(w.records) for w in written] == [{P0: 5}, {P0: 4, P1: 2}]
    # Each says when the sink had it (the drain meter's busy time): staged in order, and the
    # second overlapping the first, as it staged while the first published.
    first_span, second_span = ((w.sink_started, w.sink_done) for w in written)
    assert 0 < first_span[0] <= second_span[0] <= first_span[1] <= second_span[1]


def test_each_written_batch_says_how_stale_its_oldest_record_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    labels = {"group": "g-pipeline", "topic": "t"}
    before = REGISTRY.get_sample_value("autoscaler_consumer_table_staleness_seconds_count", labels)
    now_s = 1_700_000_100.0
    monkeypatch.setattr("consumer_sdk.pipeline.write.wall_clock", lambda: now_s)
    stamped = [Record("t", 0, o, 1_700_000_000_000 + o * 1000, None, b"x") for o in range(3)]

    async def go() -> None:
        writer = writer_for(StagingRecorder(gate=False), FakeClient(), [], asyncio.Event())
        pending: PendingRecords[KTP] = PendingRecords()
        pending.add(KTP("t", 0), stamped)
        writer.submit(pending.take())
        await writer.settle()

    asyncio.run(go())
    after = REGISTRY.get_sample_value("autoscaler_consumer_table_staleness_seconds_count", labels)
    assert after == (before or 0) + 1
    # The oldest record was written 100 s before the write returned: in the (60, 300] bucket.
    in_60 = REGISTRY.get_sample_value(
        "autoscaler_consumer_table_staleness_seconds_bucket", {**labels, "le": "60.0"}
    )
    in_300 = REGISTRY.get_sample_value(
        "autoscaler_consumer_table_staleness_seconds_bucket", {**labels, "le": "300.0"}
    )
    assert in_300 is not None and in_60 is not None and in_300 - in_60 >= 1


def test_free_write_slots_are_counted_and_each_write_that_ends_says_so() -> None:
    async def go() -> tuple[list[int], list[int]]:
        sink, client = StagingRecorder(), FakeClient()
        free_when_told: list[int] = []
        writer = writer_for(
            sink,
            client,
            [],
            asyncio.Event(),
            on_slot_free=lambda: free_when_told.append(writer.free_slots()),
        )
        seen = [writer.free_slots()]
        writer.submit(batch_of((0, range(0, 5))))
        seen.append(writer.free_slots())
        writer.submit(batch_of((0, range(5, 9))))
        seen += [writer.free_slots(), int(writer.busy())]
        await writer.settle()
        seen.append(writer.free_slots())
        return seen, free_when_told

    seen, free_when_told = asyncio.run(go())
    assert seen == [2, 1, 0, 1, 2]
    # Told once per write, after it ended: the first leaves one slot free, the second two.
    assert free_when_told == [1, 2]


def test_fenced_partitions_are_not_committed() -> None:
    async def go() -> FakeClient:
        sink, client, written = (
            StagingRecorder(fence=frozenset({TopicPartition("t", 0)}), gate=False),
            FakeClient(),
            list[WrittenBatch](),
        )
        writer = writer_for(sink, client, written, asyncio.Event())
        await writer.write(batch_of((0, range(0, 5)), (1, range(0, 3))))
        await writer._commits.settle()
        return client

    assert asyncio.run(go()).committed_offsets == [{P1: 3}]


def test_partitions_taken_from_the_latest_claim_are_handed_to_on_taken() -> None:
    async def go() -> tuple[FakeClient, list[set[KTP]]]:
        fenced = frozenset({TopicPartition("t", 0), TopicPartition("t", 1)})
        sink = StagingRecorder(fence=fenced, gate=False, taken=frozenset({TopicPartition("t", 1)}))
        client, taken = FakeClient(), list[set[KTP]]()
        writer = writer_for(sink, client, [], asyncio.Event(), taken)
        await writer.write(batch_of((0, range(0, 5)), (1, range(0, 3))))
        await writer._commits.settle()
        return client, taken

    client, taken = asyncio.run(go())
    assert client.committed_offsets == []  # nothing of the fenced ones
    assert taken == [{P1}]  # a partition lost to an older claim of its own is not retaken


class HeldPublish(StagingRecorder):
    """Publishes only once ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(gate=False)
        self.release = asyncio.Event()

    async def publish(self, staged: object) -> None:
        await self.release.wait()
        await super().publish(staged)


def test_draining_partitions_waits_for_the_writes_holding_records_of_them_only() -> None:
    async def go() -> tuple[bool, bool, list[str]]:
        sink, client = HeldPublish(), FakeClient()
        writer = writer_for(sink, client, [], asyncio.Event())
        writer.submit(batch_of((0, range(0, 5))))
        await writer.drain({P1})  # no write holds P1: returns at once
        draining = asyncio.create_task(writer.drain({P0, P1}))
        for _ in range(20):
            await asyncio.sleep(0)
        held_while_unpublished = not draining.done()
        sink.release.set()
        await draining
        return held_while_unpublished, draining.done(), sink.events

    held, done, events = asyncio.run(go())
    assert held and done
    assert events == ["stage 1", "publish 1"]


def test_a_write_failing_at_shutdown_abandons_it_and_every_batch_after_it() -> None:
    async def go() -> tuple[StagingRecorder, FakeClient, list[BaseException | None]]:
        sink, client = StagingRecorder(fail_publish=True), FakeClient()
        written: list[WrittenBatch] = []
        stopping = asyncio.Event()
        stopping.set()
        writer = writer_for(sink, client, written, stopping)
        writer.submit(batch_of((0, range(0, 5))))
        writer.submit(batch_of((0, range(5, 9))))
        with pytest.raises(WriteAbandoned):
            await writer.settle()
        assert writer.abandoned
        with pytest.raises(WriteAbandoned):
            await writer.write(batch_of((1, range(0, 1))))
        return sink, client, []

    sink, client, _ = asyncio.run(go())
    assert client.committed_offsets == []
    assert "discard 1" in sink.events and "discard 2" in sink.events
    assert not any(e.startswith("publish") for e in sink.events)


# fetch -----------------------------------------------------------------------------------
def test_the_filler_stops_at_batch_bytes_skips_revoking_partitions_and_retries_errors() -> None:
    async def go() -> tuple[BatchFiller, FakeClient]:
        client = FakeClient()
        client.polls = [
            KafkaError("coordinator moved"),
            {P0: records(0, range(0, 3)), P1: records(1, range(0, 3))},
            {P0: records(0, range(3, 6))},
            {P0: records(0, range(6, 9))},
        ]
        pending: PendingRecords[KTP] = PendingRecords()
        six_records = 6 * records(0, range(1))[0].size
        filler = BatchFiller(
            pending, group="g-pipeline", batch_bytes=six_records, wait_time_secs=30
        )
        filler.revoking.add(P1)
        await filler.fill(lambda: client, lambda: True, asyncio.Event())
        return filler, client

    filler, client = asyncio.run(go())
    taken = filler.pending.take()
    assert {p: [r.offset for r in recs] for p, recs in taken.records.items()} == {
        P0: list(range(6))
    }
    assert len(client.polls) == 1  # stopped once six records were held
    assert filler.skipped == {P1: 0}  # P1's records from 0 on were fetched and not taken
    filler.revoking_ended({P1})
    assert filler.revoking == set() and filler.skipped == {}
    assert REGISTRY.get_sample_value(
        "autoscaler_consumer_poll_errors_total", {"group": "g-pipeline", "error": "KafkaError"}
    )


def test_past_the_wait_the_batch_goes_on_filling_while_every_write_slot_is_taken() -> None:
    async def go(busy_answers: list[bool]) -> tuple[dict[KTP, list[int]], list[bool], int]:
        client = FakeClient()
        client.polls = [{P0: records(0, range(n, n + 1))} for n in range(5)]
        pending: PendingRecords[KTP] = PendingRecords()
        filler = BatchFiller(pending, group="g-pipeline", batch_bytes=10_000, wait_time_secs=0)
        answers = list(busy_answers)
        await filler.fill(lambda: client, lambda: True, asyncio.Event(), sink_busy=answers.pop)
        taken = filler.pending.take()
        offsets = {p: [r.offset for r in recs] for p, recs in taken.records.items()}
        return offsets, answers, len(client.polls)

    # The sink is busy for three checks, then a slot frees: three polls went into the batch.
    offsets, unasked, polls_left = asyncio.run(go([False, True, True, True]))
    assert offsets == {P0: [0, 1, 2]} and unasked == [] and polls_left == 2
    # A free slot at the wait's end: the batch is cut at once, nothing more is polled.
    offsets, unasked, polls_left = asyncio.run(go([False]))
    assert offsets == {} and unasked == [] and polls_left == 5


def test_a_batch_is_due_by_the_freshness_bound_less_the_sinks_write_time() -> None:
    pending: PendingRecords[KTP] = PendingRecords()
    bounded = BatchFiller(
        pending, group="g-pipeline", batch_bytes=10_000, wait_time_secs=5, staleness_bound_s=1
    )
    unbounded = BatchFiller(pending, group="g-pipeline", batch_bytes=10_000, wait_time_secs=5)
    # No record yet: only the batch wait counts.
    assert bounded.due_at(100.0, None, lambda: 0.3) == 105.0
    # Its first record taken at 101: due when it waited the bound less the write time.
    assert bounded.due_at(100.0, 101.0, lambda: 0.3) == 101.7
    # A sink slower than the bound: the batch still fills for a fifth of it.
    assert bounded.due_at(100.0, 101.0, lambda: 3.0) == 101.2
    # A batch wait shorter than the bound wins; without a bound, the wait alone.
    assert bounded.due_at(100.0, 104.5, lambda: 0.0) == 105.0
    assert unbounded.due_at(100.0, 101.0, lambda: 0.3) == 105.0


def test_the_filler_cuts_a_batch_at_the_freshness_bound_long_before_the_wait() -> None:
    async def go() -> tuple[dict[KTP, list[int]], int]:
        client = FakeClient()
        client.polls = [{P0: records(0, range(0, 2))}]
        pending: PendingRecords[KTP] = PendingRecords()
        filler = BatchFiller(
            pending,
            group="g-pipeline",
            batch_bytes=10_000,
            wait_time_secs=3600,
            staleness_bound_s=0.1,
        )
        await filler.fill(lambda: client, lambda: True, asyncio.Event(), write_time_s=lambda: 0.05)
        taken = filler.pending.take()
        return {p: [r.offset for r in recs] for p, recs in taken.records.items()}, len(client.polls)

    # An hour's batch wait, yet the batch holding a record is handed on within the bound.
    assert asyncio.run(go()) == ({P0: [0, 1]}, 0)


def test_the_filler_hands_a_jump_back_to_its_hook_before_taking_the_records() -> None:
    async def go() -> tuple[list[tuple[KTP, int]], list[int], list[int]]:
        client = FakeClient()
        told: list[tuple[KTP, int]] = []

        def rewound(ktp: KTP, first: int) -> bool:
            told.append((ktp, first))
            return False  # the hook moved the partition: not taken

        pending: PendingRecords[KTP] = PendingRecords()
        filler = BatchFiller(
            pending, group="g-pipeline", batch_bytes=10_000, wait_time_secs=60, rewound=rewound
        )
        # Records of P0 up to 4, then (a reset) records from 2 again; P1 reads on.
        client.polls = [
            {P0: records(0, range(0, 5))},
            {P0: records(0, range(2, 4)), P1: records(1, range(0, 2))},
        ]
        await filler.fill(lambda: client, lambda: bool(client.polls), asyncio.Event())
        before = [r.offset for r in filler.pending.take().records[P0]]
        filler.read_from([P0])  # checked: read on from wherever it is
        client.polls = [{P0: records(0, range(2, 4))}]
        await filler.fill(lambda: client, lambda: bool(client.polls), asyncio.Event())
        after = [r.offset for r in filler.pending.take().records[P0]]
        return told, before, after

    assert asyncio.run(go()) == ([(P0, 2)], [0, 1, 2, 3, 4], [2, 3])


# resume ----------------------------------------------------------------------------------
class LookupSink:
    """Says partition 0 resumes at 30; its first ``failures`` lookups fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lookups = 0
        self.answer = asyncio.Event()

    async def write(self, topic: str, table: pa.Table) -> None:
        raise AssertionError("not written in these tests")

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        self.lookups += 1
        if self.lookups <= self.failures:
            raise OSError("table unavailable")
        await self.answer.wait()
        return {TopicPartition("t", 0): 30}


def resume_stage(
    sink: LookupSink, client: FakeClient, **options: Any
) -> tuple[ResumeLookups, OffsetCommits]:
    """The resume stage the tests share; ``options`` are ResumeLookups' optional ones."""
    commits = commits_for(client)
    pending: PendingRecords[KTP] = PendingRecords()
    stage = ResumeLookups(
        sink,
        pending,
        commits,
        group="g-pipeline",
        retry=NO_WAIT,
        current_client=lambda: client,
        **options,
    )
    return stage, commits


def test_new_partitions_stay_paused_until_the_sink_answers_then_seek_past_it() -> None:
    async def go() -> tuple[FakeClient, OffsetCommits, ResumeLookups]:
        client, sink = FakeClient({P0, P1}), LookupSink(failures=2)
        client.group_committed = {P0: 12}
        stage, commits = resume_stage(sink, client)
        stage.start(client, {P0, P1})  # returns at once: the listener does not wait
        assert client.paused == {P0, P1} and stage.waiting == {P0, P1}
        while sink.lookups < 3:
            await asyncio.sleep(0)
        assert client.paused == {P0, P1}  # two failed lookups, the third is pending
        sink.answer.set()
        while stage.waiting:
            await asyncio.sleep(0)
        return client, commits, stage

    client, commits, _ = asyncio.run(go())
    assert client.paused == set() and client.sought == {P0: 30}
    assert commits.uncommitted == {P0: 30}  # Kafka catches up with the table


def test_a_partition_claimed_again_goes_back_to_the_table_or_the_committed_offset() -> None:
    # Claimed again after another writer's claim: the member read (and dropped) records past
    # the committed offset, so its position goes back to where the sink or the group is.
    p2 = KTP("t", 2)

    async def go() -> tuple[FakeClient, OffsetCommits]:
        client, sink = FakeClient({P0, P1, p2}), LookupSink(failures=0)
        client.group_committed = {P0: 12, P1: 40}  # the sink holds offsets up to 29 of P0
        stage, commits = resume_stage(sink, client)
        sink.answer.set()
        stage.start(client, {P0, P1, p2}, rewind=True)
        while stage.waiting:
            await asyncio.sleep(0)
        return client, commits

    client, commits = asyncio.run(go())
    assert client.sought == {P0: 30, P1: 40, p2: 0} and client.paused == set()
    assert commits.uncommitted == {P0: 30}  # only the table's lead is owed to Kafka


def test_a_lookup_asks_the_sink_only_after_the_writes_holding_its_partitions() -> None:
    # Asking claims the partitions anew: writes of records read under the old claim go first.
    async def go() -> tuple[list[set[KTP]], int, FakeClient]:
        client, sink = FakeClient({P0}), LookupSink(failures=0)
        sink.answer.set()
        writes_done = asyncio.Event()
        waited: list[set[KTP]] = []

        async def wait_for_writes(partitions: set[KTP]) -> None:
            waited.append(set(partitions))
            await writes_done.wait()

        stage, _ = resume_stage(sink, client, wait_for_writes=wait_for_writes)
        stage.start(client, {P0}, rewind=True)
        for _ in range(20):
            await asyncio.sleep(0)
        lookups_before = sink.lookups
        writes_done.set()
        while stage.waiting:
            await asyncio.sleep(0)
        return waited, lookups_before, client

    waited, lookups_before, client = asyncio.run(go())
    assert waited == [{P0}] and lookups_before == 0
    assert client.sought == {P0: 30} and client.paused == set()


def test_a_partition_revoked_during_its_lookup_is_neither_sought_nor_resumed() -> None:
    async def go() -> FakeClient:
        client, sink = FakeClient({P0, P1}), LookupSink(failures=0)
        stage, _ = resume_stage(sink, client)
        stage.start(client, {P0, P1})
        while sink.lookups < 1:
            await asyncio.sleep(0)
        client.assigned = {P1}
        stage.forget([P0])
        sink.answer.set()
        while stage.waiting:
            await asyncio.sleep(0)
        await stage.close()
        return client

    client = asyncio.run(go())
    assert client.sought == {} and client.paused == {P0}  # P0 is another member's now


def release_stage(
    client: FakeClient,
    marks: dict[KTP, tuple[int, str]],
    reading: list[set[KTP]],
    **options: Any,
) -> ResumeLookups:
    """A resume stage whose committed offsets (and their metadata) are ``marks``, logging
    what it lets be read into ``reading``; its sink answers at once. Every read of the
    marks is counted in ``MARKS_READ``."""
    sink = LookupSink(failures=0)
    sink.answer.set()

    async def committed_marks(partitions: list[KTP]) -> dict[KTP, tuple[int, str]]:
        MARKS_READ.append(len(partitions))
        return {tp: marks[tp] for tp in partitions if tp in marks}

    stage, _ = resume_stage(
        sink,
        client,
        committed_marks=committed_marks,
        on_reading=lambda ps: reading.append(set(ps)),
        **options,
    )
    return stage


MARKS_READ: list[int] = []


def test_a_partition_handed_over_in_one_round_waits_for_its_release_mark() -> None:
    async def go() -> tuple[FakeClient, list[set[KTP]], dict[KTP, tuple[int, str]]]:
        client = FakeClient({P0, P1})
        marks: dict[KTP, tuple[int, str]] = {P1: (10, mark_released("", 4))}  # an older one
        reading: list[set[KTP]] = []
        stage = release_stage(client, marks, reading)
        stage.start(client, {P0, P1}, awaiting={P1: 5})
        while P0 in stage.waiting:  # P0 moved from nobody: it does not wait for P1
            await asyncio.sleep(0.001)
        assert stage.waiting == {P1} and stage.awaiting_release == {P1} and P1 in client.paused
        marks[P1] = (17, mark_released('{"cap":1}', 5))  # the old owner's release commit
        while stage.waiting:
            await asyncio.sleep(0.001)
        return client, reading, marks

    client, reading, _ = asyncio.run(go())
    assert client.sought == {P0: 30, P1: 17} and client.paused == set()
    assert reading == [{P0}, {P1}]


def test_an_awaited_partition_no_longer_awaited_reads_from_the_committed_offset() -> None:
    # A later round no longer says P1 awaits a release: its old owner rejoined without it,
    # so its last commit is in, mark or no mark (a failed release commit).
    async def go() -> FakeClient:
        client = FakeClient({P1})
        stage = release_stage(client, {P1: (21, "")}, [])
        stage.start(client, {P1}, awaiting={P1: 5})
        for _ in range(5):
            await asyncio.sleep(0.005)
        assert stage.waiting == {P1} and client.sought == {}
        stage.keep_awaiting([])
        while stage.waiting:
            await asyncio.sleep(0.001)
        return client

    client = asyncio.run(go())
    assert client.sought == {P1: 21} and client.paused == set()


async def marks_read_again(times: int) -> None:
    """Until the stage has read the committed marks ``times`` more times."""
    target = len(MARKS_READ) + times
    while len(MARKS_READ) < target:
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("kept", [True, False])
def test_a_release_seen_during_a_join_that_said_unread_waits_for_that_round(kept: bool) -> None:
    # This member's join told the leader it does not read P1 (still awaiting its release).
    # The release lands meanwhile: reading P1 now would read what the leader may have given
    # another member with nothing to wait for. It waits for the round's answer.
    async def go() -> tuple[FakeClient, ResumeLookups, list[set[KTP]], list[set[KTP]]]:
        client = FakeClient({P1})
        told_unread: set[KTP] = set()
        released: list[set[KTP]] = []
        reading: list[set[KTP]] = []
        marks = {P1: (8, "")}
        stage = release_stage(
            client,
            marks,
            reading,
            declared_unread=lambda: told_unread,
            on_released=released.append,
        )
        stage.start(client, {P1}, awaiting={P1: 5})
        await marks_read_again(1)
        told_unread.add(P1)  # the join goes out
        marks[P1] = (17, mark_released("", 5))  # the old owner's release commit lands
        await marks_read_again(3)
        assert stage.awaiting_release == {P1} and P1 in client.paused and not released
        told_unread.clear()  # the round's answer
        if kept:
            stage.keep_awaiting([])  # kept, and nobody else reads it: no release to wait for
        else:
            client.assigned.discard(P1)
            stage.forget({P1})  # revoked: never read, nothing of it to release
        await stage.idle()
        return client, stage, reading, released

    client, stage, reading, released = asyncio.run(go())
    assert not released  # its release never counted as this member's to read from
    if kept:
        assert client.sought == {P1: 17} and reading == [{P1}] and not stage.waiting
    else:
        assert client.sought == {} and reading == [] and P1 in client.paused


def test_a_release_seen_outside_a_join_is_reported_so_the_next_join_says_read() -> None:
    async def go() -> list[set[KTP]]:
        client, released = FakeClient({P1}), list[set[KTP]]()
        stage = release_stage(
            client, {P1: (17, mark_released("", 5))}, [], on_released=released.append
        )
        stage.start(client, {P1}, awaiting={P1: 5})
        while stage.waiting:
            await asyncio.sleep(0.001)
        return released

    assert asyncio.run(go()) == [{P1}]


def test_closing_stops_lookups_in_flight() -> None:
    async def go() -> tuple[FakeClient, ResumeLookups]:
        client, sink = FakeClient({P0}), LookupSink(failures=0)
        stage, _ = resume_stage(sink, client)
        stage.start(client, {P0})
        while sink.lookups < 1:
            await asyncio.sleep(0)
        await stage.close()
        return client, stage

    client, stage = asyncio.run(go())
    assert client.paused == {P0} and client.sought == {} and stage.waiting == {P0}


def test_retry_delays_double_up_to_a_ceiling_an_outage_end_can_afford() -> None:
    delays = list(itertools.islice(RetryPolicy().delays(), 8))
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert delays[-1] == RetryPolicy().max_delay_s <= 5.0  # a freed disk waits 5 s at most
    assert all(b == min(2 * a, delays[-1]) for a, b in itertools.pairwise(delays))


def test_a_release_commit_that_fails_is_tried_again_until_it_lands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commit_stage, "RELEASE_FIRST_DELAY_S", 0.001)

    async def go() -> tuple[FakeClient, OffsetCommits]:
        client = FakeClient()
        commits = commits_for(client)
        await commits.submit({P0: 10})
        await commits.settle()
        commits.releasing([P0], generation=3)
        client.commit_failures = 2  # a coordinator moving: refused twice, then taken
        await commits.release({P0}, generation=3)
        return client, commits

    client, commits = asyncio.run(go())
    _, release = client.committed_offsets
    assert {tp: (m.offset, released_generation(m.metadata)) for tp, m in release.items()} == {
        P0: (10, 3)
    }
    assert commits.committed[P0] == 10


def test_a_release_refused_for_the_membership_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(commit_stage, "RELEASE_FIRST_DELAY_S", 0.001)

    async def go() -> tuple[FakeClient, int]:
        client = FakeClient()
        commits = commits_for(client)
        commits.owe(P0, 10)
        commits.releasing([P0], generation=3)
        attempts = commits.attempts

        async def refused(offsets: Any) -> None:
            raise UnknownMemberIdError()

        monkeypatch.setattr(client, "commit", refused)
        await commits.release({P0}, generation=3)
        return client, commits.attempts - attempts

    client, attempts = asyncio.run(go())
    assert attempts == 1 and client.committed_offsets == []
