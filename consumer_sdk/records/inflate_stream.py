"""Inflate one compressed record batch a piece at a time, never holding more than a piece.

:func:`open_stream` gives an :class:`InflateStream` whose ``read(n)`` returns at most ``n``
inflated bytes: gzip through zlib, lz4 frames through python-lz4, zstd through
python-zstandard (the codec libraries kafka-python uses), each with a bound on its output per
call. Snappy has no streaming form: Java producers frame it in blocks (xerial), each inflated
whole, and a raw snappy block is one block; a block inflates at most about 21 times its
compressed size, so what it holds stays proportional to the fetch. Any failure is an
:class:`~.inflate.InflateError`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Protocol

from consumer_sdk.records.inflate import (
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    InflateError,
    snappy_blocks,
    too_large,
)

# How much one step of inflate_size reads: the stream is measured, not kept.
_MEASURE_STEP = 1 << 20
# zstd's own default: a frame asking for a larger window is refused, not allocated.
_ZSTD_MAX_WINDOW = 1 << 27


class InflateStream(Protocol):
    """Inflated bytes, read in pieces."""

    def read(self, size: int) -> bytes:
        """At most ``size`` more inflated bytes (at least one unless the stream has ended)."""


def open_stream(codec: int, data: bytes | memoryview) -> InflateStream:
    """A stream of ``data`` inflated with ``codec`` (1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    if codec == GZIP:
        return _GzipStream(data)
    if codec == LZ4:
        return _Lz4Stream(data)
    if codec == ZSTD:
        return _ZstdStream(data)
    if codec == SNAPPY:
        return _BlockStream(snappy_blocks(data))
    raise InflateError(f"unknown compression codec {codec}")


def inflated_size(codec: int, data: bytes | memoryview, limit: int) -> int:
    """How many bytes ``data`` inflates to; :class:`~.inflate.TooLarge` past ``limit``."""
    stream = open_stream(codec, data)
    total = 0
    while piece := stream.read(min(_MEASURE_STEP, limit + 1 - total)):
        total += len(piece)
        if total > limit:
            raise too_large(limit)
    return total


class _GzipStream:
    def __init__(self, data: bytes | memoryview) -> None:
        self._inflater = zlib.decompressobj(wbits=47)  # a gzip or zlib header, detected
        self._input: bytes | memoryview = data

    def read(self, size: int) -> bytes:
        while not self._inflater.eof:
            try:
                out = self._inflater.decompress(self._input, size)
            except zlib.error as exc:
                raise InflateError(f"gzip: {exc}") from None
            self._input = self._inflater.unconsumed_tail
            if out:
                return out
            if not self._input:
                raise InflateError("gzip: truncated stream")
        return b""


class _Lz4Stream:
    def __init__(self, data: bytes | memoryview) -> None:
        import lz4.frame

        self._inflater = lz4.frame.LZ4FrameDecompressor()
        self._input = bytes(data)

    def read(self, size: int) -> bytes:
        while not self._inflater.eof:
            try:
                out = self._inflater.decompress(self._input, max_length=size)
            except RuntimeError as exc:  # python-lz4 raises it for corrupt frames
                raise InflateError(f"lz4: {exc}") from None
            self._input = b""
            if out:
                return bytes(out)
            if self._inflater.needs_input:
                raise InflateError("lz4: truncated frame")
        return b""


class _ZstdStream:
    def __init__(self, data: bytes | memoryview) -> None:
        import zstandard

        inflater = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
        self._error = zstandard.ZstdError
        # Kafka's producers write one frame; more are read as one stream, as zstd does.
        self._reader = inflater.stream_reader(bytes(data), read_across_frames=True)

    def read(self, size: int) -> bytes:
        # A truncated frame just ends early: the batch's record count tells it apart.
        try:
            return bytes(self._reader.read(size))
        except self._error as exc:
            raise InflateError(f"zstd: {exc}") from None


class _BlockStream:
    """Blocks inflated whole, one at a time, and read out in pieces."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._block = memoryview(b"")

    def read(self, size: int) -> bytes:
        while not self._block:
            block = next(self._blocks, None)
            if block is None:
                return b""
            self._block = memoryview(block)
        piece, self._block = self._block[:size], self._block[size:]
        return bytes(piece)
