"""Kafka record batches (message format v2) as Arrow columns, without an object per record.

Pure (no client, no I/O): :func:`decode_records` turns the bytes a Fetch response holds for one
partition into a :class:`RecordColumns` (offset, timestamp, key, value, headers columns and
the offset to fetch next). Batch headers are read here, one ``struct`` call per batch;
records are decoded by ``native/kafka_records.c`` through ctypes, which walks the varints and
copies keys, values and headers straight into Arrow buffers. Compressed batches
are inflated with aiokafka's codecs first. Control batches are skipped, and with
``read_committed`` so are the batches of aborted transactions, as Kafka's consumers do.

When the native library is not built (``native_available()`` is False) the same columns are
built from aiokafka's own batch reader, one record at a time: correct, not fast.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from consumer_sdk.records.inflate import (
    CODEC_NAMES,
    DEFAULT_MAX_RECORD_BATCH_BYTES,
    InflateError,
    TooLarge,
    inflate,
)
from consumer_sdk.sink import (
    HEADER_FIXED_BYTES,
    HEADERS,
    RECORD_FIXED_BYTES,
    RECORD_SCHEMA,
    REFUSED_HEADER,
)

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH_HEADER.size  # 61
_LENGTH_PREFIX = 12  # baseOffset and batchLength: batchLength counts the bytes after them
_CRC_START = 21  # the CRC covers attributes to the end of the batch
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LENGTH_PREFIX  # a batch with no records: 49
_CODEC_MASK = 0x07
_TIMESTAMP_LOG_APPEND = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


class CorruptRecords(ValueError):
    """A batch failed its CRC or its records do not parse; the message says which."""


@dataclass(frozen=True)
class BatchHeader:
    """The fixed part of one record batch, and where its records are."""

    base_offset: int
    last_offset_delta: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int
    crc: int
    start: int  # of the batch in the message set
    end: int

    @property
    def next_offset(self) -> int:
        """The offset after the batch (also when compaction removed its last records)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _CODEC_MASK

    @property
    def uses_log_append_time(self) -> int:
        """1 if the broker's time (maxTimestamp) is every record's timestamp, else 0."""
        return 1 if self.attributes & _TIMESTAMP_LOG_APPEND else 0

    @property
    def is_control(self) -> bool:
        """A transaction marker, never handed to applications."""
        return bool(self.attributes & _CONTROL)

    @property
    def is_transactional(self) -> bool:
        """Written inside a transaction."""
        return bool(self.attributes & _TRANSACTIONAL)


def batch_headers(data: bytes | memoryview) -> Iterator[BatchHeader]:
    """The complete batches of a message set, in order. A Fetch response may end inside a
    batch (the broker cuts at the byte limit): that partial batch is left out."""
    view = memoryview(data)
    position = 0
    while position + BATCH_HEADER_SIZE <= len(view):
        fields = _BATCH_HEADER.unpack_from(view, position)
        base_offset, length, _, magic, crc, attributes, last_delta = fields[:7]
        base_timestamp, max_timestamp, producer_id, _, _, count = fields[7:]
        if length < _MIN_BATCH_LENGTH:  # the next batch cannot be found past this one
            raise CorruptRecords(
                f"record batch at offset {base_offset}: length {length} "
                f"(at least {_MIN_BATCH_LENGTH})"
            )
        end = position + _LENGTH_PREFIX + length
        if end > len(view):
            return
        if magic != 2:
            raise CorruptRecords(f"record batch at offset {base_offset}: magic {magic} (only v2)")
        yield BatchHeader(
            base_offset,
            last_delta,
            attributes,
            base_timestamp,
            max_timestamp,
            producer_id,
            count,
            crc,
            position,
            end,
        )
        position = end


@dataclass(frozen=True)
class RecordColumns:
    """One partition's records of one fetch: Arrow columns in offset order, and the offset
    to read next (past skipped control and aborted batches too)."""

    topic: str
    partition: int
    batch: pa.RecordBatch
    next_offset: int
    refused: int = 0  # rows that stand for a refused batch (:data:`REFUSED_HEADER`)

    def refusal_reasons(self) -> list[str]:
        """What each refusal row says (few: read from the header column plainly)."""
        if not self.refused:
            return []
        return [
            value.decode()
            for pairs in self.batch.column(4).to_pylist()
            for key, value in ((p["key"], p["value"]) for p in pairs)
            if key == REFUSED_HEADER and value is not None
        ]

    @property
    def count(self) -> int:
        """Records held."""
        return int(self.batch.num_rows)

    @property
    def bytes(self) -> int:
        """Bytes the records take in a batch (what batch_bytes counts)."""
        return chunk_bytes(self.batch)


