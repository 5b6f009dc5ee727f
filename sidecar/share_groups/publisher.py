"""Publishes a share group's partition loads to the share loads topic, where the brokers'
share assignor (``kafkaautoscaler.broker.ShareAssignor``) reads them; reads the brokers'
``group.share.max.size``, the most members a share group may have."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from assignor.types import TopicPartition
from contract.broker_plans import PlanError
from contract.share_loads import encode_share_loads
from sidecar.publisher import ensure_speeds_topic
from sidecar.share_groups.loads import moved

log = logging.getLogger(__name__)

MAX_SIZE_CONFIG = "group.share.max.size"
DEFAULT_MAX_SIZE = 200  # Kafka's default, used while the brokers' cannot be read
# Loads are republished at least this often: the assignor takes loads younger than its
# autoscaler.plans.max.age.ms (10 minutes by default) only.
REPUBLISH_S = 60.0


def share_max_size(responses: Any) -> int | None:
    """``group.share.max.size`` in DescribeConfigs responses (None: not there)."""
    for response in responses or ():
        for resource in getattr(response, "resources", ()) or ():
            try:
                error, entries = resource[0], resource[4]
                if error:
                    continue
                for entry in entries:
                    if entry[0] == MAX_SIZE_CONFIG and entry[1] is not None:
                        value = int(entry[1])
                        if value >= 1:
                            return value
            except (TypeError, ValueError, IndexError):
                continue
    return None


class ShareLoadsPublisher:
    """One record per change of a share group's loads (and every ``REPUBLISH_S``), keyed by
    the group, so the compacted topic keeps the latest."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group: str,
        client_options: dict[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic, self.group = topic, group
        self.clock = clock
        self.max_size = DEFAULT_MAX_SIZE
        self.max_size_read = False
        self.published: dict[TopicPartition, float] | None = None
        self.published_at: float | None = None
        self.problem: str | None = None
        self._bootstrap = bootstrap_servers
        self._options = client_options or {}
        self._producer: AIOKafkaProducer | None = None

    def use_options(self, client_options: dict[str, Any]) -> None:
        """The client options the next :meth:`start` connects with."""
        self._options = client_options

    async def start(self) -> None:
        """Create the topic if missing, read the brokers' cap, connect."""
        await ensure_speeds_topic(
            self._bootstrap, self.topic, self._options, what="share loads topic"
        )
        await self._read_max_size()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap, acks="all", **self._options
        )
        await self._producer.start()

    async def _read_max_size(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **self._options)
        found, why = None, "no broker answered"
        try:
            await admin.start()
            brokers = (await admin.describe_cluster()).get("brokers", [])
            ids = sorted(int(b["node_id"]) for b in brokers)[:1]
            resources = [
                ConfigResource(ConfigResourceType.BROKER, str(i), {MAX_SIZE_CONFIG: None})
                for i in ids
            ]
            found = share_max_size(await admin.describe_configs(resources)) if ids else None
        except (KafkaError, KeyError, TypeError, ValueError) as exc:
            why = repr(exc)
        finally:
            await admin.close()
        self.max_size_read = found is not None
        if found is None:
            log.warning(
                "share group: cannot read the brokers' %s (%s): the group is capped at Kafka's "
                "default, %d members",
                MAX_SIZE_CONFIG,
                why,
                DEFAULT_MAX_SIZE,
            )
        self.max_size = found or DEFAULT_MAX_SIZE

    async def stop(self) -> None:
        """Flush and disconnect."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def publish(
        self,
        loads: Mapping[TopicPartition, float],
        partitions: Mapping[str, int],
        topic_ids: Mapping[str, str],
    ) -> bool:
        """Send ``loads`` (partition -> consumers) when they moved or are due again; whether
        a record was sent. Loads the broker would refuse, or a failed send, are one line in
        :attr:`problem` (shown in /status) and retried next round."""
        now = self.clock()
        due = self.published_at is None or now - self.published_at >= REPUBLISH_S
        if not (due or moved(self.published, loads)):
            return False
        assert self._producer is not None, "call start() first"
        try:
            key, value = encode_share_loads(
                self.group,
                loads,
                partitions,
                topic_ids,
                written_ms=int(time.time() * 1000),
            )
            await self._producer.send_and_wait(self.topic, value=value, key=key)
        except (PlanError, KafkaError) as exc:
            problem = f"share loads not published to {self.topic}: {exc}"
            if problem != self.problem:
                log.warning("%s", problem)
            self.problem = problem
            return False
        self.problem = None
        self.published, self.published_at = dict(loads), now
        return True

    def status(self) -> dict[str, Any]:
        """For /status."""
        return {
            "loads_topic": self.topic,
            "max_size": self.max_size,
            "max_size_read": self.max_size_read,
            "published_seconds_ago": None
            if self.published_at is None
            else round(self.clock() - self.published_at, 1),
            "loads": None
            if self.published is None
            else {f"{tp.topic}-{tp.partition}": round(v, 3) for tp, v in self.published.items()},
            "problem": self.problem,
        }
