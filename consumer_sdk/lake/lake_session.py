"""What a Spark session needs to read and write Delta Lake and Iceberg tables.

The jars are pinned in ``locks/spark-lake.lock`` (Delta for Spark 4.1, Iceberg's Spark 4.1
runtime, the SQLite JDBC driver, Spark's Kafka source) and fetched once into the project's jar
cache; sessions name the cached files in ``spark.jars``, so nothing is resolved per process.
Both formats live in one session: Delta through the built-in catalog
(``spark_catalog`` = Delta's), Iceberg through a catalog of its own (``lake`` by default): a
JDBC catalog on a SQLite file in the warehouse, which commits by compare-and-swap of the
table's metadata location, so concurrent writer processes never lose each other's commits
(Iceberg's Hadoop catalog relies on an atomic rename a local or NFS filesystem does not
give). ``pyiceberg``'s ``SqlCatalog`` reads the same file. A user who configures
``spark.sql.catalog.<name>`` themselves (REST, Hive, Glue ...) keeps their catalog. Delta's
commits to local paths go through our log store (:mod:`consumer_sdk.lake.commit_checks`), for
the same reason: Delta's own relies on a rename that does not refuse an existing file. Both
check the partition claims a commit of the sink names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from consumer_sdk.lake.commit_checks import (
    ICEBERG_CATALOG_IMPL,
    LOG_STORE_CLASS,
    LOG_STORE_KEY,
    ensure_commit_checks_jar,
)
from consumer_sdk.lake.iceberg.catalog import prepare_catalog_file
from consumer_sdk.lake.jar_lock import lake_jars

ICEBERG_CATALOG_FILE = "iceberg_catalog.db"
ICEBERG_DATA_DIR = "iceberg"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
ICEBERG_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
# SQLite answers "busy" at once to a second writer unless told to wait.
_SQLITE_BUSY_TIMEOUT_MS = "30000"


def iceberg_catalog_uri(warehouse: Path) -> str:
    """The SQLAlchemy URL of the default Iceberg catalog, for pyiceberg's SqlCatalog."""
    return f"sqlite:///{warehouse / ICEBERG_CATALOG_FILE}"


def lake_conf(
    warehouse: Path, iceberg_catalog: str, user_conf: Mapping[str, str]
) -> dict[str, str]:
    """Session settings for both formats, merged with the user's own ``spark.jars`` and
    ``spark.sql.extensions`` (appended, not replaced). Fetches the jars on first use and
    creates the default Iceberg catalog's file unless the user configured that catalog."""
    locked = lake_jars()
    jars = [str(path) for path in locked]
    prefix = f"spark.sql.catalog.{iceberg_catalog}"
    if LOG_STORE_KEY not in user_conf or prefix not in user_conf:
        jars.append(str(ensure_commit_checks_jar(locked)))
    extensions = [DELTA_EXTENSION, ICEBERG_EXTENSION]
    for key, ours in (("spark.jars", jars), ("spark.sql.extensions", extensions)):
        theirs = [item for item in user_conf.get(key, "").split(",") if item.strip()]
        ours.extend(item for item in theirs if item not in ours)
    conf = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": ",".join(extensions),
        "spark.sql.catalog.spark_catalog": user_conf.get(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        ),
        LOG_STORE_KEY: user_conf.get(LOG_STORE_KEY, LOG_STORE_CLASS),
    }
    if prefix not in user_conf:
        prepare_catalog_file(warehouse / ICEBERG_CATALOG_FILE)
        conf |= {
            prefix: ICEBERG_CATALOG,
            # Iceberg's JDBC catalog, its commits checking the sink's partition claims.
            f"{prefix}.catalog-impl": ICEBERG_CATALOG_IMPL,
            f"{prefix}.uri": f"jdbc:sqlite:{warehouse / ICEBERG_CATALOG_FILE}",
            f"{prefix}.warehouse": str(warehouse / ICEBERG_DATA_DIR),
            # V1 is the schema pyiceberg's SqlCatalog shares.
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.jdbc.busy_timeout": _SQLITE_BUSY_TIMEOUT_MS,
            # Several processes write one table: a table cached by this session (30 s by
            # default) would hide the others' commits from its reads.
            f"{prefix}.cache-enabled": "false",
        }
    return conf
