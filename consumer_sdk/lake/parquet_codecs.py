"""Which Parquet compression pyarrow writes a lake table's files with, so they match what
Spark's writer would give the same table: the codec the table (Iceberg:
``write.parquet.compression-codec`` / ``-level``) or the session (Delta:
``spark.sql.parquet.compression.codec``) names, at the level Spark's writer would use. Pure.
"""

from __future__ import annotations

import pyarrow as pa

# Codec names of Iceberg's and Spark's settings -> pyarrow's. Others (lz4, lz4_raw, lzo,
# brotli) are left to Spark's writer.
CODECS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gzip",
    "uncompressed": "none",
    "none": "none",
}
# The level Spark's writers use when none is set (parquet-java's zstd codec: 3; zlib's
# default: 6); pyarrow's own defaults are 1 and 9. Other codecs take no level.
DEFAULT_LEVELS = {"zstd": 3, "gzip": 6}
# What Spark's writers put before ``.parquet`` in a file's name, per pyarrow codec.
FILE_SUFFIXES = {"zstd": ".zstd", "snappy": ".snappy", "gzip": ".gz", "none": ""}


class Unwritable(ValueError):
    """A table or session setting pyarrow cannot write as Spark's writer would: why."""


def parquet_compression(codec: str, level: str | None) -> tuple[str, int | None]:
    """pyarrow's codec and level for a setting's codec and level (None: none set)."""
    codec = codec.lower()
    if codec not in CODECS:
        raise Unwritable(f"its Parquet codec is {codec}")
    if codec not in DEFAULT_LEVELS:
        return CODECS[codec], None
    if level is None:
        return CODECS[codec], DEFAULT_LEVELS[codec]
    low = pa.Codec.minimum_compression_level(codec)
    high = pa.Codec.maximum_compression_level(codec)
    try:
        chosen = int(level)
    except ValueError:
        chosen = low - 1
    if not low <= chosen <= high:
        raise Unwritable(f"its {codec} compression level {level!r} is not in [{low}, {high}]")
    return CODECS[codec], chosen
