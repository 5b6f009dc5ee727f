"""The drop-in consumer: group membership packed by write speed, batches into a sink.

Loop (the paper's Fig. 4): fetch until ``batch_bytes`` or ``wait_time_secs``; group the
records by topic; write each topic's records to the sink concurrently; commit offsets only
after every write of the batch succeeded. A failing write is retried with backoff and never
committed past. When partitions are revoked, their pending records are written and committed
first. SIGTERM (with :meth:`AutoscalingConsumer.run`): flush, commit, leave the group.

Batches are written while the next one fills. With a :class:`~consumer_sdk.sink.StagingSink`
up to ``writes_in_flight`` batches are in the sink at once: a batch stages while the one
before it is still being written, and publishes (then commits) only after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from assignor.cooperative import COOPERATIVE
from assignor.plugin import MemberState, PluginStats, build_assignor
from consumer_sdk import metrics
from consumer_sdk.columnar_fetch import COLUMNAR, install
from consumer_sdk.config import MIB, ConsumerConfig
from consumer_sdk.cooperative import CooperativeCoordinator, make_cooperative
from consumer_sdk.pending import Batch, PendingRecords
from consumer_sdk.pending_columns import ColumnBatch, PendingColumns
from consumer_sdk.sink import (
    ColumnarSink,
    ColumnarStagingSink,
    ManagedSink,
    PartitionsFenced,
    PreparingSink,
    Record,
    RecordsView,
    Sink,
    StagingSink,
)
from consumer_sdk.snapshot_cache import SnapshotCache
from contract.overload import OverloadWatch
from contract.stopping import finished_unless_stopped

log = logging.getLogger(__name__)
POLL_SLICE_MS = 200
# While a leaving member hands its partitions over, it polls in short slices: it leaves the
# group as soon as it owns nothing, and the hand-over round waits for that.
LEAVING_POLL_SLICE_MS = 20
# getmany returns buffered records without yielding to the event loop; in slices of this
# many, with a yield after each, the loop starts the previous batch's write (and answers
# heartbeats) while a batch fills, instead of after it.
POLL_MAX_RECORDS = 500


class WriteAbandoned(RuntimeError):
    """A sink write kept failing until shutdown; its records were not committed."""


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff of failed sink writes: first delay, growth factor, ceiling."""

    first_delay_s: float = 0.2
    factor: float = 2.0
    max_delay_s: float = 30.0

    def delays(self) -> Iterable[float]:
        """Delays between attempts, forever."""
        delay = self.first_delay_s
        while True:
            yield delay
            delay = min(self.max_delay_s, delay * self.factor)


@dataclass(frozen=True)
class OwnershipEvent:
    """This member started (``assigned``) or stopped (``revoked``) reading partitions."""

    at: float  # time.monotonic()
    kind: str
    partitions: frozenset[TopicPartition]
    generation: int


class _Listener(ConsumerRebalanceListener):
    def __init__(self, owner: AutoscalingConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        await self._owner._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[KafkaTopicPartition]) -> None:
        await self._owner._on_assigned(assigned)


