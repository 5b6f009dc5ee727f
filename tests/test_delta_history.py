"""Reading commit metadata from a Delta log without Spark (the Spark cross-check against
``DESCRIBE HISTORY`` is in tests/test_spark_sink.py)."""

from __future__ import annotations

import json
from pathlib import Path

from consumer_sdk.lake.delta.history import (
    LOG_DIR,
    STAGED_COMMITS_DIR,
    commit_metadata,
    has_unbackfilled_commits,
    user_metadata,
)


def write_commit(log: Path, version: int, *actions: dict[str, object]) -> None:
    log.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(json.dumps(action) for action in actions)
    (log / f"{version:020d}.json").write_text(lines + "\n")


def test_metadata_of_every_commit_file_oldest_first_and_nothing_else(tmp_path: Path) -> None:
    log = tmp_path / LOG_DIR
    write_commit(log, 0, {"commitInfo": {"operation": "CREATE TABLE"}}, {"metaData": {}})
    write_commit(log, 1, {"add": {"path": "a.parquet"}}, {"commitInfo": {"userMetadata": "one"}})
    write_commit(log, 2, {"commitInfo": {"userMetadata": "two"}}, {"add": {"path": "b"}})
    write_commit(log, 10, {"commitInfo": {"userMetadata": "ten"}})
    # Neither checkpoints, checksums, temporary files nor the checkpoint pointer are commits.
    (log / f"{2:020d}.checkpoint.parquet").write_bytes(b"PAR1")
    (log / f"{2:020d}.crc").write_text("{}")
    (log / f".{3:020d}.json.tmp").write_text('{"commitInfo": {"userMetadata": "x"}}')
    (log / "_last_checkpoint").write_text('{"version": 2}')
    assert commit_metadata(tmp_path) == [None, "one", "two", "ten"]


def test_a_table_without_a_log_has_no_history(tmp_path: Path) -> None:
    assert commit_metadata(tmp_path / "missing") == []
    assert commit_metadata(tmp_path) == []


def test_metadata_that_is_not_text_or_a_commit_without_commit_info_reads_as_none() -> None:
    assert user_metadata(['{"add": {"path": "a"}}']) is None
    assert user_metadata(['{"commitInfo": {"userMetadata": 7}}']) is None
    assert user_metadata(['{"commitInfo": "not an object"}', '{"add": {}}']) is None
    lines = ['not json but "commitInfo"', '{"commitInfo": {"userMetadata": "m"}}']
    assert user_metadata(lines) == "m"


def test_commits_a_coordinator_staged_are_seen_as_such(tmp_path: Path) -> None:
    staged = tmp_path / LOG_DIR / STAGED_COMMITS_DIR
    assert not has_unbackfilled_commits(tmp_path)
    staged.mkdir(parents=True)
    assert not has_unbackfilled_commits(tmp_path)  # backfilled: the directory is empty
    (staged / f"{4:020d}.3a1b.json").write_text("{}")
    assert has_unbackfilled_commits(tmp_path)
