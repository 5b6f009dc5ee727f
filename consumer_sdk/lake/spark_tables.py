"""Spark sessions and table definitions for the sink, and for readers in other processes.

One session per process: a local one (``local[N]``) or Spark Connect (``sc://host:port``).
Tables are registered by location: each table has a descriptor (its columns and format;
``<table>/_table.json`` for parquet, ``<database>.db/_tables/<table>.json`` for Delta and
Iceberg, whose table directories must hold nothing of ours), so any process can register
every table of a warehouse in its own catalog with :func:`register_tables` and read them
with ``spark.table(...)``. No process depends on a shared metastore (the embedded Derby one
admits a single process at a time); a deployment with a Hive metastore service can still use
it through ``spark_conf``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from consumer_sdk.lake.arrow_batch import DATE_COLUMN
from consumer_sdk.lake.commit_checks import ICEBERG_CATALOG_IMPL
from consumer_sdk.lake.lake_session import ICEBERG_DATA_DIR, lake_conf
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.values.evolution import added_columns
from consumer_sdk.lake.values.spark_ddl import SchemaError, parse_columns, sql_type
from contract.settings import ConfigError

log = logging.getLogger(__name__)

DESCRIPTOR = "_table.json"
LAKE_DESCRIPTORS = "_tables"
# Settings the sink needs whatever the user passes: files are found by listing (partitions
# appear as writers rename them in), timestamps are written the way pyarrow reads them back.
SESSION_CONF = {
    "spark.sql.hive.manageFilesourcePartitions": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.localRelationThreshold": "0",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
}
# Properties of the Delta tables a session creates (a runtime setting, so remote sessions
# take it too); the user's spark_conf overrides them. Delta writes a checkpoint of the whole
# table state every delta.checkpointInterval commits, in a Spark job, inside the commit that
# reaches it; its default, 10, suits a table written a few times an hour. A consumer commits
# once per batch and table: measured through the sink on two cores (2,000-row appends), a
# checkpoint commit took about 1.8 s against 0.25 s for the others, and at 100 an append
# took 36 % less of the JVM's CPU (0.72 s -> 0.46 s). In `make demo` those commits took
# 4-10 s and the consumer read nothing meanwhile, so by default (delta_checkpoint_every)
# no commit reaches the interval and consumer_sdk.lake.delta.maintenance writes the
# checkpoints beside the appends. Tables created before keep the interval they have.
CHECKPOINT_INTERVAL_KEY = "spark.databricks.delta.properties.defaults.checkpointInterval"
IN_COMMIT_EVERY = 100


def table_defaults(checkpoint_every: int) -> dict[str, str]:
    """Properties of the Delta tables a session creates, for ``delta_checkpoint_every``."""
    from consumer_sdk.lake.delta.maintenance import IN_COMMIT_INTERVAL

    interval = IN_COMMIT_INTERVAL if checkpoint_every > 0 else IN_COMMIT_EVERY
    return {CHECKPOINT_INTERVAL_KEY: str(interval)}


TABLE_DEFAULTS = table_defaults(IN_COMMIT_EVERY)
# Defaults for the sessions and the Spark Connect server this project starts; the user's
# spark_conf overrides them.
DEFAULT_CONF = {
    **TABLE_DEFAULTS,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # Delta rebuilds a table's state (at each checkpoint, and for a snapshot it cannot
    # update from the last) in a job of this many tasks; its default, 50, is sized for a
    # cluster. On two cores those jobs took three times the writes' time in the 60-second
    # demo (21 jobs of 50 tasks against 122 writes).
    "spark.databricks.delta.snapshotPartitions": "2",
}
_FORMAT_JARS = {
    "delta": "Delta Lake (io.delta:delta-spark_4.1_2.13 and spark.sql.extensions="
    "io.delta.sql.DeltaSparkSessionExtension)",
    "iceberg": "Apache Iceberg (org.apache.iceberg:iceberg-spark-runtime-4.1_2.13 and an "
    "Iceberg catalog in spark.sql.catalog.*)",
}


# Waits of 50, 200, 800 and 3,200 ms between the attempts of one call (DefaultPolicy's).
CONNECT_CALL_RETRIES = 4
# Spark Connect conditions of a session the server no longer has (it restarted): the client
# refuses every later call on it, so only a new session can succeed.
_LOST_SESSION = ("NO_ACTIVE_SESSION", "INVALID_HANDLE.SESSION_")


def session_lost(error: BaseException) -> bool:
    """Whether ``error`` says the Spark Connect session is gone (its server restarted)."""
    condition = getattr(error, "getCondition", None)
    found = condition() if callable(condition) else None
    return isinstance(found, str) and found.startswith(_LOST_SESSION)


def bound_call_retries(client: Any) -> None:
    """A Spark Connect call retries an unavailable server for about 4 s, not the client's
    default ten minutes. The sink's own retries (back-off up to 30 s, ended by a stop) take
    over from there; a call runs in a thread, which nothing can cancel and which the process
    waits for at exit, so with the default a consumer asked to stop while its server was
    away kept running for minutes (the soak saw it ignore SIGTERM until killed)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_CALL_RETRIES)])


