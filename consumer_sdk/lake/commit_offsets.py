"""The Kafka offsets a lake-table commit carries: encoded into the commit's own metadata.

Every batch the sink appends to a Delta or Iceberg table says, in the same commit, the last
offset it holds of each Kafka partition (Delta: the commit's ``userMetadata``; Iceberg: a
snapshot summary property, the way Iceberg's Kafka Connect sink keeps its offsets). The rows
and their offsets therefore become visible together or not at all, and resuming reads the
table's history, not a file of ours. Pure: no I/O, testable alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Iceberg snapshot summary key; Delta's userMetadata holds {MARKER: {...}}.
SUMMARY_KEY = "kafka-autoscaler.offsets"
MARKER = "kafka-autoscaler"
FORMAT_VERSION = 1


def encode_offsets(
    topic: str,
    last_offsets: Mapping[int, int],
    bound_for: str = "",
    claims: Mapping[int, str] | None = None,
    fence: str = "",
    topic_id: str = "",
) -> str:
    """The metadata text of one commit: ``topic`` and the last offset per partition. A
    dead-letter commit names the table its records were bound for (``bound_for``): one
    dead-letter table may hold the same topic's dead letters for several tables. With
    ``claims`` (the claim token per partition the rows were read under) and ``fence`` (the
    directory of those partitions' owner files), our commit checks (Delta's
    ``ExclusiveLocalLogStore``, Iceberg's ``FencedJdbcCatalog``) refuse the commit if another
    claim has replaced one. ``topic_id`` (Kafka's id of the topic the offsets were read
    from) tells them from the offsets of a topic deleted and created again under its name."""
    body: dict[str, object] = {
        "v": FORMAT_VERSION,
        "topic": topic,
        "offsets": {str(p): int(o) for p, o in sorted(last_offsets.items())},
    }
    if topic_id:
        body["id"] = topic_id
    if bound_for:
        body["for"] = bound_for
    if claims and fence:
        body["fence"] = fence
        body["claims"] = {str(p): token for p, token in sorted(claims.items())}
    return json.dumps({MARKER: body}, separators=(",", ":"))


@dataclass(frozen=True)
class CommitOffsets:
    """What one commit of ours says: the topic, the last offset per partition, for dead
    letters the table they were bound for ("" when not named: any table), and the topic's
    id ("" when not recorded)."""

    topic: str
    offsets: dict[int, int]
    bound_for: str
    topic_id: str = ""


def decode_commit(text: str | None) -> CommitOffsets | None:
    """The :class:`CommitOffsets` of one commit's metadata; None for commits that are not
    ours (compaction, another writer, a person's comment) or are unreadable."""
    if not text:
        return None
    try:
        content = json.loads(text)
    except (ValueError, RecursionError):
        return None
    body = content.get(MARKER) if isinstance(content, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("topic"), str):
        return None
    offsets = body.get("offsets")
    if not isinstance(offsets, dict):
        return None
    decoded: dict[int, int] = {}
    for partition, offset in offsets.items():
        if not (isinstance(partition, str) and partition.isdigit()):
            return None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return None
        decoded[int(partition)] = offset
    bound_for = body.get("for", "")
    topic_id = body.get("id", "")
    if not isinstance(bound_for, str) or not isinstance(topic_id, str):
        return None
    return CommitOffsets(body["topic"], decoded, bound_for, topic_id)


def stored_offsets(
    metadata: Iterable[str | None], topic: str, bound_for: str = "", topic_id: str = ""
) -> dict[int, int]:
    """Last stored offset per partition of ``topic`` over a table's commits (any order).
    With ``bound_for`` (reading a dead-letter table), commits that name another table are
    another pipeline's and do not count; commits that name none (written before dead
    letters named their table) count for every table. With ``topic_id``, commits that name
    another id are of a topic deleted since (one that had the name before) and do not
    count; commits that name none (written before ids were recorded) count."""
    stored: dict[int, int] = {}
    for text in metadata:
        decoded = decode_commit(text)
        if decoded is None or decoded.topic != topic:
            continue
        if bound_for and decoded.bound_for not in ("", bound_for):
            continue
        if topic_id and decoded.topic_id not in ("", topic_id):
            continue
        for partition, offset in decoded.offsets.items():
            if offset > stored.get(partition, -1):
                stored[partition] = offset
    return stored


def recreated_topic_line(topic: str, topic_id: str, earlier: Iterable[str], table: str) -> str:
    """What a writer says once when ``table`` holds offsets of earlier topics of this name."""
    return (
        f"topic {topic} was deleted and created again (id {topic_id}, before "
        f"{', '.join(sorted(earlier))}): {table} keeps the rows of the earlier one; the new one "
        "is read from its committed offset, or from auto_offset_reset without one"
    )


def earlier_topic_ids(metadata: Iterable[str | None], topic: str, topic_id: str) -> set[str]:
    """Ids other than ``topic_id`` that commits of ``topic`` name: topics of that name the
    table was written from before they were deleted."""
    found: set[str] = set()
    for text in metadata:
        decoded = decode_commit(text)
        if decoded is not None and decoded.topic == topic and decoded.topic_id:
            found.add(decoded.topic_id)
    found.discard(topic_id)
    return found
