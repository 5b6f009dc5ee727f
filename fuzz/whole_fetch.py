"""atheris harness for the whole-fetch decoder (consumer_sdk.records.record_columns.decode_records):
the bytes a Fetch response holds for one partition, hostile or broken, every codec.

Each input's first 2 bytes pick the fetch offset (0-65535), the rest is the message set. The
decoder must return columns or raise CorruptRecords, nothing else; the columns must stay
within the bound (max_record_batch_bytes for what batches inflate to, plus the input); the
next offset may not go back. Run by fuzz/run.py: ``python -m fuzz.whole_fetch [libFuzzer
flags] CORPUS...``.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["consumer_sdk"]):
    from consumer_sdk.records.inflate import inflate  # noqa: F401 - instrumented with the decoder
    from consumer_sdk.records.record_columns import CorruptRecords, decode_records

# A small bound, so that inputs under 1 MiB reach it: what a batch may take once inflated.
LIMIT = 4 << 20


def test_one_input(data: bytes) -> None:
    """One fetch: columns within the bound, or CorruptRecords."""
    if len(data) < 2:
        return
    fetch_offset = int.from_bytes(data[:2], "big")
    try:
        columns = decode_records("t", 0, data[2:], fetch_offset, max_record_batch_bytes=LIMIT)
    except CorruptRecords:
        return
    if columns.next_offset < fetch_offset:
        raise AssertionError(f"next offset {columns.next_offset} before {fetch_offset}")
    held = columns.batch.get_total_buffer_size()
    if held > LIMIT + 4 * len(data) + 4096:
        raise AssertionError(f"{held} bytes held for a {len(data)}-byte fetch")


def main() -> None:
    """Fuzz until libFuzzer's flags say stop."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
