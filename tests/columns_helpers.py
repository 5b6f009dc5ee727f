"""Reading the columnar record path's chunks back as plain rows, for comparisons."""

from __future__ import annotations

from consumer_sdk.records.record_columns import RecordColumns

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def column_rows(columns: RecordColumns) -> list[Row]:
    """(offset, timestamp, key, value, headers) per record of a chunk."""
    table = columns.batch.to_pydict()
    return list(
        zip(
            table["offset"],
            table["timestamp"],
            table["key"],
            table["value"],
            [[(h["key"], h["value"]) for h in headers] for headers in table["headers"]],
            strict=True,
        )
    )
