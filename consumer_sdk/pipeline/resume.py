"""Resume stage: newly assigned partitions wait, paused, until the sink says where each
resumes; then each is sought past what the sink holds and resumed.

The lookup runs as a task of its own, not inside the rebalance listener: aiokafka sends no
heartbeats while a listener runs, and a table's history can take longer than the session
timeout to read. A lookup that fails is retried with backoff, and the partitions stay paused
meanwhile (reading them from the committed offsets could write rows the sink already has).
Before it asks, it waits for this member's writes in flight that hold records of those
partitions (``wait_for_writes``): asking claims them anew for a fencing sink, and those
records were read under the claim being replaced.

Before that, a partition given in a one-round hand-over (:func:`assignor.cooperative.
give_moving`) waits for its old owner: the group's committed offsets are read every
``RELEASE_POLL_S`` until its commit carries the release mark of the hand-over's generation
or later, and the partition is then sought to that offset. The wait also ends when a later
assignment no longer says it awaits a release (:meth:`ResumeLookups.keep_awaiting`: the old
owner rejoined without it, so its last commit is in), or after ``release_timeout_s``; the
partition then reads from the committed offset as it is.

A release seen while this member's join is in progress does not count for a partition the
join said it does not read (``declared_unread``): the leader may give it on without
waiting for this member, so reading it now would read what its next owner reads too. It
waits for that round: revoked, it was never read; kept, it reads from the committed offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from assignor.cooperative import released_generation
from consumer_sdk import metrics
from consumer_sdk.pipeline.commit import OffsetCommits
from consumer_sdk.pipeline.fetch import AnyPending
from consumer_sdk.pipeline.retry import RetryPolicy
from consumer_sdk.sink import Sink, TopicIdentitySink

log = logging.getLogger(__name__)
# How often a partition awaiting its old owner's release looks at the committed offsets: a
# tenth of a typical commit's round trip under load, and one small request per member.
RELEASE_POLL_S = 0.01

CommittedMarks = Callable[
    [list[KafkaTopicPartition]], Awaitable[Mapping[KafkaTopicPartition, tuple[int, str | None]]]
]
"""Reads the group's committed offsets with their metadata (offset -1: none committed)."""


