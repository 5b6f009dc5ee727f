"""What the SDK reads of, and asks from, its consumer's group membership: aiokafka's group
coordinator, which its consumer keeps private. Every function takes the consumer (or None,
before it starts) and answers as for a member that has not joined when it has none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.structs import TopicPartition as KafkaTopicPartition


def coordinator_of(consumer: object) -> Any:
    """``consumer``'s group coordinator (None before it starts, or without a group)."""
    return getattr(consumer, "_coordinator", None)


def joined(consumer: object) -> bool:
    """Whether ``consumer`` has a group coordinator (it was started with a group)."""
    return coordinator_of(consumer) is not None


def member_id(consumer: object) -> str:
    """This member's id in the group ("" until it has joined)."""
    found = getattr(coordinator_of(consumer), "member_id", "")
    return found if isinstance(found, str) else ""


def generation(consumer: object) -> int | None:
    """The group generation this member is in (None without a coordinator)."""
    coordinator = coordinator_of(consumer)
    return None if coordinator is None else int(coordinator.generation)


def rejoining(consumer: object) -> bool:
    """Whether a cooperative rejoin is in flight (brokers refuse commits until it ends)."""
    return bool(getattr(coordinator_of(consumer), "rejoining", False))


def request_rejoin(consumer: object) -> bool:
    """Ask the coordinator to rejoin the group at once; False without one."""
    coordinator = coordinator_of(consumer)
    if coordinator is None:
        return False
    coordinator.request_rejoin()
    return True


async def committed_marks(
    consumer: object, partitions: Sequence[KafkaTopicPartition]
) -> dict[KafkaTopicPartition, tuple[int, str | None]]:
    """The group's committed offset of each of ``partitions`` with its metadata (-1: none);
    nothing without a coordinator."""
    coordinator = coordinator_of(consumer)
    if coordinator is None:
        return {}
    found = await coordinator.fetch_committed_offsets(list(partitions))
    return {tp: (int(m.offset), m.metadata) for tp, m in found.items()}
