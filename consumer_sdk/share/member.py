"""``ShareMember``: one member of a share group (KIP-932) writing what it is given to a sink.

confluent-kafka's ``ShareConsumer`` (librdkafka 2.16; aiokafka has no share consumer) in
explicit acknowledgement mode: each poll's records are written, then accepted, then the
acceptances committed. A record is acknowledged only after its write returned, so none is
lost; a record can come twice (its member died before acknowledging it, or its acquisition
lock expired during the write), so the write must be idempotent: the Spark sink's
:meth:`~consumer_sdk.lake.spark_sink.SparkTableSink.write_once` merges on (topic, partition,
offset). A failed write releases the poll's records for any member to take again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from consumer_sdk import metrics
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.health import ConsumerHealth, register, unregister
from consumer_sdk.loop_watch import LoopStallWatch
from consumer_sdk.share.delivery import DEFAULT_LIMIT, delivery_limit, split_last_deliveries
from consumer_sdk.share.delivery import GROUP_SETTING as DELIVERY_LIMIT_SETTING
from consumer_sdk.share.isolation import (
    GROUP_SETTING,
    TIMEOUT_S,
    AdminFactory,
    default_admin,
    ensure_isolation,
)
from consumer_sdk.share.reach import KafkaReach
from consumer_sdk.sink import ManagedSink, PreparingSink, Record, Sink, records_table
from consumer_sdk.stopping import run_until_signalled
from contract.refusals import diagnose
from contract.security import librdkafka_options
from contract.settings import ConfigError

log = logging.getLogger(__name__)

# Seconds a poll waits for records: also how soon a stop request is seen.
POLL_TIMEOUT_S = 0.5
# How long a connection made to diagnose an unreachable Kafka may take.
DIAGNOSE_TIMEOUT_S = 3.0
# A failed write is tried again after this long, doubled up to the maximum.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0
# How long a stopping member goes on writing records at their last delivery (released, Kafka
# would archive them) before giving them up: inside Kubernetes' default 30 s grace.
LAST_DELIVERY_RETRY_S = 20.0


@runtime_checkable
class IdempotentSink(Protocol):
    """A sink whose ``write_once`` lands each (topic, partition, offset) once however often
    it is given."""

    async def write_once(self, topic: str, table: pa.Table) -> None:
        """Persist ``table`` (as ``Sink.write``), skipping records already persisted."""
        ...

    async def prepare_merges(self, topics: Sequence[str]) -> None:
        """Make the first ``write_once`` of ``topics`` as quick as the next ones (called
        before the member joins the group: its first records' locks run during it)."""
        ...


def by_topic(messages: Iterable[Any]) -> dict[str, pa.Table]:
    """A poll's records (confluent-kafka ``Message`` objects without an error) as one sink
    table per topic, in partition and offset order."""
    records: dict[str, list[Record]] = defaultdict(list)
    for message in messages:
        topic = message.topic()
        records[topic].append(
            Record(
                topic,
                message.partition(),
                message.offset(),
                message.timestamp()[1],
                message.key(),
                message.value(),
                tuple(message.headers() or ()),
            )
        )
    return {
        topic: records_table(sorted(rows, key=lambda r: (r.partition, r.offset)))
        for topic, rows in records.items()
    }


def client_settings(config: ConsumerConfig) -> dict[str, Any]:
    """The share consumer's librdkafka properties."""
    return {
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": config.group,
        "client.id": config.kafka_client_id,
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": config.share_max_poll_records,
        **librdkafka_options(config),
    }


def _default_client(settings: dict[str, Any]) -> Any:
    from confluent_kafka import ShareConsumer

    return ShareConsumer(settings)


class ShareMember:
    """Poll, write, acknowledge, until :meth:`request_stop` (SIGTERM or SIGINT in
    :meth:`run`); then the last poll's records are written and acknowledged and the member
    leaves the group."""

    def __init__(
        self,
        config: ConsumerConfig,
        sink: IdempotentSink | Sink,
        *,
        client_factory: Callable[[dict[str, Any]], Any] = _default_client,
        admin_factory: AdminFactory | None = default_admin,
    ) -> None:
        if config.group_type != "share":
            raise ConfigError(
                f"group_type (AUTOSCALER_GROUP_TYPE) must be share for a share-group member, "
                f"got {config.group_type!r}"
            )
        self.config = config
        self.sink = sink
        self._client_factory = client_factory
        # Makes sure of the group's share.isolation.level before joining (None: not checked,
        # for tests of the record path without a broker).
        self._admin_factory = admin_factory
        self._stopping = False
        self.records_written = 0
        self.acknowledge_failures = 0
        self.records_given_up = 0
        # The group's share.delivery.count.limit, read before joining.
        self.delivery_limit = DEFAULT_LIMIT
        session_s = config.session_timeout_ms / 1000
        self.loop_watch = LoopStallWatch(config.group, session_s)
        self.health = ConsumerHealth(config.group, self.loop_watch.silent_s, session_s)
        self.reach = KafkaReach(self.health)
        if not isinstance(sink, IdempotentSink):
            log.warning(
                "the sink has no idempotent write: a record a share group delivers twice "
                "(a member died before acknowledging it, or its lock expired) is written twice"
            )

    def request_stop(self) -> None:
        """Finish the records in hand, acknowledge them and leave (safe from a signal
        handler)."""
        self._stopping = True

    def run(self) -> None:
        """Run until SIGTERM or SIGINT."""
        run_until_signalled(self.request_stop, self.run_async)

    async def run_async(self) -> None:
        """Start the sink, join the group, consume until asked to stop, leave."""
        register(self.health)
        self.loop_watch.start()
        try:
            await self._consume()
        finally:
            await self.loop_watch.stop()
            unregister(self.health)

    async def _consume(self) -> None:
        if isinstance(self.sink, ManagedSink):
            await self.sink.start()
        if isinstance(self.sink, PreparingSink):
            await self.sink.prepare(self.config.topics)
        if isinstance(self.sink, IdempotentSink):
            await self.sink.prepare_merges(self.config.topics)
        if self.config.metrics_port is not None:
            metrics.serve(self.config.metrics_port)
        await self._ensure_isolation()
        if self._stopping:
            return
        client = self._client_factory(client_settings(self.config))
        try:
            client.subscribe(list(self.config.topics))
            while not self._stopping:
                messages = await asyncio.to_thread(client.poll, POLL_TIMEOUT_S)
                records = [m for m in messages if m.error() is None]
                errors = [m.error() for m in messages if m.error() is not None]
                for error in errors:
                    metrics.CLIENT_ERRORS.labels(self.config.group).inc()
                    log.warning("share consumer: %s", error)
                self.reach.polled(errors, delivered=bool(records))
                if records:
                    await self._handle(client, records)
                if self.reach.due() and not self._stopping:
                    config = self.config
                    self.reach.diagnosed(
                        await diagnose(
                            config.bootstrap_servers,
                            config,
                            config.kafka_client_options(),
                            timeout_s=DIAGNOSE_TIMEOUT_S,
                        )
                    )
        finally:
            await asyncio.to_thread(client.close)
            if isinstance(self.sink, ManagedSink):
                await self.sink.close()

    async def _ensure_isolation(self) -> None:
        """The group's share.isolation.level made the member's isolation_level before it
        joins (a share group reads uncommitted records unless told otherwise); a broker that
        cannot be reached is said in one line and tried again; a level the member may not
        set and the group does not have is a ConfigError."""
        if self._admin_factory is None:
            return
        admin = self._admin_factory(self.config)
        delay = RETRY_FIRST_S
        while not self._stopping:
            try:
                await asyncio.to_thread(
                    ensure_isolation, admin, self.config.group, self.config.isolation_level
                )
                self.delivery_limit = await asyncio.to_thread(
                    delivery_limit, admin, self.config.group, timeout_s=TIMEOUT_S
                )
                return
            except ConfigError:
                raise
            except Exception as exc:  # a broker down or slow: tried again, never a config error
                log.warning(
                    "share group %s: %s not set yet (%s); retrying in %.1f s",
                    self.config.group,
                    GROUP_SETTING,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)

    async def _handle(self, client: Any, records: Sequence[Any]) -> None:
        """Write ``records`` (retried with backoff while the member runs), then accept them.
        If the member stops before their write succeeded, it releases those below the
        group's delivery limit and goes on writing those at their last delivery (released,
        Kafka would archive them) for up to ``LAST_DELIVERY_RETRY_S`` before giving them up
        in one line and a metric."""
        from confluent_kafka import AcknowledgeType

        tables = by_topic(records)
        delay = RETRY_FIRST_S
        give_up_at: float | None = None
        while True:
            topic = ""
            try:
                for topic, table in tables.items():
                    await self._write(topic, table)
            except ConfigError:
                raise
            except Exception as exc:
                metrics.WRITE_RETRIES.labels(self.config.group, topic).inc()
                log.warning(
                    "write failed (%s: %s); retrying in %.1f s", type(exc).__name__, exc, delay
                )
                now = asyncio.get_running_loop().time()
                if self._stopping and give_up_at is None:
                    below, last = split_last_deliveries(records, self.delivery_limit)
                    if below:
                        await self._acknowledge(client, below, AcknowledgeType.RELEASE)
                    if not last:
                        return
                    log.warning(
                        "stopping with %d record(s) at their last delivery (%s %d): writing "
                        "them for up to %.0f s more",
                        len(last),
                        DELIVERY_LIMIT_SETTING,
                        self.delivery_limit,
                        LAST_DELIVERY_RETRY_S,
                    )
                    records, tables = last, by_topic(last)
                    give_up_at = now + LAST_DELIVERY_RETRY_S
                elif give_up_at is not None and now >= give_up_at:
                    self._give_up(records)
                    return
                wait = delay if give_up_at is None else min(delay, max(0.0, give_up_at - now))
                await asyncio.sleep(wait)
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            self.records_written += len(records)
            for topic, table in tables.items():
                self._count(topic, table)
            await self._acknowledge(client, records, AcknowledgeType.ACCEPT)
            return

    def _give_up(self, records: Sequence[Any]) -> None:
        """Say in one line and count the records at their last delivery left unwritten."""
        self.records_given_up += len(records)
        by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
        for record in records:
            by_partition[(record.topic(), record.partition())].append(record.offset())
        for (topic, _partition), offsets in by_partition.items():
            metrics.SHARE_RECORDS_GIVEN_UP.labels(self.config.group, topic).inc(len(offsets))
        where = ", ".join(
            f"{topic}:{partition} offsets {min(offsets)}-{max(offsets)}"
            for (topic, partition), offsets in sorted(by_partition.items())
        )
        log.error(
            "share group %s: %d record(s) at their last delivery (%s %d) could not be "
            "written before stopping; Kafka archives them, the table lacks them: %s",
            self.config.group,
            len(records),
            DELIVERY_LIMIT_SETTING,
            self.delivery_limit,
            where,
        )

    def _count(self, topic: str, table: pa.Table) -> None:
        counts = table.group_by("partition").aggregate([("offset", "count")])
        for partition, count in zip(
            counts["partition"].to_pylist(), counts["offset_count"].to_pylist(), strict=True
        ):
            metrics.RECORDS.labels(self.config.group, topic, str(partition)).inc(count)

    async def _write(self, topic: str, table: pa.Table) -> None:
        if isinstance(self.sink, IdempotentSink):
            await self.sink.write_once(topic, table)
        elif isinstance(self.sink, Sink):
            await self.sink.write(topic, table)

    async def _acknowledge(self, client: Any, records: Sequence[Any], kind: Any) -> None:
        """Acknowledge ``records`` as ``kind`` and commit that. What the broker or the client
        refuses (a lock that ran out during the write, a member fenced, a coordinator out of
        reach) is counted and logged: those records come again, to this member or another,
        and merge to nothing."""
        from confluent_kafka import IllegalStateException, KafkaException

        for record in records:
            try:
                client.acknowledge(record, kind)
            except IllegalStateException as exc:  # no longer in flight here
                self._refused(record.topic(), record.partition(), exc)
        try:
            results = await asyncio.to_thread(client.commit_sync)
        except KafkaException as exc:
            for topic, partition in sorted({(r.topic(), r.partition()) for r in records}):
                self._refused(topic, partition, exc)
            return
        self.reach.reached()
        for where, error in (results or {}).items():
            if error is not None:
                self._refused(where.topic, where.partition, error)

    def _refused(self, topic: str, partition: int, reason: object) -> None:
        self.acknowledge_failures += 1
        metrics.SHARE_ACKNOWLEDGE_FAILURES.labels(self.config.group, topic).inc()
        log.warning(
            "acknowledging %s:%d failed (%s): its records will come again", topic, partition, reason
        )
