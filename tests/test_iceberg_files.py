"""Iceberg appends whose files pyarrow writes (``file_writer``): field ids from the table's
schema, the same rows, offsets and metrics as Spark's writer gives (read by pyiceberg and
Spark), one file and one snapshot per batch, and the tables they must leave to Spark."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.support.iceberg_tables import iceberg_table
from benchmarks.support.lake_readers import key_counts, table_offsets
from consumer_sdk.lake.arrow_batch import DATE_COLUMN
from consumer_sdk.lake.commit_offsets import SUMMARY_KEY, stored_offsets
from consumer_sdk.lake.iceberg.files import (
    FIELD_ID,
    IcebergFileCommitter,
    SchemaMismatch,
    local_directory,
    with_field_ids,
)
from consumer_sdk.lake.iceberg.maintenance import IcebergMaintenance
from consumer_sdk.lake.jvm_appends import ICEBERG_REFUSED, FilesRefused, refused_class
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_identifier
from consumer_sdk.sink import Record, records_table

ICEBERG_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "topic", "required": False, "type": "string"},
        {
            "id": 2,
            "name": "headers",
            "required": False,
            "type": {
                "type": "list",
                "element-id": 5,
                "element-required": False,
                "element": {
                    "type": "struct",
                    "fields": [
                        {"id": 6, "name": "key", "required": False, "type": "string"},
                        {"id": 7, "name": "value", "required": False, "type": "binary"},
                    ],
                },
            },
        },
        {
            "id": 3,
            "name": "labels",
            "required": False,
            "type": {
                "type": "map",
                "key-id": 8,
                "key": "string",
                "value-id": 9,
                "value-required": False,
                "value": "long",
            },
        },
    ],
}
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _ids(field: pa.Field) -> int:
    return int((field.metadata or {})[FIELD_ID])


def test_field_ids_follow_the_table_schema_into_lists_structs_and_maps() -> None:
    schema = pa.schema(
        [("labels", pa.map_(pa.string(), pa.int64())), ("topic", pa.string()), ("headers", HEADERS)]
    )
    numbered = with_field_ids(schema, ICEBERG_SCHEMA)
    assert [_ids(f) for f in numbered] == [3, 1, 2]
    element = numbered.field("headers").type.value_field
    assert (_ids(element), [_ids(f) for f in element.type]) == (5, [6, 7])
    labels = numbered.field("labels").type
    assert (_ids(labels.key_field), _ids(labels.item_field)) == (8, 9)
    assert numbered.remove_metadata().equals(schema)


@pytest.mark.parametrize(
    ("field", "named"),
    [
        (pa.field("extra", pa.string()), "column extra is not in the Iceberg table"),
        (pa.field("headers", pa.string()), "a string column where the Iceberg table has list"),
    ],
)
def test_a_column_not_of_the_table_is_named(field: pa.Field, named: str) -> None:
    with pytest.raises(SchemaMismatch, match=named):
        with_field_ids(pa.schema([field]), ICEBERG_SCHEMA)


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("file:/data/lake/t/data", Path("/data/lake/t/data")),
        ("file:///data/lake/t/data", Path("/data/lake/t/data")),
        ("/data/lake/t/data", Path("/data/lake/t/data")),
        ("s3://bucket/t/data", None),
    ],
)
def test_only_local_data_locations_are_written_by_pyarrow(
    location: str, expected: Path | None
) -> None:
    assert local_directory(location) == expected


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """This process's local session, with the lake jars (see test_spark_sink)."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


def _config(tmp_path: Path, writer: str) -> SparkSinkConfig:
    token = uuid.uuid4().hex[:8]  # a catalog per test: the one session keeps every test's
    return SparkSinkConfig(
        warehouse=str(tmp_path / writer),
        database=f"db_{token}",
        iceberg_catalog=f"lake_{token}",
        table_format="iceberg",
        file_writer=writer,
    )


