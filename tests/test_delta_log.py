"""Reading a Delta table's offsets from its log (consumer_sdk.delta_log), on hand-made logs;
the Spark-written tables of test_spark_sink resume through the same reader."""

from __future__ import annotations

import json
from pathlib import Path

from consumer_sdk.commit_offsets import encode_offsets
from consumer_sdk.delta_log import LOG_DIR, commit_metadata, commit_versions, latest_offsets


def commit(root: Path, version: int, metadata: str | None, *, info_first: bool = True) -> None:
    """A commit file as Delta writes it: one JSON action per line."""
    info: dict[str, object] = {"timestamp": version, "operation": "WRITE"}
    if metadata is not None:
        info["userMetadata"] = metadata
    actions = [{"commitInfo": info}, {"add": {"path": f"part-{version}.parquet"}}]
    if not info_first:
        actions.reverse()
    log_dir = root / LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(json.dumps(action) for action in actions) + "\n"
    (log_dir / f"{version:020d}.json").write_text(text)


def test_versions_are_the_commit_files_newest_first(tmp_path: Path) -> None:
    for version in (0, 2, 1, 11):
        commit(tmp_path, version, None)
    log_dir = tmp_path / LOG_DIR
    (log_dir / f"{10:020d}.checkpoint.parquet").write_bytes(b"PAR1")
    (log_dir / f"{11:020d}.crc").write_text("{}")
    (log_dir / "_last_checkpoint").write_text("{}")
    (log_dir / f".{12:020d}.json.tmp").write_text("half")
    assert commit_versions(tmp_path) == [11, 2, 1, 0]
    assert commit_versions(tmp_path / "no-table") == []


def test_metadata_is_the_commit_info_wherever_it_stands(tmp_path: Path) -> None:
    commit(tmp_path, 0, None)
    commit(tmp_path, 1, "note", info_first=False)
    (tmp_path / LOG_DIR / f"{2:020d}.json").write_text("not json with commitInfo\n")
    assert commit_metadata(tmp_path, 0) is None
    assert commit_metadata(tmp_path, 1) == "note"
    assert commit_metadata(tmp_path, 2) is None  # unreadable: carries no offsets of ours
    assert commit_metadata(tmp_path, 3) is None  # cleaned up by the log's retention


def test_offsets_are_the_newest_commits_of_each_partition(tmp_path: Path) -> None:
    commit(tmp_path, 0, None)  # CREATE TABLE
    commit(tmp_path, 1, encode_offsets("t", {0: 9, 1: 19}))
    commit(tmp_path, 2, encode_offsets("other", {0: 500}))
    commit(tmp_path, 3, encode_offsets("t", {0: 29}))
    commit(tmp_path, 4, "a person's comment")
    assert latest_offsets(tmp_path, "t", [0, 1, 2]) == {0: 29, 1: 19}
    assert latest_offsets(tmp_path, "other", [0]) == {0: 500}
    assert latest_offsets(tmp_path, "t", []) == {}


def test_reading_stops_at_the_newest_commits_naming_every_partition(tmp_path: Path) -> None:
    # Offsets only grow from commit to commit, so nothing older is read once each wanted
    # partition is found: an older "commit" that would fail to open is never opened.
    (tmp_path / LOG_DIR / f"{0:020d}.json").mkdir(parents=True)
    commit(tmp_path, 1, encode_offsets("t", {0: 9, 1: 3}))
    commit(tmp_path, 2, encode_offsets("t", {1: 7}))
    assert latest_offsets(tmp_path, "t", [0, 1]) == {0: 9, 1: 7}
