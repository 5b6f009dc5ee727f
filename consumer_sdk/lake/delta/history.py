"""The ``userMetadata`` of every commit a Delta table's log still holds, read from the log.

What ``DESCRIBE HISTORY`` returns in that column, without a Spark job: each commit is a file
``_delta_log/<version, 20 digits>.json`` of one JSON action per line, and the ``commitInfo``
action carries the commit's ``userMetadata`` (Delta's Spark writer puts it first). Commit
files appear whole (the log store writes a temporary file and links or renames it into
place), so a reader never sees half of one. Checkpoints hold no commit info and are not read;
commit files the log's clean-up removed are gone from the history here as from Delta's.

A resume reads this when no writer left a record of where a partition is (a fresh table, a
writer that died mid-commit). Through Spark that was a query per table: about 0.2 s in a
local session, 4-12 s through a busy Spark Connect server. Reading fast is safe because our
log store refuses a commit whose claim was replaced and a claim waits out commits being
linked (:mod:`consumer_sdk.lake.partition_fence`): once claimed, nothing of an earlier owner can
land after the read. No Spark: testable alone.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

LOG_DIR = "_delta_log"
_COMMIT_FILE = re.compile(r"^\d{20}\.json$")
# Commits a commit coordinator accepted but has not written into the log yet (Delta 4's
# coordinated commits): this reader cannot see them, Spark's history can.
STAGED_COMMITS_DIR = "_staged_commits"


def has_unbackfilled_commits(table_root: Path) -> bool:
    """Whether the log holds commits staged by a commit coordinator (not read here)."""
    staged = table_root / LOG_DIR / STAGED_COMMITS_DIR
    try:
        return any(staged.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def commit_metadata(table_root: Path) -> list[str | None]:
    """Every retained commit's ``userMetadata`` (None where a commit has none), oldest
    first; no commits (no log yet) is an empty list."""
    log_dir = table_root / LOG_DIR
    try:
        names = sorted(name for name in os.listdir(log_dir) if _COMMIT_FILE.match(name))
    except FileNotFoundError:
        return []
    metadata: list[str | None] = []
    for name in names:
        try:
            with (log_dir / name).open(encoding="utf-8") as commit:
                metadata.append(user_metadata(commit))
        except FileNotFoundError:  # the log's clean-up removed it after the listing
            continue
    return metadata


def user_metadata(lines: Iterable[str]) -> str | None:
    """The ``userMetadata`` of the commit whose action lines are ``lines``; None if it has
    no ``commitInfo`` action or no metadata in it."""
    for line in lines:
        if '"commitInfo"' not in line:
            continue
        try:
            action = json.loads(line)
        except ValueError:
            continue
        info = action.get("commitInfo") if isinstance(action, dict) else None
        if isinstance(info, dict):
            value = info.get("userMetadata")
            return value if isinstance(value, str) else None
    return None
