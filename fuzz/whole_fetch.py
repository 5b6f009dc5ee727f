"""atheris harness for the whole-fetch decoder (consumer_sdk.records.record_columns.decode_pieces):
the bytes a Fetch response holds for one partition, hostile or broken, every codec.

Each input's first 2 bytes pick the fetch offset (0-65535), the rest is the message set. The
decoder must return pieces or raise CorruptRecords, nothing else; each piece must stay within
its bound (a piece, or the input it was decoded from); offsets may not go back, and no record
may come before the position the previous piece left. Run by fuzz/run.py: ``python -m
fuzz.whole_fetch [libFuzzer flags] CORPUS...``.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["consumer_sdk"]):
    from consumer_sdk.records.batch_header import CorruptRecords
    from consumer_sdk.records.inflate import inflate  # noqa: F401 - instrumented with the decoder
    from consumer_sdk.records.record_columns import decode_pieces

# Small bounds, so that inputs under 1 MiB reach them: what a batch may take once inflated,
# and what one piece may take (a batch past it is read a piece at a time).
LIMIT = 4 << 20
PIECE = 64 << 10


def test_one_input(data: bytes) -> None:
    """One fetch: columns within the bound, or CorruptRecords."""
    if len(data) < 2:
        return
    fetch_offset = int.from_bytes(data[:2], "big")
    position = fetch_offset
    try:
        for piece in decode_pieces(
            "t", 0, data[2:], fetch_offset, max_record_batch_bytes=LIMIT, piece_bytes=PIECE
        ):
            if piece.count and piece.batch.column(0)[0].as_py() < position:
                raise AssertionError(f"a record before the position {position}")
            if piece.next_offset < position:
                raise AssertionError(f"next offset {piece.next_offset} before {position}")
            position = piece.next_offset
            held = piece.batch.get_total_buffer_size()
            if held > 2 * PIECE + 4 * len(data) + 4096:
                raise AssertionError(f"{held} bytes held in a piece of a {len(data)}-byte fetch")
    except CorruptRecords:
        return


def main() -> None:
    """Fuzz until libFuzzer's flags say stop."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
