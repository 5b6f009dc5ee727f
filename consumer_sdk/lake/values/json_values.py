"""A decoded JSON document checked against declared columns (Arrow types from
:mod:`consumer_sdk.lake.values.spark_ddl`) and turned into the Python values Arrow builds
them from: structs from objects, arrays from lists, maps from objects, timestamps from ISO
8601 text or epoch numbers, dates from ISO text, decimals from numbers or numeric text,
binary from base64 text.

Pure. A value that does not fit raises ValueError naming its path (``items[2].qty``): the
record becomes a dead letter with that reason. Nothing is rounded or cut: a decimal with
more digits than its scale, an integer beyond its type, a float beyond FLOAT are refused.
Each column type is compiled once into a function (no type dispatch per value: the decode is
the sink's CPU cost per record on this path).
"""

from __future__ import annotations

import base64
import decimal
import math
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa

from assignor.validation import is_finite_number, is_integer
from consumer_sdk.lake.values.spark_ddl import sql_type

EPOCH_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}  # microseconds per unit
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MICROS = 10**18  # past year 9999 either way: no datetime holds it
_FLOAT32_MAX = 3.4028234663852886e38
# Enough digits for any DECIMAL(38, s) and a few to see what a value would lose.
_EXACT = decimal.Context(prec=80, traps=[decimal.InvalidOperation])

Convert = Callable[[object], object]


class _Misfit(Exception):
    """A value that does not fit its type; the path is filled in on the way out."""

    def __init__(self, value: object, data_type: pa.DataType) -> None:
        super().__init__()
        self.value, self.data_type = value, data_type
        self.path: list[str] = []

    def reason(self) -> str:
        """The dead-letter reason: the value's path from its column (``items[1].qty``)."""
        path = "".join(reversed(self.path)).removeprefix(".")
        return f"field {path!r}: {_short(self.value)} is not {sql_type(self.data_type)}"


def has_decimals(data_type: pa.DataType) -> bool:
    """Whether a column of ``data_type`` holds a decimal anywhere (its JSON numbers must
    then be read as decimals, not floats)."""
    if pa.types.is_decimal(data_type):
        return True
    if pa.types.is_list(data_type):
        return has_decimals(data_type.value_type)
    if pa.types.is_map(data_type):
        return has_decimals(data_type.item_type)
    if pa.types.is_struct(data_type):
        return any(has_decimals(data_type.field(i).type) for i in range(data_type.num_fields))
    return False


class JsonConverter:
    """Checks and converts JSON values to columns (``epoch_unit``: what an epoch number of
    a TIMESTAMP counts: s, ms or us)."""

    def __init__(self, epoch_unit: str = "ms") -> None:
        if epoch_unit not in EPOCH_UNITS:
            raise ValueError(
                f"epoch unit must be one of {', '.join(EPOCH_UNITS)}, got {epoch_unit}"
            )
        self._micros = EPOCH_UNITS[epoch_unit]

    def convert(self, value: object, data_type: pa.DataType, path: str) -> object:
        """``value`` as Arrow takes it for ``data_type`` (null always fits); raises
        ValueError naming ``path`` when it does not fit."""
        return self.document([pa.field(path, data_type)])({path: value})[0]

    def document(self, fields: Sequence[pa.Field]) -> Callable[[dict[str, object]], list[object]]:
        """A function from a JSON object to the values of ``fields`` (missing: null);
        raises ValueError naming the path of a value that does not fit."""
        # The document is a struct of the columns: its fields' paths start at the column.
        columns = _struct(pa.struct(fields), [(f.name, self.compile(f.type)) for f in fields])

        def row(document: dict[str, object]) -> list[object]:
            try:
                return list(columns(document).values())
            except _Misfit as misfit:
                raise ValueError(misfit.reason()) from None

        return row

    def compile(self, data_type: pa.DataType) -> Convert:
        """The function converting a non-null JSON value to ``data_type`` (raises _Misfit)."""
        if pa.types.is_struct(data_type):
            return _struct(data_type, [(f.name, self.compile(f.type)) for f in data_type])
        if pa.types.is_list(data_type):
            return _list(data_type, self.compile(data_type.value_type))
        if pa.types.is_map(data_type):
            return _map(data_type, self.compile(data_type.item_type))
        if pa.types.is_timestamp(data_type):
            return _checked(data_type, self._timestamp)
        if pa.types.is_decimal(data_type):
            return _checked(data_type, lambda value: _decimal(value, data_type))
        if pa.types.is_date(data_type):
            return _checked(data_type, _date)
        if pa.types.is_binary(data_type):
            return _checked(data_type, _binary)
        check, convert = _SCALARS[data_type]
        return _scalar(data_type, check, convert)

    def _timestamp(self, value: object) -> object:
        try:
            if isinstance(value, str):
                moment = datetime.fromisoformat(value)
                if moment.tzinfo is None:  # no offset given: UTC, as Kafka timestamps are
                    moment = moment.replace(tzinfo=UTC)
                return moment.astimezone(UTC)
            if is_integer(value):
                return _EPOCH + timedelta(microseconds=value * self._micros)
            if isinstance(value, float | Decimal):
                micros = _EXACT.multiply(Decimal(value), self._micros)
                # Bounded before int(): Decimal("1e999999") would be a million-digit int.
                if micros.is_finite() and abs(micros) < _MAX_MICROS:
                    return _EPOCH + timedelta(microseconds=int(micros.to_integral_value()))
        except (ValueError, ArithmeticError):  # OverflowError and decimal.Overflow too
            pass
        return _MISFIT