class ResumeClient(Protocol):
    """What the stage needs of the Kafka client (aiokafka's consumer has it)."""

    def assignment(self) -> set[KafkaTopicPartition]:
        """The partitions assigned now."""

    def pause(self, *partitions: KafkaTopicPartition) -> None:
        """Stop fetching ``partitions``."""

    def resume(self, *partitions: KafkaTopicPartition) -> None:
        """Fetch ``partitions`` again."""

    def seek(self, partition: KafkaTopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""

    async def committed(self, partition: KafkaTopicPartition) -> Any:
        """The group's committed offset of ``partition`` (None if none)."""

    async def seek_to_beginning(self, *partitions: KafkaTopicPartition) -> Any:
        """Read ``partitions`` from their first offset next."""


class ResumeLookups:
    """Holds new partitions paused until the sink has said where they resume."""

    def __init__(
        self,
        sink: Sink,
        pending: AnyPending,
        commits: OffsetCommits,
        *,
        group: str,
        retry: RetryPolicy,
        current_client: Callable[[], object],
        wait_for_writes: Callable[[set[KafkaTopicPartition]], Awaitable[None]] | None = None,
        committed_marks: CommittedMarks | None = None,
        release_timeout_s: float = 300.0,
        on_reading: Callable[[set[KafkaTopicPartition]], None] | None = None,
        declared_unread: Callable[[], Collection[KafkaTopicPartition]] = frozenset,
        on_released: Callable[[set[KafkaTopicPartition]], None] = lambda released: None,
        topic_ids: Callable[[Sequence[str]], Awaitable[Mapping[str, str]]] | None = None,
    ) -> None:
        self._sink = sink
        self._topic_ids = topic_ids
        self._declared_unread = declared_unread
        self._on_released = on_released
        self._committed_marks = committed_marks
        self._release_timeout_s = release_timeout_s
        self._on_reading = on_reading
        # Partition -> the generation from which a release mark counts (see the module doc).
        self._released_since: dict[KafkaTopicPartition, int] = {}
        self._wait_for_writes = wait_for_writes
        self._pending = pending
        self._commits = commits
        self._group = group
        self._retry = retry
        self._current_client = current_client
        # The value names the assignment that paused a partition: a lookup only seeks and
        # resumes the partitions whose assignment it serves (a newer one resumes its own).
        self._waiting: dict[KafkaTopicPartition, object] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> frozenset[KafkaTopicPartition]:
        """Partitions paused until their lookup answers."""
        return frozenset(self._waiting)

    @property
    def awaiting_release(self) -> frozenset[KafkaTopicPartition]:
        """Partitions held until their old owner's release."""
        return frozenset(self._released_since)

    def start(
        self,
        client: ResumeClient,
        assigned: set[KafkaTopicPartition],
        *,
        rewind: bool = False,
        awaiting: Mapping[KafkaTopicPartition, int] | None = None,
    ) -> None:
        """Pause ``assigned`` and look up where they resume (returns at once).

        ``rewind``: partitions this member has been reading (claimed again after another
        writer's claim): their position is past records it dropped, so each goes back to
        where the sink is, else to the group's committed offset, else to its beginning (a
        new assignment starts from the committed offset by itself). ``awaiting``: those
        of ``assigned`` handed over in one round, each with the generation from which its
        old owner's release mark counts: they first wait for it."""
        client.pause(*assigned)
        assignment = object()
        for ktp in assigned:
            self._waiting[ktp] = assignment
        awaited = {ktp for ktp in (awaiting or {}) if ktp in assigned}
        for ktp in awaited:
            self._released_since[ktp] = (awaiting or {})[ktp]
        if assigned - awaited:
            self._spawn(self._resume(client, assigned - awaited, assignment, rewind))
        if awaited:
            self._spawn(self._await_releases(client, awaited, assignment, rewind))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        """``revoked`` are no longer ours: their lookups neither seek nor resume them."""
        for ktp in revoked:
            self._waiting.pop(ktp, None)
            self._released_since.pop(ktp, None)

    def keep_awaiting(self, awaited: Iterable[KafkaTopicPartition]) -> None:
        """The latest assignment's awaited partitions: any other partition still waiting
        for a release stops waiting (its old owner no longer reads it, so its last commit
        is in) and reads on from the committed offset."""
        still = set(awaited)
        for ktp in list(self._released_since):
            if ktp not in still:
                del self._released_since[ktp]
                metrics.HANDOVERS.labels(self._group, "unmarked").inc()

    async def idle(self) -> None:
        """Wait until no lookup is in flight (each has resumed its partitions or let go)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop every lookup in flight."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _still_waiting(
        self, client: ResumeClient, partitions: Iterable[KafkaTopicPartition], assignment: object
    ) -> set[KafkaTopicPartition]:
        assigned_now = client.assignment()
        return {
            ktp
            for ktp in partitions
            if self._waiting.get(ktp) is assignment and ktp in assigned_now
        }

    async def _resume(
        self,
        client: ResumeClient,
        assigned: set[KafkaTopicPartition],
        assignment: object,
        rewind: bool,
    ) -> None:
        if self._wait_for_writes is not None:
            await self._wait_for_writes(assigned)
        delays = iter(self._retry.delays())
        while True:
            mine = self._still_waiting(client, assigned, assignment)
            if not mine or self._current_client() is not client:  # closed or restarted
                return
            try:
                await self._seek_past_stored(client, mine, assignment, rewind)
                break
            except Exception as exc:  # the sink's or Kafka's; the partitions wait
                delay = next(delays)
                metrics.RESUME_LOOKUP_FAILURES.labels(self._group).inc()
                log.warning(
                    "looking up where %d partition(s) resume failed (%r); retrying in %.1f s",
                    len(mine),
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        ready = self._still_waiting(client, mine, assignment)
        for ktp in ready:
            del self._waiting[ktp]
        client.resume(*ready)
        if ready and self._on_reading is not None:
            self._on_reading(ready)

    async def _await_releases(
        self,
        client: ResumeClient,
        awaited: set[KafkaTopicPartition],
        assignment: object,
        rewind: bool,
    ) -> None:
        """Hold ``awaited`` (handed over in one round) until each old owner's release mark
        (see the module doc), seek each to where it resumes, and resume each group of them
        released together at once (one slow old owner holds back only its own)."""
        if self._committed_marks is None:
            await self._resume(client, awaited, assignment, rewind)
            return
        started = time.monotonic()
        released: set[KafkaTopicPartition] = set()
        while True:
            mine = self._still_waiting(client, awaited, assignment)
            wanted = {ktp for ktp in mine - released if ktp in self._released_since}
            if not wanted or self._current_client() is not client:
                break
            if time.monotonic() - started > self._release_timeout_s:
                log.warning(
                    "%d partition(s) handed over were not released by their old owner within "
                    "%.0f s; reading them from the committed offsets",
                    len(wanted),
                    self._release_timeout_s,
                )
                for ktp in wanted:
                    del self._released_since[ktp]
                metrics.HANDOVERS.labels(self._group, "timed_out").inc(len(wanted))
                break
            marks = await self._committed_marks(sorted(wanted))
            now_released: set[KafkaTopicPartition] = set()
            told_unread = self._declared_unread()
            for ktp in wanted - set(told_unread):
                offset, metadata = marks.get(ktp, (-1, None))
                since = self._released_since.get(ktp)
                generation = released_generation(metadata)
                if since is None or generation is None or generation < since or offset < 0:
                    continue
                del self._released_since[ktp]
                if self._waiting.get(ktp) is assignment:
                    client.seek(ktp, offset)
                now_released.add(ktp)
            if now_released:
                # In the same step as the check above: a join from now on says they are read.
                self._on_released(now_released)
                released |= now_released
                metrics.HANDOVERS.labels(self._group, "released").inc(len(now_released))
                metrics.HANDOVER_WAIT.labels(self._group).observe(time.monotonic() - started)
                self._spawn(self._resume(client, now_released, assignment, rewind))
            if wanted - released:
                await asyncio.sleep(RELEASE_POLL_S)
        # Those whose wait ended without a mark read from the committed offset as it is
        # now: the client may have taken an older one when they were assigned.
        rest = self._still_waiting(client, awaited - released, assignment)
        if rest and self._current_client() is client:
            marks = await self._committed_marks(sorted(rest))
            for ktp in rest:
                offset = marks.get(ktp, (-1, None))[0]
                if offset >= 0 and self._waiting.get(ktp) is assignment:
                    client.seek(ktp, offset)
            await self._resume(client, rest, assignment, rewind)

    async def _seek_past_stored(
        self,
        client: ResumeClient,
        partitions: set[KafkaTopicPartition],
        assignment: object,
        rewind: bool,
    ) -> None:
        """Seek each partition past what the sink already holds of it (``rewind``: each
        that the sink holds nothing past the committed offset of goes back to that offset,
        or to the beginning if there is none)."""
        wanted = sorted(TopicPartition(tp.topic, tp.partition) for tp in partitions)
        if self._topic_ids is not None and isinstance(self._sink, TopicIdentitySink):
            self._sink.use_topic_ids(await self._topic_ids(sorted({tp.topic for tp in wanted})))
        stored = await self._sink.resume_offsets(wanted)
        if rewind:
            await self._rewind(client, partitions, stored, assignment)
        for tp, next_offset in stored.items():
            ktp = KafkaTopicPartition(tp.topic, tp.partition)
            if ktp not in partitions or self._waiting.get(ktp) is not assignment:
                continue  # not asked for, or revoked (maybe assigned anew) meanwhile
            committed = await client.committed(ktp)
            if committed is None or next_offset > committed:
                log.info(
                    "%s:%d resumes at %d (sink holds data past committed %s)",
                    tp.topic,
                    tp.partition,
                    next_offset,
                    committed,
                )
                client.seek(ktp, next_offset)
                self._pending.drop(ktp)  # anything read before the pause took hold
                self._commits.owe(ktp, next_offset)  # Kafka catches up with the table

    async def _rewind(
        self,
        client: ResumeClient,
        partitions: set[KafkaTopicPartition],
        stored: Mapping[TopicPartition, int],
        assignment: object,
    ) -> None:
        """Move each of ``partitions`` the sink holds nothing of past the committed offset
        back to that offset (the beginning without one); the others are sought past what
        the sink holds by the caller."""
        for ktp in sorted(partitions):
            if self._waiting.get(ktp) is not assignment:
                continue
            next_offset = stored.get(TopicPartition(ktp.topic, ktp.partition))
            committed = await client.committed(ktp)
            if next_offset is not None and (committed is None or next_offset > committed):
                continue
            if committed is None:
                await client.seek_to_beginning(ktp)
            else:
                client.seek(ktp, committed)
            where = "its beginning" if committed is None else f"committed {committed}"
            log.info("%s:%d read again from %s", ktp.topic, ktp.partition, where)
            self._pending.drop(ktp)
