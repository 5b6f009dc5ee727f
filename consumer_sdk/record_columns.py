"""Kafka record batches (message format v2) as Arrow columns, without an object per record.

Pure (no client, no I/O): :func:`decode_records` turns the bytes a Fetch response holds for one
partition into a :class:`RecordColumns` (offset, timestamp, key, value, headers columns and
the offset to fetch next). Batch headers are read here, one ``struct`` call per batch;
records are decoded by ``consumer_sdk/native/kafka_records.c`` through ctypes, which walks the
varints and copies keys, values and headers straight into Arrow buffers. Compressed batches
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

from consumer_sdk.sink import HEADER_FIXED_BYTES, HEADERS, RECORD_FIXED_BYTES, RECORD_SCHEMA

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH_HEADER.size  # 61
_LENGTH_PREFIX = 12  # baseOffset and batchLength: batchLength counts the bytes after them
_CRC_START = 21  # the CRC covers attributes to the end of the batch
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
    library.kar_measure.argtypes = [pointer, int64, int64, int64, int64, ctypes.POINTER(_Sizes)]
    library.kar_measure.restype = int64
    library.kar_decode.argtypes = [
        *(pointer, int64, int64, int64, int64, int64, int64),
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


@dataclass(frozen=True)
class _Section:
    header: BatchHeader
    records: np.ndarray  # the (inflated) records section, uint8


def _sections(
    data: bytes | memoryview,
    fetch_offset: int,
    check_crcs: bool,
    aborted: Sequence[tuple[int, int]],
    read_committed: bool,
) -> tuple[list[_Section], int]:
    """The batches whose records are handed over, and the offset to fetch next."""
    view = memoryview(data)
    pending_aborts = sorted(aborted, key=lambda pair: pair[1])  # (producer id, first offset)
    aborting: set[int] = set()
    sections: list[_Section] = []
    next_offset = fetch_offset
    for header in batch_headers(view):
        if header.next_offset <= fetch_offset:
            continue  # wholly before what was asked for (a compressed batch re-sent)
        batch = view[header.start : header.end]
        if check_crcs and crc32c(batch[_CRC_START:]) != header.crc:
            raise CorruptRecords(f"record batch at offset {header.base_offset}: CRC mismatch")
        next_offset = max(next_offset, header.next_offset)
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
        section = batch[BATCH_HEADER_SIZE:]
        if header.codec:
            section = memoryview(_inflate(header.codec, bytes(section)))
        sections.append(_Section(header, np.frombuffer(section, dtype=np.uint8)))
    return sections, next_offset


def _is_abort_marker(batch: memoryview) -> bool:
    from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
    from aiokafka.record.default_records import DefaultRecordBatch

    record = next(iter(DefaultRecordBatch(bytes(batch))), None)
    return record is not None and ControlRecord.parse(record.key) == ABORT_MARKER


def _inflate(codec: int, data: bytes) -> bytes:
    from aiokafka import codec as codecs

    inflate = {
        1: codecs.gzip_decode,
        2: codecs.snappy_decode,
        3: codecs.lz4_decode,
        4: codecs.zstd_decode,
    }.get(codec)
    if inflate is None:
        raise CorruptRecords(f"unknown compression codec {codec}")
    return bytes(inflate(data))


def decode_records(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    fetch_offset: int,
    *,
    check_crcs: bool = True,
    aborted_transactions: Sequence[tuple[int, int]] = (),
    read_committed: bool = False,
) -> RecordColumns:
    """The records at or past ``fetch_offset`` in one partition's message set."""
    sections, next_offset = _sections(
        data, fetch_offset, check_crcs, aborted_transactions, read_committed
    )
    library = _native()
    if library is None:
        batch = _decode_with_aiokafka(data, sections, fetch_offset)
    else:
        batch = _decode_natively(library, sections, fetch_offset)
    return RecordColumns(topic, partition, batch, next_offset)


def _log_append_time(header: BatchHeader) -> int:
    return header.max_timestamp if header.attributes & _TIMESTAMP_LOG_APPEND else -1


def _decode_natively(
    library: ctypes.CDLL, sections: list[_Section], fetch_offset: int
) -> pa.RecordBatch:
    sizes = _Sizes()
    for section in sections:
        got = library.kar_measure(
            section.records.ctypes.data,
            len(section.records),
            section.header.record_count,
            section.header.base_offset,
            fetch_offset,
            ctypes.byref(sizes),
        )
        if got < 0:
            raise CorruptRecords(
                f"record batch at offset {section.header.base_offset}: records do not parse"
            )
    arrays, base = _allocate(sizes)
    columns = _Columns(**{name: base + offset for name, (offset, _) in arrays.items()})
    columns.capacity = sizes
    for section in sections:
        header = section.header
        got = library.kar_decode(
            section.records.ctypes.data,
            len(section.records),
            header.record_count,
            header.base_offset,
            header.base_timestamp,
            _log_append_time(header),
            fetch_offset,
            ctypes.byref(columns),
        )
        if got < 0:
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
    data: bytes | memoryview, sections: list[_Section], fetch_offset: int
) -> pa.RecordBatch:
    """The same columns from aiokafka's batch reader (when the native decoder is missing)."""
    from aiokafka.record.default_records import DefaultRecordBatch

    view = memoryview(data)
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    for section in sections:
        header = section.header
        raw = bytes(view[header.start : header.end])
        for record in DefaultRecordBatch(raw):
            if record.offset < fetch_offset:
                continue
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            keys.append(record.key)
            values.append(record.value)
            headers.append(list(record.headers))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(headers, HEADERS),
        ],
        schema=RECORD_SCHEMA,
    )
