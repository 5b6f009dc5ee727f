"""Configuration of the Spark table sink: arguments, else ``AUTOSCALER_SPARK_*`` variables."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from consumer_sdk.lake.arrow_batch import VALUE_FORMATS, parse_json_schema
from consumer_sdk.lake.values.json_values import EPOCH_UNITS
from consumer_sdk.lake.values.spark_ddl import SchemaError
from contract.settings import ConfigError, setting

if TYPE_CHECKING:
    import pyarrow as pa

SPARK_ENV_PREFIX = "AUTOSCALER_SPARK_"
TABLE_FORMATS = ("parquet", "delta", "iceberg")
# Who writes a Delta or Iceberg batch's data files: see SparkSinkConfig.
FILE_WRITERS = ("auto", "arrow", "spark")
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,127}")
_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|yarn|k8s)(://.+)?")


def spark_env_name(field_name: str) -> str:
    """``warehouse`` -> ``AUTOSCALER_SPARK_WAREHOUSE``; ``spark_remote`` ->
    ``AUTOSCALER_SPARK_REMOTE``."""
    return SPARK_ENV_PREFIX + field_name.removeprefix("spark_").upper()


def table_name_for(topic: str, template: str = "{topic}") -> str:
    """A topic's table name: the template with ``{topic}`` filled in, lower-cased, every
    character outside ``[a-z0-9_]`` replaced by ``_`` (``orders.v2-eu`` -> ``orders_v2_eu``)."""
    name = re.sub(r"[^a-z0-9_]", "_", template.replace("{topic}", topic).lower())
    return name if not name[:1].isdigit() else f"t_{name}"


@dataclass(frozen=True)
class SparkSinkConfig:
    """Everything :class:`~consumer_sdk.lake.spark_sink.SparkTableSink` needs.

    ``warehouse`` is a directory every writer and reader shares (local disk, NFS); Delta and
    parquet tables live in ``<warehouse>/<database>.db/<table>``, Iceberg tables in the
    ``iceberg_catalog`` catalog (by default a SQLite JDBC catalog in the warehouse, data under
    ``<warehouse>/iceberg``). ``spark_remote`` (``sc://host:port``) uses Spark
    Connect instead of a local session; the Connect server must see the same warehouse path.

    ``file_writer``: who writes a Delta or Iceberg batch's data files. ``arrow`` (and
    ``auto``, the same): pyarrow writes them into the table and the session's Delta or
    Iceberg commits them (the same transaction, log store or catalog and checks as a Spark
    write; through Spark Connect, a server loading our command plugin commits them, see
    ``SparkConnectServer``); ``spark``: Spark writes them (``createDataFrame`` and an
    append). A table that checks rows as they are written (Delta: CHECK constraints,
    generated or identity columns, column mapping, UniForm) or is not laid out as the sink
    creates it (Iceberg: another partition spec, a sort order, a non-Parquet or non-local
    data location), and every table through a Connect server without the plugin, is written
    by Spark whatever this says. (The parquet format's files are always pyarrow's.)
    """

    warehouse: str = setting(
        "a directory every writer and reader shares (local disk, NFS; a path or file://)"
    )
    database: str = setting("the database tables are created in, [a-z_][a-z0-9_]*", "kafka")
    table_template: str = setting(
        "a topic's table name, containing {topic} (lower-cased, other characters become _)",
        "{topic}",
    )
    tables: Mapping[str, str] = setting(
        "topic=table[,topic=table...]: tables named per topic, winning over table_template",
        default_factory=dict,
    )
    value_format: str = setting(
        "raw (value as bytes), text (UTF-8) or json (columns from json_schema; a value that "
        "does not parse goes to the dead-letter table)",
        "raw",
    )
    json_schema: str = setting(
        "with value_format json: the columns as Spark DDL, 'name TYPE, ...': STRING, BIGINT, "
        "INT, DOUBLE, FLOAT, BOOLEAN, TIMESTAMP, DATE, DECIMAL(p, s), BINARY, ARRAY<T>, "
        "MAP<STRING, T>, "
        "STRUCT<name: T, ...> (for example id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT>>)",
        "",
    )
    json_epoch_unit: str = setting(
        "what a JSON TIMESTAMP given as a number counts since 1970: s, ms or us (Spark's "
        "from_json reads seconds; Kafka and JavaScript write milliseconds); ISO 8601 text is "
        "read as it says, UTC when it names no offset",
        "ms",
    )
    table_format: str = setting("delta, iceberg or parquet (with an offset ledger)", "delta")
    file_writer: str = setting(
        "who writes a Delta or Iceberg batch's data files: arrow (auto: the same; pyarrow "
        "writes them and the session commits them) or spark",
        "auto",
    )
    iceberg_catalog: str = setting(
        "the Spark catalog Iceberg tables live in, an identifier other than spark_catalog "
        "(default: a JDBC catalog on SQLite in the warehouse)",
        "lake",
    )
    dead_letter_table: str = setting(
        "the table malformed records and refused batches go to, with topic, partition, "
        "offset and the reason",
        "dead_letters",
    )
    master: str = setting(
        "the local session's master: local, local[N], local[*] or a cluster URL", "local[2]"
    )
    spark_remote: str = setting(
        "sc://host:port: write through a Spark Connect server instead of a local session "
        "(it must see the same warehouse path); empty: a local session",
        "",
    )
    spark_conf: Mapping[str, str] = setting(
        "key=value[,key=value...]: Spark settings for the session (spark.jars and "
        "spark.sql.extensions are appended to ours)",
        default_factory=dict,
    )
    staging_max_age_secs: float = setting(
        "staged files of writers dead this long are removed, [60, 2592000] seconds", 86_400.0
    )
    delta_checkpoint_every: int = setting(
        "Delta tables the sink creates: a checkpoint every this many commits, written beside "
        "the appends (delta-rs, in a thread) so no append waits for it, [1, 100000]; 0: "
        "inside the commit that reaches it, every 100, as Delta does (the append waits)",
        100,
    )
    compact_every_commits: int = setting(
        "Delta and Iceberg tables: every this many commits of a table, its small files are "
        "rewritten into large ones beside the appends (Delta OPTIMIZE, Iceberg "
        "rewrite_data_files, in a thread of this process's Spark session), [1, 1000000]; 0: "
        "never (run kafka-autoscaler-compact instead)",
        0,
    )
    iceberg_keep_snapshots_secs: float = setting(
        "Iceberg tables: snapshots older than this are expired beside the appends (every 100 "
        "commits of a table), but for each Kafka partition the one holding its highest offset, "
        "[60, 2592000] seconds; 0: never (each commit's metadata then lists every snapshot)",
        900.0,
    )

    def __post_init__(self) -> None:
        if not isinstance(self.warehouse, str) or not self.warehouse:
            self._fail("warehouse", "a directory path shared by all writers")
        if "://" in self.warehouse and not self.warehouse.startswith("file://"):
            self._fail("warehouse", "a POSIX path (file:// or plain): staged files are renamed in")
        if not _IDENTIFIER.fullmatch(self.database):
            self._fail("database", "a lower-case identifier [a-z_][a-z0-9_]*")
        if "{topic}" not in self.table_template:
            self._fail("table_template", "a template containing {topic}")
        for topic, table in dict(self.tables).items():
            if not _IDENTIFIER.fullmatch(table):
                raise ConfigError(
                    f"tables ({spark_env_name('tables')}) entry {topic}={table!r}: the table "
                    "must be a lower-case identifier [a-z_][a-z0-9_]*"
                )
        if self.value_format not in VALUE_FORMATS:
            self._fail("value_format", f"one of {', '.join(VALUE_FORMATS)}")
        if self.value_format == "json":
            try:
                parse_json_schema(self.json_schema)
            except SchemaError as exc:
                raise ConfigError(f"{self._label('json_schema')}: {exc}") from None
        if self.json_epoch_unit not in EPOCH_UNITS:
            self._fail("json_epoch_unit", f"one of {', '.join(EPOCH_UNITS)}")
        if self.table_format not in TABLE_FORMATS:
            self._fail("table_format", f"one of {', '.join(TABLE_FORMATS)}")
        if self.file_writer not in FILE_WRITERS:
            self._fail("file_writer", f"one of {', '.join(FILE_WRITERS)}")
        if (
            not _IDENTIFIER.fullmatch(self.iceberg_catalog)
            or self.iceberg_catalog == "spark_catalog"
        ):
            self._fail("iceberg_catalog", "a lower-case identifier other than spark_catalog")
        if not _IDENTIFIER.fullmatch(self.dead_letter_table):
            self._fail("dead_letter_table", "a lower-case identifier [a-z_][a-z0-9_]*")
        if not _MASTER.fullmatch(self.master):
            self._fail("master", "local, local[N], local[*] or a cluster URL (spark://, yarn, k8s)")
        if self.spark_remote and not re.fullmatch(r"sc://[^/\s]+(/.*)?", self.spark_remote):
            self._fail("spark_remote", "empty (local session) or sc://host:port")
        if not 60 <= self.staging_max_age_secs <= 30 * 86_400:
            self._fail("staging_max_age_secs", "in [60, 2592000]")
        keep = self.iceberg_keep_snapshots_secs
        if not (keep == 0 or 60 <= keep <= 30 * 86_400):
            self._fail("iceberg_keep_snapshots_secs", "0 (never) or in [60, 2592000]")
        every = self.delta_checkpoint_every
        if not isinstance(every, int) or isinstance(every, bool) or not 0 <= every <= 100_000:
            self._fail("delta_checkpoint_every", "an integer in [0, 100000]")
        every = self.compact_every_commits
        if not isinstance(every, int) or isinstance(every, bool) or not 0 <= every <= 1_000_000:
            self._fail("compact_every_commits", "an integer in [0, 1000000] (0: never)")
        if every and self.table_format == "parquet":
            self._fail("compact_every_commits", "0 with table_format parquet (not compacted)")

    def _label(self, name: str) -> str:
        return f"{name} ({spark_env_name(name)})"

    def _fail(self, name: str, accepted: str) -> NoReturn:
        raise ConfigError(f"{self._label(name)} must be {accepted}, got {getattr(self, name)!r}")

    @property
    def warehouse_path(self) -> Path:
        """The warehouse as a local path."""
        return Path(self.warehouse.removeprefix("file://")).absolute()

    @property
    def files_by_arrow(self) -> bool:
        """Whether pyarrow writes Delta or Iceberg data files (``file_writer``, resolved)."""
        return self.table_format in ("delta", "iceberg") and self.file_writer != "spark"

    def json_fields(self) -> tuple[pa.Field, ...]:
        """The declared JSON columns (empty unless value_format is json)."""
        return parse_json_schema(self.json_schema) if self.value_format == "json" else ()

    def table_for(self, topic: str) -> str:
        """The table a topic's records land in."""
        return self.tables.get(topic) or table_name_for(topic, self.table_template)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> SparkSinkConfig:
        """Keyword arguments win; others from ``AUTOSCALER_SPARK_*``. Mappings (``TABLES``,
        ``CONF``) are written ``key=value,key=value``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = spark_env_name(f.name)
            if f.name in overrides:
                values[f.name] = overrides.pop(f.name)
            elif name in env:
                raw = env[name]
                if f.name in ("tables", "spark_conf"):
                    values[f.name] = _pairs(name, raw)
                elif f.name in ("staging_max_age_secs", "iceberg_keep_snapshots_secs"):
                    values[f.name] = _number(name, raw)
                elif f.name in ("delta_checkpoint_every", "compact_every_commits"):
                    values[f.name] = _integer(name, raw)
                else:
                    values[f.name] = raw
        if overrides:
            raise ConfigError(f"unknown Spark sink field(s): {', '.join(sorted(overrides))}")
        if "warehouse" not in values:
            raise ConfigError(f"warehouse is required (argument or {spark_env_name('warehouse')})")
        return cls(**values)


def _pairs(variable: str, raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{variable} must be key=value[,key=value...], got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _integer(variable: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{variable} must be an integer, got {raw!r}") from None


def _number(variable: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{variable} must be a number, got {raw!r}") from None
