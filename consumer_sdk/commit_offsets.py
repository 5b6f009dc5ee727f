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

# Iceberg snapshot summary key; Delta's userMetadata holds {MARKER: {...}}.
SUMMARY_KEY = "kafka-autoscaler.offsets"
MARKER = "kafka-autoscaler"
FORMAT_VERSION = 1


def encode_offsets(topic: str, last_offsets: Mapping[int, int]) -> str:
    """The metadata text of one commit: ``topic`` and the last offset per partition."""
    return json.dumps(
        {
            MARKER: {
                "v": FORMAT_VERSION,
                "topic": topic,
                "offsets": {str(p): int(o) for p, o in sorted(last_offsets.items())},
            }
        },
        separators=(",", ":"),
    )


def decode_offsets(text: str | None) -> tuple[str, dict[int, int]] | None:
    """``(topic, {partition: last offset})`` of one commit's metadata; None for commits
    that are not ours (compaction, another writer, a person's comment) or are unreadable."""
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
    return body["topic"], decoded


def stored_offsets(metadata: Iterable[str | None], topic: str) -> dict[int, int]:
    """Last stored offset per partition of ``topic`` over a table's commits (any order)."""
    stored: dict[int, int] = {}
    for text in metadata:
        decoded = decode_offsets(text)
        if decoded is None or decoded[0] != topic:
            continue
        for partition, offset in decoded[1].items():
            if offset > stored.get(partition, -1):
                stored[partition] = offset
    return stored
