"""Where a Delta table is, per Kafka partition, read from its log: newest commit first.

Each commit the sink makes carries the last offset per partition of its batch in the
commit's ``userMetadata`` (:mod:`consumer_sdk.commit_offsets`). Resuming a partition needs
the latest of those. Spark's ``DESCRIBE HISTORY`` reads every commit of the table through
the session: with one Spark Connect server shared by every consumer (the demo's) that took
4-12 s per claim under load, and the claimed partitions stay paused until it answers. The
writers already share the warehouse's filesystem (the partition fence's locks live there),
so this module reads the commit files themselves, newest first, and stops once every wanted
partition is found: the cost follows the commits since a partition was last written, not
the table's whole history.

Newest-first is exact because a partition's offsets only grow from commit to commit: a
writer commits a partition only past what the table holds, and the fence refuses a lost
writer's commit after the next owner's claim. Delta writes each commit file whole (written
aside, then renamed into place), so a reader never sees half of one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from pathlib import Path

from consumer_sdk.commit_offsets import decode_offsets

LOG_DIR = "_delta_log"
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def commit_versions(root: Path) -> list[int]:
    """The versions whose commit files the table's log holds, newest first."""
    log_dir = root / LOG_DIR
    if not log_dir.is_dir():
        return []
    found = (_COMMIT_FILE.match(entry.name) for entry in log_dir.iterdir())
    return sorted((int(match.group(1)) for match in found if match), reverse=True)


def commit_metadata(root: Path, version: int) -> str | None:
    """The ``userMetadata`` of commit ``version`` (None: none, or the file is gone: the
    log's clean-up removes commit files older than its retention)."""
    path = root / LOG_DIR / f"{version:020d}.json"
    try:
        with path.open(encoding="utf-8") as commit:
            for line in commit:
                if '"commitInfo"' not in line:
                    continue
                info = json.loads(line).get("commitInfo")
                metadata = info.get("userMetadata") if isinstance(info, dict) else None
                return metadata if isinstance(metadata, str) else None
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return None  # not a commit of a writer we know: it carries no offsets of ours
    return None


def _metadata_newest_first(root: Path) -> Iterator[str | None]:
    for version in commit_versions(root):
        yield commit_metadata(root, version)


def latest_offsets(root: Path, topic: str, partitions: Collection[int]) -> dict[int, int]:
    """Last offset the table at ``root`` holds of each of ``partitions`` of ``topic``
    (absent: none), reading commits newest first until every partition is found."""
    wanted = set(partitions)
    found: dict[int, int] = {}
    for metadata in _metadata_newest_first(root):
        decoded = decode_offsets(metadata)
        if decoded is not None and decoded[0] == topic:
            for partition, offset in decoded[1].items():
                if partition in wanted and offset > found.get(partition, -1):
                    found[partition] = offset
        if wanted <= found.keys():
            break
    return found
