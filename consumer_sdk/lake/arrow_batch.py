"""Records to Arrow tables: the table columns, value decoding, and dead letters.

Pure (no Spark, no files). A batch of one topic becomes two Arrow tables: the rows that
decoded, and dead letters (topic, partition, offset, error text, raw bytes) for the rest.
Value formats: ``raw`` (bytes as they came), ``text`` (UTF-8), ``json`` (an object per record,
its fields as columns of a declared schema such as ``"id BIGINT, items ARRAY<STRUCT<sku:
STRING, qty: INT>>"``: :mod:`consumer_sdk.lake.values`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from consumer_sdk.lake.values.json_values import JsonConverter, has_decimals
from consumer_sdk.lake.values.spark_ddl import TIMESTAMP, parse_columns
from consumer_sdk.sink import HEADERS, REFUSED_HEADER, Record, RecordsView, headers_column

VALUE_FORMATS = ("raw", "text", "json")
# The partition column of the table directory layout (the batch's UTC ingest date).
DATE_COLUMN = "date"
METADATA_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "headers", "ingest_time")


def parse_json_schema(ddl: str) -> tuple[pa.Field, ...]:
    """``"id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>"`` -> the value's columns;
    raises :class:`SchemaError` naming the part (a name of the metadata columns included)."""
    return parse_columns(ddl, frozenset((*METADATA_COLUMNS, DATE_COLUMN)))


@dataclass(frozen=True)
class ValueCodec:
    """How record values become columns (``epoch_unit``: what a JSON TIMESTAMP given as a
    number counts: s, ms or us)."""

    value_format: str = "raw"
    json_fields: tuple[pa.Field, ...] = ()
    epoch_unit: str = "ms"

    def __post_init__(self) -> None:
        if self.value_format not in VALUE_FORMATS:
            raise ValueError(
                f"value_format must be one of {', '.join(VALUE_FORMATS)}, got {self.value_format!r}"
            )
        if self.value_format == "json" and not self.json_fields:
            raise ValueError("value_format json needs json_schema ('name TYPE, ...')")

    @functools.cached_property
    def _row(self) -> Callable[[dict[str, object]], list[object]]:
        return JsonConverter(self.epoch_unit).document(self.json_fields)

    @functools.cached_property
    def _parse_float(self) -> type:
        # Numbers read as Decimal where a column is one: a float would have lost digits.
        return Decimal if any(has_decimals(f.type) for f in self.json_fields) else float

    def value_fields(self) -> list[pa.Field]:
        """The columns the value becomes."""
        if self.value_format == "raw":
            return [pa.field("value", pa.binary())]
        if self.value_format == "text":
            return [pa.field("value", pa.string())]
        return list(self.json_fields)

    def schema(self) -> pa.Schema:
        """Columns of a data file (the table's columns but the date partition column)."""
        return pa.schema(
            [
                pa.field("topic", pa.string()),
                pa.field("partition", pa.int32()),
                pa.field("offset", pa.int64()),
                pa.field("timestamp", TIMESTAMP),
                pa.field("key", pa.binary()),
                *self.value_fields(),
                pa.field("headers", HEADERS),
                pa.field("ingest_time", TIMESTAMP),
            ]
        )

    def decode(self, value: bytes | None) -> list[object]:
        """The value's column values; raises ValueError (the dead-letter reason)."""
        if self.value_format == "raw" or value is None:
            return [value] if self.value_format != "json" else [None] * len(self.json_fields)
        text = value.decode("utf-8")  # UnicodeDecodeError is a ValueError
        if self.value_format == "text":
            return [text]
        try:
            document = json.loads(text, parse_float=self._parse_float)
        except RecursionError:
            raise ValueError("JSON value is nested too deeply") from None
        if not isinstance(document, dict):
            raise ValueError(f"JSON value is a {type(document).__name__}, not an object")
        return self._row(document)


DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("error", pa.string()),
        pa.field("ingest_time", TIMESTAMP),
    ]
)


@dataclass(frozen=True)
class ArrowBatch:
    """One topic's batch as Arrow: decoded rows and dead letters."""

    rows: pa.Table
    dead_letters: pa.Table


