"""The drop-in consumer: group membership packed by write speed, batches into a sink.

Loop (the paper's Fig. 4): fetch until ``batch_bytes``, ``wait_time_secs`` or the freshness
bound; group the records by topic; write each topic's records to the sink concurrently;
commit offsets only after every write of the batch succeeded. A failing write is retried
with backoff and never committed past. When partitions are revoked, a sink that fences lost
partitions lets them go at once (their writes in flight finish meanwhile; the next owner
reads the rest again); otherwise their pending records are written and committed first.
SIGTERM (with :meth:`AutoscalingConsumer.run`): flush, commit, leave the group.

Batches are written while the next one fills. With a :class:`~consumer_sdk.sink.StagingSink`
up to ``writes_in_flight`` batches are in the sink at once: a batch stages while the one
before it is still being written, and publishes (then commits) only after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from assignor.cooperative import COOPERATIVE
from assignor.plugin import MemberState, PluginStats, build_assignor
from consumer_sdk import metrics
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.health import ConsumerHealth, register, unregister
from consumer_sdk.kafka_client import group as membership
from consumer_sdk.kafka_client.columnar_fetch import BoundedRecords, ColumnarDecoding, install
from consumer_sdk.kafka_client.cooperative import is_cooperative, make_cooperative
from consumer_sdk.kafka_client.fetch_budget import limit_fetch_ahead, wake_fetcher
from consumer_sdk.kafka_client.properties import aiokafka_properties
from consumer_sdk.loop_watch import LoopStallWatch
from consumer_sdk.pipeline.commit import OffsetCommits
from consumer_sdk.pipeline.drain import DrainMeter, backlog_behind
from consumer_sdk.pipeline.fetch import AnyPending, BatchFiller
from consumer_sdk.pipeline.markers import offsets_past_markers
from consumer_sdk.pipeline.recreated import TopicIdentityWatch
from consumer_sdk.pipeline.resume import ResumeLookups
from consumer_sdk.pipeline.retry import RetryPolicy
from consumer_sdk.pipeline.stuck import StuckPartitions
from consumer_sdk.pipeline.write import BatchWriter, WriteAbandoned, WrittenBatch
from consumer_sdk.records.corrupt_fetches import CORRUPT_FETCHES
from consumer_sdk.records.fetch_sizes import (
    PARTITION_FETCH_BYTES,
    fetch_ahead_room,
    fetch_max_bytes,
)
from consumer_sdk.records.pending import PendingRecords
from consumer_sdk.records.pending_columns import PendingColumns
from consumer_sdk.records.record_columns import DEFAULT_PIECE_BYTES
from consumer_sdk.sink import FencingSink, ManagedSink, PreparingSink, Sink
from consumer_sdk.snapshot_cache import SnapshotCache
from consumer_sdk.stopping import run_until_signalled
from consumer_sdk.warmup import warm_record_path
from contract.errors import first_line
from contract.kafka_client.topic_ids import consumer_topic_ids
from contract.overload import OverloadWatch, replan_can_help
from contract.refusals import Refusal, refusal
from contract.settings import ConfigError
from contract.stopping import finished_unless_stopped, sleep_unless_stopped

__all__ = ["AutoscalingConsumer", "OwnershipEvent", "RetryPolicy", "WriteAbandoned"]

log = logging.getLogger(__name__)
# How long a member whose partitions were handed over in one round waits before leaving
# (see close): longer than the spread of members' SyncGroup requests on a busy machine.
LEAVE_AFTER_HANDOVER_S = 0.5
# A fetch position is known at once for a partition being read; a wait past this is a reset
# in progress, and the next idle round asks again.
POSITION_WAIT_S = 1.0


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

    async def on_partitions_lost(self, lost: set[KafkaTopicPartition]) -> None:
        self._owner._on_lost(lost)


class AutoscalingConsumer:
    """An asyncio Kafka consumer whose group is packed by write speed; see module doc.

    It owns the client's lifecycle and the group's side (rebalance callbacks, leaving,
    overload re-plans) and wires the pipeline's stages (:mod:`consumer_sdk.pipeline`):
    fetch -> write -> commit, with new partitions held by the resume stage."""

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
            releases=config.handover == "one-round",
            rack=config.client_rack,
            follower_fetching=config.rack_locality == "replicas",
        )
        self.plugin_stats = PluginStats()
        self.snapshots = SnapshotCache(
            config.bootstrap_servers,
            config.snapshot_topic,
            config.group,
            config.snapshot_max_age_secs,
            client_options=config.kafka_client_options(),
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._columnar = config.record_path == "columns"
        # Revoked partitions are given up without writing them first (see _release).
        self._releases_revoked = (
            config.revoke_mode == "release"
            and isinstance(sink, FencingSink)
            and sink.fences_lost_partitions()
        )
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._window_started = time.monotonic()
        self._plugin_counts_seen: dict[str, int] = {}
        self.assigned: set[TopicPartition] = set()
        # Of ``assigned``, those this member reads (resumed, not waiting for a release or
        # for the sink): what the ownership log counts.
        self._reading: set[TopicPartition] = set()
        self._stuck = StuckPartitions()
        # Partitions lost with the membership, until the next assignment (_on_lost).
        self._lost: set[KafkaTopicPartition] = set()
        # the pipeline's stages
        pending: AnyPending = PendingColumns() if self._columnar else PendingRecords()
        self._fetch = BatchFiller(
            pending,
            group=config.group,
            batch_bytes=config.batch_bytes,
            wait_time_secs=config.wait_time_secs,
            staleness_bound_s=config.staleness_bound_s,
            rewound=lambda ktp, first: self._identity.rewound(ktp, first),
        )
        self.drain = DrainMeter()
        self._commits = OffsetCommits(
            config.group, lambda: self._consumer, self._owned, self._capacity_report
        )
        self._writer = BatchWriter(
            sink,
            self._commits,
            group=config.group,
            writes_in_flight=config.writes_in_flight,
            retry=self.retry,
            stopping=self._stopping,
            on_written=self._account,
            on_taken=self._reclaim,
            # A write that ends frees a slot, so the fetch ahead may grow (_fetch_ahead_room).
            on_slot_free=lambda: wake_fetcher(self._consumer),
        )
        self._resume = ResumeLookups(
            sink,
            pending,
            self._commits,
            group=config.group,
            retry=self.retry,
            current_client=lambda: self._consumer,
            wait_for_writes=self._writer.drain,
            committed_marks=self._committed_marks,
            declared_unread=self._declared_unread,
            on_released=self._released_to_us,
            release_timeout_s=config.max_poll_interval_ms / 1000,
            on_reading=self._started_reading,
            topic_ids=lambda topics: self._identity.topic_ids(topics),
        )
        self._identity = TopicIdentityWatch(
            group=config.group,
            client=lambda: self._consumer,
            fetch_ids=consumer_topic_ids,
            holds=lambda partitions: bool(pending.first_offsets(partitions)),
            wait_for_writes=self._writer.drain,
            read_again=lambda client, partitions: self._resume.start(client, partitions),
            read_from=self._fetch.read_from,
            waiting=lambda: self._resume.waiting,
            from_earliest=config.auto_offset_reset == "earliest",
            retry=self.retry,
        )
        self.ownership_log: deque[OwnershipEvent] = deque(maxlen=10_000)
        self.overload = (
            OverloadWatch(config.capacity, sustain_s=config.replan_after_secs)
            if config.replan_after_secs > 0
            else None
        )
        self.replans_requested = 0
        self.loop_watch = LoopStallWatch(config.group, config.session_timeout_ms / 1000)
        self.health = ConsumerHealth(
            config.group, self.loop_watch.silent_s, config.session_timeout_ms / 1000
        )
        # When the hand-over of our partitions on stop must end (None: not stopping yet).
        self._leave_deadline: float | None = None
        # How this member left its group (handed_over, timed_out, at_once); None until then.
        self.leave_outcome: str | None = None

    @property
    def _pending(self) -> AnyPending:
        return self._fetch.pending

    def _owned(self) -> set[KafkaTopicPartition]:
        return {KafkaTopicPartition(tp.topic, tp.partition) for tp in self.assigned}

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Serve metrics if configured, start the sink, read the latest speed snapshot, join."""
        register(self.health)
        if self.config.metrics_port is not None:
            metrics.serve(self.config.metrics_port)
        self.loop_watch.start()
        # First-use costs (imports, the native decoder) off the loop, before there is a
        # group whose heartbeats they would delay (consumer_sdk.warmup).
        await asyncio.to_thread(warm_record_path, self._columnar)
        if not await self._start_sink():
            return  # a stop came first
        await self.snapshots.start()
        await self._start_client()

    async def _start_sink(self) -> bool:
        """Start the sink and make its tables, before joining (a slow start would stall
        assignments). A failure other than a configuration error (its Spark Connect server
        not up yet) is logged in one line and retried with back-off until it works (True)
        or a stop is requested (False)."""
        delays = iter(self.retry.delays())
        while not self._stopping.is_set():
            try:
                if isinstance(self.sink, ManagedSink):
                    await self.sink.start()
                if isinstance(self.sink, PreparingSink):
                    await self.sink.prepare(self.config.topics)
                self.health.report("sink", None)
                return True
            except ConfigError:
                raise
            except Exception as exc:
                delay = next(delays)
                metrics.SINK_START_FAILURES.labels(self.config.group).inc()
                self.health.report("sink", f"the sink cannot start: {first_line(exc)}")
                log.warning(
                    "starting the sink failed (%s); retrying in %.1f s", first_line(exc), delay
                )
                await sleep_unless_stopped(self._stopping, delay)
        return False

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
                self._show_refusal(None)
                if self.state.cooperative:
                    coordinator = make_cooperative(consumer, self.state)
                    if self.state.handover_pending:
                        # Our first join was answered by aiokafka's own coordinator, which
                        # knows nothing of hand-over rounds: join the one announced.
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
            why = await self._explain(failure)
            if why is None:  # a stop came while finding out why
                return
            delay = next(delays)
            log.warning(
                "joining group %s failed: %s; retrying in %.1f s", self.config.group, why, delay
            )
            await sleep_unless_stopped(self._stopping, delay)

    async def _explain(self, failure: BaseException | None) -> str | None:
        """One line saying why joining failed, naming the setting to check (a refused
        connection is diagnosed by connecting once more); None if a stop came first."""
        if failure is None:
            return "no assignment before the stop"
        config = self.config
        finding = asyncio.create_task(
            refusal(failure, config.bootstrap_servers, config, config.kafka_client_options())
        )
        if not await finished_unless_stopped(finding, self._stopping):
            return None
        found = finding.result()
        self._show_refusal(found)
        return found.line

    def _show_refusal(self, found: Refusal | None) -> None:
        self.health.report("kafka", None if found is None else found.line)
        metrics.flag_refusal(self.config.group, found)

    def _new_client(self) -> AIOKafkaConsumer:
        config = self.config
        # Fetched bytes stay readable (the fetch budget counts them); with the COLUMNAR key
        # deserializer aiokafka's fetcher also decodes them into columns.
        install()
        assignor = build_assignor(
            self.state,
            self.snapshots.view,
            self.plugin_stats,
            leader_delay_s=config.leader_delay_secs,
        )
        tuned = aiokafka_properties(config.kafka_properties)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap_servers,
            group_id=config.group,
            client_id=config.kafka_client_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            isolation_level=config.isolation_level,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            # How long the coordinator waits for members to rejoin a round: aiokafka's
            # default is the session timeout, too short for a member that flushes and
            # commits its revoked partitions first (a sink write); the round would
            # complete without it and its commits fail with UnknownMemberId. As Kafka's
            # Java consumer: the poll interval. A dead member still goes after its session.
            rebalance_timeout_ms=config.max_poll_interval_ms,
            fetch_max_wait_ms=tuned.pop("fetch_max_wait_ms", 100),
            client_rack=config.client_rack,
            # Whole producer batches per partition; what the client holds ahead stays about a
            # quarter batch through the fetch budget (_change_ownership), not small asks.
            max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
            fetch_max_bytes=config.fetch_max_bytes or fetch_max_bytes(config.batch_bytes),
            partition_assignment_strategy=(assignor,),
            key_deserializer=(
                ColumnarDecoding(
                    config.max_record_batch_bytes, min(DEFAULT_PIECE_BYTES, config.batch_bytes)
                )
                if self._columnar
                else BoundedRecords(config.max_record_batch_bytes)
            ),
            **config.kafka_client_options(),
            **tuned,
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
                await self._fetch.fill(
                    lambda: self._consumer,
                    self._keep_reading,
                    self._stopping,
                    sink_busy=self._writer.busy,
                    write_time_s=self._writer.recent_write_s,
                )
                # Batches are written while the next one fills (Spark works outside the
                # GIL); they still land and commit in order.
                with contextlib.suppress(WriteAbandoned):  # only at shutdown
                    await self._writer.settle(keep=self._writer.depth - 1)
                async with self._lock:
                    batch = self._pending.take(limit=self.config.batch_bytes)
                    if batch:
                        batch.behind = self._behind(batch.next_offsets())
                        self._writer.submit(batch)
                        wake_fetcher(self._consumer)  # the next batch has room again
                    await self._owe_past_markers()
                    self._hold_stuck()
                    if not batch and self._commits.uncommitted:
                        await self._commits.submit({})
                self._check_overload()
        finally:
            await self.close()

    def run(self) -> None:
        """Blocking run for non-async apps; SIGTERM and SIGINT stop it gracefully."""
        run_until_signalled(self.request_stop, self.run_async)

    def _keep_reading(self) -> bool:
        """True until a stop is requested; then, while a cooperative member hands its
        partitions over to the others (it reads them meanwhile), for at most
        ``leave_handover_secs``."""
        if not self._stopping.is_set():
            return True
        if self._leave_deadline is None:
            self._leave_deadline = self._begin_leave()
        handing_over = bool(self.assigned) and not self._writer.abandoned
        return handing_over and time.monotonic() < self._leave_deadline

    def _begin_leave(self) -> float:
        """Rejoin once more as a leaving member, so the leader moves our partitions while we
        still read them; the deadline of that hand-over (now, when there is nothing to hand
        over or the group does not rebalance cooperatively)."""
        now = time.monotonic()
        if (
            self.config.leave_handover_secs <= 0
            or not self.assigned
            or not is_cooperative(self._consumer)
            or self.state.group_mode != COOPERATIVE
        ):
            return now
        self.state.leaving = True
        membership.request_rejoin(self._consumer)
        log.info(
            "stopping: handing %d partition(s) over to the rest of group %s before leaving",
            len(self.assigned),
            self.config.group,
        )
        return now + self.config.leave_handover_secs

    async def close(self) -> None:
        """Flush what is pending (best effort), commit, leave the group, stop readers."""
        self._stopping.set()
        await self._resume.close()
        await self._identity.close()
        consumer = self._consumer
        if consumer is not None:
            async with self._lock:
                with contextlib.suppress(WriteAbandoned):
                    await self._writer.settle()
                    await self._flush(None)
                await self._commits.settle()
                await self._commits.before_leaving(self.config.session_timeout_ms / 1000)
            self._count_leave()
            if self.leave_outcome == "handed_over" and self.state.one_round:
                # The round that took our partitions gave them on at once: a LeaveGroup now
                # would start a new round before slower members' SyncGroup of that one
                # reached the coordinator, and they would miss it (another round). Our
                # partitions are released already, so waiting delays nobody's reading.
                await asyncio.sleep(LEAVE_AFTER_HANDOVER_S)
            # Only now: the commits above go through this client.
            self._consumer = None
            self._change_ownership("revoked", set(self.assigned))
            await consumer.stop()  # sends LeaveGroup
        await self.snapshots.stop()
        if isinstance(self.sink, ManagedSink):
            await self.sink.close()
        await self.loop_watch.stop()
        unregister(self.health)

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

    async def _flush(self, partitions: set[KafkaTopicPartition] | None) -> None:
        """Write pending records of ``partitions`` (all if None) and commit them.

        Caller holds ``self._lock``. Raises WriteAbandoned if a write kept failing until
        shutdown; then nothing of this batch is committed.
        """
        batch = self._pending.take(partitions)
        if batch:
            await self._writer.write(batch)

    def _idle(self) -> set[KafkaTopicPartition]:
        """Partitions this member reads whose every record before the fetch position is
        written: nothing pending, no write in flight holding them, not being revoked or
        looked up, nothing of them refused by the sink."""
        reading = {KafkaTopicPartition(tp.topic, tp.partition) for tp in self._reading}
        busy = (
            self._writer.holding()
            | self._fetch.revoking
            | self._resume.waiting
            | self._commits.refused()
            | self._pending.first_offsets(reading).keys()
        )
        return reading - busy

    async def _owe_past_markers(self) -> None:
        """Owe the fetch position of idle partitions whose commits stop short of it: what
        lies between is transaction markers or aborted batches (:mod:`.pipeline.markers`).
        Caller holds ``self._lock``."""
        consumer = self._consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        positions: dict[KafkaTopicPartition, int] = {}
        for tp in sorted(self._idle() & assigned):
            with contextlib.suppress(KafkaError, TimeoutError):
                positions[tp] = await asyncio.wait_for(consumer.position(tp), POSITION_WAIT_S)
        # A rebalance may have run during the waits: owe only what is still idle.
        still = self._idle()
        owed = offsets_past_markers(
            {tp: o for tp, o in positions.items() if tp in still}, self._commits.known
        )
        for tp, offset in owed.items():
            self._commits.owe(tp, offset)

    def _hold_stuck(self) -> None:
        """Partitions whose fetches keep failing at one offset: on /healthz and a metric,
        and paused between tries (:mod:`.pipeline.stuck`)."""
        consumer = self._consumer
        if consumer is None:
            return
        stuck = {
            KafkaTopicPartition(topic, partition): failure
            for (topic, partition), failure in CORRUPT_FETCHES.stuck().items()
        }
        owned = self._owned()
        line = self._stuck.step(consumer, stuck, owned, self._resume.waiting)
        self.health.report("records", line)
        metrics.PARTITIONS_STUCK.labels(self.config.group).set(len(stuck.keys() & owned))

    def _account(self, flushed: WrittenBatch) -> None:
        group = self.config.group
        total_bytes = total_records = 0
        for tp, count in flushed.records.items():
            size = flushed.sizes[tp]
            total_bytes += size
            total_records += count
            metrics.RECORDS.labels(group, tp.topic, str(tp.partition)).inc(count)
            metrics.BYTES.labels(group, tp.topic, str(tp.partition)).inc(size)
        now = time.monotonic()
        if flushed.sink_done > 0:
            self.drain.busy(flushed.sink_started, flushed.sink_done, total_records)
            metrics.DRAIN_BUSY.labels(group).set(self.drain.busy_records_per_s)
        if self.drain.written(now, total_records, total_bytes, flushed.saturated):
            metrics.DRAIN_MEASURED.labels(group).set(self.drain.records_per_s)
        elapsed = max(1e-6, now - self._window_started)
        self._window_started = now
        metrics.THROUGHPUT.labels(group).set(total_bytes / elapsed)
        metrics.THROUGHPUT_RECORDS.labels(group).set(total_records / elapsed)
        metrics.BATCHES.labels(group).inc()
        for name, counter in metrics.PLUGIN_COUNTERS.items():
            count, seen = getattr(self.plugin_stats, name), self._plugin_counts_seen.get(name, 0)
            if count > seen:
                counter.labels(group).inc(count - seen)
                self._plugin_counts_seen[name] = count

    def _behind(self, next_offsets: Mapping[KafkaTopicPartition, int]) -> int:
        """Records waiting in Kafka behind a batch being cut (its partitions' high
        watermarks, as the last fetch responses gave them)."""
        client = self._consumer
        if client is None:
            return 0
        return backlog_behind({tp: client.highwater(tp) for tp in next_offsets}, next_offsets)

    def _capacity_report(self) -> str:
        """What every offset commit carries: this member's drain measurement."""
        member = membership.member_id(self._consumer)
        if not member:  # not joined yet
            return ""
        return self.drain.report(member, self._commits.attempts).encode()

    def _check_overload(self) -> None:
        """Ask the group for a re-plan when this member stays above its capacity (the
        speeds of its partitions in the latest fresh snapshot)."""
        view = self.snapshots.view() if self.overload is not None else None
        if view is None or self.overload is None or not self.assigned:
            return
        load = sum(view.speeds.get(tp, 0.0) for tp in self.assigned)
        capacity = view.capacity or self.config.capacity  # measured, when the sidecar says
        now = time.monotonic()
        if not self.overload.observe(now, load, capacity) or not membership.joined(self._consumer):
            return
        members = self.state.group_size
        if not replan_can_help(view.speeds, capacity, members, self.config.heuristic):
            metrics.REPLANS_SKIPPED.labels(self.config.group).inc()
            log.info(
                "load %.0f above capacity %.0f, but the speeds need more than the group's %s "
                "member(s): no re-plan (the sidecar scales up)",
                load,
                capacity,
                members,
            )
            return
        self.overload.asked(now)
        self.replans_requested += 1
        metrics.REPLANS.labels(self.config.group).inc()
        over_s, owed_s = self.overload.asked_after
        log.info(
            "load %.0f above capacity %.0f for %.0f s (its records %.1f s later): asking the "
            "group to re-plan",
            load,
            capacity,
            over_s,
            owed_s,
        )
        membership.request_rejoin(self._consumer)

    # rebalance callbacks -------------------------------------------------------------------
    async def _on_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        lost = {TopicPartition(tp.topic, tp.partition) for tp in revoked}
        self._stopped_reading(lost)
        # Still waiting for their old owner's release: this member never read them, and
        # the leader, told so, gave them on without waiting for this member.
        unread = revoked & self._resume.awaiting_release
        self._resume.forget(revoked)
        if self._releases_revoked:
            self._release(revoked)
        else:
            await self._flush_revoked(revoked, unread)
        self._commits.disown(revoked)
        self._change_ownership("revoked", lost)

    def _on_lost(self, lost: set[KafkaTopicPartition]) -> None:
        """The coordinator no longer knows this member: ``lost`` may be another member's
        already. Nothing more of them is written or committed: their pending records are
        dropped, what is owed of them forgotten, and what is fetched of them until the next
        assignment is not taken. Writes in flight finish (a fencing sink refuses them once
        the new owner has claimed the partitions; their commits are not made)."""
        gone = {TopicPartition(tp.topic, tp.partition) for tp in lost}
        self._stopped_reading(gone)
        self._resume.forget(lost)
        for tp in lost:
            self._pending.drop(tp)
        self._lost |= lost
        self._fetch.revoking |= lost  # fetched records of them are not taken until then
        self._commits.disown(lost)
        self._change_ownership("revoked", gone)
        metrics.PARTITIONS_LOST.labels(self.config.group).inc(len(lost))

    def _release(self, revoked: set[KafkaTopicPartition]) -> None:
        """Give ``revoked`` up at once, so the rebalance round waits for no table write.

        Their records not yet handed to a write are dropped: the next owner reads them
        again. Writes in flight that hold some of them finish meanwhile; the sink fences
        them (:class:`~consumer_sdk.sink.FencingSink`): each lands before the next owner's
        claim, which then resumes past it, or is refused. Nothing of them is committed by
        this member from now on: the next owner commits what its resume finds.
        """
        for tp in revoked:
            self._pending.drop(tp)
        self._commits.forget(revoked)
        metrics.PARTITIONS_RELEASED.labels(self.config.group).inc(len(revoked))

    def _reclaim(self, taken: set[KafkaTopicPartition]) -> None:
        """Claim again the partitions of ``taken`` the group still gives this member, and
        resume them from where the sink is (as for a new assignment).

        Another writer's claim overwrote this member's: one that lost them while its own
        claim waited for a lock and finished late, or one paused past its session. Without
        this, every batch of them would be fenced until the next rebalance moved them, and
        nobody would write them meanwhile."""
        consumer = self._consumer
        owned = {
            ktp
            for ktp in taken
            if TopicPartition(ktp.topic, ktp.partition) in self.assigned
            and ktp not in self._resume.waiting
        }
        if consumer is None or not owned:
            return
        for ktp in owned:
            self._pending.drop(ktp)  # read under the lost claim: read again after the seek
        metrics.PARTITIONS_RECLAIMED.labels(self.config.group).inc(len(owned))
        log.warning(
            "%d partition(s) of this member were claimed by another writer; claiming "
            "them again: %s",
            len(owned),
            ", ".join(f"{ktp.topic}:{ktp.partition}" for ktp in sorted(owned)),
        )
        self._resume.start(consumer, owned, rewind=True)

    async def _flush_revoked(
        self, revoked: set[KafkaTopicPartition], unread: set[KafkaTopicPartition]
    ) -> None:
        """Write and commit what this member holds of ``revoked`` before it rejoins; in a
        one-round hand-over, release them instead (see :meth:`_release_revoked`), except
        those of them it never read (``unread``): it has nothing of them to release."""
        self._fetch.revoking |= revoked
        asked = time.monotonic()
        try:
            async with self._lock:
                generation = membership.generation(self._consumer)
                # Only a cooperative member's partitions go to a new owner awaiting them.
                if self.state.releases and self.state.cooperative and generation is not None:
                    await self._release_revoked(revoked - unread, generation, asked)
                else:
                    await self._write_revoked(revoked)
        finally:
            self._fetch.revoking_ended(revoked)

    async def _write_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        """Write and commit what is held of ``revoked`` (caller holds ``self._lock``)."""
        try:
            await self._writer.settle()  # they may hold records of revoked partitions
            await self._flush(set(revoked))
        except WriteAbandoned as exc:
            log.error("%s", exc)
        await self._commits.settle()  # the next owner starts from these offsets
        if self._commits.owes_any(revoked):  # written earlier, commit deferred
            await self._commits.commit({})
        for tp in revoked:  # records we could not write go back to the next owner
            self._pending.drop(tp)

    async def _release_revoked(
        self, revoked: set[KafkaTopicPartition], generation: int, asked: float
    ) -> None:
        """Release ``revoked`` to their next owners, given them in this round and holding
        them until the commit that marks them released (caller holds ``self._lock``, which
        it asked for at ``asked``, monotonic).

        Writes in flight finish first (they hold records of ``revoked``) and their commits
        land; what no write took yet is dropped, not written: its next owner reads it again
        from the released offset, instead of waiting for one more table write. The time
        each step took is logged: the next owners read none of ``revoked`` meanwhile."""
        stamps = [asked, time.monotonic()]
        try:
            await self._writer.settle()
            wrote_all = True
        except WriteAbandoned as exc:
            log.error("%s", exc)
            wrote_all = False
        # The commits before the release must not carry its mark (a write's commit says
        # nothing of the writes after it), hence the settle first.
        stamps.append(time.monotonic())
        await self._commits.settle()
        stamps.append(time.monotonic())
        self._commits.releasing(revoked, generation)
        unwritten = self._pending.first_offsets(revoked)
        for tp in revoked:
            self._pending.drop(tp)
        await self._commits.release(
            revoked,
            generation,
            wrote_all=wrote_all,
            unwritten=unwritten,
            skipped=self._fetch.skipped,
        )
        stamps.append(time.monotonic())
        if not revoked:
            return
        lock, writes, commits, release = (b - a for a, b in itertools.pairwise(stamps))
        log.info(
            "released %d partition(s) in generation %d after %.0f ms: the lock %.0f, writes "
            "in flight %.0f, commits in flight %.0f, the release commit %.0f",
            len(revoked),
            generation,
            (stamps[-1] - asked) * 1000,
            lock * 1000,
            writes * 1000,
            commits * 1000,
            release * 1000,
        )

    def _change_ownership(self, kind: str, partitions: set[TopicPartition]) -> None:
        """Add (``assigned``) or remove (``revoked``) partitions."""
        if kind == "assigned":
            self.assigned |= partitions
        else:
            self.assigned -= partitions
            self._stopped_reading(partitions)
        if self._consumer is not None:
            limit_fetch_ahead(self._consumer, self._fetch_ahead_room)

    def _started_reading(self, partitions: set[KafkaTopicPartition]) -> None:
        """The resume stage let ``partitions`` be read: log those this member did not read."""
        started = {TopicPartition(tp.topic, tp.partition) for tp in partitions} - self._reading
        started &= self.assigned
        if started:
            self._reading |= started
            self.state.awaiting = self.state.awaiting - started
            self._log_ownership("assigned", started)

    def _released_to_us(self, partitions: set[KafkaTopicPartition]) -> None:
        """Their old owner released them: the next join says this member reads them."""
        self.state.awaiting = self.state.awaiting - {
            TopicPartition(tp.topic, tp.partition) for tp in partitions
        }

    def _declared_unread(self) -> set[KafkaTopicPartition]:
        """What the join in progress told the leader this member does not read."""
        return {KafkaTopicPartition(tp.topic, tp.partition) for tp in self.state.declared_unread}

    async def _committed_marks(
        self, partitions: list[KafkaTopicPartition]
    ) -> dict[KafkaTopicPartition, tuple[int, str | None]]:
        """The group's committed offsets of ``partitions`` with their metadata."""
        return await membership.committed_marks(self._consumer, partitions)

    def _stopped_reading(self, partitions: set[TopicPartition]) -> None:
        """This member stops reading ``partitions`` (revoked, or left): log those it read."""
        stopped = partitions & self._reading
        if stopped:
            self._reading -= stopped
            self._log_ownership("revoked", stopped)

    def _log_ownership(self, kind: str, partitions: set[TopicPartition]) -> None:
        self.ownership_log.append(
            OwnershipEvent(time.monotonic(), kind, frozenset(partitions), self.state.generation)
        )

    def _fetch_ahead_room(self) -> int:
        """What the client may fetch ahead now: nothing beyond the batch being filled and
        the write slots free."""
        return fetch_ahead_room(
            self.config.batch_bytes, self._pending.bytes, self._writer.free_slots()
        )

    async def _on_assigned(self, assigned: set[KafkaTopicPartition]) -> None:
        consumer = self._consumer
        if self._lost:  # lost with an earlier membership: the join that lost them is done
            self._fetch.revoking_ended(self._lost)
            self._lost = set()
        if (generation := membership.generation(consumer)) is not None:
            self.state.generation = generation
        added = {TopicPartition(tp.topic, tp.partition) for tp in assigned}
        self._change_ownership("assigned", added)
        awaited = {KafkaTopicPartition(tp.topic, tp.partition) for tp in self.state.awaiting}
        if self._releases_revoked:
            # The sink fences: a new owner's claim stops the old owner's late writes, so
            # nothing waits for its release.
            awaited = set()
        self._resume.keep_awaiting(awaited)
        if consumer is not None and assigned:
            # Paused until the old owner released them (one-round hand-over) and the sink
            # says where each resumes; the listener returns at once.
            generation = self.state.generation
            self._resume.start(
                consumer, assigned, awaiting={ktp: generation for ktp in assigned & awaited}
            )
