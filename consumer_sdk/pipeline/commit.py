"""Commit stage: a batch's offsets go to Kafka once the sink holds the batch.

One commit is in flight at a time and commits stay in order (each waits for the one before).
A commit that fails (typically a rebalance in progress), that does not complete within
``COMMIT_TIMEOUT_S`` or that a cooperative rejoin defers is kept and retried with the next one,
for the partitions the member still owns: the write stage never waits on Kafka for longer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from aiokafka.errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaError,
    UnknownMemberIdError,
)
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor.cooperative import mark_released
from consumer_sdk import metrics
from consumer_sdk.kafka_client import group as membership

log = logging.getLogger(__name__)
# A commit still retrying after this long is given up and kept owed (retried with the next).
COMMIT_TIMEOUT_S = 30.0
# How long a release waits for the fetch position of a partition nobody committed yet.
POSITION_TIMEOUT_S = 5.0
# A release commit that fails is tried again for this long, from this first delay doubling.
RELEASE_RETRY_S, RELEASE_FIRST_DELAY_S = 10.0, 0.2
# Failures that say this member is no longer in the group: a commit cannot succeed again.
MEMBERSHIP_REFUSED = (UnknownMemberIdError, IllegalGenerationError, CommitFailedError)


class CommitClient(Protocol):
    """What the stage needs of the Kafka client (aiokafka's consumer has it; its group
    membership is read through :mod:`consumer_sdk.kafka_client.group`)."""

    async def commit(
        self, offsets: dict[KafkaTopicPartition, int] | dict[KafkaTopicPartition, OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for the group."""

    async def position(self, partition: KafkaTopicPartition) -> int:
        """The offset this member reads ``partition`` from next."""


