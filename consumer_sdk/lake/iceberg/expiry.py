"""Which snapshots of an Iceberg table the sink may expire without losing where it resumes.

Every commit of the sink is a snapshot whose summary carries the last offset it wrote of each
Kafka partition, and resuming takes the highest offset per partition over all snapshots
(:func:`consumer_sdk.lake.commit_offsets.stored_offsets`). Expiring by age alone would drop
the only snapshot of a partition that has not been written for longer than the age, and its
next owner would resume from the group's committed offset, which may be behind the table
(a writer killed between its table commit and its Kafka commit): the rows between would be
written twice. So the snapshots kept are the newest ``keep_last``, every one younger than
``keep_ms``, and for each (topic, topic id, table bound for, partition) the one holding its
highest offset; the rest may go. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consumer_sdk.lake.commit_offsets import decode_commit


@dataclass(frozen=True)
class SnapshotOffsets:
    """One snapshot: its id, when it was committed (ms since the epoch) and the sink's
    offsets text in its summary (None for a snapshot not the sink's)."""

    snapshot_id: int
    committed_ms: int
    offsets: str | None


def snapshots_to_expire(
    snapshots: Iterable[SnapshotOffsets], *, now_ms: int, keep_ms: int, keep_last: int = 1
) -> list[int]:
    """The ids of ``snapshots`` that may be expired (newest first); see the module doc."""
    if keep_last < 1 or keep_ms < 0:
        raise ValueError(f"keep_last must be >= 1 and keep_ms >= 0, got {keep_last}, {keep_ms}")
    newest_first = sorted(snapshots, key=lambda s: (s.committed_ms, s.snapshot_id), reverse=True)
    kept = {s.snapshot_id for s in newest_first[:keep_last]}
    kept |= {s.snapshot_id for s in newest_first if s.committed_ms >= now_ms - keep_ms}
    kept |= set(_highest_offset_holders(newest_first).values())
    return [s.snapshot_id for s in newest_first if s.snapshot_id not in kept]


def _highest_offset_holders(
    newest_first: Sequence[SnapshotOffsets],
) -> dict[tuple[str, str, str, int], int]:
    """For each (topic, topic id, bound for, partition) the snapshot holding its highest
    offset (the newest of those holding it)."""
    highest: dict[tuple[str, str, str, int], tuple[int, int]] = {}
    for snapshot in newest_first:
        commit = decode_commit(snapshot.offsets)
        if commit is None:
            continue
        for partition, offset in commit.offsets.items():
            key = (commit.topic, commit.topic_id, commit.bound_for, partition)
            if key not in highest or offset > highest[key][0]:
                highest[key] = (offset, snapshot.snapshot_id)
    return {key: holder for key, (_, holder) in highest.items()}
