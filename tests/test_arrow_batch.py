"""Records to Arrow: columns, value formats, dead letters (pure, no Spark)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from consumer_sdk.lake.arrow_batch import (
    DEAD_LETTER_SCHEMA,
    ValueCodec,
    columns_to_arrow,
    offset_ranges,
    parse_json_schema,
    to_arrow,
)
from consumer_sdk.lake.values import json_values
from consumer_sdk.lake.values.spark_ddl import SchemaError
from consumer_sdk.sink import REFUSED_HEADER, Record, records_table

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def record(offset: int, value: bytes | None, partition: int = 0) -> Record:
    return Record(
        "orders", partition, offset, 1_700_000_000_000 + offset, b"k", value, (("h", b"v"),)
    )


def test_raw_values_keep_every_column_and_header() -> None:
    records = [record(i, f"v{i}".encode(), partition=i % 2) for i in range(5)]
    batch = to_arrow(records, ValueCodec(), NOW)
    rows = batch.rows.to_pylist()
    assert [(r["partition"], r["offset"], r["value"]) for r in rows] == [
        (r.partition, r.offset, r.value) for r in records
    ]
    assert rows[0]["headers"] == [{"key": "h", "value": b"v"}]
    assert rows[0]["timestamp"] == datetime.fromtimestamp(records[0].timestamp / 1000, UTC)
    assert {r["ingest_time"] for r in rows} == {NOW}
    assert batch.dead_letters.num_rows == 0


def test_text_values_that_are_not_utf8_become_dead_letters_with_raw_bytes() -> None:
    records = [record(0, b"ok"), record(1, b"\xff\xfe"), record(2, None)]
    batch = to_arrow(records, ValueCodec("text"), NOW)
    assert [r["value"] for r in batch.rows.to_pylist()] == ["ok", None]
    (dead,) = batch.dead_letters.to_pylist()
    assert batch.dead_letters.schema == DEAD_LETTER_SCHEMA
    assert (dead["topic"], dead["partition"], dead["offset"], dead["value"]) == (
        "orders",
        0,
        1,
        b"\xff\xfe",
    )
    assert "UnicodeDecodeError" in dead["error"]


def test_offset_ranges_span_rows_and_dead_letters_per_partition() -> None:
    # Partition 0: 10..12 with a dead letter at 12; partition 1: only a dead letter at 40.
    records = [record(10, b"a"), record(11, b"b"), record(12, b"\xff"), record(40, b"\xfe", 1)]
    batch = to_arrow(records, ValueCodec("text"), NOW)
    assert batch.dead_letters.num_rows == 2
    firsts, lasts = offset_ranges(batch)
    expected_firsts: dict[int, int] = {}
    expected_lasts: dict[int, int] = {}
    for r in records:
        expected_firsts.setdefault(r.partition, r.offset)
        expected_lasts[r.partition] = r.offset
    assert (firsts, lasts) == (expected_firsts, expected_lasts)


def test_json_values_become_declared_columns_and_misfits_dead_letters() -> None:
    codec = ValueCodec("json", parse_json_schema("id BIGINT, name STRING, price double, ok bool"))
    good = {"id": 7, "name": "a", "price": 1.5, "ok": True, "extra": [1]}
    records = [
        record(0, json.dumps(good).encode()),
        record(1, json.dumps({"id": "seven"}).encode()),
        record(2, b"[1, 2]"),
        record(3, b"{not json"),
        record(4, json.dumps({"id": 8}).encode()),
    ]
    batch = to_arrow(records, codec, NOW)
    rows = batch.rows.to_pylist()
    assert [(r["offset"], r["id"], r["name"], r["price"], r["ok"]) for r in rows] == [
        (0, 7, "a", 1.5, True),
        (4, 8, None, None, None),
    ]
    assert "value" not in batch.rows.column_names
    errors = {r["offset"]: r["error"] for r in batch.dead_letters.to_pylist()}
    assert sorted(errors) == [1, 2, 3]
    assert "'id'" in errors[1] and "BIGINT" in errors[1]
    assert "not an object" in errors[2]
    assert "JSONDecodeError" in errors[3]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("", "empty"),
        ("id", "'id' is not 'name TYPE'"),
        ("id VARCHAR", "must be one of"),
        ("offset BIGINT", "repeats"),
        ("a INT, A STRING", "repeats"),
    ],
)
def test_bad_json_schema_names_the_part(ddl: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse_json_schema(ddl)


def test_integer_range_is_checked() -> None:
    codec = ValueCodec("json", parse_json_schema("n INT"))
    batch = to_arrow([record(0, b'{"n": 3000000000}'), record(1, b'{"n": true}')], codec, NOW)
    assert batch.rows.num_rows == 0
    assert batch.dead_letters.num_rows == 2


@pytest.mark.parametrize(
    ("ddl", "value", "reason"),
    [
        ("s STRING", b'{"s": "\\ud800"}', "is not STRING"),  # a lone surrogate
        ("n BIGINT", b'{"n": ' + str(2**64).encode() + b"}", "is not BIGINT"),
        ("x DOUBLE", b'{"x": ' + str(10**400).encode() + b"}", "is not DOUBLE"),
        ("x FLOAT", b'{"x": 1e39}', "is not FLOAT"),  # would be stored as inf
        ("x DOUBLE", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        ("x DOUBLE", b'{"x": ' + b"9" * 5000 + b"}", "ValueError"),  # past int digits limit
    ],
)
def test_values_arrow_cannot_hold_are_dead_letters_and_the_batch_goes_on(
    ddl: str, value: bytes, reason: str
) -> None:
    codec = ValueCodec("json", parse_json_schema(ddl))
    field = ddl.split()[0]
    fine = json.dumps({field: 1 if "INT" in ddl else ("ok" if "STRING" in ddl else 2.5)})
    batch = to_arrow(
        [record(0, fine.encode()), record(1, value), record(2, fine.encode())], codec, NOW
    )
    assert [r["offset"] for r in batch.rows.to_pylist()] == [0, 2]
    [dead] = batch.dead_letters.to_pylist()
    assert dead["offset"] == 1 and dead["value"] == value and reason in dead["error"]


def test_a_row_arrow_refuses_is_narrowed_to_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever slips past the checks and fails the batch's Arrow build goes to the dead
    letters alone (here: a STRING check that lets a surrogate through)."""
    lenient = (lambda v: isinstance(v, str), json_values._same)
    monkeypatch.setitem(json_values._SCALARS, pa.string(), lenient)
    codec = ValueCodec("json", parse_json_schema("s STRING"))
    records = [
        record(i, json.dumps({"s": "\ud800" if i == 1 else "ok"}).encode()) for i in range(3)
    ]
    batch = to_arrow(records, codec, NOW)
    assert [r["offset"] for r in batch.rows.to_pylist()] == [0, 2]
    [dead] = batch.dead_letters.to_pylist()
    assert dead["offset"] == 1 and "is not STRING" not in dead["error"]  # Arrow's refusal