_MISFIT = object()


def _struct(
    data_type: pa.DataType, fields: list[tuple[str, Convert]]
) -> Callable[[object], dict[str, object]]:
    def convert(value: object) -> dict[str, object]:
        if type(value) is not dict:
            raise _Misfit(value, data_type)
        out: dict[str, object] = {}
        for name, inner in fields:
            item = value.get(name)
            try:
                out[name] = None if item is None else inner(item)
            except _Misfit as misfit:
                misfit.path.append(f".{name}")
                raise
        return out

    return convert


def _list(data_type: pa.DataType, element: Convert) -> Convert:
    def convert(value: object) -> object:
        if type(value) is not list:
            raise _Misfit(value, data_type)
        out = []
        for index, item in enumerate(value):
            try:
                out.append(None if item is None else element(item))
            except _Misfit as misfit:
                misfit.path.append(f"[{index}]")
                raise
        return out

    return convert


def _map(data_type: pa.DataType, item_type: Convert) -> Convert:
    def convert(value: object) -> object:
        if type(value) is not dict:
            raise _Misfit(value, data_type)
        out = []
        for key, item in value.items():
            try:
                out.append((key, None if item is None else item_type(item)))
            except _Misfit as misfit:
                misfit.path.append(f"[{key!r}]")
                raise
        return out

    return convert


def _checked(data_type: pa.DataType, converted: Convert) -> Convert:
    def convert(value: object) -> object:
        result = converted(value)
        if result is _MISFIT:
            raise _Misfit(value, data_type)
        return result

    return convert


def _scalar(data_type: pa.DataType, check: Callable[[object], bool], converted: Convert) -> Convert:
    def convert(value: object) -> object:
        if not check(value):
            raise _Misfit(value, data_type)
        return converted(value)

    return convert


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (JSON lets a lone surrogate such as
    "\\ud800" through; Arrow's strings cannot hold one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _float(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _is_float64(value: object) -> bool:
    if isinstance(value, Decimal):  # the document was read with decimals for floats
        return value.is_finite() and math.isfinite(float(value))
    return is_finite_number(value)


def _is_float32(value: object) -> bool:
    return _is_float64(value) and abs(float(value)) <= _FLOAT32_MAX  # type: ignore[arg-type]


def _is_int(bits: int) -> Callable[[object], bool]:
    low, high = -(2**bits), 2**bits
    return lambda value: type(value) is int and low <= value < high


def _same(value: object) -> object:
    return value


# Primitive type -> (does a JSON value fit it, the value Arrow takes).
_SCALARS: dict[pa.DataType, tuple[Callable[[object], bool], Convert]] = {
    pa.string(): (lambda v: type(v) is str and (v.isascii() or _is_utf8(v)), _same),
    pa.int64(): (_is_int(63), _same),
    pa.int32(): (_is_int(31), _same),
    pa.float64(): (_is_float64, _float),
    pa.float32(): (_is_float32, _float),
    pa.bool_(): (lambda v: type(v) is bool, _same),
}


def _decimal(value: object, data_type: pa.Decimal128Type) -> object:
    """A number or numeric text as a Decimal of the column's scale, refused when that would
    lose a digit or need more than its precision."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        return _MISFIT
    try:
        exact = _EXACT.create_decimal(value if not isinstance(value, str) else value.strip())
        if not exact.is_finite():
            return _MISFIT
        scaled = exact.quantize(Decimal(1).scaleb(-data_type.scale), context=_EXACT)
    except (decimal.InvalidOperation, ValueError):
        return _MISFIT
    if scaled != exact or len(scaled.as_tuple().digits) > data_type.precision:
        return _MISFIT
    return scaled


def _binary(value: object) -> object:
    """Base64 text (as Spark's JSON reader takes a BINARY) as its bytes."""
    if not isinstance(value, str):
        return _MISFIT
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error is one
        return _MISFIT


def _date(value: object) -> object:
    if not isinstance(value, str):
        return _MISFIT
    try:
        return date.fromisoformat(value)
    except ValueError:
        return _MISFIT