def _records(offsets: range, partitions: int = 3) -> list[Record]:
    headers = (("trace", b"t-1"),)
    return [
        Record("t", o % partitions, o, 1_700_000_000_000 + o, b"k", b"v" * 50, headers)
        for o in offsets
    ]


def _snapshots(config: SparkSinkConfig, table: str) -> list[dict[str, str]]:
    loaded = iceberg_table(config, table)
    assert loaded is not None
    return [s.summary.additional_properties for s in loaded.snapshots() if s.summary]


def _file_metrics(session: Any, config: SparkSinkConfig) -> dict[str, Any]:
    """Row count, and per column the null count and bounds over the table's data files
    (Spark may write a batch as several files, pyarrow writes one)."""
    identifier = table_identifier(config, "t")
    rows = session.sql(
        f"SELECT record_count, null_value_counts, readable_metrics FROM {identifier}.files"
    ).collect()
    bounds: dict[str, tuple[Any, Any]] = {}
    for row in rows:
        for name, metric in row["readable_metrics"].asDict().items():
            low, high = metric["lower_bound"], metric["upper_bound"]
            if low is None:
                continue
            old = bounds.get(name, (low, high))
            bounds[name] = (min(old[0], low), max(old[1], high))
    nulls: Counter[int] = Counter()
    for row in rows:
        nulls.update(row["null_value_counts"] or {})
    return {"rows": sum(r["record_count"] for r in rows), "bounds": bounds, "nulls": nulls}


def test_arrow_and_spark_writers_land_the_same_rows_offsets_and_metrics(tmp_path: Path) -> None:
    batches = [range(0, 300), range(300, 500)]
    tables = {}
    metrics = {}
    for writer in ("arrow", "spark"):
        config = _config(tmp_path, writer)
        sink = SparkTableSink(config)
        for offsets in batches:
            sink.write_blocking("t", records_table(_records(offsets)))
        assert table_offsets(config, "t") == {0: 498, 1: 499, 2: 497}
        assert key_counts(config, "t") == Counter((o % 3, o) for o in range(500))
        session = sink.open()
        identifier = table_identifier(config, "t")
        frame = session.sql(f"SELECT * FROM {identifier} ORDER BY offset")
        tables[writer] = pa.Table.from_pylist([r.asDict() for r in frame.collect()])
        metrics[writer] = _file_metrics(session, config)
        for name in ("ingest_time",):  # stamped anew by each run
            metrics[writer]["bounds"].pop(name)
        if writer == "arrow":
            files = session.sql(f"SELECT count(*) AS n FROM {identifier}.files").collect()
            assert files[0]["n"] == len(batches)
            summaries = _snapshots(config, "t")
            assert len(summaries) == len(batches)
            stored = stored_offsets((s.get(SUMMARY_KEY) for s in summaries), "t")
            assert stored == {0: 498, 1: 499, 2: 497}
    arrow, spark = tables["arrow"], tables["spark"]
    # The ingest time and its date stamp each run anew (two runs may straddle midnight UTC).
    stamped = ["ingest_time", DATE_COLUMN]
    assert arrow.drop_columns(stamped).equals(spark.drop_columns(stamped))
    assert metrics["arrow"]["rows"] == 500
    assert metrics["arrow"] == metrics["spark"]


