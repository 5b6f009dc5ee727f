"""The native record decoder (``native/kafka_records.c``) through ctypes.

:func:`decode_sections` measures each records section, then decodes every one that parses
into a single allocation and returns the Arrow columns over it (no copy); :func:`frame` finds
where whole records end in a window of a section inflated piece by piece. ``native_available()``
is False when the library is not built (no C compiler at install time).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from consumer_sdk.kafka_client.record_batches import portable_crc32c
from consumer_sdk.records.batch_header import BatchHeader, CorruptRecords
from consumer_sdk.sink import HEADERS, RECORD_FIXED_BYTES, RECORD_SCHEMA


class _Sizes(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "records",
            "key_bytes",
            "value_bytes",
            "headers",
            "header_key_bytes",
            "header_value_bytes",
        )
    ]


class _Columns(ctypes.Structure):
    _fields_ = [
        ("offsets", ctypes.c_void_p),
        ("timestamps", ctypes.c_void_p),
        ("key_offsets", ctypes.c_void_p),
        ("key_valid", ctypes.c_void_p),
        ("key_data", ctypes.c_void_p),
        ("value_offsets", ctypes.c_void_p),
        ("value_valid", ctypes.c_void_p),
        ("value_data", ctypes.c_void_p),
        ("header_offsets", ctypes.c_void_p),
        ("header_key_offsets", ctypes.c_void_p),
        ("header_key_data", ctypes.c_void_p),
        ("header_value_offsets", ctypes.c_void_p),
        ("header_value_valid", ctypes.c_void_p),
        ("header_value_data", ctypes.c_void_p),
        ("filled", _Sizes),
        ("capacity", _Sizes),
    ]


def native_library_path() -> Path | None:
    """The built decoder next to this module (setuptools names it like an extension)."""
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_kafka_records{suffix}"
        if candidate.exists():
            return candidate
    return None


@cache
def _native() -> ctypes.CDLL | None:
    path = native_library_path()
    if path is None:
        return None
    library = ctypes.CDLL(str(path))
    int64, pointer = ctypes.c_int64, ctypes.c_void_p
    library.kar_measure.argtypes = [
        *(pointer, int64, int64, int64, int64, int64, int64, int64),
        ctypes.POINTER(_Sizes),
    ]
    library.kar_measure.restype = int64
    library.kar_decode.argtypes = [
        *(pointer, int64, int64, int64, int64, int64, int64, int64, int64),
        ctypes.POINTER(_Columns),
    ]
    library.kar_decode.restype = int64
    library.kar_frame.argtypes = [pointer, int64, int64, int64, int64, pointer, pointer]
    library.kar_frame.restype = int64
    for crc in (library.kar_crc32c, library.kar_crc32c_portable):
        crc.argtypes = [pointer, int64]
        crc.restype = ctypes.c_uint32
    return library


def native_available() -> bool:
    """Whether the native decoder is built and loads."""
    return _native() is not None


def crc32c(data: bytes | memoryview, *, portable: bool = False) -> int:
    """CRC-32C of ``data`` (natively when built, else aiokafka's); ``portable`` forces the
    native table-driven code even where the CPU's instruction is available."""
    library = _native()
    if library is None:
        return portable_crc32c(bytes(data))
    buffer = np.frombuffer(data, dtype=np.uint8)
    native = library.kar_crc32c_portable if portable else library.kar_crc32c
    return int(native(buffer.ctypes.data, len(buffer)))


NATIVE_PROBLEMS = {
    -1: "records do not parse",
    -2: "records do not fit their measured size",
    -3: "a record's offset is outside the batch's range",
    -4: "a header key is not UTF-8",
    -5: "a record's timestamp overflows",
}


@dataclass(frozen=True)
class Section:
    """Records to decode: a batch's (inflated) records section, or a window of it holding
    ``count`` whole records."""

    header: BatchHeader
    records: np.ndarray  # uint8
    count: int


@dataclass(frozen=True)
class Framed:
    """What :func:`frame` found: whole records, the bytes they take, their largest delta."""

    count: int
    bytes: int
    max_delta: int


def frame(library: ctypes.CDLL, window: np.ndarray, max_count: int, budget: int) -> Framed:
    """The whole records at the start of ``window`` (at most ``max_count``, taking with their
    fixed cells at most ``budget`` bytes, but at least one if whole); raises ValueError when a
    record does not parse."""
    taken, max_delta = ctypes.c_int64(), ctypes.c_int64()
    count = library.kar_frame(
        window.ctypes.data,
        len(window),
        max_count,
        RECORD_FIXED_BYTES,
        budget,
        ctypes.byref(taken),
        ctypes.byref(max_delta),
    )
    if count < 0:
        raise ValueError(NATIVE_PROBLEMS.get(count, "records do not parse"))
    return Framed(int(count), int(taken.value), int(max_delta.value))


def decode_sections(
    library: ctypes.CDLL,
    sections: list[Section],
    min_offset: int,
    refuse: Callable[[BatchHeader, str], None],
) -> pa.RecordBatch:
    """Measure each section, refuse those that do not parse (``refuse(header, reason)``), then
    decode the records at or past ``min_offset`` of the rest into one allocation."""
    sizes = _Sizes()
    decodable: list[Section] = []
    for section in sections:
        measured = _Sizes()
        got = _measure(library, section, min_offset, measured)
        if got < 0:
            refuse(section.header, NATIVE_PROBLEMS.get(got, "records do not parse"))
            continue
        for field in _Sizes._fields_:
            setattr(sizes, field[0], getattr(sizes, field[0]) + getattr(measured, field[0]))
        decodable.append(section)
    arrays, base = _allocate(sizes)
    columns = _Columns(**{name: base + offset for name, (offset, _) in arrays.items()})
    columns.capacity = sizes
    for section in decodable:
        got = library.kar_decode(
            *_section_arguments(section),
            section.header.max_timestamp,
            min_offset,
            ctypes.byref(columns),
        )
        if got < 0:  # measured fine a moment ago: a bug, not the data
            offset = section.header.base_offset
            raise CorruptRecords(f"record batch at offset {offset}: decode failed")
    return _record_batch({name: view for name, (_, view) in arrays.items()})


def _allocate(sizes: _Sizes) -> tuple[dict[str, tuple[int, np.ndarray]], int]:
    """Every column the decoder fills, as views of one allocation (one per fetch, not
    fourteen): name -> (byte offset, view), and the allocation's address. 8-byte columns
    come first so that every view stays aligned."""
    n, headers = sizes.records, sizes.headers
    layout: list[tuple[str, type, int]] = [
        ("offsets", np.int64, n),
        ("timestamps", np.int64, n),
        ("key_offsets", np.int32, n + 1),
        ("value_offsets", np.int32, n + 1),
        ("header_offsets", np.int32, n + 1),
        ("header_key_offsets", np.int32, headers + 1),
        ("header_value_offsets", np.int32, headers + 1),
        ("key_valid", np.uint8, n),
        ("value_valid", np.uint8, n),
        ("header_value_valid", np.uint8, headers),
        ("key_data", np.uint8, sizes.key_bytes),
        ("value_data", np.uint8, sizes.value_bytes),
        ("header_key_data", np.uint8, sizes.header_key_bytes),
        ("header_value_data", np.uint8, sizes.header_value_bytes),
    ]
    total = sum(np.dtype(kind).itemsize * count for _, kind, count in layout)
    memory = np.zeros(total, np.uint8)
    views: dict[str, tuple[int, np.ndarray]] = {}
    position = 0
    for name, kind, count in layout:
        size = np.dtype(kind).itemsize * count
        views[name] = (position, memory[position : position + size].view(kind))
        position += size
    return views, int(memory.ctypes.data)


def _record_batch(arrays: dict[str, np.ndarray]) -> pa.RecordBatch:
    """The decoder's filled columns as an Arrow record batch, sharing their memory."""
    header_keys = _binary(
        pa.string(), arrays["header_key_offsets"], None, arrays["header_key_data"]
    )
    header_values = _binary(
        pa.binary(),
        arrays["header_value_offsets"],
        arrays["header_value_valid"],
        arrays["header_value_data"],
    )
    pairs = pa.StructArray.from_arrays(
        [header_keys, header_values], fields=list(HEADERS.value_type)
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(arrays["offsets"]),
            pa.array(arrays["timestamps"]),
            _binary(pa.binary(), arrays["key_offsets"], arrays["key_valid"], arrays["key_data"]),
            _binary(
                pa.binary(), arrays["value_offsets"], arrays["value_valid"], arrays["value_data"]
            ),
            pa.ListArray.from_arrays(pa.array(arrays["header_offsets"]), pairs, type=HEADERS),
        ],
        schema=RECORD_SCHEMA,
    )