class AutoscalingConsumer:
    """An asyncio Kafka consumer whose group is packed by write speed; see module doc."""

    def __init__(
        self, config: ConsumerConfig, sink: Sink, *, retry: RetryPolicy | None = None
    ) -> None:
        if not isinstance(sink, Sink):
            raise TypeError("sink must implement write(topic, records) and resume_offsets()")
        self.config = config
        self.sink = sink
        self.retry = retry or RetryPolicy()
        self.state = MemberState(
            config.member_identity,
            config.heuristic,
            config.capacity,
            cooperative=config.rebalance_protocol == COOPERATIVE,
        )
        self.plugin_stats = PluginStats()
        self.snapshots = SnapshotCache(
            config.bootstrap_servers,
            config.snapshot_topic,
            config.group,
            config.snapshot_max_age_secs,
            client_options=config.client_options(),
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._columnar = config.record_path == "columns"
        self._pending: PendingRecords[KafkaTopicPartition] | PendingColumns[KafkaTopicPartition]
        self._pending = PendingColumns() if self._columnar else PendingRecords()
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._window_started = time.monotonic()
        self._fallbacks_seen = 0
        self._commit_task: asyncio.Task[None] | None = None
        # Batches handed to the sink, oldest first; each publishes after the one before it.
        self._writes: deque[asyncio.Task[None]] = deque()
        self._stager: StagingSink | None = sink if isinstance(sink, StagingSink) else None
        # On the columnar path, whole tables go to a sink that takes them; others get Records.
        self._table_sink: ColumnarSink | None = (
            sink if self._columnar and isinstance(sink, ColumnarSink) else None
        )
        self._depth = config.writes_in_flight if self._stager is not None else 1
        # Offsets written (or found in the sink) whose commit has not succeeded yet: retried
        # when the member is idle, so the committed offsets (the sidecar's lag) catch up.
        self._uncommitted: dict[KafkaTopicPartition, int] = {}
        self.assigned: set[TopicPartition] = set()
        # Partitions being revoked: records fetched for them meanwhile are not taken (a
        # cooperative member keeps fetching while the listener flushes).
        self._revoking: set[KafkaTopicPartition] = set()
        # Newly assigned partitions stay paused until the sink said where each resumes; the
        # lookup runs as a task of its own, so the listener returns and heartbeats go on
        # (aiokafka sends none while a listener runs). The value names the assignment that
        # paused it: a lookup only seeks and resumes partitions whose assignment it serves.
        self._resuming: dict[KafkaTopicPartition, object] = {}
        self._resume_tasks: set[asyncio.Task[None]] = set()
        self.ownership_log: deque[OwnershipEvent] = deque(maxlen=10_000)
        self.overload = (
            OverloadWatch(config.capacity, sustain_s=config.replan_after_secs)
            if config.replan_after_secs > 0
            else None
        )
        self.replans_requested = 0
        # When the hand-over of our partitions on stop must end (None: not stopping yet).
        self._leave_deadline: float | None = None
        # A write was given up at shutdown: nothing may be written or committed after it.
        self._abandoned = False
        # How this member left its group (handed_over, timed_out, at_once); None until then.
        self.leave_outcome: str | None = None

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Serve metrics if configured, start the sink, read the latest speed snapshot, join."""
        if self.config.metrics_port is not None:
            metrics.serve(self.config.metrics_port)
        if isinstance(self.sink, ManagedSink):
            await self.sink.start()  # before joining: a slow start would stall assignments
        if isinstance(self.sink, PreparingSink):
            await self.sink.prepare(self.config.topics)
        await self.snapshots.start()
        await self._start_client()

    async def _start_client(self) -> None:
        """Create the client and join; if joining fails (Kafka unreachable, SyncGroup
        refused, ...), start over with backoff instead of dying, until a stop is requested:
        a stop ends a join or a back-off at once."""
        delays = iter(RetryPolicy(first_delay_s=0.5, max_delay_s=10.0).delays())
        while not self._stopping.is_set():
            consumer = self._new_client()
            self._consumer = consumer  # before start(): the join may call back at once
            joining = asyncio.create_task(consumer.start())  # done at the first assignment
            joined = await finished_unless_stopped(joining, self._stopping)
            failure = joining.exception() if joined else None
            if joined and failure is None:
                if self.state.cooperative:
                    coordinator = make_cooperative(consumer, self.state)
                    if self.state.handover_pending:
                        # Our first join was answered by aiokafka's own coordinator, which
                        # knows nothing of hand-over rounds: join the one announced now.
                        coordinator.request_rejoin()
                return
            if failure is not None and not isinstance(failure, KafkaError):
                await consumer.stop()
                raise failure  # a bug, not an outage
            if failure is not None:
                metrics.POLL_ERRORS.labels(self.config.group, type(failure).__name__).inc()
            await consumer.stop()
            self._consumer = None
            if self._stopping.is_set():
                return
            delay = next(delays)
            log.warning(
                "joining group %s at %s failed (%r); retrying in %.1f s",
                self.config.group,
                self.config.bootstrap_servers,
                failure,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    def _new_client(self) -> AIOKafkaConsumer:
        config = self.config
        if self._columnar:
            install()  # aiokafka's fetcher then decodes our fetches into columns
        assignor = build_assignor(
            self.state,
            self.snapshots.view,
            self.plugin_stats,
            leader_delay_s=config.leader_delay_secs,
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap_servers,
            group_id=config.group,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            fetch_max_wait_ms=100,
            # Fetch big enough to fill a batch in a few round trips (defaults: 1 MiB/partition).
            max_partition_fetch_bytes=4 * MIB,
            fetch_max_bytes=max(64 * MIB, config.batch_bytes),
            partition_assignment_strategy=(assignor,),
            **({"key_deserializer": COLUMNAR} if self._columnar else {}),
            **config.client_options(),
        )
        consumer.subscribe(list(config.topics), listener=_Listener(self))
        return consumer

    def request_stop(self) -> None:
        """Ask the loop to flush, commit and leave (safe from a signal handler)."""
        self._stopping.set()

    async def run_async(self) -> None:
        """Consume until :meth:`request_stop`; then flush, commit, leave the group."""
        if self._consumer is None:
            await self.start()
        try:
            while self._keep_reading():
                await self._fill_batch()
                # Batches are written while the next one fills (Spark works outside the
                # GIL); they still land and commit in order.
                with contextlib.suppress(WriteAbandoned):  # only at shutdown
                    await self._settle_writes(keep=self._depth - 1)
                async with self._lock:
                    batch = self._pending.take(limit=self.config.batch_bytes)
                    if batch:
                        previous = self._writes[-1] if self._writes else None
                        self._writes.append(
                            asyncio.create_task(self._write_and_commit(batch, previous))
                        )
                    elif self._uncommitted:
                        await self._settle_commit()
                        self._commit_task = asyncio.create_task(self._commit({}))
                self._check_overload()
        finally:
            await self.close()

    def run(self) -> None:
        """Blocking run for non-async apps; SIGTERM and SIGINT stop it gracefully."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            await self.run_async()

        asyncio.run(main())

    def _keep_reading(self) -> bool:
        """True until a stop is requested; then, while a cooperative member hands its
        partitions over to the others (it reads them meanwhile), for at most
        ``leave_handover_secs``."""
        if not self._stopping.is_set():
            return True
        if self._leave_deadline is None:
            self._leave_deadline = self._begin_leave()
        handing_over = bool(self.assigned) and not self._abandoned
        return handing_over and time.monotonic() < self._leave_deadline

    def _begin_leave(self) -> float:
        """Rejoin once more as a leaving member, so the leader moves our partitions while we
        still read them; the deadline of that hand-over (now, when there is nothing to hand
        over or the group does not rebalance cooperatively)."""
        now = time.monotonic()
        coordinator = getattr(self._consumer, "_coordinator", None)
        if (
            self.config.leave_handover_secs <= 0
            or not self.assigned
            or not isinstance(coordinator, CooperativeCoordinator)
            or self.state.group_mode != COOPERATIVE
        ):
            return now
        self.state.leaving = True
        coordinator.request_rejoin()
        log.info(
            "stopping: handing %d partition(s) over to the rest of group %s before leaving",
            len(self.assigned),
            self.config.group,
        )
        return now + self.config.leave_handover_secs

    async def close(self) -> None:
        """Flush what is pending (best effort), commit, leave the group, stop readers."""
        self._stopping.set()
        for task in list(self._resume_tasks):
            task.cancel()
        await asyncio.gather(*self._resume_tasks, return_exceptions=True)
        consumer = self._consumer
        if consumer is not None:
            async with self._lock:
                with contextlib.suppress(WriteAbandoned):
                    await self._settle_writes()
                    await self._flush(None)
                await self._settle_commit()
                await self._commit_before_leaving()
            self._count_leave()
            # Only now: the commits above go through this client.
            self._consumer = None
            self._change_ownership("revoked", set(self.assigned))
            await consumer.stop()  # sends LeaveGroup
        await self.snapshots.stop()
        if isinstance(self.sink, ManagedSink):
            await self.sink.close()

    def _count_leave(self) -> None:
        handing_over = self.state.leaving
        if handing_over and not self.assigned:
            self.leave_outcome = "handed_over"
        elif handing_over:
            self.leave_outcome = "timed_out"
            log.warning(
                "leaving group %s with %d partition(s) not yet handed over: their next "
                "owners wait for the group to notice",
                self.config.group,
                len(self.assigned),
            )
        else:
            self.leave_outcome = "at_once"
        metrics.LEAVES.labels(self.config.group, self.leave_outcome).inc()

    # batching ----------------------------------------------------------------------------
    async def _fill_batch(self) -> None:
        """Fetch until batch_bytes, wait_time_secs, or a stop request."""
        deadline = time.monotonic() + self.config.wait_time_secs
        while self._keep_reading() and self._pending.bytes < self.config.batch_bytes:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return
            consumer = self._consumer
            assert consumer is not None
            slice_ms = LEAVING_POLL_SLICE_MS if self._stopping.is_set() else POLL_SLICE_MS
            try:
                batch = await consumer.getmany(
                    timeout_ms=min(slice_ms, remaining_ms), max_records=POLL_MAX_RECORDS
                )
            except KafkaError as exc:
                # aiokafka hands group errors (e.g. a failed SyncGroup) to the caller once and
                # keeps its coordination loop running: polling again is the rejoin retry.
                metrics.POLL_ERRORS.labels(self.config.group, type(exc).__name__).inc()
                log.warning("poll failed, retrying (group rejoins by itself): %r", exc)
                await asyncio.sleep(0.5)
                continue
            for ktp, messages in batch.items():
                if ktp not in self._revoking:
                    self._pending.add(ktp, messages)
            await asyncio.sleep(0)

    async def _settle_writes(self, keep: int = 0) -> None:
        """Wait, oldest first, until at most ``keep`` batches are being written; then raise
        the first error a write raised. Shielded: a cancelled waiter leaves the write
        running and still owned, so no later batch of the same partitions starts before it
        ends."""
        failure: Exception | None = None
        while len(self._writes) > keep:
            task = self._writes[0]
            try:
                await asyncio.shield(task)
            except Exception as exc:  # the later writes are still waited for
                failure = failure or exc
            finally:
                if task.done() and self._writes and self._writes[0] is task:
                    self._writes.popleft()
        if failure is not None:
            raise failure

    async def _flush(self, partitions: set[KafkaTopicPartition] | None) -> None:
        """Write pending records of ``partitions`` (all if None) and commit them.

        Caller holds ``self._lock``. Raises WriteAbandoned if a write kept failing until
        shutdown; then nothing of this batch is committed.
        """
        batch = self._pending.take(partitions)
        if batch:
            await self._write_and_commit(batch)

    async def _write_and_commit(
        self,
        batch: Batch[KafkaTopicPartition] | ColumnBatch[KafkaTopicPartition],
        previous: asyncio.Task[None] | None = None,
    ) -> None:
        """Write one batch (a write per topic, concurrently), then commit its offsets. With
        a staging sink the batch stages at once and publishes after ``previous`` (the batch
        before it) succeeded; if that one was abandoned, this one is too."""
        if self._abandoned:
            raise WriteAbandoned(
                f"a batch of {len(batch.records)} partition(s) was not written: an earlier "
                "batch was given up at shutdown, and nothing is committed past it"
            )
        by_topic = self._by_topic(batch)
        staged = await asyncio.gather(*(self._stage(t, recs) for t, recs in by_topic.items()))
        if previous is not None:
            await asyncio.wait({previous})
            if previous.cancelled() or previous.exception() is not None:
                await asyncio.gather(*(self._discard(s) for s in staged))
                self._abandoned = True
                raise WriteAbandoned(
                    f"a batch of {len(batch.records)} partition(s) was not written: the batch "
                    "before it was not, and batches publish in order"
                )
        fenced = await asyncio.gather(
            *(
                self._write(topic, recs, first)
                for (topic, recs), first in zip(by_topic.items(), staged, strict=True)
            )
        )
        # Every write succeeded: commit. The commit runs while the next batch fills (it is
        # off the critical path); commits stay in order because each waits for the last.
        offsets = batch.next_offsets()
        self._forget_fenced(offsets, frozenset().union(*fenced))
        await self._settle_commit()
        self._commit_task = asyncio.create_task(self._commit(offsets))
        self._account(batch)

    def _by_topic(
        self, batch: Batch[KafkaTopicPartition] | ColumnBatch[KafkaTopicPartition]
    ) -> dict[str, Sequence[Record] | pa.Table]:
        """Each topic's part of ``batch``: Records, or one table for a columnar sink."""
        if isinstance(batch, Batch):
            lists: dict[str, list[Record]] = {}
            for recs in batch.records.values():
                lists.setdefault(recs[0].topic, []).extend(recs)
            return dict(lists)
        tables: dict[str, list[pa.Table]] = {}
        for tp, table in batch.records.items():
            partition = pa.array(np.full(len(table), tp.partition, np.int32))
            tables.setdefault(tp.topic, []).append(table.append_column("partition", partition))
        by_topic: dict[str, Sequence[Record] | pa.Table] = {}
        for topic, parts in tables.items():
            # One chunk per column: a fetch is a chunk, and Spark makes a task of each one.
            whole = pa.concat_tables(parts).combine_chunks()
            by_topic[topic] = whole if self._table_sink is not None else RecordsView(topic, whole)
        return by_topic

    def _forget_fenced(
        self, offsets: dict[KafkaTopicPartition, int], fenced: frozenset[TopicPartition]
    ) -> None:
        """Partitions whose rows the sink refused (another member claimed them): nothing of
        them is committed, now or later (a commit past rows the table lacks would make their
        next owner skip them); their new owner resumes from where the sink is."""
        for tp in fenced:
            ktp = KafkaTopicPartition(tp.topic, tp.partition)
            offsets.pop(ktp, None)
            self._uncommitted.pop(ktp, None)
        if fenced:
            metrics.PARTITIONS_FENCED.labels(self.config.group).inc(len(fenced))
            log.warning("%s", PartitionsFenced(fenced))

    async def _settle_commit(self) -> None:
        """Wait for the commit in flight, if any."""
        task, self._commit_task = self._commit_task, None
        if task is not None:
            await task

    def _account(
        self, flushed: Batch[KafkaTopicPartition] | ColumnBatch[KafkaTopicPartition]
    ) -> None:
        group = self.config.group
        total_bytes = total_records = 0
        for tp, recs in flushed.records.items():
            size = flushed.sizes[tp]
            total_bytes += size
            total_records += len(recs)
            metrics.RECORDS.labels(group, tp.topic, str(tp.partition)).inc(len(recs))
            metrics.BYTES.labels(group, tp.topic, str(tp.partition)).inc(size)
        now = time.monotonic()
        elapsed = max(1e-6, now - self._window_started)
        self._window_started = now
        metrics.THROUGHPUT.labels(group).set(total_bytes / elapsed)
        metrics.THROUGHPUT_RECORDS.labels(group).set(total_records / elapsed)
        metrics.BATCHES.labels(group).inc()
        fallbacks = self.plugin_stats.fallbacks
        if fallbacks > self._fallbacks_seen:
            metrics.ASSIGNOR_FALLBACKS.labels(group).inc(fallbacks - self._fallbacks_seen)
            self._fallbacks_seen = fallbacks

    async def _stage(self, topic: str, records: Sequence[Record] | pa.Table) -> object | None:
        """Stage ``records`` if the sink stages; None if it does not, or if staging failed
        (then :meth:`_write` writes them whole, with retries)."""
        if self._stager is None:
            return None
        try:
            if isinstance(records, pa.Table):
                if not isinstance(self._stager, ColumnarStagingSink):
                    return None  # written whole by write_columns
                return await self._stager.stage_columns(topic, records)
            return await self._stager.stage(topic, records)
        except Exception as exc:
            metrics.WRITE_RETRIES.labels(self.config.group, topic).inc()
            log.warning("staging %d records of %s failed (%r)", len(records), topic, exc)
            return None

    async def _discard(self, staged: object | None) -> None:
        """Drop a staged batch; a failure only leaves files the sink cleans up later."""
        if staged is None or self._stager is None:
            return
        try:
            await self._stager.discard(staged)
        except Exception as exc:
            log.warning("discarding a staged batch failed (%r)", exc)

    async def _write(
        self, topic: str, records: Sequence[Record] | pa.Table, staged: object | None
    ) -> frozenset[TopicPartition]:
        """Publish ``staged`` (or write ``records`` if nothing is staged); on failure write
        them again, with backoff, until they are in or a stop is requested. Returns the
        partitions the sink refused as claimed by another member (not retried)."""
        delays = iter(self.retry.delays())
        while True:
            try:
                if staged is not None and self._stager is not None:
                    await self._stager.publish(staged)
                elif isinstance(records, pa.Table):
                    assert self._table_sink is not None
                    await self._table_sink.write_columns(topic, records)
                else:
                    await self.sink.write(topic, records)
                return frozenset()
            except PartitionsFenced as fenced:
                return fenced.partitions
            except Exception as exc:
                await self._discard(staged)
                staged = None  # retries write the records whole
                if self._stopping.is_set():
                    self._abandoned = True
                    raise WriteAbandoned(
                        f"write of {len(records)} records of {topic} failed at shutdown: {exc!r}"
                    ) from exc
                delay = next(delays)
                metrics.WRITE_RETRIES.labels(self.config.group, topic).inc()
                log.warning(
                    "sink write of %d records of %s failed (%r); retry in %.1f s",
                    len(records),
                    topic,
                    exc,
                    delay,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)

    async def _commit(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        """Commit ``offsets`` plus earlier ones that failed (of partitions still ours)."""
        consumer = self._consumer
        owned = {KafkaTopicPartition(tp.topic, tp.partition) for tp in self.assigned}
        wanted = {tp: o for tp, o in {**self._uncommitted, **offsets}.items() if tp in owned}
        self._uncommitted = {}
        if consumer is None or not wanted:
            return
        if getattr(consumer._coordinator, "rejoining", False):
            # A cooperative rejoin is in flight: brokers refuse commits until it completes.
            self._uncommitted = wanted
            return
        try:
            await consumer.commit(wanted)
        except (KafkaError, AssertionError) as exc:
            # Typically a rebalance in progress: retried when idle; a next owner resumes
            # from the sink's stored offsets (or re-reads from the last commit).
            self._uncommitted = {**wanted, **self._uncommitted}
            metrics.COMMIT_FAILURES.labels(self.config.group).inc()
            log.warning("offset commit failed (%r); will retry", exc)

    async def _commit_before_leaving(self) -> None:
        """Commit what is still uncommitted (deferred during a rejoin, or failed) before the
        member leaves, so the next owners do not read it again. Waits for a rejoin in flight
        and retries, for at most one session timeout."""
        consumer = self._consumer
        deadline = time.monotonic() + self.config.session_timeout_ms / 1000
        while self._uncommitted and consumer is not None and time.monotonic() < deadline:
            if getattr(consumer._coordinator, "rejoining", False):
                await asyncio.sleep(0.05)  # the coordinator task completes the join
                continue
            await self._commit({})
            if self._uncommitted:
                await asyncio.sleep(0.1)
        if self._uncommitted:
            log.warning(
                "leaving with %d partition(s) uncommitted: their next owners read the last "
                "batch again (the sink's stored offsets keep a table exactly once)",
                len(self._uncommitted),
            )

    def _check_overload(self) -> None:
        """Ask the group for a re-plan when this member stays above its capacity (the
        speeds of its partitions in the latest fresh snapshot)."""
        view = self.snapshots.view() if self.overload is not None else None
        if view is None or self.overload is None or not self.assigned:
            return
        load = sum(view.speeds.get(tp, 0.0) for tp in self.assigned)
        coordinator: Any = getattr(self._consumer, "_coordinator", None)
        if self.overload.observe(time.monotonic(), load) and coordinator is not None:
            self.replans_requested += 1
            metrics.REPLANS.labels(self.config.group).inc()
            log.info(
                "load %.0f above capacity %.0f for %.0f s: asking the group to re-plan",
                load,
                self.config.capacity,
                self.config.replan_after_secs,
            )
            coordinator.request_rejoin()

    # rebalance callbacks -------------------------------------------------------------------
    async def _on_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        self._revoking |= revoked
        for ktp in revoked:
            self._resuming.pop(ktp, None)
        async with self._lock:
            try:
                await self._settle_writes()  # they may hold records of revoked partitions
                await self._flush(set(revoked))
            except WriteAbandoned as exc:
                log.error("%s", exc)
            await self._settle_commit()  # the next owner starts from these offsets
            if revoked & self._uncommitted.keys():  # written earlier, commit deferred
                await self._commit({})
            for tp in revoked:  # records we could not write go back to the next owner
                self._pending.drop(tp)
        self._revoking -= revoked
        self._change_ownership(
            "revoked", {TopicPartition(tp.topic, tp.partition) for tp in revoked}
        )

    def _change_ownership(self, kind: str, partitions: set[TopicPartition]) -> None:
        """Add (``assigned``) or remove (``revoked``) partitions, and log the change."""
        if kind == "assigned":
            self.assigned |= partitions
        else:
            self.assigned -= partitions
        if partitions:
            event = OwnershipEvent(
                time.monotonic(), kind, frozenset(partitions), self.state.generation
            )
            self.ownership_log.append(event)

    async def _on_assigned(self, assigned: set[KafkaTopicPartition]) -> None:
        consumer = self._consumer
        coordinator: Any = getattr(consumer, "_coordinator", None)
        if coordinator is not None:
            self.state.generation = int(coordinator.generation)
        added = {TopicPartition(tp.topic, tp.partition) for tp in assigned}
        self._change_ownership("assigned", added)
        if consumer is None or not assigned:
            return
        # Records of these partitions must not reach a batch before the seek: paused until
        # the sink has said where each resumes (a table's history can take seconds).
        consumer.pause(*assigned)
        assignment = object()
        for ktp in assigned:
            self._resuming[ktp] = assignment
        task = asyncio.create_task(self._resume_assigned(consumer, assigned, assignment))
        self._resume_tasks.add(task)
        task.add_done_callback(self._resume_tasks.discard)

    async def _resume_assigned(
        self, consumer: AIOKafkaConsumer, assigned: set[KafkaTopicPartition], assignment: object
    ) -> None:
        """Seek the partitions of one assignment past what the sink holds, then resume the
        ones still ours; retried with backoff while the sink cannot answer (the partitions
        stay paused meanwhile: reading them from the committed offsets could duplicate)."""
        delays = iter(self.retry.delays())
        while True:
            mine = {
                ktp
                for ktp in assigned
                if self._resuming.get(ktp) is assignment and ktp in consumer.assignment()
            }
            client_replaced = self._consumer is not consumer  # closed or restarted
            if not mine or client_replaced:
                return
            try:
                await self._seek_past_stored(consumer, mine)
                break
            except Exception as exc:  # the sink's or Kafka's; the partitions wait
                delay = next(delays, self.retry.max_delay_s)
                metrics.RESUME_LOOKUP_FAILURES.labels(self.config.group).inc()
                log.warning(
                    "looking up where %d partition(s) resume failed (%r); retrying in %.1f s",
                    len(mine),
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        # Only partitions still ours under this assignment: a newer one resumes its own.
        ready = [
            ktp
            for ktp in mine
            if self._resuming.get(ktp) is assignment and ktp in consumer.assignment()
        ]
        for ktp in ready:
            del self._resuming[ktp]
        consumer.resume(*ready)

    async def _seek_past_stored(
        self, consumer: AIOKafkaConsumer, assigned: set[KafkaTopicPartition]
    ) -> None:
        """Seek each new partition past what the sink already holds of it."""
        added = {TopicPartition(tp.topic, tp.partition) for tp in assigned}
        stored = await self.sink.resume_offsets(sorted(added))
        for tp, next_offset in stored.items():
            ktp = KafkaTopicPartition(tp.topic, tp.partition)
            if ktp not in assigned:
                continue
            committed = await consumer.committed(ktp)
            if committed is None or next_offset > committed:
                log.info(
                    "%s:%d resumes at %d (sink holds data past committed %s)",
                    tp.topic,
                    tp.partition,
                    next_offset,
                    committed,
                )
                consumer.seek(ktp, next_offset)
                self._pending.drop(ktp)  # anything read before the pause took hold
                self._uncommitted[ktp] = next_offset  # Kafka catches up with the table
