"""Seed inputs for both fuzzers, made from real record batches of every codec.

Batches come from aiokafka's DefaultRecordBatchBuilder, what a producer sends: keys and
values (some null, some long), headers, every codec, a transactional batch and a control
batch. A section seed is the C harness's 32 bytes of parameters and a batch's (inflated)
records section; a fetch seed is a few whole batches, as a Fetch response holds them.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from consumer_sdk.records.batch_header import BATCH_HEADER_SIZE, batch_headers
from consumer_sdk.records.inflate import CODEC_NAMES, inflate

_CONTROL = 0x20  # the attribute bit of a transaction marker batch
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]
ROWS: list[list[Row]] = [
    [(b"k", b"v", [])],
    [(None, b"x" * 300, [("h", b"1"), ("null", None)]), (b"key", None, [])] * 3,
    [
        (b"%d" % i, b"value-%d" % i * (1 + i % 5), [("i", b"%d" % i)] if i % 2 else [])
        for i in range(40)
    ],
]


def batch(
    rows: list[Row],
    base_offset: int,
    *,
    codec: int = 0,
    timestamp: int = 1_700_000_000_000,
    producer_id: int = -1,
    transactional: bool = False,
    flags: int = 0,
) -> bytes:
    """One v2 record batch of ``rows`` at ``base_offset``, record i at ``timestamp`` + 3i;
    ``flags`` are extra attribute bits (the builder cannot set them; the CRC is recomputed).
    The decoder's tests build their batches with it too."""
    builder = DefaultRecordBatchBuilder(2, codec, int(transactional), producer_id, 0, 0, 1 << 30)
    for delta, (key, value, headers) in enumerate(rows):
        builder.append(delta, timestamp + 3 * delta, key, value, headers)
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base_offset)
    if flags:
        (attributes,) = struct.unpack_from(">h", data, 21)
        struct.pack_into(">h", data, 21, attributes | flags)
        struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def fetch_seeds() -> list[bytes]:
    """Message sets as fetches bring them: every codec, transactions, a control batch."""
    seeds = []
    for codec in CODEC_NAMES:
        offset, data = 0, b""
        for rows in ROWS:
            data += batch(rows, offset, codec=codec)
            offset += len(rows)
        seeds.append(data)
    # One batch past the whole-fetch harness's piece once inflated: read a piece at a time.
    large: list[Row] = [(b"%d" % i, b"large-%d;" % i * 30, [("i", b"%d" % i)]) for i in range(400)]
    seeds.extend(batch(large, 0, codec=codec) for codec in CODEC_NAMES if codec)
    marker = batch([(struct.pack(">hh", 0, 0), b"", [])], 1, producer_id=7, flags=_CONTROL)
    seeds.append(batch(ROWS[0], 0, transactional=True, producer_id=7) + marker)
    return seeds


def section_seeds() -> list[bytes]:
    """The C harness's inputs: parameters, then an inflated records section."""
    seeds = []
    for data in fetch_seeds():
        for header in batch_headers(data):
            section = data[header.start + BATCH_HEADER_SIZE : header.end]
            if header.codec:
                section = inflate(header.codec, section, 1 << 24).tobytes()
            parameters = struct.pack(
                "<HqiqBqB",
                header.record_count,
                header.base_offset,
                header.last_offset_delta,
                header.base_timestamp,
                header.uses_log_append_time,
                header.max_timestamp,
                0,
            )
            seeds.append(parameters + section)
    return seeds


