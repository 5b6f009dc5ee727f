"""Nested JSON values (structs, arrays, maps, decimals, timestamps, dates) through the
SparkTableSink into each table format, read back with the right types by Spark and by an
engine we did not write (delta-rs, pyiceberg, pyarrow); and a json_schema that gains columns
while writers of the old one still run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from assignor import TopicPartition
from benchmarks.support.lake_readers import read_rows, warehouse_config
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import register_tables, table_identifier
from consumer_sdk.sink import Record, records_table
from contract.settings import ConfigError

SCHEMA = (
    "id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>, attrs MAP<STRING, DOUBLE>, "
    "price DECIMAL(12, 2), at TIMESTAMP, day DATE, customer STRUCT<name: STRING, vip: BOOLEAN>"
)
ORDER = {
    "id": 1,
    "items": [{"sku": "a", "qty": 2}, {"sku": "b"}],
    "attrs": {"weight": 1.5},
    "price": 12.5,
    "at": "2026-12-07T10:00:00+01:00",
    "day": "2026-12-07",
    "customer": {"name": "Ada", "vip": True},
}
# What every engine must read back for ORDER, as Python values.
EXPECTED = {
    "id": 1,
    "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": None}],
    "attrs": [("weight", 1.5)],
    "price": Decimal("12.50"),
    "at": datetime(2026, 12, 7, 9, tzinfo=UTC),
    "day": date(2026, 12, 7),
    "customer": {"name": "Ada", "vip": True},
}
# Spark's names of the columns' types.
SPARK_TYPES = {
    "id": "bigint",
    "items": "array<struct<sku:string,qty:int>>",
    "attrs": "map<string,double>",
    "price": "decimal(12,2)",
    "at": "timestamp",
    "day": "date",
    "customer": "struct<name:string,vip:boolean>",
}
# (table format, file writer): pyarrow's files committed by our Java side, and Spark's.
WRITERS = [
    ("delta", "arrow"),
    ("delta", "spark"),
    ("iceberg", "arrow"),
    ("iceberg", "spark"),
    ("parquet", "auto"),
]


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """This process's one local Spark session, started with the lake jars."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


@pytest.fixture(params=WRITERS, ids=["-".join(w) for w in WRITERS])
def json_config(tmp_path: Path, request: pytest.FixtureRequest) -> SparkSinkConfig:
    table_format, file_writer = request.param
    return dataclasses.replace(
        warehouse_config(tmp_path, table_format),
        value_format="json",
        json_schema=SCHEMA,
        file_writer=file_writer,
    )