def test_a_sorted_table_is_written_by_spark_and_a_commit_after_the_change_is_refused(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    sink.write_blocking("t", records_table(_records(range(0, 20))))
    session = sink.open()
    identifier = table_identifier(config, "t")
    committer = IcebergFileCommitter()
    assert committer.refusal(session, identifier) is None
    session.sql(f"ALTER TABLE {identifier} WRITE ORDERED BY offset")
    rows = pa.table({"topic": ["t"]})
    with pytest.raises(FilesRefused) as refused:
        committer.append(session, identifier, rows, datetime.now(UTC).date(), json.dumps({}))
    assert refused_class(refused.value.__cause__) == ICEBERG_REFUSED
    assert "sort order" in (committer.refusal(session, identifier) or "")
    sink.write_blocking("t", records_table(_records(range(20, 40))))  # Spark writes it
    assert key_counts(config, "t") == Counter((o % 3, o) for o in range(40))
    assert table_offsets(config, "t") == {0: 39, 1: 37, 2: 38}


@pytest.mark.parametrize(
    ("codec", "level", "written", "refused"),
    [
        ("snappy", None, "SNAPPY", None),
        ("zstd", "9", "ZSTD", None),
        ("lz4", None, None, "its Parquet codec is lz4"),
        ("zstd", "99", None, "its zstd compression level '99' is not in [-131072, 22]"),
    ],
)
def test_files_take_the_table_codec_and_level_or_are_left_to_spark(
    tmp_path: Path, codec: str, level: str | None, written: str | None, refused: str | None
) -> None:
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    sink.prepare_blocking(["t"])
    session = sink.open()
    identifier = table_identifier(config, "t")
    properties = f"'write.parquet.compression-codec'='{codec}'"
    if level is not None:
        properties += f", 'write.parquet.compression-level'='{level}'"
    session.sql(f"ALTER TABLE {identifier} SET TBLPROPERTIES ({properties})")
    refusal = IcebergFileCommitter().refusal(session, identifier)
    assert refusal == refused
    if written is None:
        return  # Spark's writer: it fails on a level its codec does not take, as it would
    sink.write_blocking("t", records_table(_records(range(0, 20))))
    assert key_counts(config, "t") == Counter((o % 3, o) for o in range(20))
    [path] = [
        r["file_path"] for r in session.sql(f"SELECT file_path FROM {identifier}.files").collect()
    ]
    metadata = pq.ParquetFile(local_directory(path)).metadata
    assert metadata.row_group(0).column(0).compression == written


def test_a_table_keeps_a_bounded_number_of_metadata_files(tmp_path: Path) -> None:
    """Each commit writes a metadata.json listing every snapshot; the tables the sink creates
    delete all but the last 20 earlier ones at each commit (by default Iceberg keeps every
    one, and their bytes grow with the square of the commits)."""
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    commits = 25
    for batch in range(commits):
        sink.write_blocking("t", records_table(_records(range(batch * 3, batch * 3 + 3))))
    loaded = iceberg_table(config, "t")
    assert loaded is not None and len(loaded.snapshots()) == commits
    kept = list(tmp_path.rglob("*.metadata.json"))
    assert len(kept) == 21  # the current one and the 20 before it
    assert table_offsets(config, "t") == {0: 72, 1: 73, 2: 74}


def test_expiry_beside_the_appends_keeps_each_partitions_offsets_and_every_row(
    tmp_path: Path,
) -> None:
    """Snapshots past the retention are expired every few commits, beside the appends, but
    not the one holding a partition's highest offset: the partition written only at first
    resumes where it was, and every row stays, read back by pyiceberg."""
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    sink.write_blocking("t", records_table(_records(range(0, 3))))  # partitions 0, 1, 2
    assert sink._lake is not None
    # An hour later by the maintenance's clock: every snapshot is past the retention.
    maintenance = IcebergMaintenance(60, every=5, clock=lambda: time.time() + 3600)
    sink._lake.iceberg_maintenance = maintenance
    for offset in range(3, 33, 3):  # ten commits of partition 0 alone
        sink.write_blocking("t", records_table([Record("t", 0, offset, 0, b"k", b"v", ())]))
    maintenance.wait()
    assert maintenance.expired > 0
    loaded = iceberg_table(config, "t")
    assert loaded is not None
    assert len(loaded.snapshots()) == 11 - maintenance.expired
    assert table_offsets(config, "t") == {0: 30, 1: 1, 2: 2}
    assert sum(key_counts(config, "t").values()) == 13
