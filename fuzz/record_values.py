"""atheris harness for record values into table columns (consumer_sdk.lake.arrow_batch with
consumer_sdk.lake.values): JSON values, hostile or broken, against nested column schemas.

The first input byte picks the schema (its value mod the schemas below) and the epoch unit
(its value // 16 mod 3); the rest is one record's value. ``to_arrow`` must not raise: the
record is a row of the schema's columns or a dead letter with a reason, exactly one of the
two. Run by fuzz/run.py: ``python -m fuzz.record_values [libFuzzer flags] CORPUS...``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import atheris

with atheris.instrument_imports(include=["consumer_sdk.lake.values"]):
    from consumer_sdk.lake.arrow_batch import ValueCodec, parse_json_schema, to_arrow
    from consumer_sdk.lake.values.json_values import EPOCH_UNITS
    from consumer_sdk.sink import Record

SCHEMAS = (
    "id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>, attrs MAP<STRING, DOUBLE>, "
    "price DECIMAL(12, 2), at TIMESTAMP, day DATE, customer STRUCT<name: STRING, vip: BOOLEAN>",
    "n INT, x FLOAT, big DECIMAL(38, 18), tiny DECIMAL(1, 0), moments ARRAY<TIMESTAMP>",
    "deep STRUCT<a: ARRAY<MAP<STRING, STRUCT<b: ARRAY<DECIMAL(5, 2)>, c: DATE>>>>",
)
CODECS = [
    ValueCodec("json", parse_json_schema(ddl), unit) for ddl in SCHEMAS for unit in EPOCH_UNITS
]
NOW = datetime(2026, 12, 7, tzinfo=UTC)


def test_one_input(data: bytes) -> None:
    """One record: a row or a dead letter, never an exception."""
    if not data:
        return
    schema, unit = data[0] % len(SCHEMAS), (data[0] // 16) % len(EPOCH_UNITS)
    codec = CODECS[schema * len(EPOCH_UNITS) + unit]
    batch = to_arrow([Record("t", 0, 7, 0, None, data[1:])], codec, NOW)
    if batch.rows.num_rows + batch.dead_letters.num_rows != 1:
        raise AssertionError(f"{batch.rows.num_rows} rows, {batch.dead_letters.num_rows} dead")
    if batch.rows.schema != codec.schema():
        raise AssertionError(f"rows of {batch.rows.schema}")
    if batch.dead_letters.num_rows and not batch.dead_letters.column("error")[0].as_py():
        raise AssertionError("a dead letter without its reason")


def main() -> None:
    """Fuzz until libFuzzer's flags say stop."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
