"""Publishing staged Parquet files into table directories, exactly once per offset.

The HDFS-connector pattern, on a POSIX filesystem shared by every writer (local disk, NFS):
Spark writes each batch into a private staging directory; this module moves its files into
the table by atomic rename and records how far each Kafka partition got in an offset ledger
beside the data (``<table>/_offsets/<topic>/ledger.json``, ignored by Spark readers because
the directory starts with ``_``). Published names say what they hold:
``part-<topic>+<publish number>+<file index>.parquet``.

Per topic, under an exclusive file lock (a publish is renames only: milliseconds):

1. read the ledger (last stored offset per partition); roll back a publish that died
   half-way (its intent file lists the files it moved: they are deleted unless the ledger
   already holds the intent's offsets);
2. drop staged rows at or below the ledger's offset of their partition (a zombie writer or a
   re-delivered batch never duplicates; the common case reads no data);
3. write an intent, rename the files in, replace the ledger atomically (the commit point for
   every partition of the batch at once), delete the intent.

Readers see a batch entirely or not at all, except while a writer that died mid-publish waits
for the topic's next publish or resume to roll it back.
No Spark here: files and locks only, testable alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from consumer_sdk.lake.commit_offsets import recreated_topic_line

log = logging.getLogger(__name__)

LEDGER_DIR = "_offsets"
LEDGER_FILE = "ledger.json"


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file Spark wrote to staging, and the table directory it goes to."""

    path: Path
    table_root: Path
    date_dir: str  # e.g. "date=2026-11-22"


@dataclass(frozen=True)
class PublishResult:
    """What one publish did."""

    files: int
    rows_skipped: int  # rows at or below the ledger's offsets (already in the table)


def staged_parquet(staging: Path, table_root: Path, date_dir: str) -> list[StagedFile]:
    """The Parquet files Spark wrote under ``staging`` (none if it wrote nothing)."""
    if not staging.exists():
        return []
    return [StagedFile(p, table_root, date_dir) for p in sorted(staging.glob("*.parquet"))]