def spark_session(config: SparkSinkConfig) -> Any:
    """Start (or reuse) this process's session as ``config`` says."""
    from pyspark.sql import SparkSession

    if config.spark_remote:
        # The Connect class itself: a process may also hold a local session (the generic
        # builder refuses a remote one then).
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        # create(), not getOrCreate(): the latter returns the process's default session
        # whatever its URL, so a second sink (or a reader) would talk to the wrong server.
        remote = ConnectSession.builder.remote(config.spark_remote).create()
        bound_call_retries(remote.client)
        # Each Connect client asks its server at interpreter exit to drop its ML cache; with
        # the server gone that call retries for about ten minutes, so a consumer stopped
        # after its server went away would not exit. The sink caches no models.
        cleanup = getattr(remote.client, "_cleanup_ml_cache", None)
        if cleanup is not None:
            atexit.unregister(cleanup)
        defaults = table_defaults(config.delta_checkpoint_every)
        for key, value in {**defaults, **SESSION_CONF, **config.spark_conf}.items():
            if key != "spark.sql.hive.manageFilesourcePartitions":  # static: server's choice
                remote.conf.set(key, value)
        return remote
    builder = SparkSession.builder.master(config.master).appName("kafka-autoscaler-sink")
    settings = {
        **DEFAULT_CONF,
        **table_defaults(config.delta_checkpoint_every),
        "spark.sql.warehouse.dir": str(config.warehouse_path),
        **config.spark_conf,
        **SESSION_CONF,
    }
    if config.table_format != "parquet":
        settings |= lake_conf(config.warehouse_path, config.iceberg_catalog, config.spark_conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # A runtime setting: the process's one session (made by the first sink) takes this
    # sink's, as a remote session does.
    session.conf.set(CHECKPOINT_INTERVAL_KEY, settings[CHECKPOINT_INTERVAL_KEY])
    if config.table_format != "parquet":
        _use_catalog_settings(session, settings, f"spark.sql.catalog.{config.iceberg_catalog}")
    return session


def _use_catalog_settings(session: Any, settings: dict[str, str], prefix: str) -> None:
    """A process has one local session: a later sink gets the one the first created. Catalog
    settings are runtime ones, so a catalog the first session lacks is added now; one that
    points elsewhere is refused rather than written to."""
    wanted = {k: v for k, v in settings.items() if k == prefix or k.startswith(prefix + ".")}
    for key, value in wanted.items():
        current = session.conf.get(key, None)
        if current is None:
            session.conf.set(key, value)
        elif current != value:
            raise ConfigError(
                f"iceberg_catalog ({prefix.removeprefix('spark.sql.catalog.')}): this "
                f"process's Spark session already has {key}={current}, not {value}; give "
                "each warehouse its own catalog name"
            )


def column_ddl(schema: pa.Schema) -> str:
    """``\\`topic\\` STRING, ...`` for a data-file schema, plus the date partition column."""
    columns = [f"`{f.name}` {sql_type(f.type)}" for f in schema]
    return ", ".join([*columns, f"`{DATE_COLUMN}` DATE"])


def table_root(config: SparkSinkConfig, table: str) -> Path:
    """Directory of ``table`` in the warehouse (Delta and parquet data, every format's
    descriptor and partition fences)."""
    return config.warehouse_path / f"{config.database}.db" / table


def table_identifier(config: SparkSinkConfig, table: str) -> str:
    """The SQL name of ``table``, quoted: database.table (Iceberg: catalog.database.table)."""
    name = f"`{config.database}`.`{table}`"
    return f"`{config.iceberg_catalog}`.{name}" if config.table_format == "iceberg" else name


def descriptor_path(root: Path, table_format: str) -> Path:
    """Where the descriptor of the table at ``root`` is."""
    if table_format == "parquet":
        return root / DESCRIPTOR
    return root.parent / LAKE_DESCRIPTORS / f"{root.name}.json"


def describe_table(root: Path, schema: pa.Schema, table_format: str) -> list[pa.Field]:
    """Write the table's descriptor unless there is one (atomically), and return the columns
    of ``schema`` the table lacks (to be added by :func:`create_table`). A table created
    with other columns takes this writer when every column both have is of the same type
    (its other columns stay null in this writer's rows); otherwise ConfigError."""
    descriptor = descriptor_path(root, table_format)
    descriptor.parent.mkdir(parents=True, exist_ok=True)
    columns = column_ddl(schema)
    if not descriptor.exists():
        _write_descriptor(descriptor, columns, table_format)
        return []
    described = json.loads(descriptor.read_text())
    if described["format"] != table_format:
        raise ConfigError(
            f"table {root} exists as a {described['format']} table ({descriptor}), not "
            f"{table_format}; pick another table name (tables / table_template)"
        )
    if described["columns"] == columns:
        return []
    try:
        return added_columns(parse_columns(described["columns"]), parse_columns(columns))
    except SchemaError as exc:
        raise ConfigError(
            f"table {root} cannot take this writer's columns ({descriptor}): {exc}; pick "
            "another table name (tables / table_template) or the value format it was "
            "created with"
        ) from None


def _write_descriptor(descriptor: Path, columns: str, table_format: str) -> None:
    text = json.dumps({"columns": columns, "format": table_format}, indent=1)
    staged = descriptor.with_name(f".{descriptor.name}.{os.getpid()}")
    staged.write_text(text)
    os.replace(staged, descriptor)


# What Spark says when a format's classes or its catalog are not there; any other failure
# to create a table (a Spark Connect link reset: "Operation was orphaned because of an
# internal error") is transient, and the caller retries it.
_FORMAT_MISSING = (
    "DATA_SOURCE_NOT_FOUND",
    "Failed to find the data source",
    "Failed to find data source",
    "CATALOG_NOT_FOUND",
    "plugin class not found",
    "Cannot find catalog plugin class",
    "ClassNotFoundException",
    "NoClassDefFoundError",
    "DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG",
)


def format_missing(exc: BaseException) -> bool:
    """Whether ``exc`` says this Spark lacks a table format's jars or catalog (a
    configuration error), rather than that a call failed on its way (retried)."""
    text = str(exc)
    return any(marker in text for marker in _FORMAT_MISSING)


def create_table(
    session: Any,
    database: str,
    table: str,
    root: Path,
    table_format: str,
    iceberg_catalog: str = "lake",
    added: Sequence[pa.Field] = (),
) -> None:
    """Register the table directory ``root`` as ``database.table`` in this session (Iceberg:
    create it in its catalog unless it exists), and add the columns ``added`` (from
    :func:`describe_table`) to it and its descriptor."""
    descriptor = descriptor_path(root, table_format)
    if table_format == "iceberg":
        identifier = f"`{iceberg_catalog}`.`{database}`.`{table}`"
    else:
        identifier = f"`{database}`.`{table}`"
    try:
        with _creation_lock(descriptor):
            described = json.loads(descriptor.read_text())
            for statement in _create_statements(
                described["columns"], identifier, root, table_format
            ):
                session.sql(statement)
            _check_location(session, database, identifier, root, table_format, iceberg_catalog)
            if added:
                _add_columns(session, identifier, descriptor, described, added)
            if table_format == "parquet":
                _catch_up_parquet(session, identifier, descriptor)
    except Exception as exc:
        if table_format in _FORMAT_JARS and format_missing(exc):
            raise ConfigError(
                f"table_format {table_format} needs {_FORMAT_JARS[table_format]} on the "
                f"Spark classpath; this Spark could not create {database}.{table}: "
                f"{str(exc).splitlines()[0]}"
            ) from exc
        raise
    if table_format == "iceberg":
        return
    if session.conf.get("spark.sql.hive.manageFilesourcePartitions", "true") == "true":
        # A session tracking partitions in its catalog sees new date directories only
        # after this (ours lists files instead).
        session.sql(f"ALTER TABLE {identifier} RECOVER PARTITIONS")
    session.sql(f"REFRESH TABLE {identifier}")


def _check_location(
    session: Any,
    database: str,
    identifier: str,
    root: Path,
    table_format: str,
    iceberg_catalog: str,
) -> None:
    """Refuse a table this session's catalog already knows at another warehouse's place:
    ``CREATE ... IF NOT EXISTS`` keeps the first registration, so a second warehouse's sink
    under the same database (or Iceberg catalog) name would write into the first's table."""
    if table_format == "iceberg":
        implementation = session.conf.get(f"spark.sql.catalog.{iceberg_catalog}.catalog-impl", "")
        if implementation != ICEBERG_CATALOG_IMPL:
            return  # the user's own catalog: it places its tables where it likes
        expected = root.parent.parent / ICEBERG_DATA_DIR
    else:
        expected = root
    rows = session.sql(f"DESCRIBE TABLE EXTENDED {identifier}").collect()
    location = next((str(row[1]) for row in rows if str(row[0]).strip() == "Location"), "")
    written = location.removeprefix("file://").removeprefix("file:")
    # Spark gives the path normalized ("a/../b" as "b"), and may give it URL-quoted.
    places = {Path(os.path.normpath(p)) for p in (written, urllib.parse.unquote(written))}
    home = Path(os.path.normpath(expected))
    if location and not any(place.is_relative_to(home) for place in places):
        raise ConfigError(
            f"database {database}: this Spark session already holds {identifier} at "
            f"{location}, not under {expected}; a database name (and an Iceberg catalog "
            "name) holds one warehouse's tables per Spark session: give this sink its own "
            "database (and iceberg_catalog)"
        )


def _create_statements(columns: str, identifier: str, root: Path, table_format: str) -> list[str]:
    """What creates (or registers) the table ``identifier`` with ``columns``."""
    if table_format == "iceberg":
        namespace = identifier.rpartition(".")[0]
        return [
            f"CREATE NAMESPACE IF NOT EXISTS {namespace}",
            f"CREATE TABLE IF NOT EXISTS {identifier} ({columns}) "
            f"USING iceberg PARTITIONED BY (`{DATE_COLUMN}`) "
            f"TBLPROPERTIES ({ICEBERG_TABLE_PROPERTIES})",
        ]
    database = identifier.partition(".")[0]
    statements = [f"CREATE DATABASE IF NOT EXISTS {database} LOCATION '{root.parent.as_posix()}'"]
    if table_format == "delta" and (root / "_delta_log" / f"{0:020d}.json").exists():
        # Registered from its log: a column list that is not the log's (a writer that died
        # between adding a column and describing it) would be refused.
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {identifier} USING delta LOCATION '{root.as_posix()}'"
        )
    else:
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {identifier} ({columns}) USING {table_format} "
            f"PARTITIONED BY (`{DATE_COLUMN}`) LOCATION '{root.as_posix()}'"
        )
    return statements


