"""consumer_sdk.lake.values.evolution: which columns a writer adds to a shared table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from consumer_sdk.lake.values.evolution import added_columns
from consumer_sdk.lake.values.spark_ddl import SchemaError, parse_columns

TABLE = parse_columns("id BIGINT, name STRING, tags ARRAY<STRING>")


def test_new_columns_are_added_in_the_writers_order_and_missing_ones_stay_out() -> None:
    writer = parse_columns("tier STRING, id BIGINT, at TIMESTAMP")  # lacks name and tags
    assert added_columns(TABLE, writer) == [
        pa.field("tier", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]


def test_the_same_columns_add_nothing() -> None:
    assert added_columns(TABLE, TABLE) == []
    assert added_columns(TABLE, TABLE[:1]) == []  # an older writer


@pytest.mark.parametrize(
    ("writer", "message"),
    [
        ("id INT", "'id' is INT here and BIGINT"),  # widening is not taken either
        ("tags ARRAY<INT>", "'tags' is ARRAY<INT> here and ARRAY<STRING>"),
        ("Name STRING", "'Name' is STRING here and STRING as 'name'"),  # one column to Spark
    ],
)
def test_a_column_whose_type_or_name_changed_is_refused_naming_it(
    writer: str, message: str
) -> None:
    with pytest.raises(SchemaError, match=message):
        added_columns(TABLE, parse_columns(writer))
