"""Appending batches to Delta Lake and Iceberg tables, exactly once per Kafka offset.

A topic's batch goes into its table in one commit of the format that also carries the batch's
last offset per partition (:mod:`consumer_sdk.lake.commit_offsets`); dead letters go first, in a
commit of the dead-letter table that carries theirs. Resuming a partition reads those offsets
back from the table's history (Delta: the commit info in its log,
:mod:`consumer_sdk.lake.delta.history`; Iceberg: its ``snapshots`` table), so the table says where
it is; a partition whose last writer finished its commits left a record of where they end
(:mod:`consumer_sdk.lake.partition_fence`), and its next owner resumes from that without reading
the history. A member that lost its partitions while paused cannot add duplicates:
:mod:`consumer_sdk.lake.partition_fence` drops its rows of partitions another member has claimed
since, and a Delta commit names the claims its rows were read under, which our log store
checks as it links the commit (so a commit a Spark Connect server finishes for a writer
killed with -9 cannot land after the next owner read where the table is). Readers see whole
commits only: a killed writer leaves at most data files no commit names (``VACUUM`` /
``remove_orphan_files`` clean them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from assignor import TopicPartition
from consumer_sdk.lake.arrow_batch import ArrowBatch, table_offset_ranges, with_ingest_date
from consumer_sdk.lake.commit_offsets import (
    SUMMARY_KEY,
    earlier_topic_ids,
    encode_offsets,
    recreated_topic_line,
    stored_offsets,
)
from consumer_sdk.lake.compact import CompactionBesideAppends
from consumer_sdk.lake.delta.files import DeltaFileCommitter
from consumer_sdk.lake.delta.history import commit_metadata, has_unbackfilled_commits
from consumer_sdk.lake.delta.maintenance import DeltaMaintenance
from consumer_sdk.lake.iceberg.files import IcebergFileCommitter
from consumer_sdk.lake.iceberg.maintenance import IcebergMaintenance
from consumer_sdk.lake.jvm_appends import FileCommitter, FilesRefused
from consumer_sdk.lake.partition_fence import (
    FENCE_DIR,
    PartitionFence,
    StoredOffsets,
    WriteTarget,
    lost_partitions,
    taken_partitions,
)
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import column_ddl, table_identifier, table_root
from consumer_sdk.lake.table_store import rows_past

log = logging.getLogger(__name__)

FrameBuilder = Callable[[Any, pa.Table], Any]


@dataclass(frozen=True)
class AppendResult:
    """What one fenced append wrote, and what it dropped."""

    rows: int
    dead_letters: int
    fenced_partitions: frozenset[int]  # lost to another member: nothing of them written
    fenced_rows: int
    skipped: int  # rows and dead letters the table already held (a batch read again)
    # Of the fenced: this writer's latest claim was overwritten by another writer's.
    taken_partitions: frozenset[int] = frozenset()


class LakeAppender:
    """Fenced, offset-carrying appends of one sink to its Delta or Iceberg tables."""

    def __init__(
        self,
        config: SparkSinkConfig,
        frame: FrameBuilder,
        topic_ids: Mapping[str, str] | None = None,
    ) -> None:
        if config.table_format not in ("delta", "iceberg"):
            raise ValueError(f"LakeAppender writes delta or iceberg, not {config.table_format}")
        self.config = config
        self._frame = frame
        self._fence = PartitionFence(config.warehouse_path / FENCE_DIR / config.database)
        self._claims: dict[tuple[str, int], str] = {}
        # Last offset per (topic, partition) known to be in the table (rows) and in the
        # dead-letter table: from the resume read, then from this writer's own commits.
        self._stored: dict[tuple[str, int], int] = {}
        self._dead_stored: dict[tuple[str, int], int] = {}
        # Partitions a commit of which failed: whether it landed is unknown until a claim
        # reads the history (the next append of them claims them anew first), so no
        # record of them is written meanwhile.
        self._uncertain: set[tuple[str, int]] = set()
        # A claim this writer replaced by its own next one while it kept the partition
        # (renewed to settle an uncertain commit) -> that next claim: batches staged under
        # the old one are still this owner's.
        self._renewed: dict[str, str] = {}
        # Kafka's id of each topic as the consumer last learnt it, kept by the sink (none:
        # not known, and a topic created again under its name cannot be told from the one
        # before).
        self._topic_ids: Mapping[str, str] = {} if topic_ids is None else topic_ids
        self._told_recreated: set[tuple[str, str]] = set()
        self.history_reads = 0
        self.maintenance: DeltaMaintenance | None = None
        if config.table_format == "delta" and config.delta_checkpoint_every > 0:
            self.maintenance = DeltaMaintenance(config.delta_checkpoint_every)
        self.iceberg_maintenance: IcebergMaintenance | None = None
        if config.table_format == "iceberg" and config.iceberg_keep_snapshots_secs > 0:
            self.iceberg_maintenance = IcebergMaintenance(config.iceberg_keep_snapshots_secs)
        self.compaction: CompactionBesideAppends | None = None
        if config.compact_every_commits > 0:
            self.compaction = CompactionBesideAppends(config, config.compact_every_commits)
        self._files: FileCommitter | None = None
        if config.files_by_arrow:
            delta = config.table_format == "delta"
            self._files = DeltaFileCommitter() if delta else IcebergFileCommitter()

    def close(self) -> None:
        """Let a checkpoint, expiry or compaction in progress end; start no more."""
        for upkeep in (self.maintenance, self.iceberg_maintenance, self.compaction):
            if upkeep is not None:
                upkeep.close()

    # resume ------------------------------------------------------------------------------
    def claim_and_resume(
        self, session: Any, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Claim ``partitions`` for this writer, then read where the table is: the next
        offset per partition the table already holds rows (or dead letters) of. From the
        last writers' records where they left exact ones, else from the tables' history."""
        topics = sorted({tp.topic for tp in partitions})
        started = time.monotonic()
        recorded: dict[tuple[str, int], StoredOffsets] = {}
        unknown: dict[str, list[int]] = {}
        for topic in topics:  # every claim before any read of where the tables are
            wanted = sorted({tp.partition for tp in partitions if tp.topic == topic})
            target = self._target(topic)
            claims = self._fence.claim(target, wanted)
            self._claims.update({(topic, p): token for p, token in claims.items()})
            topic_id = self._topic_ids.get(topic, "")
            for partition in wanted:
                self._uncertain.discard((topic, partition))
                record = self._fence.read_stored(target, partition)
                if record is None or record.topic_id != topic_id:
                    unknown.setdefault(topic, []).append(partition)
                else:
                    recorded[(topic, partition)] = record
        claimed = time.monotonic()
        if unknown:
            dead_history = self._history(session, self.config.dead_letter_table)
            for topic, wanted in unknown.items():
                table = self.config.table_for(topic)
                topic_id = self._topic_ids.get(topic, "")
                history = self._history(session, table)
                rows = stored_offsets(history, topic, topic_id=topic_id)
                dead = stored_offsets(dead_history, topic, bound_for=table, topic_id=topic_id)
                if topic_id:
                    self._say_if_recreated(topic, table, topic_id, history, dead_history)
                for partition in wanted:
                    recorded[(topic, partition)] = StoredOffsets(
                        rows.get(partition), dead.get(partition), topic_id
                    )
        found: dict[TopicPartition, int] = {}
        for (topic, partition), record in recorded.items():
            key = (topic, partition)
            # Nothing of it in a table, though this writer may have written it: the topic
            # was deleted and created again since.
            if record.dead is None:
                self._dead_stored.pop(key, None)
            else:
                self._dead_stored[key] = record.dead
            if record.rows is None:
                self._stored.pop(key, None)
            else:
                self._stored[key] = record.rows
                found[TopicPartition(topic, partition)] = record.rows + 1
        log.info(
            "claimed %d partition(s) in %.2f s (waiting for writes of their last owners), "
            "read where their tables are in %.2f s (%d from the history, the rest from the "
            "last writers' records)",
            len(partitions),
            claimed - started,
            time.monotonic() - claimed,
            sum(len(wanted) for wanted in unknown.values()),
        )
        return found

    def _say_if_recreated(
        self,
        topic: str,
        table: str,
        topic_id: str,
        history: Sequence[str | None],
        dead_history: Sequence[str | None],
    ) -> None:
        """One line, once, when the tables hold offsets of an earlier topic of this name."""
        earlier = earlier_topic_ids([*history, *dead_history], topic, topic_id)
        if not earlier or (topic, topic_id) in self._told_recreated:
            return
        self._told_recreated.add((topic, topic_id))
        log.warning("%s", recreated_topic_line(topic, topic_id, earlier, table))

    def _target(self, topic: str) -> WriteTarget:
        """``topic`` and the tables it is written into: its own, dead letters."""
        return WriteTarget(topic, self.config.table_for(topic), self.config.dead_letter_table)

    def claims_for(self, topic: str, partitions: Sequence[int]) -> dict[int, str]:
        """The claims a batch of ``partitions`` is read under (taken when it is staged)."""
        return {p: self._claims[(topic, p)] for p in partitions if (topic, p) in self._claims}

    def _history(self, session: Any, table: str) -> list[str | None]:
        """Every commit's offsets metadata of ``table`` (None where a commit has none)."""
        self.history_reads += 1
        if self.config.table_format == "delta":
            root = table_root(self.config, table)
            if not has_unbackfilled_commits(root):
                return commit_metadata(root)  # the log itself: no Spark job
            query = f"DESCRIBE HISTORY delta.`{root.as_posix()}`"
            rows = session.sql(query).select("userMetadata").collect()
            return [row["userMetadata"] for row in rows]
        identifier = table_identifier(self.config, table)
        # Other processes commit to this table: read its latest metadata, not a copy a
        # caching catalog (Iceberg's default in Spark) may hold from before their commits.
        session.sql(f"REFRESH TABLE {identifier}")
        query = f"SELECT summary['{SUMMARY_KEY}'] AS offsets FROM {identifier}.snapshots"
        return [row["offsets"] for row in session.sql(query).collect()]

    # append ------------------------------------------------------------------------------
    def append(
        self,
        session: Any,
        topic: str,
        batch: ArrowBatch,
        last_offsets: Mapping[int, int],
        ingest_date: date,
        claims: Mapping[int, str],
    ) -> AppendResult:
        """Commit ``batch`` (whose last offset per partition is ``last_offsets``; dead
        letters, then rows) without the partitions it lost and without what the table
        already holds."""
        held = {p: self._latest(token) for p, token in claims.items()}
        started = time.monotonic()
        target = self._target(topic)
        uncertain = sorted(p for p in last_offsets if (topic, p) in self._uncertain)
        if uncertain:
            self._settle(session, target, uncertain, held)
        with self._fence.locked(target, last_offsets) as owners:
            locked = time.monotonic()
            for partition, owner in owners.items():
                if partition not in held and (topic, partition) in self._claims:
                    # Staged before this writer claimed it (a sink used without the
                    # consumer's resume): its current claim is the batch's.
                    held[partition] = self._claims[(topic, partition)]
                if not owner and partition not in held:  # nobody ever claimed it: ours now
                    held[partition] = self._fence.write_owner(target, partition)
                    self._claims[(topic, partition)] = held[partition]
                    owners[partition] = held[partition]
            lost = lost_partitions(held, owners)
            current = {p: self._claims[(topic, p)] for p in owners if (topic, p) in self._claims}
            taken = frozenset(taken_partitions(held, current, owners))
            rows, dead = batch.rows, batch.dead_letters
            if lost:
                rows, dead = _without(rows, lost), _without(dead, lost)
                log.warning(
                    "%s: partitions %s were claimed by another member since this batch was "
                    "read; its rows of them are dropped (the new owner writes them)",
                    topic,
                    sorted(lost),
                )
            fenced = batch.rows.num_rows - rows.num_rows
            before = rows.num_rows + dead.num_rows
            rows = _unstored(rows, topic, self._stored)
            dead = _unstored(dead, topic, self._dead_stored)
            skipped = before - rows.num_rows - dead.num_rows
            kept_last = {
                p: o
                for p, o in last_offsets.items()
                if p not in lost and o > self._stored.get((topic, p), -1)
            }
            if not kept_last:
                return AppendResult(0, 0, frozenset(lost), fenced, skipped, taken)
            dead_last = table_offset_ranges(dead)[1] if dead.num_rows else {}
            written = sorted({*kept_last, *dead_last})
            self._fence.write_stored(target, dict.fromkeys(written))  # "writing"
            # Our Delta log store / Iceberg catalog check these once more as they commit: a
            # writer killed mid-commit has let go of its locks, but a Spark Connect server may
            # still be landing it.
            claims = {p: held[p] for p in written if p in held}
            fence = str(self._fence.directory(target))
            topic_id = self._topic_ids.get(topic, "")
            try:
                if dead_last:
                    dead_metadata = encode_offsets(
                        topic, dead_last, target.table, claims, fence, topic_id
                    )
                    self._write(session, target.dead_table, dead, ingest_date, dead_metadata)
                    self._dead_stored.update({(topic, p): o for p, o in dead_last.items()})
                metadata = encode_offsets(
                    topic, kept_last, claims=claims, fence=fence, topic_id=topic_id
                )
                self._write(session, target.table, rows, ingest_date, metadata)
                self._stored.update({(topic, p): o for p, o in kept_last.items()})
            except BaseException:
                self._uncertain.update((topic, p) for p in written)
                raise
            for table in (target.table, *([target.dead_table] if dead_last else [])):
                if self.maintenance is not None:
                    self.maintenance.committed(table_root(self.config, table))
                if self.iceberg_maintenance is not None:
                    identifier = table_identifier(self.config, table)
                    self.iceberg_maintenance.committed(session, identifier, table)
                if self.compaction is not None:
                    self.compaction.committed(session, table)
            self._fence.write_stored(
                target,
                {
                    p: StoredOffsets(
                        self._stored.get((topic, p)), self._dead_stored.get((topic, p)), topic_id
                    )
                    for p in written
                    if (topic, p) not in self._uncertain
                },
            )
        log.info(
            "%s: appended %d row(s) and %d dead letter(s) in %.2f s (%.2f s waiting for "
            "the partitions' locks)",
            topic,
            rows.num_rows,
            dead.num_rows,
            time.monotonic() - started,
            locked - started,
        )
        return AppendResult(rows.num_rows, dead.num_rows, frozenset(lost), fenced, skipped, taken)

    def _latest(self, token: str) -> str:
        """This writer's current claim for a batch read under ``token`` (itself unless this
        writer renewed it)."""
        while token in self._renewed:
            token = self._renewed[token]
        return token

    def _settle(
        self, session: Any, target: WriteTarget, partitions: list[int], held: dict[int, str]
    ) -> None:
        """Find out whether the failed commit of ``partitions`` landed before anything of
        them is appended again (a commit can land and its answer be lost: a connection
        reset after the server committed, Iceberg's CommitStateUnknownException). Those this
        writer still owns are claimed anew, so no commit under the old claim can land from
        now on (a Spark Connect server may still be running it), then the tables' history
        says where each is; ``held`` (the batch's claims) takes the new claims."""
        topic = target.topic
        with self._fence.locked(target, partitions) as owners:
            mine = [p for p in partitions if owners[p] and owners[p] == held.get(p)]
            renewed = {p: self._fence.write_owner(target, p) for p in mine}
        if not mine:
            return  # claimed by another member since: dropped as lost below
        for p in mine:  # before anything can fail: the claims are this writer's now
            self._renewed[held[p]] = renewed[p]
            held[p] = self._claims[(topic, p)] = renewed[p]
        self._fence.wait_at_gates(target, mine)
        topic_id = self._topic_ids.get(topic, "")
        rows = stored_offsets(self._history(session, target.table), topic, topic_id=topic_id)
        dead = stored_offsets(
            self._history(session, target.dead_table),
            topic,
            bound_for=target.table,
            topic_id=topic_id,
        )
        for p in mine:
            for known, found in ((self._stored, rows), (self._dead_stored, dead)):
                if p in found:
                    known[(topic, p)] = found[p]
                else:
                    known.pop((topic, p), None)
            self._uncertain.discard((topic, p))
        with self._fence.locked(target, mine) as owners:
            self._fence.write_stored(
                target,
                {
                    p: StoredOffsets(rows.get(p), dead.get(p), topic_id)
                    for p in mine
                    if owners[p] == renewed[p]
                },
            )
        log.warning(
            "%s: a commit of partitions %s failed without saying whether it landed; claimed "
            "them again and read the tables' history: their rows end at %s",
            topic,
            mine,
            {p: rows.get(p) for p in mine},
        )

    def _write(
        self, session: Any, table: str, rows: pa.Table, ingest_date: date, metadata: str
    ) -> None:
        """One commit of ``rows`` (possibly none: the offsets still advance) into ``table``."""
        if rows.num_rows and self._append_files(session, table, rows, ingest_date, metadata):
            return
        if rows.num_rows:
            frame = self._frame(session, with_ingest_date(rows, ingest_date))
        else:  # a batch of dead letters only: Spark Connect infers no schema from no rows
            frame = session.createDataFrame([], column_ddl(rows.schema))
        if self.config.table_format == "delta":
            root = table_root(self.config, table).as_posix()
            frame.write.format("delta").mode("append").option("userMetadata", metadata).save(root)
        else:
            identifier = table_identifier(self.config, table)
            frame.writeTo(identifier).option(f"snapshot-property.{SUMMARY_KEY}", metadata).append()

    def _append_files(
        self, session: Any, table: str, rows: pa.Table, ingest_date: date, metadata: str
    ) -> bool:
        """pyarrow writes ``rows`` as one data file and the format commits it
        (:mod:`consumer_sdk.lake.delta.files`, :mod:`consumer_sdk.lake.iceberg.files`); False when
        Spark must write them (no such committer, or the table refuses)."""
        if self._files is None:
            return False
        try:
            return self._files.write_batch(session, self.config, table, rows, ingest_date, metadata)
        except FilesRefused as exc:  # nothing committed: Spark writes the batch
            log.warning("%s: %s; Spark writes this batch", table, exc)
        return False


def _unstored(table: pa.Table, topic: str, stored: Mapping[tuple[str, int], int]) -> pa.Table:
    """``table`` without rows at or below the stored offset of their partition."""
    known = {p: last for (t, p), last in stored.items() if t == topic}
    if not known or table.num_rows == 0:
        return table
    keep = rows_past(table, known)
    if pc.all(keep).as_py():  # the common case: nothing of the batch is stored yet
        return table
    return table.filter(keep)


def _without(table: pa.Table, partitions: set[int]) -> pa.Table:
    """``table`` without the rows of ``partitions``."""
    if table.num_rows == 0:
        return table
    mask = pc.is_in(table.column("partition"), value_set=pa.array(sorted(partitions), pa.int32()))
    return table.filter(pc.invert(mask))
