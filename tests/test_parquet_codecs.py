"""Which compression pyarrow writes lake files with (consumer_sdk.lake.parquet_codecs): the
setting's codec at the level Spark's writer would use, or why Spark must write instead."""

from __future__ import annotations

import pytest

from consumer_sdk.lake.parquet_codecs import Unwritable, parquet_compression


@pytest.mark.parametrize(
    ("codec", "level", "expected"),
    [
        ("zstd", None, ("zstd", 3)),  # Parquet's Java default, as Spark's writer
        ("ZSTD", "-5", ("zstd", -5)),
        ("gzip", None, ("gzip", 6)),
        ("gzip", "9", ("gzip", 9)),
        ("snappy", "4", ("snappy", None)),  # no levels: ignored, as Iceberg does
        ("uncompressed", None, ("none", None)),
        ("none", None, ("none", None)),  # Spark's session name for it
        ("lz4_raw", None, "its Parquet codec is lz4_raw"),
        ("gzip", "0", "its gzip compression level '0' is not in [1, 9]"),
        ("zstd", "fast", "its zstd compression level 'fast' is not in [-131072, 22]"),
        ("brotli", None, "its Parquet codec is brotli"),
    ],
)
def test_a_codec_and_level_map_to_pyarrow_or_name_why_not(
    codec: str, level: str | None, expected: tuple[str, int | None] | str
) -> None:
    if isinstance(expected, str):
        with pytest.raises(Unwritable) as refused:
            parquet_compression(codec, level)
        assert str(refused.value) == expected
    else:
        assert parquet_compression(codec, level) == expected
