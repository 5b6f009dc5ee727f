"""A Delta table's freshness read from its log: each row's commit time minus its Kafka
timestamp, on a table delta-rs wrote (a writer the project did not write)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from consumer_sdk.lake.delta.visibility import row_visibility_s


def _append(root: Path, stamps_ms: list[int]) -> tuple[int, int]:
    """Append rows of these Kafka timestamps in one commit; the wall clock around it (ms)."""
    rows = pa.table({"timestamp": pa.array(stamps_ms, pa.timestamp("ms")), "v": stamps_ms})
    before = int(time.time() * 1000)
    write_deltalake(str(root), rows, mode="append")
    return before, int(time.time() * 1000)


def test_each_row_is_as_stale_as_its_commit_is_late_and_early_rows_can_be_left_out(
    tmp_path: Path,
) -> None:
    now = int(time.time() * 1000)
    old, older = now - 4_000, now - 9_000
    first = _append(tmp_path, [older, old])
    second = _append(tmp_path, [now])

    seconds, files = row_visibility_s(tmp_path)
    assert files == 2 and seconds.size == 3
    for stamp, (before, after), got in zip(
        (older, old, now), (first, first, second), sorted(seconds, reverse=True), strict=True
    ):
        assert (before - stamp) / 1000 <= got <= (after - stamp) / 1000

    recent, _ = row_visibility_s(tmp_path, produced_after_ms=old)
    assert recent.size == 2 and recent.max() <= (first[1] - old) / 1000


def test_a_table_without_commits_has_no_rows(tmp_path: Path) -> None:
    seconds, files = row_visibility_s(tmp_path)
    assert seconds.size == 0 and files == 0
