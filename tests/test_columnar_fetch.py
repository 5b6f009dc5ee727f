"""aiokafka fetching Arrow columns (consumer_sdk.kafka_client.columnar_fetch) on both Kafka legs:
the same records as aiokafka's own ConsumerRecords, positions that follow, seek, and other consumers
in the process untouched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Producer

from benchmarks.hostile_batches import built_batch, produce_raw
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.kafka_client.columnar_fetch import COLUMNAR, install
from consumer_sdk.records.inflate import ZSTD
from consumer_sdk.records.record_columns import RecordColumns
from consumer_sdk.sink import REFUSED_HEADER, SINK_SCHEMA, CallbackSink, Record
from tests.columns_helpers import Row, column_rows


def produce_mixed(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """Keys (some null), values (some null, some large), headers, gzip and uncompressed."""
    for compression in ("none", "gzip"):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5}
        )
        for i in range(per_partition // 2):
            for partition in range(partitions):
                producer.produce(
                    topic,
                    partition=partition,
                    key=None if i % 3 == 0 else f"k{i}".encode(),
                    value=None if i % 7 == 0 else f"v{i}-{compression}".encode() * (1 + i % 50),
                    headers=[("h", f"{i}".encode()), ("null", None)] if i % 4 == 0 else None,
                )
        assert producer.flush(30) == 0


async def read_all(
    bootstrap: str, topic: str, partitions: int, expected: int, columnar: bool, seek: int = 0
) -> dict[int, list[Row]]:
    """Every partition's records from ``seek`` on, by one consumer without a group."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4096,  # several fetches per partition
        **({"key_deserializer": COLUMNAR} if columnar else {}),
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, seek)
    rows: dict[int, list[Row]] = {p: [] for p in range(partitions)}
    try:
        async with asyncio.timeout(60):
            while sum(len(r) for r in rows.values()) < expected:
                fetched = await consumer.getmany(timeout_ms=500)
                for tp, items in fetched.items():
                    rows[tp.partition].extend(_rows(items, columnar))
        positions = {tp.partition: await consumer.position(tp) for tp in tps}
    finally:
        await consumer.stop()
    for partition, partition_rows in rows.items():
        assert positions[partition] == partition_rows[-1][0] + 1
    return rows


def _rows(items: list[Any], columnar: bool) -> list[Row]:
    if not columnar:
        return [(m.offset, m.timestamp, m.key, m.value, list(m.headers)) for m in items]
    out: list[Row] = []
    for chunk in items:
        assert isinstance(chunk, RecordColumns)
        out.extend(column_rows(chunk))
    return out


