"""A compressed batch that inflates past one piece, decoded a piece at a time.

Kafka bounds a batch by its compressed size only, so one batch may inflate to many times
what the consumer should hold at once. Such a batch is read twice through an
:class:`~.inflate_stream.InflateStream`: first to check it (it stays within
``max_record_batch_bytes`` and every record parses; nothing is kept), so that a batch is
either refused whole or handed over whole; then in windows of about ``piece_bytes``, each
cut at a record boundary (``kar_frame``) and decoded into its own columns. What it holds at
any time is one window and its columns, whatever the batch inflates to.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np

from consumer_sdk.records.batch_header import BatchHeader
from consumer_sdk.records.inflate import InflateError, TooLarge, past_bound, too_large
from consumer_sdk.records.inflate_stream import open_stream
from consumer_sdk.records.native_decoder import Section, frame, measure_problem
from consumer_sdk.sink import RECORD_FIXED_BYTES


class LargeBatch:
    """One compressed batch's records, in windows of about ``piece_bytes``."""

    def __init__(
        self,
        library: ctypes.CDLL,
        header: BatchHeader,
        body: memoryview,
        limit: int,
        piece_bytes: int,
    ) -> None:
        self.header = header
        self._library = library
        self._body = body
        self._limit = limit
        self._piece_bytes = piece_bytes

    def problem(self) -> str | None:
        """Why the batch cannot be handed over whole, or None (reads it all, keeps nothing)."""
        try:
            for section, _ in self.windows():
                problem = measure_problem(self._library, section)
                if problem is not None:
                    return problem
        except TooLarge:
            return past_bound(self.header.codec, self._limit)
        except (InflateError, ValueError) as exc:
            return str(exc)
        return None

    def windows(self) -> Iterator[tuple[Section, int]]:
        """Each window of whole records, and the offset after its records (the batch's next
        offset after the last window). Raises TooLarge past the bound, InflateError or
        ValueError when the records do not inflate or parse."""
        header = self.header
        stream = open_stream(header.codec, self._body)
        room = self._limit - header.record_count * RECORD_FIXED_BYTES
        carry = np.empty(0, np.uint8)
        left, read, next_offset = header.record_count, 0, header.base_offset
        while left > 0:
            window, wanted, ended = carry, self._piece_bytes - len(carry), False
            while True:
                if wanted > 0 and not ended:
                    chunk = stream.read(wanted)
                    read += len(chunk)
                    if read > room:
                        raise too_large(self._limit)
                    ended = not chunk
                    if chunk:
                        window = np.concatenate([window, np.frombuffer(chunk, np.uint8)])
                framed = frame(self._library, window, left, self._piece_bytes)
                if framed.count or ended:
                    break
                wanted = self._piece_bytes  # a record longer than the window: read on
            if not framed.count:
                raise ValueError(f"records do not parse ({left} of {header.record_count} missing)")
            left -= framed.count
            next_offset = max(next_offset, header.base_offset + framed.max_delta + 1)
            after = header.next_offset if left == 0 else next_offset
            yield Section(header, window[: framed.bytes], framed.count), after
            carry = window[framed.bytes :]