def _add_columns(
    session: Any,
    identifier: str,
    descriptor: Path,
    described: dict[str, str],
    added: Sequence[pa.Field],
) -> None:
    """Add ``added`` to the table (those it lacks: another writer may have added some) and
    then to its descriptor (so a descriptor never names a column the table lacks)."""
    try:
        undescribed = added_columns(parse_columns(described["columns"]), added)
    except SchemaError as exc:  # another writer added the same name with another type
        raise ConfigError(f"table {identifier} cannot take this writer's columns: {exc}") from None
    if described["format"] != "parquet":  # parquet: the descriptor, then the session
        session.sql(f"REFRESH TABLE {identifier}")  # Iceberg's catalog caches the schema
        present = {name.lower() for name in session.table(identifier).columns}
        missing = [f for f in added if f.name.lower() not in present]
        if missing:
            session.sql(f"ALTER TABLE {identifier} ADD COLUMNS ({_columns(missing)})")
    if undescribed:
        columns = f"{described['columns']}, {_columns(undescribed)}"
        _write_descriptor(descriptor, columns, described["format"])
    log.info("table %s: added the columns %s", identifier, _columns(added))


def _catch_up_parquet(session: Any, identifier: str, descriptor: Path) -> None:
    """Give this session's definition of a parquet table the columns its descriptor gained
    since the session registered it (its catalog is the session's own)."""
    described = parse_columns(json.loads(descriptor.read_text())["columns"])
    present = {name.lower() for name in session.table(identifier).columns}
    missing = [f for f in described if f.name.lower() not in present]
    if missing:
        session.sql(f"ALTER TABLE {identifier} ADD COLUMNS ({_columns(missing)})")


