"""Apache Kafka Connect (a standalone worker) running Apache Iceberg's sink connector: what a
team would run instead of the SDK to land a topic in an Iceberg table. Tests and benchmarks
start it as the peer; nothing in the product uses it.

The worker, the connector and their dependencies are Maven Central jars pinned in
``local_kafka/locks/kafka-connect-iceberg.lock`` (Kafka Connect 4.3, Iceberg 1.12's sink,
Hadoop's shaded client for Iceberg's file IO, the SQLite JDBC driver). The connector writes
through the same kind of catalog the SDK's Iceberg tables use by default (Iceberg's JDBC
catalog on a SQLite file), so pyiceberg reads both the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer_sdk.lake.jar_lock import ensure_jars, read_lock
from contract.local_ports import free_port
from local_kafka.apache_kafka import java_executable

CONNECT_LOCK = Path(__file__).resolve().parent / "locks" / "kafka-connect-iceberg.lock"
CONNECTOR_NAME = "iceberg-sink"
_STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
_START_TIMEOUT_S = 180.0


# The worker's log: INFO to its output (without a configuration log4j2 prints nothing).
_LOG4J2 = """\
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka.clients
logger.kafka.level = WARN
"""


class KafkaConnectUnavailable(RuntimeError):
    """The worker did not start, or its connector's task did not reach RUNNING."""


@dataclass(frozen=True)
class IcebergSinkSettings:
    """One Iceberg sink connector: ``topics`` into ``database.table`` of the JDBC catalog on
    the SQLite file ``catalog_file``, data under ``warehouse``. Each row gets the record's
    ``partition``, ``offset`` and Kafka timestamp (``kafka_timestamp``) beside the JSON
    value's fields (Kafka Connect's own InsertField transform)."""

    topics: tuple[str, ...]
    database: str
    table: str
    catalog_name: str
    catalog_file: Path
    warehouse: Path
    commit_interval_ms: int = 300_000  # the connector's default: 5 minutes
    tasks: int = 1
    control_topic: str = "control-iceberg"

    def connector_properties(self) -> dict[str, str]:
        """The connector's configuration, as Kafka Connect takes it."""
        return {
            "name": CONNECTOR_NAME,
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "tasks.max": str(self.tasks),
            "topics": ",".join(self.topics),
            "iceberg.tables": f"{self.database}.{self.table}",
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.control.topic": self.control_topic,
            "iceberg.control.commit.interval-ms": str(self.commit_interval_ms),
            "iceberg.catalog": self.catalog_name,
            "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "iceberg.catalog.uri": f"jdbc:sqlite:{self.catalog_file}",
            "iceberg.catalog.warehouse": f"file:{self.warehouse}",
            "iceberg.catalog.jdbc.schema-version": "V1",
            "transforms": "kafka",
            "transforms.kafka.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.kafka.partition.field": "partition",
            "transforms.kafka.offset.field": "offset",
            "transforms.kafka.timestamp.field": "kafka_timestamp",
        }


def connect_classpath() -> str:
    """The worker's classpath, fetching and verifying the locked jars if needed."""
    return os.pathsep.join(str(path) for path in ensure_jars(read_lock(CONNECT_LOCK)))


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


class KafkaConnectWorker:
    """A standalone Kafka Connect worker running one connector, from ``start`` (returns once
    the connector's tasks run) to ``stop`` (SIGTERM, then SIGKILL after 30 s)."""

    def __init__(
        self,
        bootstrap_servers: str,
        connector: Mapping[str, str],
        work_dir: Path,
        heap_mib: int = 1024,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.connector = dict(connector)
        self.work_dir = work_dir
        self.heap_mib = heap_mib
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        """The worker's output."""
        return self.work_dir / "connect.log"

    def start(self) -> None:
        """Start the worker and wait until the connector's every task is RUNNING."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        worker = self.work_dir / "worker.properties"
        worker.write_text(
            _properties(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "listeners": f"http://127.0.0.1:{self.port}",
                    "offset.storage.file.filename": str(self.work_dir / "offsets"),
                    # The worker polls at most this long before calling the task, and the
                    # Iceberg task answers its coordinator only then: at Connect's default
                    # (60 s) an idle topic's rows waited past the commit timeout (30 s).
                    "offset.flush.interval.ms": "1000",
                    # Keys stay bytes; values are JSON objects without an embedded schema.
                    "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": "false",
                }
            )
        )
        connector = self.work_dir / "connector.properties"
        connector.write_text(_properties(self.connector))
        logging_config = self.work_dir / "log4j2.properties"
        logging_config.write_text(_LOG4J2)
        command = [
            java_executable(),
            f"-Xmx{self.heap_mib}m",
            f"-Dlog4j2.configurationFile={logging_config}",
            "-cp",
            connect_classpath(),
            _STANDALONE,
            str(worker),
            str(connector),
        ]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_running()

    def _wait_running(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise KafkaConnectUnavailable(
                    f"the Kafka Connect worker exited ({self.process.returncode}); "
                    f"see {self.log_file}"
                )
            status = self.status()
            if status is not None:
                states = [task.get("state") for task in status.get("tasks", [])]
                if states and all(state == "RUNNING" for state in states):
                    return
                if "FAILED" in states or status.get("connector", {}).get("state") == "FAILED":
                    raise KafkaConnectUnavailable(f"the connector failed: {json.dumps(status)}")
                last = json.dumps(status)
            time.sleep(0.5)
        raise KafkaConnectUnavailable(
            f"the connector's tasks were not RUNNING after {_START_TIMEOUT_S:.0f} s ({last}); "
            f"see {self.log_file}"
        )

    def status(self) -> dict[str, Any] | None:
        """The connector's status from the worker's REST API, None while it does not answer."""
        url = f"http://127.0.0.1:{self.port}/connectors/{self.connector['name']}/status"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                status: dict[str, Any] = json.loads(answer.read())
                return status
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the worker: SIGTERM (it commits what it holds), SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def __enter__(self) -> KafkaConnectWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