def fetched_table(records: list[Record]) -> pa.Table:
    """What the columnar record path hands a sink for these records."""
    return records_table(records)


@pytest.mark.parametrize(
    ("codec", "values"),
    [
        (ValueCodec(), [b"a", None, b"\xff raw"]),
        (ValueCodec("text"), ["é".encode(), None, b"plain"]),
        (ValueCodec("text"), [b"ok", b"\xff not utf-8", None]),  # falls back, dead letter
        (ValueCodec("json", parse_json_schema("id BIGINT")), [b'{"id": 1}', b"[", None]),
    ],
)
def test_a_fetched_table_becomes_the_same_tables_as_its_records(
    codec: ValueCodec, values: list[bytes | None]
) -> None:
    records = [record(i, value, partition=i % 2) for i, value in enumerate(values)]
    from_records = to_arrow(records, codec, NOW)
    from_columns = columns_to_arrow("orders", fetched_table(records), codec, NOW)
    assert from_columns.rows.equals(from_records.rows)
    assert from_columns.dead_letters.equals(from_records.dead_letters)


@pytest.mark.parametrize("value_format", ["raw", "text"])
def test_a_refused_batch_row_becomes_a_dead_letter_with_its_reason(value_format: str) -> None:
    reason = b"CRC mismatch (record batch, offsets 3-5)"
    refused = Record("orders", 1, 5, 1_700_000_000_000, None, None, ((REFUSED_HEADER, reason),))
    records = [record(2, b"a", 1), refused, record(6, b"b", 1)]
    codec = ValueCodec(value_format)
    for batch in (
        to_arrow(records, codec, NOW),
        columns_to_arrow("orders", records_table(records), codec, NOW),
    ):
        assert batch.rows.column("offset").to_pylist() == [2, 6]
        [letter] = batch.dead_letters.to_pylist()
        assert (letter["partition"], letter["offset"], letter["value"]) == (1, 5, None)
        assert letter["error"] == reason.decode()
        assert offset_ranges(batch) == ({1: 2}, {1: 6})  # the commit covers the refused batch
