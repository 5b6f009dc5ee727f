"""Iceberg appends whose data files pyarrow writes, committed by the session's Iceberg.

The Iceberg twin of consumer_sdk.lake.delta.files. Spark's own append of a batch converts its
Arrow columns to rows and back to Parquet in Spark tasks; here pyarrow writes the batch as
one Parquet file under the table's data location, carrying the table's field ids (Iceberg
reads files by field id), and ``java/kafkaautoscaler/iceberg/FileAppend.java`` appends it in
one snapshot through the session's catalog: the same table operations as a Spark write, so
the same claim check at the commit point, the same retry on a concurrent append, and the
batch's offsets in the snapshot summary. Its metrics (counts, bounds) are read from the
file's footer on the Java side, as Iceberg's own file import does. A file no snapshot names
(its writer died before committing) is never read; ``remove_orphan_files`` removes it.

Only tables keeping their data on a local path (through Spark Connect: one the server
sees too, and a server that loads our command plugin, see consumer_sdk.lake.jvm_appends), and
only tables laid out as the sink creates them (see FileAppend); others are written by Spark.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from consumer_sdk.lake.arrow_batch import DATE_COLUMN, with_ingest_date
from consumer_sdk.lake.jvm_appends import Refusals, run_request
from consumer_sdk.lake.parquet_codecs import Unwritable, parquet_compression
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import table_identifier

FIELD_ID = b"PARQUET:field_id"


class SchemaMismatch(ValueError):
    """A column of the batch is not in the table's schema (or not of its shape)."""


def with_field_ids(schema: pa.Schema, iceberg_schema: dict[str, Any]) -> pa.Schema:
    """``schema`` whose fields (nested ones too) carry the ids of the same-named fields of
    ``iceberg_schema`` (Iceberg's schema JSON), as Parquet field ids."""
    known = {field["name"]: field for field in iceberg_schema["fields"]}
    return pa.schema([_field_with_ids(field, known) for field in schema])


def _field_with_ids(field: pa.Field, known: dict[str, dict[str, Any]]) -> pa.Field:
    if field.name not in known:
        raise SchemaMismatch(f"column {field.name} is not in the Iceberg table")
    iceberg = known[field.name]
    return _with_id(field.with_type(_type_with_ids(field.type, iceberg["type"])), iceberg["id"])


def _with_id(field: pa.Field, field_id: int) -> pa.Field:
    return field.with_metadata({FIELD_ID: str(field_id).encode()})


def _type_with_ids(kind: pa.DataType, iceberg: Any) -> pa.DataType:
    if isinstance(iceberg, str):  # a primitive: no children to number
        return kind
    if iceberg["type"] == "struct" and pa.types.is_struct(kind):
        known = {field["name"]: field for field in iceberg["fields"]}
        return pa.struct([_field_with_ids(kind.field(i), known) for i in range(kind.num_fields)])
    if iceberg["type"] == "list" and pa.types.is_list(kind):
        element = kind.value_field
        element = element.with_type(_type_with_ids(element.type, iceberg["element"]))
        return pa.list_(_with_id(element, iceberg["element-id"]))
    if iceberg["type"] == "map" and pa.types.is_map(kind):
        key = kind.key_field.with_type(_type_with_ids(kind.key_type, iceberg["key"]))
        item = kind.item_field.with_type(_type_with_ids(kind.item_type, iceberg["value"]))
        return pa.map_(_with_id(key, iceberg["key-id"]), _with_id(item, iceberg["value-id"]))
    raise SchemaMismatch(f"a {kind} column where the Iceberg table has {iceberg['type']}")


def local_directory(location: str) -> Path | None:
    """The local path of a data location (``file:`` URI or plain path); None otherwise."""
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        return None
    return Path(parsed.path)


@dataclass(frozen=True)
class _Layout:
    """Where a table's data files go and the Arrow schema (with field ids) they are written
    with."""

    location: str  # as the table names it (a file: URI or a path)
    directory: Path
    iceberg_schema: dict[str, Any]
    compression: str  # pyarrow's name of the table's codec
    level: int | None  # its level (None: a codec without levels)


class IcebergFileCommitter:
    """Writes a batch's rows as one Parquet file and appends it to an Iceberg table through
    the session's Java side (:mod:`consumer_sdk.lake.jvm_appends`)."""

    def __init__(self) -> None:
        self._refusals = Refusals()
        self._layouts: dict[str, _Layout] = {}

    def refusal(self, session: Any, identifier: str) -> str | None:
        """Why the table ``identifier`` must be written by Spark (None: files can be
        appended). Asked once per table and process (again after a refused commit)."""
        return self._refusals.of(identifier, lambda: self._ask(session, identifier))

    def _ask(self, session: Any, identifier: str) -> str | None:
        request = {"op": "iceberg.layout", "identifier": identifier, "column": DATE_COLUMN}
        layout = run_request(session, request)
        if layout["refusal"] is not None:
            return str(layout["refusal"])
        location = str(layout["location"])
        directory = local_directory(location)
        if directory is None:
            return f"its data location {location} is not a local path"
        try:
            compression, level = parquet_compression(str(layout["codec"]), layout["level"])
        except Unwritable as exc:
            return str(exc)
        schema = json.loads(layout["schema"])
        self._layouts[identifier] = _Layout(
            location.rstrip("/"), directory, schema, compression, level
        )
        return None

    def write_batch(
        self,
        session: Any,
        config: SparkSinkConfig,
        table: str,
        rows: pa.Table,
        day: date,
        metadata: str,
    ) -> bool:
        """:meth:`consumer_sdk.lake.jvm_appends.FileCommitter.write_batch`."""
        identifier = table_identifier(config, table)
        if self.refusal(session, identifier) is not None:
            return False
        self.append(session, identifier, with_ingest_date(rows, day), day, metadata)
        return True

    def append(
        self, session: Any, identifier: str, rows: pa.Table, day: date, metadata: str
    ) -> int:
        """Write ``rows`` (the table's columns, its date column included) as one file into
        the ``day`` partition and append it in one snapshot whose summary carries
        ``metadata``; returns the snapshot id."""
        layout = self._layouts[identifier]
        try:
            schema = with_field_ids(rows.schema, layout.iceberg_schema)
        except SchemaMismatch:
            self._refusals.forget(identifier)  # the table's schema changed: read it again
            raise
        partition = f"{DATE_COLUMN}={day.isoformat()}"
        name = f"{uuid.uuid4()}.parquet"
        path = layout.directory / partition / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            rows.cast(schema),
            path,
            compression=layout.compression,
            compression_level=layout.level,
        )
        request = {
            "op": "iceberg.commit",
            "identifier": identifier,
            "column": DATE_COLUMN,
            "partition": partition,
            "paths": [f"{layout.location}/{partition}/{name}"],
            "sizes": [path.stat().st_size],
            "metadata": metadata,
        }
        with self._refusals.committing(identifier):
            snapshot: int = run_request(session, request)
        return snapshot