def _binary(
    kind: pa.DataType, offsets: np.ndarray, valid: np.ndarray | None, data: np.ndarray
) -> pa.Array:
    """A binary (or string) array over the decoder's buffers, without copying them."""
    nulls = None
    null_count = 0
    if valid is not None and len(valid) and not valid.all():
        nulls = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(len(valid) - valid.sum())
    return pa.Array.from_buffers(
        kind,
        len(offsets) - 1,
        [nulls, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=null_count,
    )


def measure_problem(library: ctypes.CDLL, section: Section) -> str | None:
    """Why ``section``'s records would not decode, or None (nothing is allocated)."""
    got = _measure(library, section, 0, _Sizes())
    return NATIVE_PROBLEMS.get(got, "records do not parse") if got < 0 else None


def _measure(library: ctypes.CDLL, section: Section, min_offset: int, sizes: _Sizes) -> int:
    """kar_measure: adds what decoding the section's records at or past ``min_offset`` needs
    to ``sizes``; returns their count, or a negative problem code."""
    return int(library.kar_measure(*_section_arguments(section), min_offset, ctypes.byref(sizes)))


def _section_arguments(section: Section) -> tuple[int, ...]:
    """What kar_measure and kar_decode both take first: the records, their length and count,
    and the batch's base offset, last delta, base timestamp and LogAppendTime flag."""
    header = section.header
    return (
        section.records.ctypes.data,
        len(section.records),
        section.count,
        header.base_offset,
        header.last_offset_delta,
        header.base_timestamp,
        header.uses_log_append_time,
    )
