"""The peer users run instead of the SDK: Kafka Connect with Apache Iceberg's sink, from the
pinned jars, writing a table pyiceberg reads through the catalog the SDK's tables use."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks.support.iceberg_tables import iceberg_table
from consumer_sdk.lake.iceberg.catalog import prepare_catalog_file
from consumer_sdk.lake.lake_session import ICEBERG_CATALOG_FILE, ICEBERG_DATA_DIR
from consumer_sdk.lake.spark_config import SparkSinkConfig
from local_kafka.clusters import ClusterKind, KafkaCluster
from local_kafka.kafka_connect import IcebergSinkSettings, KafkaConnectWorker
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import wait_until

PARTITIONS = 3


def iceberg_sink(
    tmp_path: Path, topic: str, control_topic: str
) -> tuple[IcebergSinkSettings, SparkSinkConfig]:
    """A connector writing ``topic`` into a table of a warehouse as the SDK lays one out,
    committing every second, and the SDK settings that name the same table."""
    reader = SparkSinkConfig(
        warehouse=str(tmp_path / "warehouse"), database="peer", table_format="iceberg"
    )
    prepare_catalog_file(reader.warehouse_path / ICEBERG_CATALOG_FILE)
    settings = IcebergSinkSettings(
        topics=(topic,),
        database=reader.database,
        table=reader.table_for(topic),
        catalog_name=reader.iceberg_catalog,
        catalog_file=reader.warehouse_path / ICEBERG_CATALOG_FILE,
        warehouse=reader.warehouse_path / ICEBERG_DATA_DIR,
        commit_interval_ms=1000,
        control_topic=control_topic,
    )
    return settings, reader


def test_kafka_connects_iceberg_sink_lands_every_record_once(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    if kafka_cluster_handle.kind is not ClusterKind.APACHE:
        pytest.skip("Kafka Connect's Java clients run against Apache Kafka")
    topic = topic_factory(PARTITIONS, prefix="connect")
    settings, reader = iceberg_sink(tmp_path, topic, topic_factory(1, prefix="connect-control"))
    produced = produce_tracked(
        kafka_cluster_handle.bootstrap_servers,
        topic,
        600,
        PARTITIONS,
        value_for=lambda i: json.dumps({"id": i, "name": f"n{i}"}).encode(),
    )
    landed: dict[str, pa.Table] = {}

    def all_landed() -> bool:
        table = iceberg_table(reader, settings.table)
        if table is None:
            return False
        rows: pa.Table = table.scan().to_arrow()
        landed["rows"] = rows
        return bool(rows.num_rows >= len(produced))

    worker = KafkaConnectWorker(
        kafka_cluster_handle.bootstrap_servers,
        settings.connector_properties(),
        tmp_path / "connect",
    )
    with worker:
        assert wait_until(all_landed, timeout_s=120), f"see {worker.log_file}"
    rows = landed["rows"]
    keys = Counter(
        zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True)
    )
    assert keys == Counter(produced)
    assert sorted(rows.column("id").to_pylist()) == list(range(600))
    assert None not in rows.column("kafka_timestamp").to_pylist()