def _binary_offsets(column: pa.Array) -> np.ndarray:
    """A binary or list column's offsets (length + 1 of them, from its slice's start), read
    from its buffer. Every column the decoders build (the native one, pyarrow's builders)
    gives a null slot no bytes, so consecutive offsets are exact sizes: no Arrow kernel is
    needed."""
    first = column.offset
    buffer = column.buffers()[1]
    return np.frombuffer(buffer, dtype=np.int32, count=first + len(column) + 1)[first:]


def _header_spans(chunk: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per record boundary, where its headers start in the header pairs, and where their
    keys' and values' bytes start; None when the chunk holds no header (the common case)."""
    column = chunk.column(4)
    bounds = _binary_offsets(column)
    if bounds[-1] == bounds[0]:
        return None
    pairs = column.values  # the whole child: list offsets index it, slice or not
    keys = _binary_offsets(pairs.field(0))
    values = _binary_offsets(pairs.field(1))
    return bounds, keys[bounds], values[bounds]


def record_sizes(chunk: pa.RecordBatch) -> np.ndarray:
    """Bytes each record takes in a batch (what batch_bytes counts,
    :attr:`consumer_sdk.sink.Record.size`): key, value, headers and the fixed-width cells."""
    if chunk.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.diff(_binary_offsets(chunk.column(2)))
    values = np.diff(_binary_offsets(chunk.column(3)))
    sizes = keys.astype(np.int64) + values + RECORD_FIXED_BYTES
    spans = _header_spans(chunk)
    if spans is not None:
        bounds, key_starts, value_starts = spans
        sizes += np.diff(bounds) * HEADER_FIXED_BYTES
        sizes += np.diff(key_starts) + np.diff(value_starts)
    return sizes


def chunk_bytes(chunk: pa.RecordBatch) -> int:
    """The sum of :func:`record_sizes` in O(1): the span of each column's offsets."""
    if chunk.num_rows == 0:
        return 0
    keys = _binary_offsets(chunk.column(2))
    values = _binary_offsets(chunk.column(3))
    size = int(keys[-1] - keys[0]) + int(values[-1] - values[0])
    size += RECORD_FIXED_BYTES * int(chunk.num_rows)
    spans = _header_spans(chunk)
    if spans is not None:
        bounds, key_starts, value_starts = spans
        size += HEADER_FIXED_BYTES * int(bounds[-1] - bounds[0])
        size += int(key_starts[-1] - key_starts[0]) + int(value_starts[-1] - value_starts[0])
    return size


# -- the native decoder ----------------------------------------------------------------------


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
        from aiokafka.record.util import calc_crc32c

        return int(calc_crc32c(bytes(data)))
    buffer = np.frombuffer(data, dtype=np.uint8)
    native = library.kar_crc32c_portable if portable else library.kar_crc32c
    return int(native(buffer.ctypes.data, len(buffer)))


# -- decoding --------------------------------------------------------------------------------

MAX_OFFSET = (1 << 63) - 1

_NATIVE_PROBLEMS = {
    -1: "records do not parse",
    -2: "records do not fit their measured size",
    -3: "a record's offset is outside the batch's range",
    -4: "a header key is not UTF-8",
    -5: "a record's timestamp overflows",
}


@dataclass(frozen=True)
class Refusal:
    """A batch left out of the columns, and why."""

    first_offset: int
    last_offset: int
    timestamp: int
    reason: str

    def describe(self) -> str:
        """The text the dead-letter row carries."""
        return f"{self.reason} (record batch, offsets {self.first_offset}-{self.last_offset})"


@dataclass(frozen=True)
class _Section:
    header: BatchHeader
    records: np.ndarray  # the (inflated) records section, uint8


def _refusal(header: BatchHeader, reason: str) -> Refusal:
    last = min(max(header.base_offset, header.next_offset - 1), MAX_OFFSET)
    return Refusal(header.base_offset, last, header.max_timestamp, reason)


def _header_problem(header: BatchHeader, limit: int) -> str | None:
    """Why the batch's fixed part cannot be right, or None."""
    if header.last_offset_delta < 0 or header.base_offset < 0:
        return f"offset range {header.base_offset}+{header.last_offset_delta}"
    if header.next_offset - 1 > MAX_OFFSET:
        return "last offset past 2^63 - 1"
    if not 0 <= header.record_count <= header.last_offset_delta + 1:
        return f"record count {header.record_count} for {header.last_offset_delta + 1} offsets"
    if header.record_count * RECORD_FIXED_BYTES > limit:
        return (
            f"{header.record_count} records take more than max_record_batch_bytes ({limit} bytes)"
        )
    return None


def _sections(
    data: bytes | memoryview,
    fetch_offset: int,
    check_crcs: bool,
    aborted: Sequence[tuple[int, int]],
    read_committed: bool,
    limit: int = DEFAULT_MAX_RECORD_BATCH_BYTES,
) -> tuple[list[_Section], list[Refusal], int]:
    """The batches whose records are handed over, those refused, and the offset to fetch
    next. What the sections take in memory stays within ``limit`` in all: a batch that would
    pass it after others waits for the next fetch, one that passes it alone is refused."""
    view = memoryview(data)
    pending_aborts = sorted(aborted, key=lambda pair: pair[1])  # (producer id, first offset)
    aborting: set[int] = set()
    sections: list[_Section] = []
    refusals: list[Refusal] = []
    next_offset = fetch_offset
    room = limit
    for header in batch_headers(view):
        problem = _header_problem(header, limit)
        # Past this batch, even when its own range is nonsense (else it is fetched for ever),
        # but never past what an offset can be. Every outcome below moves there, but a batch
        # left for the next fetch.
        past = min(max(header.next_offset, header.base_offset + 1), MAX_OFFSET)
        if past <= fetch_offset:
            continue  # wholly before what was asked for (a compressed batch re-sent)
        before, next_offset = next_offset, max(next_offset, past)
        batch = view[header.start : header.end]
        if problem is None and check_crcs and crc32c(batch[_CRC_START:]) != header.crc:
            problem = "CRC mismatch"
        if problem is not None:
            refusals.append(_refusal(header, problem))
            continue
        if read_committed and header.producer_id >= 0:
            while pending_aborts and pending_aborts[0][1] <= header.base_offset:
                aborting.add(pending_aborts.pop(0)[0])
            if header.is_control:
                if _is_abort_marker(batch):
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if header.is_control or header.record_count == 0:
            continue
        fixed = header.record_count * RECORD_FIXED_BYTES
        records: np.ndarray = np.frombuffer(batch[BATCH_HEADER_SIZE:], dtype=np.uint8)
        if header.codec:
            try:
                records = inflate(header.codec, batch[BATCH_HEADER_SIZE:], room - fixed)
            except TooLarge:
                if sections:
                    next_offset = before  # the next fetch starts here, with the whole room
                    break
                reason = f"inflates past max_record_batch_bytes ({limit} bytes)"
                refusals.append(_refusal(header, f"{CODEC_NAMES[header.codec]} batch {reason}"))
                continue
            except InflateError as exc:
                refusals.append(_refusal(header, str(exc)))
                continue
        elif sections and len(records) + fixed > room:
            next_offset = before
            break
        room -= len(records) + fixed
        sections.append(_Section(header, records))
    return sections, refusals, next_offset


def _is_abort_marker(batch: memoryview) -> bool:
    from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
    from aiokafka.record.default_records import DefaultRecordBatch

    try:
        record = next(iter(DefaultRecordBatch(bytes(batch))), None)
        return record is not None and ControlRecord.parse(record.key) == ABORT_MARKER
    except Exception:  # a malformed control batch: it marks nothing
        return False


def decode_records(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    fetch_offset: int,
    *,
    check_crcs: bool = True,
    aborted_transactions: Sequence[tuple[int, int]] = (),
    read_committed: bool = False,
    max_record_batch_bytes: int = DEFAULT_MAX_RECORD_BATCH_BYTES,
) -> RecordColumns:
    """The records at or past ``fetch_offset`` in one partition's message set. A batch that
    is malformed, or takes more than ``max_record_batch_bytes`` once inflated, becomes one
    :data:`REFUSED_HEADER` row; a message set whose batches cannot be told apart raises
    :class:`CorruptRecords`."""
    if not 0 <= fetch_offset <= MAX_OFFSET:
        raise CorruptRecords(f"fetch offset {fetch_offset} outside [0, 2^63 - 1]")
    sections, refusals, next_offset = _sections(
        data,
        fetch_offset,
        check_crcs,
        aborted_transactions,
        read_committed,
        max_record_batch_bytes,
    )
    library = _native()
    if library is None:
        batch = _decode_with_aiokafka(sections, fetch_offset, refusals)
    else:
        batch = _decode_natively(library, sections, fetch_offset, refusals)
    if refusals:
        batch = _with_refusals(batch, refusals, fetch_offset)
    return RecordColumns(topic, partition, batch, next_offset, len(refusals))


def _with_refusals(
    batch: pa.RecordBatch, refusals: Sequence[Refusal], fetch_offset: int
) -> pa.RecordBatch:
    """``batch`` with a row per refused batch, in offset order (rare: built plainly)."""
    rows = pa.RecordBatch.from_pylist(
        [
            {
                "offset": max(r.last_offset, fetch_offset),
                "timestamp": r.timestamp,
                "key": None,
                "value": None,
                "headers": [{"key": REFUSED_HEADER, "value": r.describe().encode()}],
            }
            for r in refusals
        ],
        schema=RECORD_SCHEMA,
    )
    table = pa.Table.from_batches([batch, rows]).sort_by("offset")
    return table.combine_chunks().to_batches()[0]


def _decode_natively(
    library: ctypes.CDLL, sections: list[_Section], fetch_offset: int, refusals: list[Refusal]
) -> pa.RecordBatch:
    """Measure each section, refuse those that do not parse (into ``refusals``), then decode
    the rest into one allocation."""
    sizes = _Sizes()
    decodable: list[_Section] = []
    for section in sections:
        header = section.header
        measured = _Sizes()
        got = library.kar_measure(
            section.records.ctypes.data,
            len(section.records),
            header.record_count,
            header.base_offset,
            header.last_offset_delta,
            header.base_timestamp,
            header.uses_log_append_time,
            fetch_offset,
            ctypes.byref(measured),
        )
        if got < 0:
            refusals.append(_refusal(header, _NATIVE_PROBLEMS.get(got, "records do not parse")))
            continue
        for field in _Sizes._fields_:
            setattr(sizes, field[0], getattr(sizes, field[0]) + getattr(measured, field[0]))
        decodable.append(section)
    arrays, base = _allocate(sizes)
    columns = _Columns(**{name: base + offset for name, (offset, _) in arrays.items()})
    columns.capacity = sizes
    for section in decodable:
        header = section.header
        got = library.kar_decode(
            section.records.ctypes.data,
            len(section.records),
            header.record_count,
            header.base_offset,
            header.last_offset_delta,
            header.base_timestamp,
            header.uses_log_append_time,
            header.max_timestamp,
            fetch_offset,
            ctypes.byref(columns),
        )
        if got < 0:  # measured fine a moment ago: a bug, not the data
            raise CorruptRecords(f"record batch at offset {header.base_offset}: decode failed")
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


def _decode_with_aiokafka(
    sections: list[_Section], fetch_offset: int, refusals: list[Refusal]
) -> pa.RecordBatch:
    """The same columns from aiokafka's record reader (when the native decoder is missing),
    one section at a time: a section it cannot read is refused (into ``refusals``)."""
    from aiokafka.record.default_records import DefaultRecordBatch

    columns: list[list[object]] = [[], [], [], [], []]
    for section in sections:
        header = section.header
        # aiokafka reads a whole batch: the header (codec bit cleared) before its records.
        fixed = bytearray(
            _BATCH_HEADER.pack(
                header.base_offset,
                BATCH_HEADER_SIZE - _LENGTH_PREFIX + len(section.records),
                0,
                2,
                0,
                header.attributes & ~_CODEC_MASK,
                header.last_offset_delta,
                header.base_timestamp,
                header.max_timestamp,
                header.producer_id,
                0,
                0,
                header.record_count,
            )
        )
        rows: list[list[object]] = [[], [], [], [], []]
        try:
            for record in DefaultRecordBatch(bytes(fixed) + section.records.tobytes()):
                if record.offset < fetch_offset:
                    continue
                for column, value in zip(
                    rows,
                    (
                        record.offset,
                        record.timestamp,
                        record.key,
                        record.value,
                        list(record.headers),
                    ),
                    strict=True,
                ):
                    column.append(value)
        except Exception as exc:  # whatever aiokafka's reader raises on bad bytes
            refusals.append(_refusal(header, f"records do not parse ({type(exc).__name__})"))
            continue
        for column, values in zip(columns, rows, strict=True):
            column.extend(values)
    types = [pa.int64(), pa.int64(), pa.binary(), pa.binary(), HEADERS]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, kind) for values, kind in zip(columns, types, strict=True)],
        schema=RECORD_SCHEMA,
    )
