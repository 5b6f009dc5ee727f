"""A table commit whose answer is lost (a connection reset after the server committed,
Iceberg's CommitStateUnknownException): the write stage retries the batch, and the sink must
find out whether the first attempt landed before it appends anything again. Real PySpark,
Delta and Iceberg; the tables counted by delta-rs and pyiceberg."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assignor import TopicPartition
from benchmarks.support.lake_readers import key_counts, warehouse_config
from consumer_sdk.lake.lake_writer import LakeAppender
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.sink import Record, records_table
from tests.test_spark_sink import POISON


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """One local Spark session with the lake jars, before any sink of this module."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


@pytest.fixture(params=["delta", "iceberg"])
def sink_config(tmp_path: Path, request: pytest.FixtureRequest) -> SparkSinkConfig:
    return warehouse_config(tmp_path, request.param)


class LostAnswer(ConnectionResetError):
    """What the client sees when the connection drops around a commit."""


def answer_lost_once(lake: LakeAppender, table: str, *, landed: bool) -> list[str]:
    """The next commit into ``table`` lands (``landed``) or not, and raises either way;
    later ones go through. Returns the commits made, in order."""
    real = lake._write
    commits: list[str] = []

    def write(session: Any, into: str, rows: Any, ingest_date: Any, metadata: str) -> None:
        first = into == table and not any(c.startswith(table) for c in commits)
        if not first or landed:
            real(session, into, rows, ingest_date, metadata)
        commits.append(f"{into} (answer lost)" if first else into)
        if first:
            raise LostAnswer("connection reset by peer after the commit was sent")

    lake._write = write  # type: ignore[method-assign,assignment]
    return commits


def batch(offsets: range, poison_every: int = 0) -> list[Record]:
    return [
        Record(
            "t",
            p,
            o,
            0,
            None,
            POISON if poison_every and o % poison_every == 0 else f"v{o}".encode(),
        )
        for p in (0, 1)
        for o in offsets
    ]


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_a_batch_whose_commit_answer_was_lost_is_in_the_table_once_after_the_retry(
    sink_config: SparkSinkConfig, landed: bool
) -> None:
    sink = SparkTableSink(sink_config)
    asyncio.run(sink.resume_offsets([TopicPartition("t", p) for p in (0, 1)]))
    assert sink._lake is not None
    first, second = batch(range(0, 20), poison_every=7), batch(range(20, 40))
    # Staged before the failure, as the consumer stages the next batch during a write.
    staged = [sink.stage_blocking("t", records_table(b)) for b in (first, second)]
    commits = answer_lost_once(sink._lake, "t", landed=landed)
    with pytest.raises(LostAnswer):
        sink.publish_blocking(staged[0])
    sink.write_blocking("t", records_table(first))  # the write stage's retry: staged anew
    sink.publish_blocking(staged[1])  # staged under the claim the retry renewed
    rows = Counter((r.partition, r.offset) for r in first + second if r.value != POISON)
    dead = Counter((r.partition, r.offset) for r in first if r.value == POISON)
    assert key_counts(sink_config, "t") == rows
    assert key_counts(sink_config, "dead_letters") == dead
    # The retry committed again only what had not landed; the next batch once.
    assert commits == ["dead_letters", "t (answer lost)"] + (["t"] if landed else ["t", "t"])
    # Where the table is, as the next owner finds it, and nothing skipped twice or written.
    again = SparkTableSink(sink_config)
    assert asyncio.run(again.resume_offsets([TopicPartition("t", p) for p in (0, 1)])) == {
        TopicPartition("t", 0): 40,
        TopicPartition("t", 1): 40,
    }
