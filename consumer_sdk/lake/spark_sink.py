"""``SparkTableSink``: batches into Spark tables, exactly once per (topic, partition, offset).

Each topic's batch becomes Arrow (:mod:`consumer_sdk.lake.arrow_batch`). In the ``parquet``
format pyarrow writes it as one file into a staging directory private to this write
(:meth:`stage`: several batches may stage at once), and :mod:`consumer_sdk.lake.table_store`
publishes the files into the table by atomic rename under names holding their offset range,
advancing a per-partition offset ledger (:meth:`publish`: in batch order). Tables are
created when the consumer starts (:meth:`prepare`), not with the first batch. Concurrent
writer processes never share Spark's ``_temporary`` directory or a metastore. On assignment,
:meth:`SparkTableSink.resume_offsets` reports where the table already is, so the consumer
seeks past rows a killed process wrote but did not commit to Kafka.

Records whose value does not decode go to the dead-letter table (topic, partition, offset,
error, raw bytes) of the same format, published under the same ledger step as the good rows
of their batch (parquet), or in a commit just before theirs (delta, iceberg).
``delta`` (the default) and ``iceberg`` append through the format's own commit, which carries
the batch's Kafka offsets; :mod:`consumer_sdk.lake.lake_writer` does that, fenced against members
that lost their partitions. ``parquet`` with the offset ledger is the fallback for a Spark
without the lake jars.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from assignor import TopicPartition
from consumer_sdk.lake.arrow_batch import (
    DATE_COLUMN,
    DEAD_LETTER_SCHEMA,
    ArrowBatch,
    ValueCodec,
    columns_to_arrow,
    offset_ranges,
    table_offset_ranges,
    with_ingest_date,
)
from consumer_sdk.lake.lake_writer import LakeAppender
from consumer_sdk.lake.merge_once import MERGE_FORMATS, merge_once
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import (
    column_ddl,
    create_table,
    describe_table,
    session_lost,
    spark_session,
    table_identifier,
    table_root,
)
from consumer_sdk.lake.table_store import OffsetLedger, StagedFile, staged_parquet
from consumer_sdk.sink import PartitionsFenced
from contract.settings import ConfigError

# A warehouse these say of is set up wrong (the user's to fix); a full disk or an I/O error
# is not, and the start is retried.
_SETUP_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENOENT}
)
log = logging.getLogger(__name__)
STAGING_DIR = ".staging"
# A batch from this size on is written by two Spark tasks at once (see SparkTableSink._frame).
SPLIT_FROM_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class StagedBatch:
    """One topic's batch, staged and not yet visible: what :meth:`SparkTableSink.publish`
    needs. ``staging`` is None for delta/iceberg (their append happens at publish)."""

    topic: str
    table: str
    batch: ArrowBatch
    ingest_time: datetime
    staging: Path | None
    files: list[StagedFile]
    first_offsets: dict[int, int]
    last_offsets: dict[int, int]
    claims: dict[int, str]  # delta/iceberg: the partition claims the batch was read under


def _staged_batch(staged: object) -> StagedBatch:
    if not isinstance(staged, StagedBatch):
        raise TypeError(f"expected a StagedBatch from SparkTableSink.stage, got {staged!r}")
    return staged


class SparkTableSink:
    """A :class:`~consumer_sdk.sink.Sink` writing Spark tables; see module doc."""

    def __init__(self, config: SparkSinkConfig) -> None:
        self.config = config
        self.codec = ValueCodec(config.value_format, config.json_fields(), config.json_epoch_unit)
        self._session: Any = None
        # Tables registered in the current session's catalog, and every table this sink
        # registered (to register again in a new session after its server restarted).
        self._ready_tables: set[str] = set()
        self._registered: dict[str, pa.Schema] = {}
        self._table_lock = threading.Lock()
        # One publish per topic at a time. The consumer publishes in batch order (a batch must
        # never publish before an earlier one of the same partitions: the ledger would skip
        # the earlier rows); the lock holds that even when an awaiting coroutine was cancelled
        # while its thread still runs.
        self._topic_locks: dict[str, threading.Lock] = {}
        self._frame_lock = threading.Lock()
        token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._staging = config.warehouse_path / STAGING_DIR / token
        self.rows_written = 0
        self.dead_letters_written = 0
        self.rows_skipped = 0
        self.rows_fenced = 0
        # Kafka's id of each topic (use_topic_ids): the parquet ledger and the appender name it.
        self._topic_ids: dict[str, str] = {}
        self._lake = (
            LakeAppender(config, self._frame, self._topic_ids)
            if config.table_format != "parquet"
            else None
        )

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the Spark session (paid once per process) and clear dead staging dirs."""
        await asyncio.to_thread(self.open)

    def open(self) -> Any:
        """Blocking :meth:`start`; returns the session."""
        if self._session is None:
            try:
                self.config.warehouse_path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # not a directory, not writable, read-only
                raise self._unwritable(exc) from None
            _remove_dead_staging(
                self.config.warehouse_path / STAGING_DIR, self.config.staging_max_age_secs
            )
            self._session = spark_session(self.config)
        return self._session

    async def prepare(self, topics: Sequence[str]) -> None:
        """Create (or register) the table of each topic (and, for delta and iceberg, the
        dead-letter table whose history every resume reads), before any batch arrives."""
        await asyncio.to_thread(self.prepare_blocking, topics)

    def prepare_blocking(self, topics: Sequence[str]) -> None:
        """Blocking :meth:`prepare`. Raises ConfigError if a table exists with other columns,
        or if the table format needs jars this Spark lacks."""
        tables = [(self.config.table_for(topic), self.codec.schema()) for topic in topics]
        if self._lake is not None:  # read at every assignment: made now, not at the first
            tables.append((self.config.dead_letter_table, DEAD_LETTER_SCHEMA))
        for table, schema in tables:
            try:
                self._ensure_table(table, schema)
            except OSError as exc:
                raise self._unwritable(exc) from None

    def _unwritable(self, exc: OSError) -> Exception:
        """What to raise for ``exc`` met writing the warehouse: a ConfigError where it is set
        up wrong (``_SETUP_ERRNOS``), else ``exc`` itself (a full disk, an I/O error: the
        start is retried)."""
        if exc.errno not in _SETUP_ERRNOS:
            return exc
        return ConfigError(
            f"warehouse (AUTOSCALER_SPARK_WAREHOUSE) must be a directory this process can "
            f"write, got {self.config.warehouse!r}: {exc.strerror} ({exc.filename})"
        )

    async def close(self) -> None:
        """Remove this process's staging directory and let a table's checkpoint being
        written end (the session lives with the process)."""
        shutil.rmtree(self._staging, ignore_errors=True)
        if self._lake is not None:
            await asyncio.to_thread(self._lake.close)

    # Sink --------------------------------------------------------------------------------
    async def write(self, topic: str, table: pa.Table) -> None:
        """Write one topic's part of a batch; returns once it is in the table."""
        if table.num_rows:
            await asyncio.to_thread(self.write_blocking, topic, table)

    async def write_once(self, topic: str, table: pa.Table) -> None:
        """Write one topic's records so that the tables hold each (topic, partition, offset)
        once however often they come: what a share-group member writes
        (:mod:`consumer_sdk.lake.merge_once`). Returns once they are in the tables."""
        if table.num_rows:
            await asyncio.to_thread(self.write_once_blocking, topic, table)

    async def prepare_merges(self, topics: Sequence[str]) -> None:
        """Merge nothing into each table :meth:`write_once` writes for ``topics``: the
        session compiles what merges need now, before the member takes records (a share
        group's acquisition lock runs while the first write does)."""
        await asyncio.to_thread(self.prepare_merges_blocking, topics)

    def prepare_merges_blocking(self, topics: Sequence[str]) -> None:
        """Blocking :meth:`prepare_merges`."""
        self._check_merge_format()
        self._ensure_tables(topics)
        tables = [(self.config.table_for(t), self.codec.schema(), t) for t in topics]
        tables += [(self.config.dead_letter_table, DEAD_LETTER_SCHEMA, t) for t in topics[:1]]
        with self._using_session() as session:
            for name, schema, topic in tables:
                nothing = session.createDataFrame([], column_ddl(schema))
                target = table_identifier(self.config, name)
                merge_once(
                    session,
                    target,
                    nothing,
                    {0: (0, -1)},
                    topic,
                    table_format=self.config.table_format,
                )

    def _check_merge_format(self) -> None:
        if self.config.table_format not in MERGE_FORMATS:
            raise ConfigError(
                f"table_format (AUTOSCALER_SPARK_TABLE_FORMAT) must be "
                f"{' or '.join(MERGE_FORMATS)} for a share-group member (its writes merge on "
                f"topic, partition and offset), got {self.config.table_format!r}"
            )

    def write_once_blocking(self, topic: str, table: pa.Table) -> None:
        """Blocking :meth:`write_once`: dead letters first, then the rows, each an
        insert-only merge."""
        self._check_merge_format()
        self._ensure_tables([topic])
        ingest_time = datetime.now(UTC)
        batch = columns_to_arrow(topic, table, self.codec, ingest_time)
        targets = (
            (self.config.dead_letter_table, batch.dead_letters),
            (self.config.table_for(topic), batch.rows),
        )
        for name, rows in targets:
            if not rows.num_rows:
                continue
            firsts, lasts = table_offset_ranges(rows)
            ranges = {p: (first, lasts[p]) for p, first in firsts.items()}
            with self._using_session() as session:
                frame = self._frame(session, with_ingest_date(rows, ingest_time.date()))
                target = table_identifier(self.config, name)
                inserted = merge_once(
                    session, target, frame, ranges, topic, table_format=self.config.table_format
                )
            if inserted is None:  # Iceberg's answer has no count: the rows, at most
                log.info("%s: merged %d row(s) into %s", topic, rows.num_rows, name)
            else:
                log.info(
                    "%s: merged %d row(s) into %s, %d already there",
                    topic,
                    inserted,
                    name,
                    rows.num_rows - inserted,
                )
                self.rows_skipped += rows.num_rows - inserted
            added = rows.num_rows if inserted is None else inserted
            if rows is batch.rows:
                self.rows_written += added
            else:
                self.dead_letters_written += added

    async def stage(self, topic: str, table: pa.Table) -> StagedBatch:
        """Build and stage one topic's part of a batch; nothing is visible until
        :meth:`publish`."""
        return await asyncio.to_thread(self.stage_blocking, topic, table)

    async def publish(self, staged: object) -> None:
        """Publish a batch :meth:`stage` returned into the table."""
        await asyncio.to_thread(self.publish_blocking, _staged_batch(staged))

    async def discard(self, staged: object) -> None:
        """Delete a staged batch's files."""
        await asyncio.to_thread(self.discard_blocking, _staged_batch(staged))

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """Next offset per partition where the table holds rows past the committed offset."""
        return await asyncio.to_thread(self.stored_next_offsets, partitions)

    def use_topic_ids(self, ids: Mapping[str, str]) -> None:
        """Kafka's current id of each topic: offsets the tables recorded under another id
        are of a topic deleted since, not where this one is."""
        self._topic_ids.update(ids)

    def fences_lost_partitions(self) -> bool:
        """Every format does: Delta and Iceberg drop the rows of partitions claimed since a
        batch was read (the claim is taken in :meth:`resume_offsets`); Parquet's ledger
        drops rows at or below the offsets it already holds, under the topic's lock."""
        return True

    # blocking work (runs in a thread) ----------------------------------------------------
    def write_blocking(self, topic: str, table: pa.Table) -> None:
        """Stage and publish. Raises on failure (nothing of the batch is then in the
        table's commits, so a retry or the next owner writes it again)."""
        self.publish_blocking(self.stage_blocking(topic, table))

    def stage_blocking(self, topic: str, fetched: pa.Table) -> StagedBatch:
        """Convert to the table's rows (raw and valid text values without a Python object per
        record) and (Parquet format) write them into a staging directory private to this
        batch. Safe to run for several batches at once."""
        now = datetime.now(UTC)
        return self._stage_arrow(topic, columns_to_arrow(topic, fetched, self.codec, now), now)

    def _stage_arrow(self, topic: str, batch: ArrowBatch, now: datetime) -> StagedBatch:
        table = self.config.table_for(topic)
        self._ensure_table(table, batch.rows.schema)
        if batch.dead_letters.num_rows:
            self._ensure_table(self.config.dead_letter_table, batch.dead_letters.schema)
        first_offsets, last_offsets = offset_ranges(batch)
        if self._lake is not None:  # appended at publish, by the format
            claims = self._lake.claims_for(topic, sorted(last_offsets))
            return StagedBatch(
                topic, table, batch, now, None, [], first_offsets, last_offsets, claims
            )
        date_dir = f"{DATE_COLUMN}={now.date().isoformat()}"
        staging = self._staging / uuid.uuid4().hex
        try:
            _stage_file(batch.dead_letters, staging / "dead", "dead-letters.parquet")
            _stage_file(batch.rows, staging / "rows", "rows.parquet")
            dead_root = table_root(self.config, self.config.dead_letter_table)
            files = staged_parquet(staging / "dead", dead_root, date_dir) + staged_parquet(
                staging / "rows", table_root(self.config, table), date_dir
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return StagedBatch(
            topic, table, batch, now, staging, files, first_offsets, last_offsets, {}
        )

    def publish_blocking(self, staged: StagedBatch) -> None:
        """Move a staged batch into the table and advance the offset ledger (Parquet), or
        append it through the format's own commit. The staging directory goes either way."""
        with self._table_lock:
            topic_lock = self._topic_locks.setdefault(staged.topic, threading.Lock())
        with topic_lock:
            try:
                if self._lake is not None:
                    self._append_to_lake(self._lake, staged)
                    return
                self._publish_staged(staged)
            finally:
                self.discard_blocking(staged)
        self.rows_written += staged.batch.rows.num_rows
        self.dead_letters_written += staged.batch.dead_letters.num_rows

    @contextlib.contextmanager
    def _using_session(self) -> Iterator[Any]:
        """The session, forgotten if a call on it finds it gone (its Connect server
        restarted): the caller's retry then makes a new one and registers the tables this
        sink registered in the new server's catalog again, instead of failing on the old
        one for ever."""
        session = self.open()
        try:
            yield session
        except Exception as exc:
            if session_lost(exc) and self._session is session:
                log.warning(
                    "the Spark Connect session at %s is gone (its server restarted?): "
                    "the next attempt starts a new one",
                    self.config.spark_remote,
                )
                self._session = None
                self._ready_tables = set()
            raise

    def _append_to_lake(self, lake: LakeAppender, staged: StagedBatch) -> None:
        for table, schema in list(self._registered.items()):  # again, after a lost session
            self._ensure_table(table, schema)
        with self._using_session() as session:
            result = lake.append(
                session,
                staged.topic,
                staged.batch,
                staged.last_offsets,
                staged.ingest_time.date(),
                staged.claims,
            )
        self.rows_written += result.rows
        self.dead_letters_written += result.dead_letters
        self.rows_fenced += result.fenced_rows
        self.rows_skipped += result.skipped
        if result.fenced_partitions:
            raise PartitionsFenced(
                frozenset(TopicPartition(staged.topic, p) for p in result.fenced_partitions),
                frozenset(TopicPartition(staged.topic, p) for p in result.taken_partitions),
            )

    def discard_blocking(self, staged: StagedBatch) -> None:
        """Delete what is left of a batch's staging directory."""
        if staged.staging is not None:
            shutil.rmtree(staged.staging, ignore_errors=True)

    def _publish_staged(self, staged: StagedBatch) -> None:
        root = table_root(self.config, staged.table)
        first, last = staged.first_offsets, staged.last_offsets
        topic_id = self._topic_ids.get(staged.topic, "")
        result = OffsetLedger(root).publish(staged.topic, first, last, staged.files, topic_id)
        self.rows_skipped += result.rows_skipped
        log.info(
            "%s: published %d file(s), offsets %s, %d row(s) already stored",
            staged.topic,
            result.files,
            {p: f"{first[p]}-{end}" for p, end in sorted(last.items())},
            result.rows_skipped,
        )

    def stored_next_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Blocking :meth:`resume_offsets` (also rolls back half-done publishes)."""
        found: dict[TopicPartition, int] = {}
        if self._lake is not None:
            self._ensure_tables({tp.topic for tp in partitions})
            with self._using_session() as session:
                return self._lake.claim_and_resume(session, partitions)
        for topic in sorted({tp.topic for tp in partitions}):
            stored = OffsetLedger(table_root(self.config, self.config.table_for(topic))).stored(
                topic, self._topic_ids.get(topic, "")
            )
            for tp in partitions:
                if tp.topic == topic and tp.partition in stored:
                    found[tp] = stored[tp.partition] + 1
        return found

    def _frame(self, session: Any, table: pa.Table) -> Any:
        """A DataFrame of ``table`` in two Arrow batches, or one below ``SPLIT_FROM_BYTES``.
        Spark writes each batch in a task of its own, into a file of its own: two tasks
        write a large batch in parallel (far fewer files than the 10,000-row default gives);
        a small one pays each task's fixed cost twice for nothing (the statistics code Delta
        generates per task, the Parquet writer): 2,000-row Delta appends took 16 % less of
        the JVM's CPU as one batch (benchmarks/results/delta_commit_cost.md).

        ``table`` comes in a chunk per fetch, and Spark makes a batch (a task) of each
        chunk: it is copied into one chunk per column here, then split in two. Handing Spark
        the chunks and coalescing its partitions instead saves the copy but made a 16 MiB
        Delta append 24 % slower (0.45 s against 0.36 s, 40 chunks, measured side by side).
        The batch size is a session setting read by createDataFrame: held while both run,
        so batches staged at once each get their own; Spark's write runs outside the lock."""
        table = table.combine_chunks()
        rows = table.num_rows if table.nbytes < SPLIT_FROM_BYTES else (table.num_rows + 1) // 2
        with self._frame_lock:
            session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(max(1, rows)))
            return session.createDataFrame(table)

    def _ensure_tables(self, topics: Iterable[str]) -> None:
        """The tables of ``topics`` and the dead-letter table, registered (lake formats)."""
        for topic in topics:
            self._ensure_table(self.config.table_for(topic), self.codec.schema())
        self._ensure_table(self.config.dead_letter_table, DEAD_LETTER_SCHEMA)

    def _ensure_table(self, table: str, schema: pa.Schema) -> None:
        with self._table_lock:
            if table in self._ready_tables:
                return
            root = table_root(self.config, table)
            added = describe_table(root, schema, self.config.table_format)
            with self._using_session() as session:
                create_table(
                    session,
                    self.config.database,
                    table,
                    root,
                    self.config.table_format,
                    self.config.iceberg_catalog,
                    added,
                )
            self._ready_tables.add(table)
            self._registered[table] = schema


def _stage_file(table: pa.Table, path: Path, name: str) -> None:
    """pyarrow writes ``table`` (if it has rows) as one Parquet file ``name`` under ``path``.
    Spark's own write of a batch converts its Arrow columns to rows and back in Spark tasks
    (most of a batch's write time on two cores); the file is the same to Spark's reader."""
    if table.num_rows:
        path.mkdir(parents=True)
        pq.write_table(table, path / name, coerce_timestamps="us")


def _remove_dead_staging(base: Path, max_age_secs: float) -> None:
    """Delete staging dirs of dead processes on this host, and any older than the limit."""
    if not base.exists():
        return
    host = socket.gethostname()
    now = time.time()
    for directory in base.iterdir():
        owner_host, _, rest = directory.name.rpartition("-")[0].rpartition("-")
        pid_text = rest
        dead = False
        if owner_host == host and pid_text.isdigit():
            dead = not _alive(int(pid_text))
        try:
            old = now - directory.stat().st_mtime > max_age_secs
        except FileNotFoundError:
            continue
        if dead or old:
            shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