class OffsetCommits:
    """Offsets owed to Kafka: committed in order, one commit in flight, failures retried."""

    def __init__(
        self,
        group: str,
        client: Callable[[], CommitClient | None],
        owned: Callable[[], Iterable[KafkaTopicPartition]],
        metadata: Callable[[], str] | None = None,
    ) -> None:
        self._group = group
        self._client = client
        self._owned = owned
        # What every commit carries per partition (the capacity report, contract.capacity).
        self._metadata = metadata
        self.attempts = 0
        # Offsets written (or found in the sink) whose commit has not succeeded yet: retried
        # when the member is idle, so the committed offsets (the sidecar's lag) catch up.
        self.uncommitted: dict[KafkaTopicPartition, int] = {}
        # The last offset this member committed per partition: where a next owner resumes.
        self.committed: dict[KafkaTopicPartition, int] = {}
        # Partitions whose next commit marks them released, with the generation to mark.
        self._releasing: dict[KafkaTopicPartition, int] = {}
        # Partitions the sink refused records of: their fetch position is past records
        # this member did not write, so a release never commits it.
        self._refused: set[KafkaTopicPartition] = set()
        self._task: asyncio.Task[None] | None = None

    def owe(self, partition: KafkaTopicPartition, next_offset: int) -> None:
        """Kafka must catch up to ``next_offset`` (the sink already holds what is before)."""
        self.uncommitted[partition] = next_offset

    def forget(self, partitions: Iterable[KafkaTopicPartition]) -> None:
        """Never commit these (another member owns what the sink holds of them)."""
        for partition in partitions:
            self.uncommitted.pop(partition, None)
            self.committed.pop(partition, None)
            self._refused.add(partition)

    def disown(self, partitions: Iterable[KafkaTopicPartition]) -> None:
        """This member gave ``partitions`` up (its last commit of them is done): forget what
        it knew of their offsets. Should one come back to it, other members may have read
        on and committed meanwhile; a release of it must not commit this member's old
        offset (the next owner would read again all that was written since)."""
        for partition in partitions:
            self.uncommitted.pop(partition, None)
            self.committed.pop(partition, None)
            self._releasing.pop(partition, None)
            self._refused.discard(partition)

    def known(self, partition: KafkaTopicPartition) -> int | None:
        """The furthest offset of ``partition`` this member committed or owes (None: none)."""
        offsets = [
            o
            for o in (self.uncommitted.get(partition), self.committed.get(partition))
            if o is not None
        ]
        return max(offsets) if offsets else None

    def refused(self) -> frozenset[KafkaTopicPartition]:
        """Partitions the sink refused records of (:meth:`forget`) and not given up since:
        their fetch position is past records this member did not write."""
        return frozenset(self._refused)

    def owes_any(self, partitions: Iterable[KafkaTopicPartition]) -> bool:
        """True if an offset of one of ``partitions`` is still to be committed."""
        return any(p in self.uncommitted for p in partitions)

    async def settle(self) -> None:
        """Wait for the commit in flight, if any."""
        task, self._task = self._task, None
        if task is not None:
            await task

    async def submit(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        """Start committing ``offsets`` (and what is owed) after the commit in flight; the
        commit runs while the next batch fills."""
        await self.settle()
        self._task = asyncio.create_task(self.commit(offsets))

    async def commit(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        """Commit ``offsets`` plus earlier ones that failed (of partitions still owned)."""
        client = self._client()
        owned = set(self._owned())
        wanted = {tp: o for tp, o in {**self.uncommitted, **offsets}.items() if tp in owned}
        self.uncommitted = {}
        if client is None or not wanted:
            return
        if membership.rejoining(client):
            # A cooperative rejoin is in flight: brokers refuse commits until it completes.
            self.uncommitted = wanted
            return
        try:
            # aiokafka retries a retriable failure (no coordinator, a request timed out)
            # until it succeeds; the batches behind this one must not wait that long.
            self.attempts += 1
            await asyncio.wait_for(client.commit(self._with_metadata(wanted)), COMMIT_TIMEOUT_S)
            self.committed.update(wanted)
            for tp in wanted:
                self._releasing.pop(tp, None)
        except (KafkaError, AssertionError, TimeoutError) as exc:
            # Typically a rebalance in progress: retried when idle; a next owner resumes
            # from the sink's stored offsets (or re-reads from the last commit).
            self.uncommitted = {**wanted, **self.uncommitted}
            metrics.COMMIT_FAILURES.labels(self._group).inc()
            log.warning("offset commit failed (%r); will retry", exc)

    def releasing(self, partitions: Iterable[KafkaTopicPartition], generation: int) -> None:
        """The next commit of each of ``partitions`` marks it released in ``generation``
        (the revocation's flush commits them anyway: one commit does both)."""
        for tp in partitions:
            self._releasing[tp] = generation

    async def release(
        self,
        partitions: set[KafkaTopicPartition],
        generation: int,
        *,
        wrote_all: bool = True,
        unwritten: Mapping[KafkaTopicPartition, int] | None = None,
        skipped: Mapping[KafkaTopicPartition, int] | None = None,
    ) -> None:
        """Commit where each of ``partitions`` resumes, marked released in ``generation``
        (:func:`assignor.cooperative.mark_released`), unless a commit since
        :meth:`releasing` did: its next owner, which holds it until it sees the mark, reads
        on from there. The offset is the one still owed, else the last this member
        committed, else the first record read and dropped unwritten (``unwritten``), else
        the group's committed offset, else (nothing was ever committed, and ``wrote_all``:
        everything read was written, and the sink refused nothing of it since
        :meth:`forget`) this member's fetch position, the reset policy's offset if it read
        nothing. ``skipped`` (read live: the fetch stage adds to it while this waits) holds
        the first offset fetched and not taken while they were revoked: the offset never
        goes past it (measured on Apache Kafka: a partition revoked 4 s after the group
        formed, before any commit, resumed at the position, 431, past records fetched and
        skipped meanwhile: offsets 0-430 were never written). A failure is logged: the next
        owners then wait for the group's next round, which no longer counts this member as
        reading them."""
        unmarked = {tp for tp in partitions if tp in self._releasing}
        refused = partitions & self._refused
        for tp in partitions:
            self._releasing.pop(tp, None)
            self._refused.discard(tp)
        client = self._client()
        if client is None or not unmarked:
            return
        offsets: dict[KafkaTopicPartition, int] = {}
        skipped = skipped if skipped is not None else {}
        for tp in unmarked:
            offset = self.uncommitted.get(tp, self.committed.get(tp, (unwritten or {}).get(tp)))
            if offset is not None:
                offsets[tp] = offset
        metadata = mark_released(self._metadata() if self._metadata is not None else "", generation)
        try:
            unknown = sorted(unmarked - offsets.keys())
            if unknown:
                found = await asyncio.wait_for(
                    membership.committed_marks(client, unknown), COMMIT_TIMEOUT_S
                )
                offsets.update({tp: at for tp, (at, _) in found.items() if at >= 0})
            unknown_positions = unmarked - offsets.keys() - refused
            for tp in sorted(unknown_positions) if wrote_all else ():
                offsets[tp] = await asyncio.wait_for(client.position(tp), POSITION_TIMEOUT_S)
            for tp, offset in offsets.items():
                # What this member wrote (owed or committed) precedes anything it skipped.
                if tp in skipped and tp not in self.uncommitted and tp not in self.committed:
                    offsets[tp] = min(offset, skipped[tp])
            if not offsets:
                return
            marked = {tp: OffsetAndMetadata(o, metadata) for tp, o in offsets.items()}
            await self._commit_release(client, marked)
        except (KafkaError, AssertionError, TimeoutError) as exc:
            metrics.COMMIT_FAILURES.labels(self._group).inc()
            log.warning(
                "committing the release of %d partition(s) failed (%r): their next owners "
                "wait for the group's next round",
                len(offsets),
                exc,
            )
            return
        self.committed.update(offsets)
        for tp in offsets:
            self.uncommitted.pop(tp, None)

    async def _commit_release(
        self, client: CommitClient, marked: dict[KafkaTopicPartition, OffsetAndMetadata]
    ) -> None:
        """Commit a release, tried again with backoff for up to ``RELEASE_RETRY_S`` while
        the failure may pass (a coordinator moving, a timeout): its next owners wait for
        it, and without it they read from an older commit. A refused member id or
        generation is final (the partitions are lost, not released)."""
        deadline = time.monotonic() + RELEASE_RETRY_S
        delay = RELEASE_FIRST_DELAY_S
        while True:
            self.attempts += 1
            try:
                await asyncio.wait_for(client.commit(marked), COMMIT_TIMEOUT_S)
                return
            except (KafkaError, AssertionError, TimeoutError) as exc:
                if isinstance(exc, MEMBERSHIP_REFUSED) or time.monotonic() + delay > deadline:
                    raise
                metrics.COMMIT_FAILURES.labels(self._group).inc()
                log.warning("committing a release failed (%r); trying again in %.1f s", exc, delay)
            await asyncio.sleep(delay)
            delay *= 2

    def _with_metadata(
        self, offsets: dict[KafkaTopicPartition, int]
    ) -> dict[KafkaTopicPartition, int] | dict[KafkaTopicPartition, OffsetAndMetadata]:
        metadata = self._metadata() if self._metadata is not None else ""
        if not metadata and not self._releasing:
            return offsets
        return {
            tp: OffsetAndMetadata(
                offset,
                mark_released(metadata, self._releasing[tp]) if tp in self._releasing else metadata,
            )
            for tp, offset in offsets.items()
        }

    async def before_leaving(self, timeout_s: float) -> None:
        """Commit what is still owed before the member leaves, so the next owners do not
        read it again. Waits for a rejoin in flight and retries, for at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.uncommitted and time.monotonic() < deadline:
            client = self._client()
            if client is None:
                break
            if membership.rejoining(client):
                await asyncio.sleep(0.05)  # the coordinator task completes the join
                continue
            await self.commit({})
            if self.uncommitted:
                await asyncio.sleep(0.1)
        if self.uncommitted:
            log.warning(
                "leaving with %d partition(s) uncommitted: their next owners read the last "
                "batch again (the sink's stored offsets keep a table exactly once)",
                len(self.uncommitted),
            )
