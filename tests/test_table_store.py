"""The publish protocol on plain files: ledger, stale rows, roll-back, concurrent writers."""

from __future__ import annotations

import os
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from consumer_sdk.lake import table_store
from consumer_sdk.lake.arrow_batch import ValueCodec, to_arrow
from consumer_sdk.lake.table_store import OffsetLedger, StagedFile, staged_parquet
from consumer_sdk.sink import Record

DATE_DIR = "date=2026-11-22"


def stage(staging: Path, table: Path, offsets: dict[int, range]) -> list[StagedFile]:
    """Write one Parquet file per partition the way Spark would stage a batch."""
    staging.mkdir(parents=True)
    for partition, span in offsets.items():
        records = [Record("t", partition, o, 0, None, b"v") for o in span]
        rows = to_arrow(records, ValueCodec(), datetime.now(UTC)).rows
        pq.write_table(rows, staging / f"part-{partition}.parquet", coerce_timestamps="us")
    return staged_parquet(staging, table, DATE_DIR)


def table_rows(table: Path) -> Counter[tuple[int, int]]:
    found: Counter[tuple[int, int]] = Counter()
    for path in table.glob("date=*/*.parquet"):
        for row in (
            pq.read_table(path, partitioning=None).select(["partition", "offset"]).to_pylist()
        ):
            found[(row["partition"], row["offset"])] += 1
    return found


def publish(
    ledger: OffsetLedger, files: list[StagedFile], offsets: dict[int, range], topic_id: str = ""
) -> int:
    firsts = {p: span[0] for p, span in offsets.items()}
    lasts = {p: span[-1] for p, span in offsets.items()}
    return ledger.publish("t", firsts, lasts, files, topic_id).rows_skipped


def test_a_topic_created_again_starts_the_ledger_again_and_keeps_the_rows(
    tmp_path: Path,
) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    old = {0: range(0, 10)}
    publish(ledger, stage(tmp_path / "s1", table, old), old, topic_id="old-id")
    assert ledger.stored("t", "old-id") == {0: 9}
    assert ledger.stored("t", "new-id") == {}  # the earlier topic's offsets are not its
    new = {0: range(0, 4)}
    assert publish(ledger, stage(tmp_path / "s2", table, new), new, topic_id="new-id") == 0
    assert ledger.stored("t", "new-id") == {0: 3}
    # A batch still read from the earlier topic is dropped whole.
    late = {0: range(10, 12)}
    assert publish(ledger, stage(tmp_path / "s3", table, late), late, topic_id="old-id") == 2
    assert table_rows(table) == Counter({(0, o): 1 for o in range(10)}) + Counter(
        {(0, o): 1 for o in range(4)}
    )


def test_a_ledger_that_names_no_topic_id_is_the_current_topics(tmp_path: Path) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    first = {0: range(0, 10)}
    publish(ledger, stage(tmp_path / "s1", table, first), first)  # written before ids
    assert ledger.stored("t", "the-id") == {0: 9}
    again = {0: range(5, 12)}
    assert publish(ledger, stage(tmp_path / "s2", table, again), again, topic_id="the-id") == 5
    assert ledger.stored("t", "another-id") == {}


def test_publish_moves_files_in_and_advances_the_ledger(tmp_path: Path) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    batch = {0: range(0, 10), 1: range(5, 8)}
    publish(ledger, stage(tmp_path / "s1", table, batch), batch)
    assert ledger.stored("t") == {0: 9, 1: 7}
    assert table_rows(table) == Counter({(p, o): 1 for p, span in batch.items() for o in span})
    assert not list((tmp_path / "s1").glob("*.parquet"))


def test_rows_already_stored_are_dropped_not_duplicated(tmp_path: Path) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    first = {0: range(0, 10), 1: range(0, 10)}
    publish(ledger, stage(tmp_path / "s1", table, first), first)
    # A zombie (or a re-read after a crash) writes overlapping and fully stored ranges.
    second = {0: range(5, 15), 1: range(0, 10)}
    skipped = publish(ledger, stage(tmp_path / "s2", table, second), second)
    assert skipped == 5 + 10
    assert ledger.stored("t") == {0: 14, 1: 9}
    assert table_rows(table) == Counter(
        {**{(0, o): 1 for o in range(15)}, **{(1, o): 1 for o in range(10)}}
    )


def test_a_publish_that_dies_before_its_commit_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    first = {0: range(0, 10)}
    publish(ledger, stage(tmp_path / "s1", table, first), first)
    real_replace = os.replace

    def die_at_commit(source: str | Path, target: str | Path) -> None:
        if str(target).endswith(table_store.LEDGER_FILE):
            raise KeyboardInterrupt("killed between the renames and the ledger")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", die_at_commit)
    second = {0: range(10, 20)}
    with pytest.raises(KeyboardInterrupt):
        publish(ledger, stage(tmp_path / "s2", table, second), second)
    monkeypatch.setattr(os, "replace", real_replace)
    assert max(o for _, o in table_rows(table)) == 19  # half-published: visible for now
    assert ledger.stored("t") == {0: 9}  # the next owner's resume rolls it back
    assert table_rows(table) == Counter({(0, o): 1 for o in range(10)})


def test_concurrent_writers_of_one_topic_never_duplicate(tmp_path: Path) -> None:
    table = tmp_path / "table"
    ledger = OffsetLedger(table)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for start in range(0, 200, 20):  # both write every range, racing
                batch = {0: range(start, start + 20), 1: range(start, start + 20)}
                files = stage(tmp_path / f"{name}-{start}", table, batch)
                publish(OffsetLedger(table), files, batch)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert table_rows(table) == Counter({(p, o): 1 for p in (0, 1) for o in range(200)})
    assert ledger.stored("t") == {0: 199, 1: 199}