def to_arrow(records: Sequence[Record], codec: ValueCodec, ingest_time: datetime) -> ArrowBatch:
    """Build the batch's Arrow tables. Raw and text values take a vectorised path; a text
    batch with invalid UTF-8 and every JSON batch decode record by record. A record that
    fails to decode, or whose row Arrow refuses, becomes a dead letter: one value never
    stops its batch."""
    good: list[Record] = []
    values: list[Sequence[object]] = []
    dead: list[tuple[Record, str]] = []
    records, dead = _without_refused(records)
    if codec.value_format == "raw":
        good = list(records)
    else:
        for r in records:
            try:
                values.append(codec.decode(r.value))
            except Exception as exc:  # ValueError mostly; any other is this record's too
                dead.append((r, f"{type(exc).__name__}: {exc}"))
            else:
                good.append(r)
    try:
        rows = _rows(good, values, codec, ingest_time)
    except Exception:  # a row Arrow cannot take: find it, keep the others
        good, values = _narrow(good, values, codec, ingest_time, dead)
        rows = _rows(good, values, codec, ingest_time)
    return ArrowBatch(rows, _dead_letter_table(dead, ingest_time))


def columns_to_arrow(
    topic: str, fetched: pa.Table, codec: ValueCodec, ingest_time: datetime
) -> ArrowBatch:
    """The same tables as :func:`to_arrow`, from a fetched table (offset, timestamp, key,
    value, headers, partition: the columnar record path) without a Python object per record
    when values are raw, or text that is all valid UTF-8. Otherwise (JSON, or text with a
    value that is not UTF-8) the records are decoded one by one, as :func:`to_arrow` does."""
    refused = _refused_rows(fetched)
    if refused is not None:  # rare: a batch the decoder refused; the rest as usual
        kept = columns_to_arrow(topic, fetched.filter(pc.invert(refused)), codec, ingest_time)
        dead = _without_refused(RecordsView(topic, fetched.filter(refused)))[1]
        letters = pa.concat_tables([kept.dead_letters, _dead_letter_table(dead, ingest_time)])
        return ArrowBatch(kept.rows, letters)
    values = fetched.column("value")
    if codec.value_format == "text":
        try:
            values = values.cast(pa.string())  # validates the UTF-8 of every value
        except pa.ArrowInvalid:
            return to_arrow(RecordsView(topic, fetched), codec, ingest_time)
    elif codec.value_format != "raw":
        return to_arrow(RecordsView(topic, fetched), codec, ingest_time)
    count = fetched.num_rows
    timestamps = pc.multiply(fetched.column("timestamp"), 1000).cast(TIMESTAMP)  # ms -> us
    rows = pa.Table.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), count),
            fetched.column("partition").cast(pa.int32()),
            fetched.column("offset"),
            timestamps,
            fetched.column("key"),
            values,
            fetched.column("headers"),
            pa.repeat(pa.scalar(ingest_time, TIMESTAMP), count),
        ],
        schema=codec.schema(),
    )
    return ArrowBatch(rows, _dead_letter_table([], ingest_time))


def _without_refused(records: Sequence[Record]) -> tuple[list[Record], list[tuple[Record, str]]]:
    """The records, less the rows standing for a batch the decoder refused, and those rows
    with the reason each carries (its dead-letter error)."""
    kept: list[Record] = []
    refused: list[tuple[Record, str]] = []
    for r in records:
        reason = next((v for k, v in r.headers if k == REFUSED_HEADER), None) if r.headers else None
        if reason is None:
            kept.append(r)
        else:
            refused.append((r, reason.decode("utf-8", "replace")))
    return kept, refused


def _refused_rows(fetched: pa.Table) -> pa.ChunkedArray | None:
    """A mask of the rows that stand for a refused batch, or None if there are none (found
    without a Python object per record: most batches carry no header at all)."""
    headers = fetched.column("headers")
    pairs = pc.list_flatten(headers)
    if len(pairs) == 0:
        return None
    marked = pc.equal(pairs.combine_chunks().field("key"), REFUSED_HEADER)
    if not pc.any(marked).as_py():
        return None
    rows = pc.filter(pc.list_parent_indices(headers), marked).to_numpy()
    mask = np.zeros(fetched.num_rows, dtype=bool)
    mask[rows] = True
    return pa.chunked_array([mask])


