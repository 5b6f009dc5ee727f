"""Delta appends whose data files pyarrow writes, committed by the session's Delta.

Spark's own append of a batch converts its Arrow columns to rows and back to Parquet in
Spark tasks: on two cores a 16 MiB append took 0.54 s and 1.0 s of the JVM's CPU that way,
against 0.07 s and 0.08 s with this module's file (benchmarks/results/
delta_commit_cost_writers.md). Here pyarrow writes the batch as one Parquet file into its
date directory of the table, and ``java/kafkaautoscaler/delta/FileAppend.java`` commits it
through Delta's own transaction in the session's JVM (local, or a Spark Connect server's):
the same log store (which links each version exclusively and checks the claims the commit
names), the same conflict retry for concurrent appends, checkpoints and commit info (the
batch's offsets in ``userMetadata``) as a Spark write. A file no commit names (its writer
died before committing) is never read; ``VACUUM`` removes it.

Through Spark Connect the server commits the file the client wrote (they share the
warehouse's file system, as the sink's other Connect paths assume), when the server loads our
command plugin; without it Spark writes. Tables that check rows as they are written are
refused by the Java side and written by Spark.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from consumer_sdk.lake.arrow_batch import DATE_COLUMN
from consumer_sdk.lake.jvm_appends import Refusals, run_request
from consumer_sdk.lake.parquet_codecs import FILE_SUFFIXES, Unwritable, parquet_compression
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import table_root

SESSION_CODEC_KEY = "spark.sql.parquet.compression.codec"
SNAPPY = ("snappy", None)
# Delta truncates string bounds to this many characters (delta.dataSkippingStringPrefixLength);
# a longer value's bounds are left out here (no bound: Delta reads the file).
STRING_BOUND_CHARS = 32


@dataclass(frozen=True)
class DataFile:
    """A data file written into a table directory, named as its commit names it."""

    path: str  # relative to the table root: <date column>=<day>/part-<uuid>.snappy.parquet
    size: int
    stats: str


def file_stats(rows: pa.Table) -> str:
    """Delta's statistics JSON of a file holding ``rows``, as Spark's Delta writes them: the
    row count, every column's null count, and bounds of integer, timestamp (to the
    millisecond, Delta's precision) and string columns; a struct's are nested objects of its
    fields' (delta-rs refuses a number there). Data skipping uses them: resume and dedup
    filter on partition and offset, queries often on the record timestamp."""
    nulls, minimum, maximum = _column_stats(rows.columns, rows.schema, rows.num_rows)
    stats = {"numRecords": rows.num_rows, "minValues": minimum, "maxValues": maximum}
    return json.dumps({**stats, "nullCount": nulls}, separators=(",", ":"))


def _column_stats(
    columns: list[pa.ChunkedArray], fields: Iterable[pa.Field], num_rows: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Null counts, minima and maxima of ``columns`` (nested for structs)."""
    nulls: dict[str, Any] = {}
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    for column, field in zip(columns, fields, strict=True):
        if pa.types.is_struct(field.type):
            # Flattened children carry their struct's nulls as their own.
            inner = _column_stats(column.flatten(), field.type, num_rows)
            for into, found in zip((nulls, minimum, maximum), inner, strict=True):
                if found or into is nulls:
                    into[field.name] = found
            continue
        nulls[field.name] = column.null_count
        if column.null_count < num_rows:
            bounds = _bounds(column, field.type)
            if bounds is not None:
                minimum[field.name], maximum[field.name] = bounds
    return nulls, minimum, maximum


def _bounds(column: pa.ChunkedArray, kind: pa.DataType) -> tuple[int | str, int | str] | None:
    """A column's (min, max) in Delta's statistics form, None for types without bounds."""
    if pa.types.is_integer(kind):
        found = pc.min_max(column)
        return found["min"].as_py(), found["max"].as_py()
    if pa.types.is_timestamp(kind) and kind.tz is not None:  # Spark's TIMESTAMP (not NTZ)
        found = pc.min_max(column.cast(pa.timestamp("ms", tz="UTC"), safe=False))
        return _timestamp_bound(found["min"].as_py()), _timestamp_bound(found["max"].as_py())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        found = pc.min_max(column)
        low, high = found["min"].as_py(), found["max"].as_py()
        if max(len(low), len(high)) > STRING_BOUND_CHARS:
            return None
        return low, high
    return None


def _timestamp_bound(moment: datetime) -> str:
    """A UTC moment as Delta's statistics write a timestamp: milliseconds, ``Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_data_file(
    root: Path, rows: pa.Table, day: date, compression: tuple[str, int | None] = SNAPPY
) -> DataFile:
    """Write ``rows`` (a data file's columns: no date column) as one Parquet file into the
    ``day`` partition of the table at ``root``, with pyarrow's ``(codec, level)``."""
    codec, level = compression
    name = f"part-{uuid.uuid4()}{FILE_SUFFIXES[codec]}.parquet"
    relative = f"{DATE_COLUMN}={day.isoformat()}/{name}"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path, compression=codec, compression_level=level)
    return DataFile(relative, path.stat().st_size, file_stats(rows))


class DeltaFileCommitter:
    """Commits :class:`DataFile` s into Delta tables through the session's Java side (a
    local session's JVM, or a Spark Connect server's: :mod:`consumer_sdk.lake.jvm_appends`)."""

    def __init__(self) -> None:
        self._refusals = Refusals()
        self._compression: dict[str, tuple[str, int | None]] = {}

    def refusal(self, session: Any, root: Path) -> str | None:
        """Why the table at ``root`` must be written by Spark (None: files can be committed).
        Asked once per table and process (again after a refused commit); a refusal is
        logged when found."""
        key = root.as_posix()
        return self._refusals.of(key, lambda: self._ask(session, key))

    def _ask(self, session: Any, key: str) -> str | None:
        refused: str | None = run_request(session, {"op": "delta.refusal", "root": key})
        if refused is not None:
            return refused
        # Spark's Delta writer compresses as the session says; so do the files written here.
        codec = session.conf.get(SESSION_CODEC_KEY, "snappy")
        try:
            self._compression[key] = parquet_compression(codec, None)
        except Unwritable as exc:
            return f"the session's {SESSION_CODEC_KEY}: {exc}"
        return None

    def write_batch(
        self,
        session: Any,
        config: SparkSinkConfig,
        table: str,
        rows: pa.Table,
        day: date,
        metadata: str,
    ) -> bool:
        """:meth:`consumer_sdk.lake.jvm_appends.FileCommitter.write_batch`."""
        root = table_root(config, table)
        if self.refusal(session, root) is not None:
            return False
        data = write_data_file(root, rows, day, self._compression[root.as_posix()])
        self.commit(session, root, day, [data], metadata)
        return True

    def commit(
        self, session: Any, root: Path, day: date, files: Sequence[DataFile], metadata: str
    ) -> int:
        """One Delta commit of ``files`` (all in the ``day`` partition) carrying
        ``metadata`` as its ``userMetadata``; returns the version committed."""
        request = {
            "op": "delta.commit",
            "root": root.as_posix(),
            "column": DATE_COLUMN,
            "value": day.isoformat(),
            "paths": [f.path for f in files],
            "sizes": [f.size for f in files],
            "stats": [f.stats for f in files],
            "metadata": metadata,
        }
        with self._refusals.committing(root.as_posix()):
            version: int = run_request(session, request)
        return version
