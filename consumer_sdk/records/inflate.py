"""Inflate one compressed record batch, never past a bound.

Kafka limits a batch by its compressed size, so a small batch may inflate a thousandfold. Each
codec here writes into a buffer of at most ``limit`` bytes and stops there: pages of that
buffer are only touched as they are written, so a batch past the bound costs at most
``limit`` bytes before it is refused. Every codec Kafka has: gzip (zlib), snappy (raw, or the
xerial framing Java producers write), lz4 (frames, as KIP-57 fixed them) and zstd, the last
three through cramjam (what aiokafka's codecs use). Any failure is an :class:`InflateError`
whose text says what went wrong; a batch over the bound is a :class:`TooLarge`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# What one producer batch may take in memory once inflated and decoded, by default: well
# above any producer's batch.size (librdkafka 1 MB, Java 16 KiB before compression).
DEFAULT_MAX_RECORD_BATCH_BYTES = 64 << 20
CODEC_NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version and compatible version
_BLOCK_LENGTH = struct.Struct(">i")
# Snappy's densest code (a 64-byte copy in 2-3 bytes) bounds what a block can inflate to.
SNAPPY_MAX_RATIO = 32
# The first buffer lz4 and zstd inflate into: this many times the compressed size, at least
# FIRST_GUESS_BYTES (text and JSON inflate 2-10x; past the guess a batch is inflated twice).
FIRST_GUESS_RATIO = 16
FIRST_GUESS_BYTES = 1 << 20


class InflateError(ValueError):
    """The compressed bytes do not inflate (corrupt, truncated, or an unknown codec)."""


class TooLarge(InflateError):
    """The batch inflates past the bound."""


def inflate(codec: int, data: bytes | memoryview, limit: int) -> np.ndarray:
    """The inflated bytes of ``data`` (uint8), at most ``limit`` of them."""
    if codec == GZIP:
        return _gzip(data, limit)
    if codec in (LZ4, ZSTD):
        return _into_buffer(codec, data, limit)
    if codec == SNAPPY:
        return _snappy(data, limit)
    raise InflateError(f"unknown compression codec {codec}")


def too_large(limit: int) -> TooLarge:
    """The error for a batch past ``limit`` once inflated."""
    return TooLarge(f"inflates past max_record_batch_bytes ({limit} bytes)")


def past_bound(codec: int, limit: int) -> str:
    """Why a ``codec`` batch past ``limit`` is refused: its dead-letter reason."""
    return f"{CODEC_NAMES[codec]} batch {too_large(limit)}"


def _gzip(data: bytes | memoryview, limit: int) -> np.ndarray:
    inflater = zlib.decompressobj(wbits=47)  # a gzip or zlib header, detected
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InflateError(f"gzip: {exc}") from None
    if len(out) > limit:
        raise too_large(limit)
    if not inflater.eof:
        raise InflateError("gzip: truncated stream")
    return np.frombuffer(out, np.uint8)


def _into_buffer(codec: int, data: bytes | memoryview, limit: int) -> np.ndarray:
    """lz4 or zstd into a buffer sized by a guess first (most batches inflate less than
    :data:`FIRST_GUESS_RATIO` x), then into one of ``limit`` bytes if that was too small: a
    buffer of the whole bound per batch cost 1.5-2x the inflating itself (measured)."""
    compressed = bytes(data)
    guess = min(limit, max(FIRST_GUESS_BYTES, FIRST_GUESS_RATIO * len(compressed)))
    try:
        return _inflate_into(codec, compressed, guess, limit)
    except TooLarge:
        if guess == limit:
            raise
    return _inflate_into(codec, compressed, limit, limit)


def _inflate_into(codec: int, compressed: bytes, size: int, limit: int) -> np.ndarray:
    import cramjam

    module = cramjam.lz4 if codec == LZ4 else cramjam.zstd
    out = np.empty(size, np.uint8)  # reserved, not resident: pages come as written
    try:
        written = int(module.decompress_into(compressed, out))
    except cramjam.DecompressionError as exc:
        if "whole buffer" in str(exc):
            raise too_large(limit) from None
        raise InflateError(f"{CODEC_NAMES[codec]}: {exc}") from None
    return out[:written]


def _snappy(data: bytes | memoryview, limit: int) -> np.ndarray:
    return _snappy_blocks(_compressed_blocks(data), limit)


def _compressed_blocks(data: bytes | memoryview) -> list[memoryview]:
    """A snappy section's blocks: one raw block, or the xerial framing's blocks."""
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return [view]
    blocks: list[memoryview] = []
    position = _XERIAL_HEADER
    while position < len(view):
        if position + 4 > len(view):
            raise InflateError("snappy: truncated block length")
        (size,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += 4
        if size < 0 or position + size > len(view):
            raise InflateError(f"snappy: block of {size} bytes past the data")
        blocks.append(view[position : position + size])
        position += size
    return blocks


def _inflated_lengths(blocks: list[memoryview]) -> list[int]:
    """What each block says it inflates to, checked against what snappy can reach."""
    import cramjam

    try:
        sizes = [int(cramjam.snappy.decompress_raw_len(bytes(block))) for block in blocks]
    except cramjam.DecompressionError as exc:
        raise InflateError(f"snappy: {exc}") from None
    for block, size in zip(blocks, sizes, strict=True):
        if size > SNAPPY_MAX_RATIO * len(block) + 64:
            raise InflateError(f"snappy: a block of {len(block)} bytes claims {size} inflated")
    return sizes


def snappy_blocks(data: bytes | memoryview) -> Iterator[bytes]:
    """A snappy section's blocks, each inflated whole, one at a time."""
    blocks = _compressed_blocks(data)
    for block, size in zip(blocks, _inflated_lengths(blocks), strict=True):
        out = bytearray(size)
        _inflate_block(block, memoryview(out))
        yield bytes(out)


def _snappy_blocks(blocks: list[memoryview], limit: int) -> np.ndarray:
    sizes = _inflated_lengths(blocks)
    total = sum(sizes)
    if total > limit:
        raise too_large(limit)
    out = np.empty(total, np.uint8)
    position = 0
    for block, size in zip(blocks, sizes, strict=True):
        _inflate_block(block, memoryview(out[position : position + size]))  # type: ignore[arg-type]
        position += size
    return out


def _inflate_block(block: memoryview, into: memoryview) -> None:
    """One raw snappy block into ``into`` (exactly its inflated length)."""
    import cramjam

    try:
        cramjam.snappy.decompress_raw_into(bytes(block), into)
    except cramjam.DecompressionError as exc:
        raise InflateError(f"snappy: {exc}") from None
