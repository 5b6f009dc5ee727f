"""The sink's Iceberg tables read by pyiceberg (an engine the project did not write) from
the sink's default catalog: for tests and benchmarks that check what landed."""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy.exc import OperationalError

from consumer_sdk.lake.lake_session import (
    ICEBERG_CATALOG_FILE,
    ICEBERG_DATA_DIR,
    iceberg_catalog_uri,
)
from consumer_sdk.lake.spark_config import SparkSinkConfig


def iceberg_table(config: SparkSinkConfig, table: str) -> Table | None:
    """``table`` of ``config``'s default Iceberg catalog, or None until a writer created
    it."""
    if not (config.warehouse_path / ICEBERG_CATALOG_FILE).exists():
        return None  # no writer has started yet (SQLite cannot open it)
    # The writers' Spark catalog creates the catalog's own tables. A reader creating them
    # too raced with it: "table iceberg_tables already exists" (seen in CI).
    catalog = SqlCatalog(
        config.iceberg_catalog,
        uri=iceberg_catalog_uri(config.warehouse_path),
        warehouse=f"file://{config.warehouse_path / ICEBERG_DATA_DIR}",
        init_catalog_tables="false",
    )
    try:
        return catalog.load_table(f"{config.database}.{table}")
    except NoSuchTableError:
        return None
    except OperationalError as error:
        if "no such table" in str(error):  # the catalog's tables are not created yet
            return None
        raise
