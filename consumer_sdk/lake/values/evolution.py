"""Which columns a writer adds to a table it shares with writers of an earlier (or later)
schema: pure. A writer's columns fit a table when every column both have is of the same type;
the writer's other columns are added to the table (nullable, at its end), and the table's
columns the writer lacks stay null in its rows. Anything else (a column whose type changed)
is refused, naming it."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from consumer_sdk.lake.values.spark_ddl import SchemaError, sql_type


def added_columns(table: Sequence[pa.Field], writer: Sequence[pa.Field]) -> list[pa.Field]:
    """The writer's columns the table lacks, in the writer's order; raises
    :class:`SchemaError` naming a column both have with different types (Spark resolves
    names case-insensitively, so ``Tier`` and ``tier`` are one column)."""
    known = {field.name.lower(): field for field in table}
    added: list[pa.Field] = []
    for field in writer:
        existing = known.get(field.name.lower())
        if existing is None:
            added.append(field)
        elif existing.type != field.type or existing.name != field.name:
            raise SchemaError(
                f"column {field.name!r} is {sql_type(field.type)} here and "
                f"{sql_type(existing.type)} as {existing.name!r} in the table: only new "
                "columns can be added to a table, a column's type or name cannot change"
            )
    return added