def _rows(
    good: Sequence[Record],
    values: Sequence[Sequence[object]],
    codec: ValueCodec,
    ingest_time: datetime,
) -> pa.Table:
    schema = codec.schema()
    columns: list[pa.Array] = _metadata_columns(good, ingest_time)
    value_fields = codec.value_fields()
    if codec.value_format == "raw":
        value_columns = [pa.array([r.value for r in good], pa.binary())]
    else:
        value_columns = [
            pa.array([row[i] for row in values], f.type) for i, f in enumerate(value_fields)
        ]
    ordered = columns[:5] + value_columns + columns[5:]
    return pa.Table.from_arrays(ordered, schema=schema)


def _narrow(
    good: Sequence[Record],
    values: Sequence[Sequence[object]],
    codec: ValueCodec,
    ingest_time: datetime,
    dead: list[tuple[Record, str]],
) -> tuple[list[Record], list[Sequence[object]]]:
    """Try each row alone; the ones that fail join ``dead``; return the rest."""
    kept: list[Record] = []
    kept_values: list[Sequence[object]] = []
    raw = codec.value_format == "raw"
    for index, record in enumerate(good):
        row_values = [] if raw else [values[index]]
        try:
            _rows([record], row_values, codec, ingest_time)
        except Exception as exc:
            dead.append((record, f"{type(exc).__name__}: {str(exc)[:200]}"))
        else:
            kept.append(record)
            if not raw:
                kept_values.append(values[index])
    return kept, kept_values


def _metadata_columns(records: Sequence[Record], ingest_time: datetime) -> list[pa.Array]:
    """topic, partition, offset, timestamp, key | headers, ingest_time."""
    timestamps = pa.array([r.timestamp for r in records], pa.int64())
    return [
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pc.multiply(timestamps, 1000).cast(TIMESTAMP),  # ms -> us
        pa.array([r.key for r in records], pa.binary()),
        headers_column(records),
        pa.repeat(pa.scalar(ingest_time, TIMESTAMP), len(records)),
    ]


def _dead_letter_table(dead: Sequence[tuple[Record, str]], ingest_time: datetime) -> pa.Table:
    recs = [r for r, _ in dead]
    meta = _metadata_columns(recs, ingest_time)
    return pa.Table.from_arrays(
        [
            *meta[:5],
            pa.array([r.value for r in recs], pa.binary()),
            pa.array([error for _, error in dead], pa.string()),
            meta[6],
        ],
        schema=DEAD_LETTER_SCHEMA,
    )


def with_ingest_date(table: pa.Table, day: date) -> pa.Table:
    """``table`` plus the date column the lake tables are partitioned by, ``day`` in every
    row (one scalar repeated: nothing built per row)."""
    return table.append_column(DATE_COLUMN, pa.repeat(pa.scalar(day, pa.date32()), table.num_rows))


def offset_ranges(batch: ArrowBatch) -> tuple[dict[int, int], dict[int, int]]:
    """First and last offset per partition over a batch's rows and dead letters (an Arrow
    group-by: no Python work per record in the write path)."""
    return table_offset_ranges(
        pa.concat_tables(
            [t.select(["partition", "offset"]) for t in (batch.rows, batch.dead_letters)]
        )
    )


def table_offset_ranges(table: pa.Table) -> tuple[dict[int, int], dict[int, int]]:
    """First and last offset per partition of a table with ``partition`` and ``offset``."""
    ranges = table.group_by("partition").aggregate([("offset", "min"), ("offset", "max")])
    partitions = ranges.column("partition").to_pylist()
    firsts = ranges.column("offset_min").to_pylist()
    lasts = ranges.column("offset_max").to_pylist()
    return dict(zip(partitions, firsts, strict=True)), dict(zip(partitions, lasts, strict=True))
