"""A topic deleted and created again under its name while this member reads it.

The sinks key what they hold by topic name and Kafka's topic id (learnt when partitions are
assigned): under the earlier id the new topic's first records look stored already and would
be dropped. A member that keeps its partitions through the re-creation (the group does not
rebalance when the new topic has as many partitions and comes soon enough) sees it only as
a jump back: its position was past the new topic's end, aiokafka's fetcher resets it
(OffsetOutOfRange, then ``auto_offset_reset``) and the next records start below where the
partition was read to. The fetch stage hands such a jump to :meth:`TopicIdentityWatch.rewound`
before taking its records: the partition waits, paused where those records start, while
the topic's id is asked again. The same id (a seek back of our own): it reads on. A new id:
what was fetched of the earlier topic is written first, then the topic's partitions are
read from ``auto_offset_reset`` and looked up again (the sink learns the new id and claims
them under it), and one line says so.

Not seen: a new topic that already holds more records than the position when the member
fetches it again (no reset, no jump back). Its records below the position are skipped, as by
Kafka's own clients that fetch by topic name; aiokafka's fetch predates topic ids.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Protocol

from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk import metrics
from consumer_sdk.pipeline.resume import ResumeClient
from consumer_sdk.pipeline.retry import RetryPolicy

log = logging.getLogger(__name__)
PENDING_POLL_S = 0.05  # how often the watch looks whether the earlier topic's records left


class WatchedClient(ResumeClient, Protocol):
    """What the watch needs of the Kafka client (aiokafka's consumer has it)."""

    async def seek_to_end(self, *partitions: KafkaTopicPartition) -> object:
        """Read ``partitions`` from their end next."""


class TopicIdentityWatch:
    """Kafka's id of each topic as last learnt, and what a jump back makes of it."""

    def __init__(
        self,
        *,
        group: str,
        client: Callable[[], WatchedClient | None],
        fetch_ids: Callable[[object, Sequence[str]], Awaitable[dict[str, str]]],
        holds: Callable[[Collection[KafkaTopicPartition]], bool],
        wait_for_writes: Callable[[set[KafkaTopicPartition]], Awaitable[None]],
        read_again: Callable[[WatchedClient, set[KafkaTopicPartition]], None],
        read_from: Callable[[Collection[KafkaTopicPartition]], None],
        waiting: Callable[[], Collection[KafkaTopicPartition]],
        from_earliest: bool,
        retry: RetryPolicy,
    ) -> None:
        self._group = group
        self._client = client
        self._fetch_ids = fetch_ids
        self._holds = holds
        self._wait_for_writes = wait_for_writes
        self._read_again = read_again
        self._read_from = read_from
        self._waiting = waiting
        self._from_earliest = from_earliest
        self._retry = retry
        self.known: dict[str, str] = {}
        self._checking: set[KafkaTopicPartition] = set()
        self._recreating: set[str] = set()  # topics whose partitions are read again
        self._tasks: set[asyncio.Task[None]] = set()

    async def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """Each of ``topics``' current id (none where the brokers predate ids), learnt."""
        client = self._client()
        ids = {} if client is None else await self._fetch_ids(client, topics)
        self.known.update(ids)
        return ids

    def rewound(self, ktp: KafkaTopicPartition, first: int) -> bool:
        """Records of ``ktp`` start at ``first``, below where it was read to: whether to take
        them. Not while its topic's id is unknown to be the same: the partition waits,
        paused at ``first``, for the check."""
        client = self._client()
        if client is None or ktp.topic not in self.known:
            return True  # no id learnt (brokers before Kafka 3.1): nothing to tell by
        client.pause(ktp)
        client.seek(ktp, first)
        if ktp not in self._checking:
            self._checking.add(ktp)
            task = asyncio.ensure_future(self._check(client, ktp))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return False

    async def idle(self) -> None:
        """Wait until no check is in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop every check in flight."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _check(self, client: WatchedClient, ktp: KafkaTopicPartition) -> None:
        try:
            now = await self._current_id(client, ktp.topic)
            if now is None or self._client() is not client or ktp not in client.assignment():
                return
            if ktp.topic in self._recreating:
                return  # its partitions are read again from the new topic's start
            before = self.known.get(ktp.topic)
            if now == before or not now:
                self._read_from([ktp])
                if ktp not in self._waiting():
                    client.resume(ktp)
                return
            await self._recreated(client, ktp.topic, now, before or "")
        finally:
            self._checking.discard(ktp)

    async def _current_id(self, client: WatchedClient, topic: str) -> str | None:
        """The topic's id now, asked until the brokers answer (None: the client closed)."""
        delays = iter(self._retry.delays())
        while self._client() is client:
            try:
                return (await self._fetch_ids(client, [topic])).get(topic, "")
            except Exception as exc:  # the brokers' or the network's; the partition waits
                delay = next(delays)
                log.warning(
                    "asking topic %s's id failed (%r); retrying in %.1f s", topic, exc, delay
                )
                await asyncio.sleep(delay)
        return None

    async def _recreated(
        self, client: WatchedClient, topic: str, topic_id: str, before: str
    ) -> None:
        partitions = {tp for tp in client.assignment() if tp.topic == topic}
        client.pause(*partitions)
        where = "start" if self._from_earliest else "end (auto_offset_reset latest)"
        log.warning(
            "topic %s was deleted and created again while group %s read it (id %s, before "
            "%s): what was read of the earlier one is written first, then the new one is "
            "read from its %s",
            topic,
            self._group,
            topic_id,
            before,
            where,
        )
        metrics.TOPICS_RECREATED.labels(self._group, topic).inc()
        self._recreating.add(topic)
        try:
            # What was fetched of the earlier topic reaches the table under its id: the
            # batches cut from the buffer (nothing new comes, the partitions are paused),
            # their writes.
            while self._holds(partitions) and self._client() is client:
                await asyncio.sleep(PENDING_POLL_S)
            await self._wait_for_writes(partitions)
            if self._client() is not client:
                return
            if self._from_earliest:
                await client.seek_to_beginning(*partitions)
            else:
                await client.seek_to_end(*partitions)
            self._read_from(partitions)
            self._read_again(client, partitions)  # the sink learns the new id as it claims them
        finally:
            self._recreating.discard(topic)
