"""Delta appends whose files pyarrow writes (``file_writer``): their statistics, the same
rows and offsets as Spark's writer gives, and the tables they must leave to Spark."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from benchmarks.support.lake_readers import key_counts
from consumer_sdk.lake.arrow_batch import DATE_COLUMN
from consumer_sdk.lake.commit_offsets import stored_offsets
from consumer_sdk.lake.delta.files import (
    SESSION_CODEC_KEY,
    DataFile,
    DeltaFileCommitter,
    file_stats,
)
from consumer_sdk.lake.delta.history import commit_metadata
from consumer_sdk.lake.jvm_appends import DELTA_REFUSED, FilesRefused, refused_class
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_root
from consumer_sdk.sink import Record, records_table


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """This process's local session, with the lake jars (see test_spark_sink)."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


def _config(tmp_path: Path, writer: str) -> SparkSinkConfig:
    token = uuid.uuid4().hex[:8]
    return SparkSinkConfig(
        warehouse=str(tmp_path / writer), database=f"db_{token}", file_writer=writer
    )


def _records(offsets: range, partitions: int = 3) -> list[Record]:
    headers = (("trace", b"t-1"),)
    return [
        Record("t", o % partitions, o, 1_700_000_000_000 + o, b"k", b"v" * 50, headers)
        for o in offsets
    ]


