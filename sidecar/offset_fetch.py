"""A group's committed offsets from an OffsetFetch response (Kafka API 9), read strictly.

aiokafka's ``AIOKafkaAdminClient.list_consumer_group_offsets`` never looks at the
response's group-level error. While a group's coordinator moves or loads its offsets (a
broker restarted), the broker answers ``COORDINATOR_LOAD_IN_PROGRESS`` or
``NOT_COORDINATOR`` with no partitions, which that method returns as "nothing committed":
in the soak the sidecar then planned for every partition's whole log as backlog (513 MB)
and scaled from 2 consumers to 6 while a broker was down. Here an error at either level,
or a partition asked for and left out of the answer, means the round's committed offsets
are not known.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import for_code

from assignor import TopicPartition


class OffsetFetchFailed(Exception):
    """The answer does not say every asked partition's committed offset (one line: why)."""


@dataclass(frozen=True)
class Committed:
    """Committed offsets of the partitions that have one, and their non-empty metadata (the
    consumers' capacity reports). A partition asked for and absent here has none."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    metadata: dict[TopicPartition, str] = field(default_factory=dict)


def error_name(code: int) -> str:
    """Kafka's name for an error code (``UNKNOWN`` for a code aiokafka does not know)."""
    return f"{getattr(for_code(code), 'message', 'UNKNOWN')} ({code})"


def committed_offsets(response: Any, asked: Iterable[TopicPartition]) -> Committed:
    """The committed offsets in an OffsetFetch ``response`` (v0-v3: ``topics`` of topic,
    partitions of partition, offset, metadata, error code; from v2 a group-level
    ``error_code``) for the partitions ``asked``; raises :class:`OffsetFetchFailed` on an
    error at the group or a partition's level, an answer shaped otherwise, or an asked
    partition missing from the answer. Offset -1 with no error: nothing committed."""
    group_error = getattr(response, "error_code", 0)
    if group_error:
        raise OffsetFetchFailed(f"the group's coordinator answered {error_name(group_error)}")
    committed = Committed()
    answered: set[TopicPartition] = set()
    try:
        for topic, partitions in response.topics:
            for partition, offset, metadata, error in partitions:
                tp = TopicPartition(str(topic), int(partition))
                if error:
                    raise OffsetFetchFailed(f"{tp.topic}-{tp.partition}: {error_name(error)}")
                answered.add(tp)
                if int(offset) >= 0:
                    committed.offsets[tp] = int(offset)
                    if isinstance(metadata, str) and metadata:
                        committed.metadata[tp] = metadata
    except (TypeError, ValueError) as exc:
        raise OffsetFetchFailed(f"an OffsetFetch answer shaped otherwise: {exc}") from None
    missing = sorted(set(asked) - answered)
    if missing:
        first = missing[0]
        raise OffsetFetchFailed(
            f"the answer left out {len(missing)} partition(s) asked for, "
            f"{first.topic}-{first.partition} first"
        )
    return committed