class OffsetLedger:
    """How far each partition of each topic got in one table; see module doc."""

    def __init__(self, table_root: Path) -> None:
        self.root = table_root / LEDGER_DIR

    @contextlib.contextmanager
    def _locked(self, topic: str) -> Iterator[Path]:
        """Hold the topic's exclusive lock (across processes on this filesystem)."""
        directory = self.root / topic
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / ".lock").open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield directory
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _read(directory: Path) -> tuple[dict[int, int], int, str]:
        """Last stored offset per partition, how many publishes there were, and the id of
        the topic the offsets are of ("" when not recorded)."""
        path = directory / LEDGER_FILE
        if not path.exists():
            return {}, 0, ""
        content = json.loads(path.read_text())
        offsets = {int(p): int(last) for p, last in content["offsets"].items()}
        return offsets, int(content["publishes"]), str(content.get("id", ""))

    @staticmethod
    def _write(directory: Path, publishes: int, offsets: Mapping[int, int], topic_id: str) -> None:
        """Replace the ledger atomically (the commit point of a publish)."""
        content: dict[str, object] = {
            "publishes": publishes,
            "offsets": {str(p): o for p, o in sorted(offsets.items())},
        }
        if topic_id:
            content["id"] = topic_id
        staged_ledger = directory / f".{LEDGER_FILE}.{uuid.uuid4().hex}"
        _write_synced(staged_ledger, json.dumps(content))
        os.replace(staged_ledger, directory / LEDGER_FILE)

    @staticmethod
    def _roll_back(directory: Path, ledger: Mapping[int, int]) -> None:
        """Finish the bookkeeping of a publish that died: keep its files if the ledger holds
        its offsets (it died after the commit), else delete them."""
        for intent in directory.glob("intent-*.json"):
            content = json.loads(intent.read_text())
            committed = all(
                ledger.get(int(p), -1) >= int(last) for p, last in content["offsets"].items()
            )
            if not committed:
                for target in content["files"]:
                    Path(target).unlink(missing_ok=True)
            intent.unlink()

    def stored(self, topic: str, topic_id: str = "") -> dict[int, int]:
        """Last stored offset per partition of ``topic`` (after any roll-back). With
        ``topic_id`` (Kafka's id of the topic now), offsets recorded under another id are of
        a topic deleted since: the ledger starts again, empty, under the new id (the files
        stay; publishes go on numbering after theirs). A ledger that names no id (written
        before ids were recorded) is taken as the current topic's."""
        with self._locked(topic) as directory:
            ledger, publishes, recorded_id = self._read(directory)
            self._roll_back(directory, ledger)
            if topic_id and recorded_id and recorded_id != topic_id:
                line = recreated_topic_line(topic, topic_id, [recorded_id], self.root.parent.name)
                log.warning("%s", line)
                self._write(directory, publishes, {}, topic_id)
                return {}
            return ledger

    def publish(
        self,
        topic: str,
        first_offsets: Mapping[int, int],
        last_offsets: Mapping[int, int],
        staged: Sequence[StagedFile],
        topic_id: str = "",
    ) -> PublishResult:
        """Move ``staged`` (records of ``topic`` with, per partition, offsets from
        ``first_offsets`` to ``last_offsets``) into their tables and advance the ledger.
        Records read from a topic of another id than the ledger's (the topic was deleted
        and created again since they were read) are dropped."""
        with self._locked(topic) as directory:
            ledger, publishes, recorded_id = self._read(directory)
            self._roll_back(directory, ledger)
            if topic_id and recorded_id and topic_id != recorded_id:
                return PublishResult(0, sum(_rows(file) for file in staged))
            topic_id = topic_id or recorded_id
            stale = {
                p: ledger[p] for p, first in first_offsets.items() if first <= ledger.get(p, -1)
            }
            skipped = 0
            files = list(staged)
            if stale:
                files, skipped = _drop_stored_rows(files, stale)
            advanced = {p: last for p, last in last_offsets.items() if last > ledger.get(p, -1)}
            if not advanced:
                return PublishResult(0, skipped)
            number = publishes + 1
            moves: list[tuple[Path, Path]] = []
            for index, file in enumerate(files):
                target_dir = file.table_root / file.date_dir
                target_dir.mkdir(parents=True, exist_ok=True)
                name = f"part-{topic}+{number:012d}+{index:05d}.parquet"
                moves.append((file.path, target_dir / name))
            intent = directory / f"intent-{uuid.uuid4().hex}.json"
            _write_synced(
                intent,
                json.dumps(
                    {
                        "files": [str(t) for _, t in moves],
                        "offsets": {str(p): o for p, o in advanced.items()},
                    }
                ),
            )
            for source, target in moves:
                os.replace(source, target)
            self._write(directory, number, {**ledger, **advanced}, topic_id)  # the commit
            intent.unlink()
            return PublishResult(len(moves), skipped)


def _rows(file: StagedFile) -> int:
    return int(pq.ParquetFile(file.path).metadata.num_rows)


def _write_synced(path: Path, text: str) -> None:
    with path.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _drop_stored_rows(
    files: Sequence[StagedFile], stored: Mapping[int, int]
) -> tuple[list[StagedFile], int]:
    """Rewrite staged files without rows at or below ``stored[partition]`` (rare: a zombie
    writer's batch, or records re-read after a crash)."""
    kept_files: list[StagedFile] = []
    dropped = 0
    for file in files:
        table = pq.read_table(file.path, partitioning=None)
        keep = rows_past(table, stored)
        kept: pa.Table = table.filter(keep)
        dropped += table.num_rows - kept.num_rows
        if kept.num_rows == 0:
            file.path.unlink()
            continue
        if kept.num_rows < table.num_rows:
            pq.write_table(kept, file.path, coerce_timestamps="us")
        kept_files.append(file)
    return kept_files, dropped


def rows_past(table: pa.Table, stored: Mapping[int, int]) -> pa.Array:
    """Mask of rows whose offset is past the stored offset of their partition (rows of a
    partition with nothing stored are kept; rows without an offset are not). One pass,
    whatever the partition count: each row's threshold is looked up by its partition."""
    if table.num_rows == 0:
        return pa.array([], pa.bool_())
    partitions = np.asarray(table.column("partition").combine_chunks().to_numpy(), np.int64)
    threshold = np.full(int(max([partitions.max(), *stored])) + 1, -1, np.int64)
    threshold[np.fromiter(stored.keys(), np.int64)] = np.fromiter(stored.values(), np.int64)
    # A missing offset (-1) is never past any threshold (-1 where nothing is stored).
    offsets = pc.fill_null(table.column("offset"), -1).combine_chunks().to_numpy()
    return pa.array(offsets > threshold[partitions])
