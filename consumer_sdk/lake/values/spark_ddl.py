"""Spark SQL column types as Arrow types, and back: ``"id BIGINT, items ARRAY<STRUCT<sku:
STRING, qty: INT>>"`` parsed into Arrow fields (what a JSON value's columns are declared as),
and an Arrow type named as Spark SQL writes it (what a table is created with).

Pure. The grammar is the part of Spark's DDL a record's columns (and the tables' metadata
columns) need: the primitives below, ``DECIMAL(p, s)``, ``ARRAY<T>``, ``MAP<STRING, T>`` and
``STRUCT<name[:] T, ...>``; names plain or in backticks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
PRIMITIVES: dict[str, pa.DataType] = {
    "STRING": pa.string(),
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "DOUBLE": pa.float64(),
    "FLOAT": pa.float32(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": TIMESTAMP,
    "DATE": pa.date32(),
    "BINARY": pa.binary(),
}
ALIASES = {
    "LONG": "BIGINT",
    "INTEGER": "INT",
    "BOOL": "BOOLEAN",
    "TEXT": "STRING",
    "REAL": "FLOAT",
    "DEC": "DECIMAL",
    "NUMERIC": "DECIMAL",
}
COMPOUND = ("DECIMAL", "ARRAY", "MAP", "STRUCT")
MAX_DECIMAL_PRECISION = 38  # Spark's, Delta's and Iceberg's
MAX_DEPTH = 16
# Characters Delta refuses in a column name (without column mapping), and the backtick.
_NAME_REFUSED = set(" ,;{}()\n\t=`")
_TOKEN = re.compile(r"\s*(?:`([^`]*)`|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class SchemaError(ValueError):
    """A column schema that cannot be parsed (the message names the part)."""


@dataclass(frozen=True)
class _Token:
    kind: str  # "name" (a word or a backticked name), "number" or "punct"
    text: str
    quoted: bool = False


def _tokens(ddl: str) -> Iterator[_Token]:
    position = 0
    while position < len(ddl):
        if not ddl[position:].strip():
            return
        match = _TOKEN.match(ddl, position)
        if match is None:
            raise SchemaError(f"json_schema: cannot read {ddl[position:].strip()[:40]!r}")
        quoted, word, number, punct = match.groups()
        if quoted is not None:
            yield _Token("name", quoted, quoted=True)
        elif word is not None:
            yield _Token("name", word)
        elif number is not None:
            yield _Token("number", number)
        else:
            yield _Token("punct", punct)
        position = match.end()


class _Parser:
    def __init__(self, ddl: str) -> None:
        self.tokens = list(_tokens(ddl))
        self.at = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise SchemaError(f"json_schema ends where {what} was expected")
        self.at += 1
        return token

    def expect(self, punct: str, where: str) -> None:
        token = self.take(f"{punct!r} ({where})")
        if token.kind != "punct" or token.text != punct:
            raise SchemaError(f"json_schema: expected {punct!r} {where}, got {token.text!r}")

    def accept(self, punct: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "punct" and token.text == punct:
            self.at += 1
            return True
        return False

    def fields(self, closing: str | None, depth: int) -> list[pa.Field]:
        """``name TYPE, ...`` up to ``closing`` (None: the end of the text)."""
        parsed: list[pa.Field] = []
        while True:
            parsed.append(self.field(depth))
            if not self.accept(","):
                break
        if closing is None:
            leftover = self.peek()
            if leftover is not None:
                raise SchemaError(f"json_schema: unexpected {leftover.text!r} after a column")
        else:
            self.expect(closing, "closing STRUCT<...>")
        seen: set[str] = set()
        for field in parsed:
            if field.name.lower() in seen:  # Spark resolves names case-insensitively
                raise SchemaError(f"json_schema column {field.name!r} repeats a column name")
            seen.add(field.name.lower())
        return parsed

    def field(self, depth: int) -> pa.Field:
        token = self.take("a column name")
        if token.kind != "name":
            raise SchemaError(f"json_schema: expected a column name, got {token.text!r}")
        name = token.text
        if not name or _NAME_REFUSED & set(name):
            raise SchemaError(
                f"json_schema column name {name!r} is empty or holds one of ' ,;{{}}()=' "
                "or a tab or newline (Delta refuses them)"
            )
        self.accept(":")
        following = self.peek()
        if following is None or following.kind != "name" or following.quoted:
            got = "nothing" if following is None else repr(following.text)
            raise SchemaError(f"json_schema part {name!r} is not 'name TYPE' (got {got})")
        return pa.field(name, self.data_type(name, depth))

    def data_type(self, name: str, depth: int) -> pa.DataType:
        if depth > MAX_DEPTH:
            raise SchemaError(f"json_schema type of {name!r} nests deeper than {MAX_DEPTH}")
        raw = self.take("a type").text.upper()
        kind = ALIASES.get(raw, raw)
        if kind in PRIMITIVES:
            return PRIMITIVES[kind]
        if kind == "DECIMAL":
            return self.decimal(name)
        if kind == "ARRAY":
            self.expect("<", "after ARRAY")
            element = self.data_type(name, depth + 1)
            self.expect(">", "closing ARRAY<...>")
            return pa.list_(element)
        if kind == "MAP":
            self.expect("<", "after MAP")
            key = self.data_type(name, depth + 1)
            if key != pa.string():
                raise SchemaError(
                    f"json_schema type of {name!r}: a MAP's keys must be STRING (JSON "
                    f"object keys are strings), got {sql_type(key)}"
                )
            self.expect(",", "between a MAP's key and value types")
            value = self.data_type(name, depth + 1)
            self.expect(">", "closing MAP<...>")
            return pa.map_(key, value)
        if kind == "STRUCT":
            self.expect("<", "after STRUCT")
            return pa.struct(self.fields(">", depth + 1))
        accepted = ", ".join([*sorted(PRIMITIVES), *COMPOUND])
        raise SchemaError(f"json_schema type of {name!r} must be one of {accepted}, got {raw}")

    def decimal(self, name: str) -> pa.DataType:
        precision, scale = 10, 0  # Spark's DECIMAL without arguments
        if self.accept("("):
            precision = self.number(name)
            scale = self.number(name) if self.accept(",") else 0
            self.expect(")", "closing DECIMAL(p, s)")
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise SchemaError(
                f"json_schema type of {name!r}: DECIMAL({precision}, {scale}) needs a "
                f"precision of 1 to {MAX_DECIMAL_PRECISION} and a scale of 0 to the precision"
            )
        return pa.decimal128(precision, scale)

    def number(self, name: str) -> int:
        token = self.take("a number")
        if token.kind != "number":
            raise SchemaError(
                f"json_schema type of {name!r}: expected a number, got {token.text!r}"
            )
        return int(token.text)


def parse_columns(ddl: str, reserved: frozenset[str] = frozenset()) -> tuple[pa.Field, ...]:
    """``"id BIGINT, tags ARRAY<STRING>"`` -> Arrow fields; raises :class:`SchemaError`
    naming the part. A top-level name in ``reserved`` (lower case) is refused."""
    if not isinstance(ddl, str) or not ddl.strip():
        raise SchemaError("json_schema must be 'name TYPE, ...', got an empty schema")
    fields = _Parser(ddl).fields(None, 0)
    for field in fields:
        if field.name.lower() in reserved:
            raise SchemaError(f"json_schema column {field.name!r} repeats a column name")
    return tuple(fields)


def sql_type(data_type: pa.DataType) -> str:
    """``data_type`` as Spark SQL names it (a table's column type)."""
    if pa.types.is_string(data_type):
        return "STRING"
    if pa.types.is_binary(data_type):
        return "BINARY"
    if pa.types.is_boolean(data_type):
        return "BOOLEAN"
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP"
    if pa.types.is_date(data_type):
        return "DATE"
    named = {pa.int32(): "INT", pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE"}
    if data_type in named:
        return named[data_type]
    if pa.types.is_decimal(data_type):
        return f"DECIMAL({data_type.precision}, {data_type.scale})"
    if pa.types.is_list(data_type):
        return f"ARRAY<{sql_type(data_type.value_type)}>"
    if pa.types.is_map(data_type):
        return f"MAP<{sql_type(data_type.key_type)}, {sql_type(data_type.item_type)}>"
    if pa.types.is_struct(data_type):
        inner = ", ".join(
            f"`{data_type.field(i).name}`: {sql_type(data_type.field(i).type)}"
            for i in range(data_type.num_fields)
        )
        return f"STRUCT<{inner}>"
    raise TypeError(f"no Spark SQL type for Arrow {data_type}")