def plain(value: Any) -> Any:
    """An Arrow-read value with maps as lists of pairs, whichever form the reader gave."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tuple(plain(v)) if isinstance(v, tuple) else plain(v) for v in value]
    return value


def test_nested_json_lands_with_its_types_for_every_reader(json_config: SparkSinkConfig) -> None:
    records = [
        Record("orders", 0, 0, 1_765_000_000_000, None, json.dumps(ORDER).encode()),
        Record("orders", 0, 1, 1_765_000_000_000, None, b'{"id": 2, "price": "1.005"}'),
        Record("orders", 0, 2, 1_765_000_000_000, None, json.dumps({"id": 3}).encode()),
    ]
    SparkTableSink(json_config).write_blocking("orders", records_table(records))
    table = json_config.table_for("orders")

    rows = read_rows(json_config, table)  # delta-rs, pyiceberg or pyarrow
    assert rows is not None
    by_id = {row["id"]: row for row in rows.to_pylist()}
    assert sorted(by_id) == [1, 3]
    assert {k: plain(by_id[1][k]) for k in EXPECTED} == EXPECTED
    missing = {k: by_id[3][k] for k in EXPECTED if k != "id"}
    if json_config.table_format == "iceberg":
        # pyiceberg reads a null list<struct> as [] (apache/iceberg-python#3833, open); the
        # file holds a null, as Spark reads below.
        missing["items"] = missing["items"] or None
    assert set(missing.values()) == {None}
    types = {name: rows.schema.field(name).type for name in EXPECTED}
    assert pa.types.is_decimal(types["price"]) and types["price"].scale == 2
    assert pa.types.is_timestamp(types["at"]) and types["at"].tz in ("UTC", "+00:00")
    assert pa.types.is_map(types["attrs"]) and pa.types.is_date32(types["day"])

    dead = read_rows(json_config, json_config.dead_letter_table)
    assert dead is not None
    [letter] = dead.to_pylist()
    assert letter["offset"] == 1 and "'price'" in letter["error"]

    session = SparkTableSink(json_config).open()
    register_tables(
        session, json_config.warehouse, json_config.database, json_config.iceberg_catalog
    )
    frame = session.table(table_identifier(json_config, table))
    assert {f.name: f.dataType.simpleString() for f in frame.schema if f.name in EXPECTED} == (
        SPARK_TYPES
    )
    [spark_row] = (
        frame.where("id = 1")
        .selectExpr(
            "to_json(items) AS items",
            "to_json(attrs) AS attrs",
            "CAST(price AS STRING) AS price",
            "unix_micros(at) AS at",
            "CAST(day AS STRING) AS day",
            "to_json(customer) AS customer",
        )
        .collect()
    )
    assert frame.where("id = 3 AND items IS NULL AND customer IS NULL").count() == 1
    assert spark_row.asDict() == {
        "items": '[{"sku":"a","qty":2},{"sku":"b"}]',
        "attrs": '{"weight":1.5}',
        "price": "12.50",
        "at": int(datetime(2026, 12, 7, 9, tzinfo=UTC).timestamp()) * 1_000_000,
        "day": "2026-12-07",
        "customer": '{"name":"Ada","vip":true}',
    }


@pytest.mark.parametrize(
    ("table_format", "file_writer"), WRITERS, ids=["-".join(w) for w in WRITERS]
)
def test_a_schema_that_gains_columns_adds_them_and_writers_of_either_schema_go_on(
    tmp_path: Path, table_format: str, file_writer: str
) -> None:
    """A rolling update: writers of the new json_schema add its columns to the table; a
    writer still on the old one keeps writing (its rows hold nulls there); a writer whose
    column changed type is refused at start, naming the column."""
    old = dataclasses.replace(
        warehouse_config(tmp_path, table_format),
        value_format="json",
        json_schema="id BIGINT, name STRING",
        file_writer=file_writer,
    )
    new = dataclasses.replace(
        old, json_schema="id BIGINT, name STRING, tier STRING, scores ARRAY<INT>"
    )

    def write(config: SparkSinkConfig, first: int, document: dict[str, Any]) -> None:
        records = [
            Record(
                "users", 0, first + i, 0, None, json.dumps({**document, "id": first + i}).encode()
            )
            for i in range(3)
        ]
        sink = SparkTableSink(config)  # a new writer claims the partition as it resumes
        asyncio.run(sink.resume_offsets([TopicPartition("users", 0)]))
        sink.write_blocking("users", records_table(records))

    write(old, 0, {"name": "a"})
    write(new, 3, {"name": "b", "tier": "gold", "scores": [1, 2]})
    write(old, 6, {"name": "c", "tier": "ignored by this writer"})
    table = old.table_for("users")

    rows = read_rows(new, table)
    assert rows is not None
    got = sorted((r["id"], r["name"], r["tier"], r["scores"]) for r in rows.to_pylist())
    assert got == [
        *((i, "a", None, None) for i in range(3)),
        *((i, "b", "gold", [1, 2]) for i in range(3, 6)),
        *((i, "c", None, None) for i in range(6, 9)),
    ]
    session = SparkTableSink(new).open()
    register_tables(session, new.warehouse, new.database, new.iceberg_catalog)
    frame = session.table(table_identifier(new, table))
    assert frame.where("tier = 'gold' AND size(scores) = 2").count() == 3
    assert frame.count() == 9

    changed = dataclasses.replace(old, json_schema="id STRING, name STRING")
    with pytest.raises(ConfigError, match="column 'id' is STRING here and BIGINT"):
        write(changed, 9, {"name": "d"})
