"""Kafka record batches (message format v2) as Arrow columns, without an object per record.

Pure (no client, no I/O): :func:`decode_pieces` turns the bytes a Fetch response holds for one
partition into :class:`RecordColumns` (offset, timestamp, key, value, headers columns and the
offset to fetch next), each of about ``piece_bytes`` at most, made only when asked for. Batch
headers are read in :mod:`.batch_header`; records are decoded by the native decoder
(:mod:`.native_decoder`), which walks the varints and copies keys, values and headers straight
into Arrow buffers. Compressed batches are inflated first; one that inflates past a piece is
read a piece at a time (:mod:`.large_batch`). Control batches are skipped, and with
``read_committed`` so are the batches of aborted transactions, as Kafka's consumers do.

When the native library is not built (``native_available()`` is False) the same columns are
built from aiokafka's own batch reader, one record at a time: correct, not fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from consumer_sdk.kafka_client.record_batches import is_abort_marker, read_batch
from consumer_sdk.records.batch_header import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CRC_START,
    LENGTH_PREFIX,
    MAX_OFFSET,
    BatchHeader,
    CorruptRecords,
    Refusal,
    batch_headers,
    refusal,
)
from consumer_sdk.records.inflate import (
    DEFAULT_MAX_RECORD_BATCH_BYTES,
    InflateError,
    TooLarge,
    inflate,
    past_bound,
)
from consumer_sdk.records.large_batch import LargeBatch
from consumer_sdk.records.native_decoder import (
    Section,
    _native,
    crc32c,
    decode_sections,
)
from consumer_sdk.sink import (
    HEADER_FIXED_BYTES,
    HEADERS,
    RECORD_FIXED_BYTES,
    RECORD_SCHEMA,
    REFUSED_HEADER,
)

# What one RecordColumns may take, by default: a batch inflating past it is cut into pieces
# this size, so what the consumer holds does not grow with what producers send.
DEFAULT_PIECE_BYTES = 4 << 20


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


class Unverified:
    """A batch that failed its CRC: none of its fields can be trusted, its base offset and
    length included (the CRC does not cover them), so reading stops before it."""


UNVERIFIED = Unverified()


def unverified_reason(topic: str, partition: int, offset: int) -> str:
    """What a consumer says of a batch failing its CRC where reading stopped."""
    return (
        f"{topic}:{partition}: the record batch after offset {offset - 1} fails its CRC: "
        "nothing of it or after it is read, and it is fetched again"
    )


Outcome = Section | LargeBatch | Refusal | Unverified | None


def _batches(
    data: bytes | memoryview,
    fetch_offset: int,
    check_crcs: bool,
    aborted: Sequence[tuple[int, int]],
    read_committed: bool,
    limit: int,
    piece_bytes: int,
) -> Iterator[tuple[int, Outcome]]:
    """Each batch at or past ``fetch_offset``: the offset after it, and its records (a
    section, or a large batch to read in pieces), its refusal, or None (skipped)."""
    view = memoryview(data)
    pending_aborts = sorted(aborted, key=lambda pair: pair[1])  # (producer id, first offset)
    aborting: set[int] = set()
    for header in batch_headers(view):
        batch = view[header.start : header.end]
        # First: a batch failing its CRC may be anywhere, whatever its base offset says.
        if check_crcs and crc32c(batch[CRC_START:]) != header.crc:
            yield fetch_offset, UNVERIFIED
            return
        problem = _header_problem(header, limit)
        # Past this batch, even when its own range is nonsense (else it is fetched for ever),
        # but never past what an offset can be.
        past = min(max(header.next_offset, header.base_offset + 1), MAX_OFFSET)
        if past <= fetch_offset:
            continue  # wholly before what was asked for (a compressed batch re-sent)
        if problem is not None:
            yield past, refusal(header, problem)
            continue
        if read_committed and header.producer_id >= 0:
            while pending_aborts and pending_aborts[0][1] <= header.base_offset:
                aborting.add(pending_aborts.pop(0)[0])
            if header.is_control:
                if is_abort_marker(bytes(batch)):
                    aborting.discard(header.producer_id)
                yield past, None
                continue
            if header.is_transactional and header.producer_id in aborting:
                yield past, None
                continue
        if header.is_control or header.record_count == 0:
            yield past, None
            continue
        yield past, _records(header, batch[BATCH_HEADER_SIZE:], limit, piece_bytes)


def _records(header: BatchHeader, body: memoryview, limit: int, piece_bytes: int) -> Outcome:
    """The batch's records: as they are, inflated whole (within a piece), or a large batch
    checked and read in pieces; or why not."""
    count = header.record_count
    if not header.codec:
        return Section(header, np.frombuffer(body, dtype=np.uint8), count)
    fixed = count * RECORD_FIXED_BYTES
    library = _native()
    # Without the native decoder (no framing) a batch is inflated whole, within the bound.
    whole = limit if library is None else min(piece_bytes, limit)
    try:
        if fixed < whole:
            return Section(header, inflate(header.codec, body, whole - fixed), count)
    except TooLarge:
        pass
    except InflateError as exc:
        return refusal(header, str(exc))
    if library is None:
        return refusal(header, past_bound(header.codec, limit))
    large = LargeBatch(library, header, body, limit, piece_bytes)
    problem = large.problem()
    return large if problem is None else refusal(header, problem)


def decode_pieces(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    fetch_offset: int,
    *,
    check_crcs: bool = True,
    aborted_transactions: Sequence[tuple[int, int]] = (),
    read_committed: bool = False,
    max_record_batch_bytes: int = DEFAULT_MAX_RECORD_BATCH_BYTES,
    piece_bytes: int = DEFAULT_PIECE_BYTES,
) -> Iterator[RecordColumns]:
    """The records at or past ``fetch_offset`` in one partition's message set, in pieces of
    about ``piece_bytes`` (batches are cut only when one alone passes it), each decoded
    when asked for; the last piece carries the offset past everything read, and may be
    empty. A batch that is malformed, or takes more than ``max_record_batch_bytes`` once
    inflated, becomes one :data:`REFUSED_HEADER` row; a message set whose batches cannot be
    told apart, or one with a batch failing its CRC, raises :class:`CorruptRecords` after
    the pieces before that point (the position never moves on fields the CRC does not
    cover: Kafka's Java consumer raises too)."""
    if not 0 <= fetch_offset <= MAX_OFFSET:
        raise CorruptRecords(f"fetch offset {fetch_offset} outside [0, 2^63 - 1]")
    piece = _Piece(topic, partition, fetch_offset)
    for past, outcome in _batches(
        data,
        fetch_offset,
        check_crcs,
        aborted_transactions,
        read_committed,
        max_record_batch_bytes,
        piece_bytes,
    ):
        if isinstance(outcome, Unverified):
            if piece.sections or piece.refusals or piece.next_offset > fetch_offset:
                yield piece.columns()
            raise CorruptRecords(unverified_reason(topic, partition, piece.next_offset))
        if isinstance(outcome, Refusal):
            piece.refusals.append(outcome)
        elif isinstance(outcome, Section):
            taken = len(outcome.records) + outcome.count * RECORD_FIXED_BYTES
            if piece.sections and piece.size + taken > piece_bytes:
                yield piece.columns()
                piece = _Piece(topic, partition, fetch_offset, piece.next_offset)
            piece.sections.append(outcome)
            piece.size += taken
        elif isinstance(outcome, LargeBatch):
            if piece.sections or piece.refusals:
                yield piece.columns()
            yield from _large_pieces(topic, partition, outcome, fetch_offset)
            piece = _Piece(topic, partition, fetch_offset, piece.next_offset)
        piece.next_offset = max(piece.next_offset, past)
    yield piece.columns()


def decode_records(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    fetch_offset: int,
    **options: object,
) -> RecordColumns:
    """Every piece of :func:`decode_pieces` as one :class:`RecordColumns` (tests and
    warm-up; the consumer takes the pieces one by one)."""
    pieces = list(decode_pieces(topic, partition, data, fetch_offset, **options))  # type: ignore[arg-type]
    if len(pieces) == 1:
        return pieces[0]
    table = pa.Table.from_batches([piece.batch for piece in pieces], schema=RECORD_SCHEMA)
    return RecordColumns(
        topic,
        partition,
        table.combine_chunks().to_batches()[0] if table.num_rows else pieces[-1].batch,
        pieces[-1].next_offset,
        sum(piece.refused for piece in pieces),
    )


class _Piece:
    """Sections and refusals gathered for one RecordColumns."""

    def __init__(
        self, topic: str, partition: int, fetch_offset: int, next_offset: int | None = None
    ) -> None:
        self.topic, self.partition = topic, partition
        self.fetch_offset = fetch_offset
        self.next_offset = fetch_offset if next_offset is None else next_offset
        self.sections: list[Section] = []
        self.refusals: list[Refusal] = []
        self.size = 0

    def columns(self) -> RecordColumns:
        """The gathered records decoded, refusals as rows, in offset order."""
        library = _native()
        refuse = self._refuse
        if library is None:
            batch = _decode_with_aiokafka(self.sections, self.fetch_offset, refuse)
        else:
            batch = decode_sections(library, self.sections, self.fetch_offset, refuse)
        if self.refusals:
            batch = _with_refusals(batch, self.refusals, self.fetch_offset)
        return RecordColumns(
            self.topic, self.partition, batch, self.next_offset, len(self.refusals)
        )

    def _refuse(self, header: BatchHeader, reason: str) -> None:
        self.refusals.append(refusal(header, reason))


def _large_pieces(
    topic: str, partition: int, large: LargeBatch, fetch_offset: int
) -> Iterator[RecordColumns]:
    """A large batch's windows, each decoded into its own RecordColumns."""
    start = fetch_offset
    try:
        for section, after in large.windows():
            piece = _Piece(topic, partition, start, max(start, after))
            piece.sections.append(section)
            yield piece.columns()
            start = max(start, after)
    except (InflateError, ValueError) as exc:  # it read whole a moment ago: not expected
        piece = _Piece(topic, partition, start, max(start, large.header.next_offset))
        piece.refusals.append(refusal(large.header, str(exc), first_offset=start))
        yield piece.columns()


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


def _decode_with_aiokafka(
    sections: list[Section], fetch_offset: int, refuse: Callable[[BatchHeader, str], None]
) -> pa.RecordBatch:
    """The same columns from aiokafka's record reader (when the native decoder is missing),
    one section at a time: a section it cannot read is refused (``refuse(header, reason)``)."""
    columns: list[list[object]] = [[], [], [], [], []]
    for section in sections:
        header = section.header
        # aiokafka reads a whole batch: the header (codec bit cleared) before its records.
        fixed = bytearray(
            BATCH_HEADER.pack(
                header.base_offset,
                BATCH_HEADER_SIZE - LENGTH_PREFIX + len(section.records),
                0,
                2,
                0,
                header.attributes & ~CODEC_MASK,
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
            for record in read_batch(bytes(fixed) + section.records.tobytes()):
                if record.offset < fetch_offset:
                    continue
                for column, value in zip(
                    rows,
                    (
                        record.offset,
                        record.timestamp,
                        record.key,
                        record.value,
                        record.headers,
                    ),
                    strict=True,
                ):
                    column.append(value)
        except Exception as exc:  # whatever aiokafka's reader raises on bad bytes
            refuse(header, f"records do not parse ({type(exc).__name__})")
            continue
        for column, values in zip(columns, rows, strict=True):
            column.extend(values)
    types = [pa.int64(), pa.int64(), pa.binary(), pa.binary(), HEADERS]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, kind) for values, kind in zip(columns, types, strict=True)],
        schema=RECORD_SCHEMA,
    )