def control_plane_seeds() -> list[bytes]:
    """The control-plane harness's inputs: a selector byte, then a capacity report (0), a
    speed snapshot (1), as the sidecar and the consumers write them, a share group's
    offsets (2) or description (3), as the brokers answer them, what group members send
    each other (4): a member's userdata, an assignment's, release-marked commit metadata,
    or the Metadata response (v12) the SDK reads topic ids from (5)."""
    from assignor import TopicPartition
    from assignor.backlog import DrainRule
    from contract.capacity import CapacityReport
    from contract.snapshot import PartitionStat, Snapshot

    reports = [
        CapacityReport("consumer-1-4f2a", 1, 1, 2310.5, 1_180_000.0, 21.4),
        CapacityReport("m", 0, 0, 0.0, 0.0, 0.0),
    ]
    snapshot = Snapshot(
        "g",
        4,
        1000.0,
        "records/s",
        {TopicPartition("t", p): PartitionStat(12.5 * p, 7.0, 900) for p in range(3)},
        DrainRule(30.0, 5.0),
        2310.5,
    )
    from contract.kafka_client.share_requests import (
        DescribeShareGroupOffsetsResponse_v1,
        ShareGroupDescribeResponse_v1,
    )

    topic_id = "AAECAwQFBgcICQoLDA0ODw"
    offsets = DescribeShareGroupOffsetsResponse_v1(
        0, [("g", [("t", topic_id, [(0, 40, 0, 7, 0, None, {})], {})], 0, None, {})], {}
    )
    member: tuple[object, ...] = (
        "m1",
        None,
        3,
        "c",
        "/h",
        ["t"],
        ([(topic_id, "t", [0], {})], {}),
        {},
    )
    described = ShareGroupDescribeResponse_v1(
        0, [(0, None, "g", "Stable", 3, 3, "simple", [member], 0, {})], {}
    )
    from assignor.cooperative import COOPERATIVE, encode_assignment_data, mark_released
    from assignor.member_data import MemberData

    owned = tuple(TopicPartition("t", p) for p in range(3))
    member_data = MemberData("sink-0", "repair", 2310.5, 7, owned, True, False, False, True)
    assignment = encode_assignment_data(COOPERATIVE, True, 3, owned[:1], one_round=True)
    group = [member_data.encode(), assignment, mark_released('{"cap":1}', 7).encode()]
    from contract.kafka_client.topic_ids import MetadataResponse_v12

    partition: tuple[object, ...] = (0, 0, 1, 4, [1], [1], [], {})
    metadata = MetadataResponse_v12(
        0,
        [(1, "localhost", 9092, None, {})],
        "cluster",
        1,
        [
            (0, "t", topic_id, False, [partition], -2147483648, {}),
            (3, "gone", "A" * 22, False, [], 0, {}),
        ],
        {},
    )
    return (
        [b"\x00" + r.encode().encode() for r in reports]
        + [b"\x01" + snapshot.encode()]
        + [b"\x02" + offsets.encode(), b"\x03" + described.encode()]
        + [b"\x04" + data for data in group]
        + [b"\x05" + metadata.encode()]
    )


def record_value_seeds() -> list[bytes]:
    """The record-values harness's inputs: a selector byte (schema, epoch unit), then a JSON
    value that fits the schema, one that nearly does, and a few that do not."""
    order = {
        "id": 1,
        "items": [{"sku": "a", "qty": 2}, {"sku": "b"}],
        "attrs": {"weight": 1.5},
        "price": "12.50",
        "at": "2026-12-07T10:00:00+01:00",
        "day": "2026-12-07",
        "customer": {"name": "Ada", "vip": True},
    }
    numbers = {
        "n": 7,
        "x": 2.5,
        "big": 12345678901234567890.123456789012345678,
        "tiny": 9,
        "moments": [1765101600000, "2026-12-07", 1.5],
    }
    deep = {"deep": {"a": [{"k": {"b": [1.25, "3.5"], "c": "2026-01-02"}}]}}
    values = [
        (0, json.dumps(order)),
        (0x10, json.dumps({**order, "price": 12.345, "at": 10**20})),
        (1, json.dumps(numbers)),
        (0x21, json.dumps({**numbers, "x": 1e39, "tiny": "10"})),
        (2, json.dumps(deep)),
        (2, '{"deep": {"a": [[]]}}'),
        (0, "[1, 2]"),
        (1, '{"n": 1e400}'),
    ]
    return [bytes([selector]) + value.encode() for selector, value in values]


def write(directory: Path, seeds: list[bytes]) -> Path:
    """Write ``seeds`` as files into ``directory`` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        (directory / f"seed-{i:03d}").write_bytes(seed)
    return directory
