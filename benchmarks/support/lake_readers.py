"""Reading the sink's tables with engines other than Spark: delta-rs for Delta Lake, pyiceberg
for Iceberg, pyarrow plus the offset ledger for parquet. Tests count rows and offsets with
these, so "exactly once" is not only Spark's word."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from benchmarks.support.iceberg_tables import iceberg_table
from consumer_sdk.lake.commit_offsets import SUMMARY_KEY, stored_offsets
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import table_root
from consumer_sdk.lake.table_store import OffsetLedger

KEY_COLUMNS = ["partition", "offset"]


def warehouse_config(tmp_path: Path, table_format: str) -> SparkSinkConfig:
    """A text-valued sink config with a database (and Iceberg catalog) of its own under
    ``tmp_path``: the process's one Spark session keeps every test's catalog."""
    token = uuid.uuid4().hex[:8]
    return SparkSinkConfig(
        warehouse=str(tmp_path / "warehouse"),
        database=f"db_{token}",
        iceberg_catalog=f"lake_{token}",
        value_format="text",
        table_format=table_format,
    )


def _delta_table(config: SparkSinkConfig, table: str) -> DeltaTable | None:
    try:
        return DeltaTable(str(table_root(config, table)))
    except TableNotFoundError:  # not created yet, or its first commit is being written
        return None


def read_keys(config: SparkSinkConfig, table: str) -> pa.Table:
    """(partition, offset) of every row of ``table``, read without Spark."""
    empty = pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64())})
    rows = read_rows(config, table, KEY_COLUMNS)
    return empty if rows is None else rows


def read_rows(
    config: SparkSinkConfig, table: str, columns: list[str] | None = None
) -> pa.Table | None:
    """``columns`` (None: all) of every row of ``table`` as delta-rs, pyiceberg or pyarrow
    read it; None while the table has no data."""
    root = table_root(config, table)
    if config.table_format == "delta":
        delta = _delta_table(config, table)
        return None if delta is None else delta.to_pyarrow_table(columns=columns)
    if config.table_format == "iceberg":
        loaded = iceberg_table(config, table)
        if loaded is None:
            return None
        return loaded.scan(selected_fields=tuple(columns or ("*",))).to_arrow()
    files = sorted(root.glob("date=*/*.parquet"))
    if not files:
        return None
    # Files written before the table gained columns lack them: read under the union.
    schema = pa.unify_schemas([pq.read_schema(f) for f in files])
    return ds.dataset([str(f) for f in files], schema=schema, format="parquet").to_table(
        columns=columns
    )


def key_counts(config: SparkSinkConfig, table: str) -> Counter[tuple[int, int]]:
    """How many rows each (partition, offset) has in ``table``, read without Spark."""
    keys = read_keys(config, table)
    return Counter(
        zip(keys.column("partition").to_pylist(), keys.column("offset").to_pylist(), strict=True)
    )


def table_offsets(config: SparkSinkConfig, topic: str) -> dict[int, int]:
    """Last offset per partition the topic's table says it holds: Delta commit metadata read
    by delta-rs, Iceberg snapshot summaries read by pyiceberg, or the parquet ledger."""
    table = config.table_for(topic)
    root = table_root(config, table)
    if config.table_format == "delta":
        delta = _delta_table(config, table)
        history = [] if delta is None else delta.history()
        return stored_offsets((commit.get("userMetadata") for commit in history), topic)
    if config.table_format == "iceberg":
        loaded = iceberg_table(config, table)
        if loaded is None:
            return {}
        summaries = (s.summary.additional_properties for s in loaded.snapshots() if s.summary)
        return stored_offsets((summary.get(SUMMARY_KEY) for summary in summaries), topic)
    return OffsetLedger(root).stored(topic)


class PollingReader:
    """Reads a table over and over in a thread (as a dashboard would) while writers run, and
    remembers the worst it saw: a (partition, offset) twice in one read, a row count lower
    than an earlier read's."""

    def __init__(self, config: SparkSinkConfig, table: str) -> None:
        self.config = config
        self.table = table
        self.reads = 0
        self.most_copies = 0
        self.count_went_down = False
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PollingReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _poll(self) -> None:
        try:
            self._poll_until_stopped()
        except Exception as exc:  # reported to the test, which fails on it
            self.error = exc

    def _poll_until_stopped(self) -> None:
        last = 0
        while not self._stop.is_set():
            counts = key_counts(self.config, self.table)
            total = sum(counts.values())
            self.count_went_down |= total < last
            self.most_copies = max(self.most_copies, max(counts.values(), default=0))
            last = max(last, total)
            self.reads += 1
