"""Commit stage: a batch's offsets go to Kafka once the sink holds the batch.

Offsets handed to the stage are owed until a commit carries them. One commit is in flight at
a time, and the next one carries everything owed meanwhile (commits coalesce and stay in
order): a write hands its offsets over and is done, it does not wait for the commit before
it. A commit that fails (typically a rebalance in progress), that does not complete within
``COMMIT_TIMEOUT_S`` or that a cooperative rejoin defers stays owed and goes with the next
one, for the partitions the member still owns.

A release (the one-round hand-over) marks its partitions in the next commit, the one after
the commit in flight, together with whatever else is owed: the old owner's hand-over costs
the rest of the commit in flight plus one commit, not one commit per step before it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor.cooperative import mark_released
from consumer_sdk import metrics

log = logging.getLogger(__name__)
# A commit still retrying after this long is given up and kept owed (retried with the next).
COMMIT_TIMEOUT_S = 30.0
# How long a release waits for the fetch position of a partition nobody committed yet.
POSITION_TIMEOUT_S = 5.0


class CommitClient(Protocol):
    """What the stage needs of the Kafka client (aiokafka's consumer has it)."""

    _coordinator: Any

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
        # What the commit in flight carries: no longer owed, not yet committed.
        self._in_flight: dict[KafkaTopicPartition, int] = {}
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

    def owes_any(self, partitions: Iterable[KafkaTopicPartition]) -> bool:
        """True if an offset of one of ``partitions`` is still to be committed."""
        return any(p in self.uncommitted for p in partitions)

    async def settle(self) -> None:
        """Wait until no commit is in flight: what was owed is committed, or still owed
        after a failure (then it goes with the next commit)."""
        task = self._task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        finally:
            if self._task is task and task.done():
                self._task = None

    async def submit(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        """Owe ``offsets`` and return: the commit after the one in flight (or one started
        now) carries them with everything else owed."""
        self.uncommitted.update(offsets)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._commit_owed())

    async def _commit_owed(self) -> None:
        """Commit what is owed, again while more was owed meanwhile; stop at a failure."""
        while await self.commit({}) and self.uncommitted:
            pass

    async def commit(
        self, offsets: dict[KafkaTopicPartition, int], *, even_rejoining: bool = False
    ) -> bool:
        """Commit ``offsets`` plus what is owed (of partitions still owned). True if a
        commit went out and succeeded. A cooperative rejoin in flight defers it, unless
        ``even_rejoining`` (a release: the group's next round waits for nothing else)."""
        client = self._client()
        owned = set(self._owned())
        wanted = {tp: o for tp, o in {**self.uncommitted, **offsets}.items() if tp in owned}
        self.uncommitted = {}
        if client is None or not wanted:
            return False
        if getattr(client._coordinator, "rejoining", False) and not even_rejoining:
            # A cooperative rejoin is in flight: brokers refuse commits until it completes.
            self.uncommitted = wanted
            return False
        marked = {tp: g for tp, g in self._releasing.items() if tp in wanted}
        self._in_flight = wanted
        try:
            # aiokafka retries a retriable failure (no coordinator, a request timed out)
            # until it succeeds; the batches behind this one must not wait that long.
            self.attempts += 1
            await asyncio.wait_for(client.commit(self._with_metadata(wanted)), COMMIT_TIMEOUT_S)
        except (KafkaError, AssertionError, TimeoutError) as exc:
            # Typically a rebalance in progress: retried when idle; a next owner resumes
            # from the sink's stored offsets (or re-reads from the last commit).
            self.uncommitted = {**wanted, **self.uncommitted}
            metrics.COMMIT_FAILURES.labels(self._group).inc()
            log.warning("offset commit failed (%r); will retry", exc)
            return False
        finally:
            self._in_flight = {}
        self.committed.update(wanted)
        for tp, generation in marked.items():  # a mark set meanwhile is still to be sent
            if self._releasing.get(tp) == generation:
                del self._releasing[tp]
        return True

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
        on from there. The mark goes with the commit after the one in flight, which also
        carries everything owed. Where each resumes: :meth:`_resume_offsets`. A failure is
        logged: the next owners then wait for the group's next round, which no longer
        counts this member as reading them."""
        unmarked = {tp for tp in partitions if tp in self._releasing}
        refused = partitions & self._refused
        self._refused -= partitions
        client = self._client()
        marking: set[KafkaTopicPartition] = set()
        try:
            if client is None or not unmarked:
                return
            offsets = await self._resume_offsets(
                client, unmarked, refused, wrote_all, unwritten or {}, skipped or {}
            )
            # Owed from now on: the commit after the one in flight (which carries no mark)
            # carries them, marked, with everything else owed; a member with no commit in
            # flight, or whose commits a rejoin defers, sends that commit now.
            self.uncommitted.update(offsets)
            marking = unmarked & self.uncommitted.keys()
            await self.settle()
            if marking & self._releasing.keys():
                await self.commit({}, even_rejoining=True)
        except (KafkaError, AssertionError, TimeoutError) as exc:
            metrics.COMMIT_FAILURES.labels(self._group).inc()
            log.warning("looking up where %d partition(s) resume failed (%r)", len(unmarked), exc)
        finally:
            failed = {tp for tp in marking if tp in self._releasing}
            for tp in partitions:
                self._releasing.pop(tp, None)
        if failed:
            log.warning(
                "committing the release of %d partition(s) failed: their next owners wait "
                "for the group's next round",
                len(failed),
            )

    async def _resume_offsets(
        self,
        client: CommitClient,
        partitions: set[KafkaTopicPartition],
        refused: set[KafkaTopicPartition],
        wrote_all: bool,
        unwritten: Mapping[KafkaTopicPartition, int],
        skipped: Mapping[KafkaTopicPartition, int],
    ) -> dict[KafkaTopicPartition, int]:
        """Where each of ``partitions`` not owed already resumes: the offset being
        committed, else the last this member committed, else the first record read and
        dropped unwritten (``unwritten``), else the group's committed offset, else
        (nothing was ever committed, ``wrote_all``: everything read was written, and the
        sink refused nothing of it since :meth:`forget`) this member's fetch position, the
        reset policy's offset if it read nothing. ``skipped`` (read live: the fetch stage
        adds to it meanwhile) holds the first offset fetched and not taken while they were
        revoked: an offset this member did not write never goes past it (measured on Apache
        Kafka: a partition revoked 4 s after the group formed, before any commit, resumed
        at the position, 431, past records fetched and skipped meanwhile: offsets 0-430
        were never written)."""
        wanted = partitions - self.uncommitted.keys()
        written = {**self.committed, **self._in_flight}
        offsets: dict[KafkaTopicPartition, int] = {}
        for tp in wanted:
            offset = written.get(tp, unwritten.get(tp))
            if offset is not None:
                offsets[tp] = offset
        unknown = sorted(wanted - offsets.keys())
        if unknown:
            found = await asyncio.wait_for(
                client._coordinator.fetch_committed_offsets(unknown), COMMIT_TIMEOUT_S
            )
            offsets.update({tp: m.offset for tp, m in found.items() if m.offset >= 0})
        for tp in sorted(wanted - offsets.keys() - refused) if wrote_all else ():
            offsets[tp] = await asyncio.wait_for(client.position(tp), POSITION_TIMEOUT_S)
        for tp, offset in offsets.items():
            if tp in skipped and tp not in written:
                offsets[tp] = min(offset, skipped[tp])
        return offsets

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
            if getattr(client._coordinator, "rejoining", False):
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