def _columns(fields: Sequence[pa.Field]) -> str:
    return ", ".join(f"`{f.name}` {sql_type(f.type)}" for f in fields)


# Every Iceberg commit writes a new metadata.json holding every snapshot so far (about 1.1 KB
# each here), and by default keeps every earlier one: 1,500 commits of the sink left 1,502
# files and 1.3 GB (benchmarks.lake.iceberg_metadata; the bytes grow with the square of the
# commits). Iceberg deletes all but the last few after each commit when told to; readers
# load the current one through the catalog.
ICEBERG_TABLE_PROPERTIES = ", ".join(
    f"'{key}'='{value}'"
    for key, value in {
        "format-version": "2",
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "20",
    }.items()
)


@contextlib.contextmanager
def _creation_lock(descriptor: Path) -> Iterator[None]:
    """Writer processes create a table one at a time (across processes on the warehouse's
    filesystem), so each finds it created or creates it alone: Delta's first commit, seen
    half-written by a second creator, is "a non-empty location that is not a Delta table",
    and the Iceberg catalog refuses a second insert of the same table."""
    with descriptor.with_suffix(".lock").open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def register_tables(
    session: Any, warehouse: str | Path, database: str = "kafka", iceberg_catalog: str = "lake"
) -> list[str]:
    """Register every table the sink wrote under ``warehouse`` in ``session``'s catalog, so
    ``session.table("kafka.orders")`` works in any process (Iceberg tables are in their
    catalog already: ``lake.kafka.orders``). Returns the table names."""
    base = Path(str(warehouse).removeprefix("file://")) / f"{database}.db"
    names: list[str] = []
    descriptors = [*base.glob(f"*/{DESCRIPTOR}"), *base.glob(f"{LAKE_DESCRIPTORS}/*.json")]
    for descriptor in sorted(descriptors):
        table_format = json.loads(descriptor.read_text())["format"]
        root = descriptor.parent if table_format == "parquet" else base / descriptor.stem
        if table_format == "iceberg":
            names.append(f"{iceberg_catalog}.{database}.{root.name}")
            continue
        create_table(session, database, root.name, root, table_format)
        names.append(f"{database}.{root.name}")
    return names
