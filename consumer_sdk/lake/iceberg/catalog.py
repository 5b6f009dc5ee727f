"""The default Iceberg catalog's SQLite file, created whole before any engine opens it.

Iceberg's JDBC catalog creates its two tables on first use and, for the schema version
readers such as pyiceberg expect (V1), then adds the ``iceberg_type`` column with a separate
``ALTER TABLE``. Several writer processes starting at once, and a reader opening the file
between those two statements, see a catalog table without that column and fail. Creating
both tables, V1 already, in one transaction before Spark starts leaves nothing for the
engines to create or alter: they find the schema they expect.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Iceberg's JDBC catalog schema V1 (the V0 tables plus iceberg_type), as its JdbcUtil and
# pyiceberg's SqlCatalog define it.
_TABLES = """
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);
"""
_BUSY_TIMEOUT_S = 30.0


def prepare_catalog_file(path: Path) -> None:
    """Create the catalog's tables in ``path`` (and its directory) unless they exist; safe
    to call from several processes at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        # One writer at a time (the others wait), and both tables or none.
        connection.executescript(f"BEGIN IMMEDIATE;{_TABLES}COMMIT;")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    finally:
        connection.close()
