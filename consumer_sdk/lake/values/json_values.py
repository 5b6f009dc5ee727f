"""A decoded JSON document checked against declared columns (Arrow types from
:mod:`consumer_sdk.lake.values.spark_ddl`) and turned into the Python values Arrow builds
them from: structs from objects, arrays from lists, maps from objects, timestamps from ISO
8601 text or epoch numbers, dates from ISO text, decimals from numbers or numeric text.

Pure. A value that does not fit raises ValueError naming its path (``items[2].qty``): the
record becomes a dead letter with that reason. Nothing is rounded or cut: a decimal with
more digits than its scale, an integer beyond its type, a float beyond FLOAT are refused.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
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


class JsonConverter:
    """Checks and converts one column's JSON values (``epoch_unit``: what an epoch number
    of a TIMESTAMP counts: s, ms or us)."""

    def __init__(self, epoch_unit: str = "ms") -> None:
        if epoch_unit not in EPOCH_UNITS:
            raise ValueError(
                f"epoch unit must be one of {', '.join(EPOCH_UNITS)}, got {epoch_unit}"
            )
        self._micros = EPOCH_UNITS[epoch_unit]

    def convert(self, value: object, data_type: pa.DataType, path: str) -> object:
        """``value`` as Arrow takes it for ``data_type`` (null always fits); raises
        ValueError naming ``path`` when it does not fit."""
        if value is None:
            return None
        converted = self._converted(value, data_type, path)
        if converted is _MISFIT:
            raise ValueError(f"field {path!r}: {_short(value)} is not {sql_type(data_type)}")
        return converted

    def _converted(self, value: object, data_type: pa.DataType, path: str) -> object:
        if pa.types.is_struct(data_type):
            if not isinstance(value, dict):
                return _MISFIT
            return {
                f.name: self.convert(value.get(f.name), f.type, f"{path}.{f.name}")
                for f in (data_type.field(i) for i in range(data_type.num_fields))
            }
        if pa.types.is_list(data_type):
            if not isinstance(value, list):
                return _MISFIT
            element = data_type.value_type
            return [self.convert(v, element, f"{path}[{i}]") for i, v in enumerate(value)]
        if pa.types.is_map(data_type):
            if not isinstance(value, dict):
                return _MISFIT
            item = data_type.item_type
            return [(k, self.convert(v, item, f"{path}[{k!r}]")) for k, v in value.items()]
        scalar = _SCALARS.get(data_type)
        if scalar is not None:
            check, convert = scalar
            return convert(value) if check(value) else _MISFIT
        if pa.types.is_decimal(data_type):
            return _decimal(value, data_type)
        if pa.types.is_timestamp(data_type):
            return self._timestamp(value)
        if pa.types.is_date(data_type):
            return _date(value)
        return _MISFIT

    def _timestamp(self, value: object) -> object:
        try:
            if isinstance(value, str):
                moment = datetime.fromisoformat(value)
                if moment.tzinfo is None:  # no offset given: UTC, as Kafka timestamps are
                    moment = moment.replace(tzinfo=UTC)
                return moment.astimezone(UTC)
            if is_integer(value):
                return _EPOCH + timedelta(microseconds=value * self._micros)
            if isinstance(value, float | Decimal) and not isinstance(value, bool):
                micros = _EXACT.multiply(Decimal(value), self._micros)
                # Bounded before int(): Decimal("1e999999") would be a million-digit int.
                if micros.is_finite() and abs(micros) < _MAX_MICROS:
                    return _EPOCH + timedelta(microseconds=int(micros.to_integral_value()))
        except (ValueError, ArithmeticError):  # OverflowError and decimal.Overflow too
            pass
        return _MISFIT


_MISFIT = object()


def _float(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _is_float64(value: object) -> bool:
    if isinstance(value, Decimal):  # the document was read with decimals for floats
        return value.is_finite() and math.isfinite(float(value))
    return is_finite_number(value)


def _is_float32(value: object) -> bool:
    return _is_float64(value) and abs(float(value)) <= _FLOAT32_MAX  # type: ignore[arg-type]


def _is_int(bits: int) -> Callable[[object], bool]:
    return lambda value: is_integer(value) and -(2**bits) <= value < 2**bits


def _same(value: object) -> object:
    return value


# Primitive type -> (does a JSON value fit it, the value Arrow takes).
_SCALARS: dict[pa.DataType, tuple[Callable[[object], bool], Callable[[object], object]]] = {
    pa.string(): (lambda v: isinstance(v, str) and _is_utf8(v), _same),
    pa.int64(): (_is_int(63), _same),
    pa.int32(): (_is_int(31), _same),
    pa.float64(): (_is_float64, _float),
    pa.float32(): (_is_float32, _float),
    pa.bool_(): (lambda v: isinstance(v, bool), _same),
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


def _date(value: object) -> object:
    if not isinstance(value, str):
        return _MISFIT
    try:
        return date.fromisoformat(value)
    except ValueError:
        return _MISFIT
