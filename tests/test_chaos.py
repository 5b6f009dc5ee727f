"""Chaos on three brokers, embedded and Apache Kafka: while records are produced, consumers
are killed with SIGKILL and restarted, a broker goes down and comes back (Apache Kafka: kill -9
of one node of three and its restart, so partition leaders and the group coordinator move),
OffsetCommit fails (embedded only: the mock injects errors, a real broker cannot be told to),
members join and leave (forced rebalances). Afterwards the Spark table holds every produced
(partition, offset) exactly once."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.support.lake_readers import key_counts, table_offsets
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import table_identifier, table_root
from local_kafka.clusters import ClusterKind, suite_cluster_kinds
from tests.conftest import cluster_or_skip
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import wait_until
from tests.test_spark_sink import (
    first_rows_stored,
    start_writer,
    stop,
    wait_for_table,
    writer_tails,
)

PARTITIONS = 6
OFFSET_COMMIT = 8  # Kafka API key
# Retriable (14 coordinator loading, 16 not coordinator, 7 timeout) and one that forces a
# full rejoin (27 rebalance in progress): docs/architecture.md section 7.
COMMIT_ERRORS = (14, 16, 7, 27)


KINDS = [k for k in suite_cluster_kinds() if k in (ClusterKind.EMBEDDED, ClusterKind.APACHE)]


@pytest.mark.parametrize(
    ("kind", "table_format"),
    [(kind, "delta") for kind in KINDS]
    + [(kind, "iceberg") for kind in KINDS if kind is ClusterKind.APACHE],
    ids=lambda value: getattr(value, "value", value),
)
def test_chaos_leaves_every_record_exactly_once_in_the_table(
    kind: ClusterKind, table_format: str, tmp_path: Path
) -> None:
    # Iceberg on Apache Kafka only: its commit check is the same gates as Delta's, the suite
    # pays one leg for it.
    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    config = SparkSinkConfig(
        warehouse=str(tmp_path / "warehouse"),
        database="chaos",
        value_format="text",
        table_format=table_format,
    )
    with (
        cluster_or_skip(kind, brokers=3) as broker,
        SparkConnectServer(tmp_path / "warehouse") as spark,
    ):
        broker.broker_handle().create_topic(topic, PARTITIONS, 3)
        kafka = broker.bootstrap_servers
        group = f"g-{topic}"
        remote = ("--remote", spark.url)
        members = {
            f"w-{i}": start_writer(kafka, group, topic, f"w-{i}", config, *remote) for i in range(3)
        }
        produced: set[tuple[int, int]] = set()
        producer = threading.Thread(
            target=lambda: produced.update(
                produce_tracked(
                    kafka, topic, 6000, PARTITIONS, pause_every=100, pause_s=0.4, idempotent=True
                )
            )
        )
        try:
            # Producing starts once the table has rows: the group formed and writes work.
            produced |= first_rows_stored(kafka, topic, PARTITIONS, config)
            producer.start()

            def written() -> int:
                return sum(table_offsets(config, topic).values())

            def progress_after(mark: int) -> None:
                if not wait_until(lambda: written() > mark, timeout_s=60):
                    pytest.fail(
                        f"the table stayed at {mark} rows for 60 s; the writers:\n"
                        + writer_tails(config)
                    )

            # 1. kill -9 a consumer mid-stream, restart it.
            progress_after(written())
            members["w-0"].kill()
            members["w-0"].wait(30)
            members["w-0"] = start_writer(kafka, group, topic, "w-0", config, *remote)
            # 2. a broker goes down and comes back.
            progress_after(written())
            broker.broker_down(2)
            wait_until(lambda: False, timeout_s=3)  # stays down ~3 s while load goes on
            broker.broker_up(2)
            # 3. OffsetCommit fails, retriably and with a forced rejoin (embedded only).
            if broker.embedded is not None:
                broker.embedded.push_request_errors(OFFSET_COMMIT, COMMIT_ERRORS)
            # 4. forced rebalances: a member joins, another leaves gracefully.
            progress_after(written())
            members["w-3"] = start_writer(kafka, group, topic, "w-3", config, *remote)
            progress_after(written())
            stop([members.pop("w-1")])
            # 5. kill -9 again, while the group is still settling.
            members["w-2"].kill()
            members["w-2"].wait(30)
            members["w-2"] = start_writer(kafka, group, topic, "w-2", config, *remote)
            producer.join(180)
            assert not producer.is_alive()
            ends = {p: max(o for q, o in produced if q == p) for p in range(PARTITIONS)}
            wait_for_table(config, topic, ends, timeout_s=180)
        finally:
            stop(list(members.values()))
        reader = SparkTableSink(
            SparkSinkConfig(warehouse=config.warehouse, spark_remote=spark.url)
        ).open()
        try:
            table = config.table_for(topic)
            if table_format == "iceberg":
                rows = reader.table(table_identifier(config, table))
            else:
                rows = reader.read.format(table_format).load(str(table_root(config, table)))
            found = Counter(
                (int(r["partition"]), int(r["offset"]))
                for r in rows.select("partition", "offset").collect()
            )
        finally:
            reader.stop()  # its gRPC threads would keep the test process alive
    assert len(produced) >= 6000
    assert found == Counter(produced)
    assert key_counts(config, config.table_for(topic)) == Counter(produced)  # delta-rs too
