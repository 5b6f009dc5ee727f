"""What the coordinator says of a KIP-848 group (ConsumerGroupDescribe, through
confluent-kafka's admin client: aiokafka has no such request) and what the brokers say of
their assignors (DescribeConfigs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from assignor.broker import ASSIGNOR_CLASS, ASSIGNOR_NAME
from assignor.types import TopicPartition
from contract.broker_plans import check_topic_id

ASSIGNORS_CONFIG = "group.consumer.assignors"


@dataclass(frozen=True)
class DescribedGroup:
    """A group as its coordinator describes it: each member (by its ``group.instance.id``,
    else its member id) and the partitions it reads now."""

    owned: Mapping[str, frozenset[TopicPartition]]
    # What the last assignment gave each member (KIP-848: the members reconcile towards it).
    targets: Mapping[str, frozenset[TopicPartition]]


def described_group(description: Any) -> DescribedGroup:
    """A ``confluent_kafka.admin.ConsumerGroupDescription`` as a :class:`DescribedGroup`."""
    owned: dict[str, frozenset[TopicPartition]] = {}
    targets: dict[str, frozenset[TopicPartition]] = {}
    for member in description.members:
        key = member.group_instance_id or member.member_id
        owned[key] = _partitions(member.assignment)
        target = getattr(member, "target_assignment", None)
        targets[key] = _partitions(target) if target is not None else owned[key]
    return DescribedGroup(owned, targets)


def _partitions(assignment: Any) -> frozenset[TopicPartition]:
    tps = assignment.topic_partitions if assignment is not None else []
    return frozenset(TopicPartition(tp.topic, tp.partition) for tp in tps or [])


def describe_group(admin: Any, group: str, timeout_s: float) -> DescribedGroup:
    """Describe ``group`` (blocking: call it off the event loop)."""
    future = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    return described_group(future.result(timeout=timeout_s))


def topic_ids(admin: Any, topics: Sequence[str], timeout_s: float) -> dict[str, str]:
    """Each topic's id in the plans' URL-safe form (blocking)."""
    from confluent_kafka import TopicCollection

    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    return {
        topic: check_topic_id(str(future.result(timeout=timeout_s).topic_id))
        for topic, future in futures.items()
    }


def assignor_problem(assignors: str | None) -> str | None:
    """One line when a broker's ``group.consumer.assignors`` lacks ours (None: it has it)."""
    listed = [entry.strip() for entry in (assignors or "").split(",") if entry.strip()]
    if ASSIGNOR_CLASS in listed or ASSIGNOR_NAME in listed:
        return None
    return (
        f"the brokers do not load the autoscaler assignor ({ASSIGNORS_CONFIG}="
        f"{','.join(listed) or 'unset'}): add {ASSIGNOR_CLASS} there and its jar to their "
        "classpath (docs: broker-assignor), or the group's consumers cannot use "
        f"group.remote.assignor={ASSIGNOR_NAME}"
    )


def broker_assignors(admin: Any, timeout_s: float) -> str | None:
    """One broker's ``group.consumer.assignors`` (blocking; None: not reported)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        ResourceType,
    )

    brokers = admin.list_topics(timeout=timeout_s).brokers
    if not brokers:
        return None
    resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
    entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
    entry = entries.result(timeout=timeout_s).get(ASSIGNORS_CONFIG)
    return None if entry is None else str(entry.value)
