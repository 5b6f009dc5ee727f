"""Iceberg: data files appended as one snapshot (:mod:`.files`) and the default JDBC catalog
on SQLite (:mod:`.catalog`)."""
