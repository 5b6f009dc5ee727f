"""What decoding record values costs the sink, side by side: the same ~1 KiB records as raw
bytes, UTF-8 text, flat JSON and nested JSON (structs, arrays, a map, a decimal, a timestamp,
a date), first decoded alone (the codec the sink uses: ``columns_to_arrow``, records/s and MiB/s
of value bytes), then written by the sink into Delta tables (one local Spark session, the
sink's own append path: decoding, the pyarrow file, the commit).

Seeded records made here, no Kafka. The formats take turns batch by batch, so each sees the
same machine at the same moments. ``python -m benchmarks.lake.value_formats`` writes
``results/value_formats.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.support.machine import machine_line, require_committed_code
from benchmarks.support.report import publish
from consumer_sdk.lake.arrow_batch import ValueCodec, columns_to_arrow, parse_json_schema
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.sink import Record, records_table

NESTED_SCHEMA = (
    "id BIGINT, items ARRAY<STRUCT<sku: STRING, qty: INT, price: DOUBLE>>, "
    "attrs MAP<STRING, STRING>, total DECIMAL(12, 2), at TIMESTAMP, day DATE, "
    "customer STRUCT<name: STRING, email: STRING, vip: BOOLEAN>, note STRING"
)
FLAT_SCHEMA = "id BIGINT, sku STRING, qty INT, price DOUBLE, vip BOOLEAN, note STRING"
RECORD_BYTES = 1024


def _words(rng: np.random.Generator, count: int) -> str:
    letters = rng.integers(97, 123, size=count * 6).astype(np.uint8).tobytes().decode()
    return " ".join(letters[i : i + 6] for i in range(0, len(letters), 6))


def _padded(document: dict[str, Any], rng: np.random.Generator) -> bytes:
    """``document`` with a ``note`` that takes it to about RECORD_BYTES."""
    short = len(json.dumps({**document, "note": ""}))
    document["note"] = _words(rng, max(1, (RECORD_BYTES - short) // 7))[: RECORD_BYTES - short]
    return json.dumps(document).encode()


def nested_value(i: int, rng: np.random.Generator) -> bytes:
    """An order: a few items, attributes, a total, a moment (ISO text or epoch ms)."""
    items = [
        {"sku": _words(rng, 1), "qty": int(rng.integers(1, 9)), "price": float(rng.random())}
        for _ in range(int(rng.integers(2, 6)))
    ]
    moment = 1_765_000_000_000 + i
    document = {
        "id": i,
        "items": items,
        "attrs": {_words(rng, 1): _words(rng, 2) for _ in range(int(rng.integers(2, 5)))},
        "total": f"{rng.integers(0, 10**6) / 100:.2f}",
        "at": moment if i % 2 else datetime.fromtimestamp(moment / 1000, UTC).isoformat(),
        "day": "2026-12-07",
        "customer": {"name": _words(rng, 2), "email": f"{_words(rng, 1)}@x.org", "vip": i % 7 == 0},
    }
    return _padded(document, rng)


def flat_value(i: int, rng: np.random.Generator) -> bytes:
    """A flat record of the same size."""
    document = {
        "id": i,
        "sku": _words(rng, 1),
        "qty": int(rng.integers(1, 9)),
        "price": float(rng.random()),
        "vip": i % 7 == 0,
    }
    return _padded(document, rng)


FORMATS: dict[str, tuple[ValueCodec, str]] = {
    "raw": (ValueCodec("raw"), "nested"),
    "text": (ValueCodec("text"), "nested"),
    "json flat": (ValueCodec("json", parse_json_schema(FLAT_SCHEMA)), "flat"),
    "json nested": (ValueCodec("json", parse_json_schema(NESTED_SCHEMA)), "nested"),
}


def batches(records: int, batch: int, seed: int) -> dict[str, list[pa.Table]]:
    """The fetched tables of both record kinds, ``batch`` records each."""
    rng = np.random.default_rng(seed)
    made: dict[str, list[pa.Table]] = {"nested": [], "flat": []}
    for start in range(0, records, batch):
        for kind, make in (("nested", nested_value), ("flat", flat_value)):
            rows = [
                Record("t", 0, o, 1_765_000_000_000, None, make(o, rng))
                for o in range(start, min(records, start + batch))
            ]
            made[kind].append(records_table(rows))
    return made


def value_mib(tables: list[pa.Table]) -> float:
    """MiB of record values in ``tables``."""
    values = sum(int(pc.sum(pc.binary_length(t.column("value"))).as_py()) for t in tables)
    return values / 2**20


def decode_rates(made: dict[str, list[pa.Table]], repeats: int) -> dict[str, list[float]]:
    """Seconds to decode every batch, per format, per repeat (formats in turn per batch)."""
    seconds: dict[str, list[float]] = {name: [] for name in FORMATS}
    now = datetime.now(UTC)
    for _ in range(repeats):
        spent = dict.fromkeys(FORMATS, 0.0)
        for index in range(len(made["nested"])):
            for name, (codec, kind) in FORMATS.items():
                started = time.perf_counter()
                decoded = columns_to_arrow("t", made[kind][index], codec, now)
                spent[name] += time.perf_counter() - started
                if decoded.dead_letters.num_rows:
                    raise AssertionError(f"{name}: {decoded.dead_letters.column('error')[0]}")
        for name in FORMATS:
            seconds[name].append(spent[name])
    return seconds


def sink_seconds(made: dict[str, list[pa.Table]], root: Path) -> dict[str, float]:
    """Seconds the Delta sink took to write every batch but the first (written untimed),
    per format (in turn per batch)."""
    # A database per format: one session's catalog holds every sink's tables by name.
    sinks = {
        name: SparkTableSink(
            SparkSinkConfig(
                warehouse=str(root / name.replace(" ", "_")),
                database=f"bench_{name.replace(' ', '_')}",
                value_format=codec.value_format,
                json_schema=NESTED_SCHEMA if kind == "nested" else FLAT_SCHEMA,
            )
        )
        for name, (codec, kind) in FORMATS.items()
    }
    for name, (_, kind) in FORMATS.items():  # untimed: the table made, the JVM warm
        sinks[name].write_blocking("t", made[kind][0])
    spent = dict.fromkeys(FORMATS, 0.0)
    for index in range(1, len(made["nested"])):
        for name, (_, kind) in FORMATS.items():
            started = time.perf_counter()
            sinks[name].write_blocking("t", made[kind][index])
            spent[name] += time.perf_counter() - started
    for sink in sinks.values():
        asyncio.run(sink.close())
    return spent


def main(argv: Sequence[str] | None = None) -> int:
    """Decode, then write, every format; report records/s and MiB/s side by side."""
    require_committed_code()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000, help="records per format")
    parser.add_argument("--batch", type=int, default=10_000, help="records a batch")
    parser.add_argument("--repeats", type=int, default=3, help="decode-only repeats")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.records < args.batch or args.batch < 100 or args.repeats < 1:
        parser.error("--batch must be >= 100 and <= --records, --repeats >= 1")
    made = batches(args.records, args.batch, args.seed)
    decoded = decode_rates(made, args.repeats)
    with tempfile.TemporaryDirectory(prefix="value-formats-") as scratch:
        written = sink_seconds(made, Path(scratch))
    rows: list[dict[str, Any]] = []
    for name, (_, kind) in FORMATS.items():
        mib, sink_mib = value_mib(made[kind]), value_mib(made[kind][1:])
        sink_records = sum(t.num_rows for t in made[kind][1:])
        decode_s = statistics.median(decoded[name])
        rows.append(
            {
                "format": name,
                "value_mib": mib,
                "decode_s": decoded[name],
                "decode_records_s": args.records / decode_s,
                "decode_mib_s": mib / decode_s,
                "sink_s": written[name],
                "sink_records_s": sink_records / written[name],
                "sink_mib_s": sink_mib / written[name],
            }
        )
    raw = rows[0]
    lines = [
        "# Record value formats: decoding and the Delta sink, side by side",
        "",
        machine_line(),
        f"{args.records:,} records of about {RECORD_BYTES} B per format (seed {args.seed}), "
        f"batches of {args.batch:,}. Decode: the sink's codec alone (`columns_to_arrow`), "
        f"median of {args.repeats}. Sink: `SparkTableSink.write_blocking` into a Delta table "
        "per format (one local Spark session, pyarrow files, the commit), every batch but "
        "the first (written untimed: the table made, the JVM warm). Formats take turns "
        "batch by batch. Nested schema: `" + NESTED_SCHEMA + "`.",
        "",
        "| format | decode records/s | decode MiB/s | sink records/s | sink MiB/s | sink vs raw |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['format']} | {r['decode_records_s']:,.0f} | {r['decode_mib_s']:,.1f} "
        f"| {r['sink_records_s']:,.0f} | {r['sink_mib_s']:,.1f} "
        f"| {r['sink_records_s'] / raw['sink_records_s']:.2f}x |"
        for r in rows
    ]
    publish("value_formats", "\n".join(lines), {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
