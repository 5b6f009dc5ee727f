"""consumer_sdk.lake.values.spark_ddl: Spark DDL column types as Arrow types and back."""

from __future__ import annotations

import pyarrow as pa
import pytest

from consumer_sdk.lake.values.spark_ddl import SchemaError, parse_columns, sql_type

NESTED = (
    "id BIGINT, `user-id` string, items ARRAY<STRUCT<sku: STRING, qty INT>>, "
    "attrs MAP<STRING, DOUBLE>, price DECIMAL(12, 2), at TIMESTAMP, day DATE, "
    "ok BOOL, ratio REAL, total NUMERIC, tags ARRAY<ARRAY<LONG>>"
)


def test_nested_columns_become_their_arrow_types() -> None:
    assert parse_columns(NESTED) == (
        pa.field("id", pa.int64()),
        pa.field("user-id", pa.string()),
        pa.field(
            "items",
            pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int32())])),
        ),
        pa.field("attrs", pa.map_(pa.string(), pa.float64())),
        pa.field("price", pa.decimal128(12, 2)),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.date32()),
        pa.field("ok", pa.bool_()),
        pa.field("ratio", pa.float32()),
        pa.field("total", pa.decimal128(10, 0)),  # Spark's DECIMAL without arguments
        pa.field("tags", pa.list_(pa.list_(pa.int64()))),
    )


def test_the_sql_a_table_is_created_with_parses_to_the_same_columns() -> None:
    fields = parse_columns(NESTED)
    ddl = ", ".join(f"`{f.name}` {sql_type(f.type)}" for f in fields)
    assert parse_columns(ddl) == fields
    assert sql_type(fields[3].type) == "MAP<STRING, DOUBLE>"
    assert sql_type(fields[4].type) == "DECIMAL(12, 2)"


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("", "empty"),
        ("id", "'id' is not 'name TYPE'"),
        ("a VARCHAR", "must be one of"),
        ("a INT,", "ends where a column name was expected"),
        ("a INT; DROP", "cannot read ';"),
        ("a INT NOT NULL", "unexpected 'NOT'"),
        ("a MAP<INT, STRING>", "keys must be STRING"),
        ("a DECIMAL(40, 2)", "precision of 1 to 38"),
        ("a DECIMAL(5, 6)", "scale of 0 to the precision"),
        ("a DECIMAL(x)", "expected a number"),
        ("a STRUCT<b INT", "ends where"),
        ("a ARRAY<>", "must be one of .*, got >"),
        ("a STRUCT<b INT, B STRING>", "'B' repeats"),
        ("`a b` INT", "Delta refuses"),
        ("a " + "ARRAY<" * 20 + "INT" + ">" * 20, "deeper than 16"),
        ("a STRUCT<b INT> c", "unexpected 'c'"),
    ],
)
def test_a_schema_that_cannot_be_read_names_the_part(ddl: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse_columns(ddl)


def test_reserved_names_are_refused_at_the_top_only() -> None:
    reserved = frozenset({"offset"})
    with pytest.raises(SchemaError, match="'Offset' repeats"):
        parse_columns("Offset BIGINT", reserved)
    [nested] = parse_columns("s STRUCT<offset: BIGINT>", reserved)
    assert nested.type.field(0).name == "offset"