def test_columns_hold_what_aiokafka_records_hold(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    install()
    partitions, per_partition = 3, 60
    topic = topic_factory(partitions, prefix=f"columnar-{uuid.uuid4().hex[:6]}")
    produce_mixed(kafka, topic, partitions, per_partition)
    total = partitions * per_partition
    plain = asyncio.run(read_all(kafka, topic, partitions, total, columnar=False))
    columns = asyncio.run(read_all(kafka, topic, partitions, total, columnar=True))
    assert columns == plain
    assert all(len(rows) == per_partition for rows in columns.values())
    # From the middle of a batch: only what follows the position.
    later = asyncio.run(read_all(kafka, topic, partitions, total - 3 * 17, True, seek=17))
    assert later == {p: rows[17:] for p, rows in plain.items()}


class TableSink:
    """A sink that keeps the tables it is given."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []

    async def write(self, topic: str, table: pa.Table) -> None:
        self.tables.append(table)

    async def resume_offsets(self, partitions: Sequence[Any]) -> Mapping[Any, int]:
        return {}


async def consume_columns(
    bootstrap: str,
    topic: str,
    sink: Any,
    expected: Callable[[], bool],
    record_path: str = "columns",
    **overrides: Any,
) -> AutoscalingConsumer:
    config = ConsumerConfig(
        bootstrap_servers=bootstrap,
        group=f"g-{topic}",
        topics=(topic,),
        capacity=1.0,
        member_identity="columns-0",
        wait_time_secs=0.2,
        batch_bytes=4096,  # several batches, cut inside fetched chunks
        record_path=record_path,
        **overrides,
    )
    consumer = AutoscalingConsumer(config, sink)
    runner = asyncio.create_task(consumer.run_async())
    async with asyncio.timeout(60):
        while not expected():
            await asyncio.sleep(0.05)  # polling the sink's progress, not timing it
    consumer.request_stop()
    await runner
    return consumer


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_a_sink_gets_every_record_once_as_tables_on_either_record_path(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    install()
    partitions, per_partition = 3, 60
    total = partitions * per_partition
    topic = topic_factory(partitions, prefix=f"columns-{uuid.uuid4().hex[:6]}")
    produce_mixed(kafka, topic, partitions, per_partition)
    plain = asyncio.run(read_all(kafka, topic, partitions, total, columnar=False))

    tables = TableSink()
    asyncio.run(consume_columns(kafka, topic, tables, lambda: rows(tables) >= total, record_path))
    got = pa.concat_tables(tables.tables)
    assert len(tables.tables) > 1
    assert got.schema == SINK_SCHEMA
    pairs = zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True)
    assert sorted(pairs) == sorted(
        (p, row[0]) for p, partition_rows in plain.items() for row in partition_rows
    )


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_a_callback_sink_gets_every_record_once_on_either_record_path(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    install()
    partitions, per_partition = 3, 60
    total = partitions * per_partition
    seen: list[Record] = []
    records_topic = topic_factory(partitions, prefix=f"columns-cb-{uuid.uuid4().hex[:6]}")
    produce_mixed(kafka, records_topic, partitions, per_partition)
    expected = asyncio.run(read_all(kafka, records_topic, partitions, total, columnar=False))
    sink = CallbackSink(lambda _topic, records: seen.extend(records))
    asyncio.run(
        consume_columns(kafka, records_topic, sink, lambda: len(seen) >= total, record_path)
    )
    assert sorted(
        (r.partition, r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in seen
    ) == sorted((p, *row) for p, partition_rows in expected.items() for row in partition_rows)


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def produce_every_codec(bootstrap: str, topic: str) -> set[bytes]:
    """Records in every codec Kafka has, from confluent-kafka and from aiokafka's producer
    (each writes its own framing: librdkafka's and Java's snappy differ); the values."""
    values: set[bytes] = set()
    for codec in CODECS:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
        )
        for i in range(200):
            value = f"{codec}-librdkafka-{i}-".encode() * (1 + i % 9)
            producer.produce(topic, value=value, key=f"{i}".encode(), partition=i % 2)
            values.add(value)
        assert producer.flush(30) == 0

    async def with_aiokafka() -> None:
        for codec in CODECS:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                compression_type=None if codec == "none" else codec,
                linger_ms=20,
            )
            await producer.start()
            try:
                sent = []
                for i in range(200):
                    value = f"{codec}-aiokafka-{i}-".encode() * (1 + i % 9)
                    sent.append(await producer.send(topic, value, partition=i % 2))
                    values.add(value)
                await asyncio.gather(*sent)
            finally:
                await producer.stop()

    asyncio.run(with_aiokafka())
    return values


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_every_codec_from_either_producer_lands_on_either_record_path(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    topic = topic_factory(2, prefix=f"codecs-{uuid.uuid4().hex[:6]}")
    values = produce_every_codec(kafka, topic)
    seen: list[Record] = []
    sink = CallbackSink(lambda _topic, records: seen.extend(records))
    asyncio.run(consume_columns(kafka, topic, sink, lambda: len(seen) >= len(values), record_path))
    assert sorted(r.value or b"" for r in seen) == sorted(values)


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_a_batch_that_inflates_past_the_bound_is_a_dead_letter_row_and_reading_goes_on(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    topic = topic_factory(1, prefix=f"bomb-{uuid.uuid4().hex[:6]}")
    good = Producer({"bootstrap.servers": kafka})
    for i in range(10):
        good.produce(topic, value=b"before-%d" % i, partition=0)
    assert good.flush(30) == 0
    produce_raw(kafka, topic, built_batch(4, bytes(1 << 20), ZSTD))  # 4 MiB once inflated
    for i in range(10):
        good.produce(topic, value=b"after-%d" % i, partition=0)
    assert good.flush(30) == 0
    seen: list[Record] = []
    sink = CallbackSink(lambda _topic, records: seen.extend(records))
    asyncio.run(
        consume_columns(
            kafka, topic, sink, lambda: len(seen) >= 21, record_path, max_record_batch_bytes=1 << 20
        )
    )
    [refused] = [r for r in seen if r.value is None]
    assert refused.offset == 13  # the batch's last offset: the commit moves past it
    reason = dict(refused.headers)[REFUSED_HEADER]
    assert reason == (
        b"zstd batch inflates past max_record_batch_bytes (1048576 bytes) "
        b"(record batch, offsets 10-13)"
    )
    assert [r.value for r in seen if r.value is not None] == [
        *(b"before-%d" % i for i in range(10)),
        *(b"after-%d" % i for i in range(10)),
    ]


@pytest.mark.parametrize("record_path", ["columns", "records"])
def test_a_batch_inflating_to_many_consumer_batches_lands_whole_on_either_record_path(
    kafka: str, topic_factory: Callable[..., str], record_path: str
) -> None:
    # 600 KiB once inflated, read in 4 KiB batches: the columnar path decodes it a piece at
    # a time as the batches are cut, never all at once.
    topic = topic_factory(1, prefix=f"large-{uuid.uuid4().hex[:6]}")
    produce_raw(kafka, topic, built_batch(600, b"x" * 1024, ZSTD))
    seen: list[Record] = []
    sink = CallbackSink(lambda _topic, records: seen.extend(records))
    asyncio.run(
        consume_columns(
            kafka,
            topic,
            sink,
            lambda: len(seen) >= 600,
            record_path,
            max_record_batch_bytes=1 << 20,
        )
    )
    assert [r.offset for r in seen] == list(range(600))
    assert all(r.value == b"x" * 1024 for r in seen)


def rows(sink: TableSink) -> int:
    return sum(table.num_rows for table in sink.tables)
