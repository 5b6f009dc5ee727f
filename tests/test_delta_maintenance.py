"""Delta checkpoints beside the appends (consumer_sdk.lake.delta.maintenance): no append
waits for one, one writer at a time writes them, a failure is said and tried again; on real
tables they are Delta's own checkpoints, read back by Spark and delta-rs."""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import json
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from assignor import TopicPartition
from benchmarks.support.lake_readers import key_counts, warehouse_config
from consumer_sdk.lake.delta.history import LOG_DIR
from consumer_sdk.lake.delta.maintenance import (
    IN_COMMIT_INTERVAL,
    LAST_CHECKPOINT,
    LOCK_FILE,
    DeltaMaintenance,
    checkpoint_due,
    last_checkpoint_version,
)
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_root
from consumer_sdk.sink import Record, records_table
from contract.settings import ConfigError


def latest_version(table_root: Path) -> int:
    """The highest commit version in the table's log (-1: none)."""
    log = table_root / LOG_DIR
    versions = [int(p.stem) for p in log.glob("*.json")] if log.is_dir() else []
    return max(versions, default=-1)


def fake_log(root: Path, commits: int, checkpoint: int | None = None) -> Path:
    log = root / LOG_DIR
    log.mkdir(parents=True, exist_ok=True)
    for version in range(commits):
        (log / f"{version:020d}.json").write_text("{}\n")
    if checkpoint is not None:
        (log / LAST_CHECKPOINT).write_text(json.dumps({"version": checkpoint, "size": 3}))
    return root


def test_a_checkpoint_is_due_every_so_many_commits_past_the_last(tmp_path: Path) -> None:
    assert latest_version(tmp_path) == -1 and last_checkpoint_version(tmp_path) == -1
    root = fake_log(tmp_path / "t", commits=5)
    assert latest_version(root) == 4
    assert not checkpoint_due(root, 5)
    fake_log(root, commits=6)
    assert checkpoint_due(root, 5)
    fake_log(root, commits=6, checkpoint=5)
    assert last_checkpoint_version(root) == 5 and not checkpoint_due(root, 5)
    (root / LOG_DIR / LAST_CHECKPOINT).write_text("not json")
    assert last_checkpoint_version(root) == -1


def test_the_append_never_waits_and_one_checkpoint_runs_at_a_time(tmp_path: Path) -> None:
    root = fake_log(tmp_path / "t", commits=12)
    release, started = threading.Event(), threading.Event()
    written: list[Path] = []

    def slow_checkpoint(table: Path) -> None:
        started.set()
        assert release.wait(10)
        written.append(table)
        (table / LOG_DIR / LAST_CHECKPOINT).write_text(json.dumps({"version": 11}))

    maintenance = DeltaMaintenance(5, slow_checkpoint)
    maintenance.committed(root)  # returns at once, the checkpoint runs beside
    assert started.wait(10)
    maintenance.committed(root)  # one already runs for this table: none more
    release.set()
    maintenance.wait()
    maintenance.committed(root)  # no longer due
    maintenance.wait()
    maintenance.close()
    assert written == [root] and maintenance.checkpoints == 1


def test_another_writer_holding_the_table_is_left_to_it(tmp_path: Path) -> None:
    root = fake_log(tmp_path / "t", commits=12)
    calls: list[Path] = []
    with (root / LOG_DIR / LOCK_FILE).open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        maintenance = DeltaMaintenance(5, calls.append)
        maintenance.committed(root)
        maintenance.wait()
    assert calls == []
    maintenance.committed(root)  # let go: this one writes it
    maintenance.wait()
    maintenance.close()
    assert calls == [root]


def test_a_failed_checkpoint_is_said_once_and_tried_after_the_next_append(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = fake_log(tmp_path / "t", commits=12)
    attempts: list[Path] = []

    def failing(table: Path) -> None:
        attempts.append(table)
        if len(attempts) == 1:
            raise OSError(28, "No space left on device")

    maintenance = DeltaMaintenance(5, failing)
    with caplog.at_level(logging.WARNING):
        maintenance.committed(root)
        maintenance.wait()
    said = [r.getMessage() for r in caplog.records if "checkpoint failed" in r.getMessage()]
    assert len(said) == 1 and "No space left" in said[0]
    maintenance.committed(root)
    maintenance.wait()
    maintenance.close()
    assert len(attempts) == 2 and maintenance.checkpoints == 1


@pytest.mark.parametrize("raw", ["-1", "100001", "ten", "1.5"])
def test_a_bad_checkpoint_interval_is_refused_naming_the_field(raw: str) -> None:
    with pytest.raises(ConfigError, match="AUTOSCALER_SPARK_DELTA_CHECKPOINT_EVERY"):
        SparkSinkConfig.from_env(
            {"AUTOSCALER_SPARK_WAREHOUSE": "/tmp/w", "AUTOSCALER_SPARK_DELTA_CHECKPOINT_EVERY": raw}
        )


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """One local Spark session with the lake jars, before any sink of this module."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


def write_batches(config: SparkSinkConfig, batches: int, rows_each: int = 10) -> SparkTableSink:
    sink = SparkTableSink(config)
    asyncio.run(sink.resume_offsets([TopicPartition("t", 0)]))
    for index in range(batches):
        offsets = range(index * rows_each, (index + 1) * rows_each)
        records = [Record("t", 0, o, 0, None, f"v{o}".encode()) for o in offsets]
        sink.write_blocking("t", records_table(records))
    return sink


def test_tables_get_checkpoints_beside_their_appends_and_read_back_everywhere(
    tmp_path: Path,
) -> None:
    config = dataclasses.replace(warehouse_config(tmp_path, "delta"), delta_checkpoint_every=5)
    sink = write_batches(config, batches=12)
    assert sink._lake is not None and sink._lake.maintenance is not None
    sink._lake.maintenance.wait()
    root = table_root(config, "t")
    properties = DeltaTable(str(root)).metadata().configuration
    assert properties["delta.checkpointInterval"] == str(IN_COMMIT_INTERVAL)
    assert last_checkpoint_version(root) >= latest_version(root) - 5
    assert sink._lake.maintenance.checkpoints >= 2
    expected = Counter((0, o) for o in range(120))
    assert key_counts(config, "t") == expected  # delta-rs, from the checkpoint
    spark = SparkTableSink(config).open()
    rows = spark.read.format("delta").load(str(root)).select("partition", "offset").collect()
    assert Counter((r["partition"], r["offset"]) for r in rows) == expected
    asyncio.run(sink.close())


def test_checkpoints_inside_the_commit_are_there_for_who_asks(tmp_path: Path) -> None:
    config = dataclasses.replace(warehouse_config(tmp_path, "delta"), delta_checkpoint_every=0)
    sink = write_batches(config, batches=2)
    assert sink._lake is not None and sink._lake.maintenance is None
    properties = DeltaTable(str(table_root(config, "t"))).metadata().configuration
    assert properties["delta.checkpointInterval"] == "100"
    asyncio.run(sink.close())
