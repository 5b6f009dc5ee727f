"""consumer_sdk.lake.values.json_values: nested JSON checked against declared columns and
turned into what Arrow builds them from, through the codec the sink uses (pure)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from consumer_sdk.lake.arrow_batch import ValueCodec, parse_json_schema, to_arrow
from consumer_sdk.lake.values.json_values import JsonConverter
from consumer_sdk.sink import Record

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
ORDER = (
    "id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>, attrs MAP<STRING, DOUBLE>, "
    "price DECIMAL(12, 2), at TIMESTAMP, day DATE, customer STRUCT<name: STRING, vip: BOOLEAN>"
)


def record(offset: int, document: object) -> Record:
    value = document if isinstance(document, bytes) else json.dumps(document).encode()
    return Record("orders", 0, offset, 1_765_000_000_000, None, value)


def test_nested_values_become_typed_columns_and_misfits_dead_letters_with_their_path() -> None:
    codec = ValueCodec("json", parse_json_schema(ORDER))
    good = {
        "id": 1,
        "items": [{"sku": "a", "qty": 2}, {"sku": "b"}],
        "attrs": {"weight": 1.5, "volume": 2},
        "price": 12.5,
        "at": "2026-12-07T10:00:00+01:00",
        "day": "2026-12-07",
        "customer": {"name": "Ada", "vip": True, "unused": [1]},
        "extra": "ignored",
    }
    batch = to_arrow(
        [
            record(0, good),
            record(1, {**good, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "two"}]}),
            record(2, {"id": 3}),
            record(3, {**good, "price": 12.345}),
            record(4, {**good, "attrs": {"weight": "heavy"}}),
        ],
        codec,
        NOW,
    )
    assert batch.rows.schema == codec.schema()
    rows = batch.rows.to_pylist()
    assert [r["offset"] for r in rows] == [0, 2]
    first = rows[0]
    assert first["items"] == [{"sku": "a", "qty": 2}, {"sku": "b", "qty": None}]
    assert first["attrs"] == [("weight", 1.5), ("volume", 2.0)]
    assert first["price"] == Decimal("12.50")
    assert first["at"] == datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert first["day"] == date(2026, 12, 7)
    assert first["customer"] == {"name": "Ada", "vip": True}
    assert rows[1]["items"] is None and rows[1]["customer"] is None
    errors = {r["offset"]: r["error"] for r in batch.dead_letters.to_pylist()}
    assert "'items[1].qty'" in errors[1] and "is not INT" in errors[1]
    assert "'price'" in errors[3] and "DECIMAL(12, 2)" in errors[3]  # a digit would be lost
    assert "\"attrs['weight']\"" in errors[4] and "DOUBLE" in errors[4]


@pytest.mark.parametrize(
    ("value", "unit", "moment"),
    [
        ("2026-12-07T10:00:00Z", "ms", datetime(2026, 12, 7, 10, tzinfo=UTC)),
        ("2026-12-07 10:00:00.123456", "ms", datetime(2026, 12, 7, 10, 0, 0, 123456, UTC)),
        ("2026-12-07T12:00:00+02:00", "ms", datetime(2026, 12, 7, 10, tzinfo=UTC)),
        ("2026-12-07", "ms", datetime(2026, 12, 7, tzinfo=UTC)),
        (1_765_101_600_000, "ms", datetime(2025, 12, 7, 10, tzinfo=UTC)),
        (1_765_101_600, "s", datetime(2025, 12, 7, 10, tzinfo=UTC)),
        (1_765_101_600.5, "s", datetime(2025, 12, 7, 10, 0, 0, 500000, UTC)),
        (Decimal("1765101600000.25"), "ms", datetime(2025, 12, 7, 10, 0, 0, 250, UTC)),
        (1_765_101_600_000_001, "us", datetime(2025, 12, 7, 10, 0, 0, 1, UTC)),
        (-1000, "ms", datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_timestamps_from_iso_text_or_epoch_numbers(
    value: object, unit: str, moment: datetime
) -> None:
    converted = JsonConverter(unit).convert(value, pa.timestamp("us", tz="UTC"), "at")
    assert converted == moment
    assert isinstance(converted, datetime) and converted.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("data_type", "value"),
    [
        (pa.timestamp("us", tz="UTC"), "yesterday"),
        (pa.timestamp("us", tz="UTC"), 10**20),  # past year 9999
        (pa.timestamp("us", tz="UTC"), True),
        (pa.timestamp("us", tz="UTC"), float("inf")),
        (pa.timestamp("us", tz="UTC"), Decimal("1e999999")),  # refused before int()
        (pa.date32(), 20261207),
        (pa.binary(), "not base64!"),
        (pa.binary(), 12),
        (pa.date32(), "2026-13-01"),
        (pa.decimal128(5, 2), "12.345"),  # a digit lost
        (pa.decimal128(5, 2), 1234),  # 1234.00 needs 6 digits
        (pa.decimal128(5, 2), "NaN"),
        (pa.decimal128(5, 2), "twelve"),
        (pa.decimal128(5, 2), True),
        (pa.decimal128(5, 2), [1]),
        (pa.list_(pa.int64()), {"a": 1}),
        (pa.map_(pa.string(), pa.int64()), [["a", 1]]),
        (pa.struct([pa.field("a", pa.int64())]), "a"),
        (pa.int32(), 2**31),
        (pa.float32(), Decimal("1e39")),
        (pa.float64(), Decimal("1e400")),
    ],
)
def test_a_value_that_does_not_fit_is_refused_not_rounded(
    data_type: pa.DataType, value: object
) -> None:
    with pytest.raises(ValueError, match=r"field 'v': .* is not "):
        JsonConverter().convert(value, data_type, "v")


@pytest.mark.parametrize(
    ("value", "decimal"),
    [("12.3", "12.30"), (Decimal("-0.5"), "-0.50"), (7, "7.00"), (" 999.99 ", "999.99")],
)
def test_decimals_from_numbers_or_numeric_text_keep_every_digit(
    value: object, decimal: str
) -> None:
    assert JsonConverter().convert(value, pa.decimal128(5, 2), "v") == Decimal(decimal)


def test_a_document_with_a_decimal_column_reads_its_numbers_exactly() -> None:
    codec = ValueCodec("json", parse_json_schema("price DECIMAL(38, 18), ratio DOUBLE"))
    exact = "12345678901234567890.123456789012345678"
    [price, ratio] = codec.decode(f'{{"price": {exact}, "ratio": 0.1}}'.encode())
    assert price == Decimal(exact)
    assert ratio == 0.1 and isinstance(ratio, float)


def test_binary_from_base64_text() -> None:
    assert JsonConverter().convert("aGk=", pa.binary(), "v") == b"hi"


def test_an_unknown_epoch_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="s, ms, us"):
        JsonConverter("minutes")


def test_timestamps_in_other_zones_are_stored_as_the_same_instant() -> None:
    codec = ValueCodec("json", parse_json_schema("at TIMESTAMP"))
    zone = timezone(timedelta(hours=-5))
    batch = to_arrow(
        [record(0, {"at": datetime(2026, 12, 7, 5, tzinfo=zone).isoformat()})], codec, NOW
    )
    assert batch.rows.column("at").to_pylist() == [datetime(2026, 12, 7, 10, tzinfo=UTC)]
