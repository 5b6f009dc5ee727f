"""The default Iceberg catalog file: created whole (schema V1), by any number of processes at
once, and readable by pyiceberg before any engine wrote to it."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from consumer_sdk.lake.iceberg.catalog import prepare_catalog_file


def test_processes_preparing_one_catalog_at_once_leave_the_v1_schema(tmp_path: Path) -> None:
    path = tmp_path / "warehouse" / "catalog.db"
    with ProcessPoolExecutor(4) as pool:
        list(pool.map(prepare_catalog_file, [path] * 8))
    with sqlite3.connect(path) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(iceberg_tables)")]
    assert "iceberg_type" in columns
    catalog = SqlCatalog("lake", uri=f"sqlite:///{path}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    assert catalog.list_tables("db") == []
    prepare_catalog_file(path)  # again, with a namespace in it: nothing changes
    assert catalog.list_namespaces() == [("db",)]