@pytest.mark.parametrize(
    ("partitions", "offsets", "expected"),
    [
        (
            [0, 2, 1],
            [5, 9, 7],
            {
                "numRecords": 3,
                "minValues": {"partition": 0, "offset": 5},
                "maxValues": {"partition": 2, "offset": 9},
                "nullCount": {"partition": 0, "offset": 0},
            },
        ),
        (
            [4, 4],
            [None, 3],
            {
                "numRecords": 2,
                "minValues": {"partition": 4, "offset": 3},
                "maxValues": {"partition": 4, "offset": 3},
                "nullCount": {"partition": 0, "offset": 1},
            },
        ),
        (
            [1],
            [None],
            {
                "numRecords": 1,
                "minValues": {"partition": 1},
                "maxValues": {"partition": 1},
                "nullCount": {"partition": 0, "offset": 1},
            },
        ),
    ],
)
def test_file_stats_count_rows_and_bound_partition_and_offset(
    partitions: list[int], offsets: list[int | None], expected: dict[str, Any]
) -> None:
    rows = pa.table(
        {"partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64())}
    )
    assert json.loads(file_stats(rows)) == expected


def test_file_stats_bound_timestamps_to_the_millisecond_and_short_strings() -> None:
    moments = [1_764_189_486_123_456, 1_764_189_535_172_999, None]
    rows = pa.table(
        {
            "topic": ["orders", "orders", "orders"],
            "long": ["x" * 33, "y", "z"],
            "timestamp": pa.array(moments, pa.timestamp("us", tz="UTC")),
            "local": pa.array(moments, pa.timestamp("us")),
            "value": [b"a", None, b"c"],
        }
    )
    assert json.loads(file_stats(rows)) == {
        "numRecords": 3,
        "minValues": {"topic": "orders", "timestamp": "2025-11-26T20:38:06.123Z"},
        "maxValues": {"topic": "orders", "timestamp": "2025-11-26T20:38:55.172Z"},
        "nullCount": {"topic": 0, "long": 0, "timestamp": 1, "local": 1, "value": 1},
    }


def test_file_stats_of_a_struct_are_objects_of_its_fields_counting_its_nulls() -> None:
    """As Spark's Delta writes them (delta-rs refuses a number where a struct is): a null
    struct counts as a null in each of its fields; lists and maps get a null count only."""
    customer = pa.struct(
        [pa.field("id", pa.int64()), pa.field("tag", pa.struct([("k", pa.string())]))]
    )
    rows = pa.table(
        {
            "customer": pa.array(
                [{"id": 3, "tag": {"k": "b"}}, None, {"id": None, "tag": {"k": "a"}}], customer
            ),
            "items": pa.array([[1], None, []], pa.list_(pa.int64())),
        }
    )
    assert json.loads(file_stats(rows)) == {
        "numRecords": 3,
        "minValues": {"customer": {"id": 3, "tag": {"k": "a"}}},
        "maxValues": {"customer": {"id": 3, "tag": {"k": "b"}}},
        "nullCount": {"customer": {"id": 2, "tag": {"k": 1}}, "items": 1},
    }


def _commit_stats(root: Path) -> list[dict[str, Any]]:
    """Per commit that added files: its rows, and each column's bounds and nulls over the
    files it added (Spark may write a batch as several files, pyarrow writes one)."""
    commits = []
    for log_file in sorted((root / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log_file.read_text().splitlines()]
        files = [json.loads(a["add"]["stats"]) for a in actions if "add" in a]
        if not files:
            continue
        bounded = {name for f in files for name in f["minValues"]}
        counted = {name for f in files for name in f["nullCount"]}
        commits.append(
            {
                "rows": sum(f["numRecords"] for f in files),
                "min": {
                    n: min(f["minValues"][n] for f in files if n in f["minValues"]) for n in bounded
                },
                "max": {
                    n: max(f["maxValues"][n] for f in files if n in f["maxValues"]) for n in bounded
                },
                "nulls": {n: sum(f["nullCount"].get(n, 0) for f in files) for n in counted},
            }
        )
    return commits


def test_arrow_and_spark_writers_land_the_same_rows_and_offsets(tmp_path: Path) -> None:
    """... and the same statistics, but for the ingest time, which each run stamps anew."""
    batches = [range(0, 300), range(300, 500)]
    tables = {}
    stats = {}
    for writer in ("arrow", "spark"):
        config = _config(tmp_path, writer)
        sink = SparkTableSink(config)
        for offsets in batches:
            sink.write_blocking("t", records_table(_records(offsets)))
        root = table_root(config, "t")
        stats[writer] = _commit_stats(root)
        for commit in stats[writer]:
            assert commit["min"].pop("ingest_time") <= commit["max"].pop("ingest_time")
        assert stored_offsets(commit_metadata(root), "t") == {0: 498, 1: 499, 2: 497}
        assert key_counts(config, "t") == Counter((o % 3, o) for o in range(500))
        tables[writer] = DeltaTable(str(root)).to_pyarrow_table().sort_by("offset")
        session = sink.open()
        frame = session.read.format("delta").load(root.as_posix()).orderBy("offset")
        assert [r["offset"] for r in frame.select("offset").collect()] == list(range(500))
    arrow, spark = tables["arrow"], tables["spark"]
    # The ingest time and its date stamp each run anew (two runs may straddle midnight UTC).
    stamped = ["ingest_time", DATE_COLUMN]
    assert arrow.drop_columns(stamped).equals(spark.drop_columns(stamped))
    assert [c["rows"] for c in stats["arrow"]] == [300, 200]
    assert stats["arrow"] == stats["spark"]


def test_one_file_per_batch_with_its_row_count(tmp_path: Path) -> None:
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    for offsets in (range(0, 100), range(100, 250)):
        sink.write_blocking("t", records_table(_records(offsets)))
    actions = DeltaTable(str(table_root(config, "t"))).get_add_actions(flatten=True)
    assert sorted(actions.column("num_records").to_pylist()) == [100, 150]


def test_a_table_with_a_check_constraint_is_written_by_spark_which_enforces_it(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "arrow")
    writer = SparkTableSink(config)
    writer.prepare_blocking(["t"])
    session = writer.open()
    root = table_root(config, "t")
    session.sql(f"ALTER TABLE delta.`{root}` ADD CONSTRAINT small_offsets CHECK (offset < 20)")
    assert "small_offsets" in (DeltaFileCommitter().refusal(session, root) or "")
    writer.write_blocking("t", records_table(_records(range(0, 20))))
    assert key_counts(config, "t") == Counter((o % 3, o) for o in range(20))
    with pytest.raises(Exception, match=r"small_offsets|CHECK constraint"):
        writer.write_blocking("t", records_table(_records(range(20, 25))))
    assert key_counts(config, "t") == Counter((o % 3, o) for o in range(20))


def test_a_commit_refused_after_the_table_changed_is_asked_again_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table that took files when first asked, then gained a row check: the commit is
    refused by FileAppend's own exception class, and the next ask finds why, once logged."""
    config = _config(tmp_path, "arrow")
    writer = SparkTableSink(config)
    writer.prepare_blocking(["t"])
    session = writer.open()
    root = table_root(config, "t")
    committer = DeltaFileCommitter()
    assert committer.refusal(session, root) is None
    session.sql(f"ALTER TABLE delta.`{root}` ADD CONSTRAINT small_offsets CHECK (offset < 20)")
    unread = DataFile("date=2026-11-26/part-unread.snappy.parquet", 1, "{}")
    with pytest.raises(FilesRefused) as refused:
        committer.commit(session, root, date(2026, 11, 26), [unread], "{}")
    assert refused_class(refused.value.__cause__) == DELTA_REFUSED
    with caplog.at_level(logging.WARNING, logger="consumer_sdk.lake.jvm_appends"):
        assert "small_offsets" in (committer.refusal(session, root) or "")
        assert "small_offsets" in (committer.refusal(session, root) or "")
    assert [r.getMessage().count("small_offsets") for r in caplog.records] == [1]


@pytest.mark.parametrize(("codec", "written"), [("zstd", "ZSTD"), ("lz4", None)])
def test_files_take_the_session_codec_or_are_left_to_spark(
    tmp_path: Path, codec: str, written: str | None
) -> None:
    """Spark's Delta writer compresses as the session's setting says; so do pyarrow's
    files (named as Spark names them), and a codec pyarrow does not write leaves them to
    Spark."""
    config = _config(tmp_path, "arrow")
    sink = SparkTableSink(config)
    sink.prepare_blocking(["t"])
    session = sink.open()
    before = session.conf.get(SESSION_CODEC_KEY)
    session.conf.set(SESSION_CODEC_KEY, codec)
    try:
        refusal = DeltaFileCommitter().refusal(session, table_root(config, "t"))
        sink.write_blocking("t", records_table(_records(range(0, 20))))
    finally:
        session.conf.set(SESSION_CODEC_KEY, before)
    assert key_counts(config, "t") == Counter((o % 3, o) for o in range(20))
    root = table_root(config, "t")
    [path] = DeltaTable(str(root)).file_uris()
    if written is None:
        assert refusal == f"the session's {SESSION_CODEC_KEY}: its Parquet codec is {codec}"
        return
    assert refusal is None
    assert path.endswith(".zstd.parquet")
    metadata = pq.ParquetFile(path.removeprefix("file://")).metadata
    assert metadata.row_group(0).column(0).compression == written
