"""SparkTableSink against real PySpark, in each table format (delta, iceberg, parquet): round
trip through Kafka, dead letters, concurrent writer processes, kill -9 between the table write
and the commit, Spark Connect. Rows and offsets are counted by engines other than Spark
(delta-rs, pyiceberg, pyarrow: :mod:`tests.lake_readers`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from assignor import TopicPartition
from benchmarks.support.lake_readers import (
    PollingReader,
    key_counts,
    table_offsets,
    warehouse_config,
)
from consumer_sdk.lake.commit_checks import LOG_STORE_CLASS, LOG_STORE_KEY
from consumer_sdk.lake.commit_offsets import SUMMARY_KEY, encode_offsets, stored_offsets
from consumer_sdk.lake.compact import compact, compacting_alone, data_files
from consumer_sdk.lake.delta.files import DataFile, DeltaFileCommitter
from consumer_sdk.lake.delta.history import LOG_DIR, commit_metadata
from consumer_sdk.lake.jvm_appends import UNSEEN_FILE_REFUSED, FilesRefused, refused_class
from consumer_sdk.lake.partition_fence import FENCE_DIR, PartitionFence, WriteTarget
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.lake.spark_tables import (
    CONNECT_CALL_RETRIES,
    create_table,
    descriptor_path,
    register_tables,
    session_lost,
    table_identifier,
    table_root,
)
from consumer_sdk.sink import Record, records_table
from contract.settings import ConfigError
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import ThreadedMember, member_config, wait_until

ROOT = Path(__file__).parent.parent
POISON = b"\xff\xfe not utf-8"


def poison_every_50th(i: int) -> bytes:
    return POISON if i % 50 == 7 else f"record {i}".encode()


FORMATS = ["delta", "iceberg", "parquet"]
# Tests that start writer processes or a Connect server run in the default format and the
# parquet fallback; Iceberg runs the round trip, every in-process test, the three concurrent
# writers and the kill -9 and zombie-writer tests (its exactly-once counted by pyiceberg),
# not the Connect one (CI time).
PROCESS_FORMATS = ["delta", "parquet"]


def process_formats(config: SparkSinkConfig, *also: str, leg: KafkaCluster | None = None) -> None:
    """Skip the formats this process-level test does not run in; with ``leg``, Delta runs on
    every Kafka leg and the other formats on Apache Kafka alone: what they do with Kafka
    (commit after the write, fencing by generation) is Delta's code, so the suite pays one
    leg for their commits."""
    formats = [*PROCESS_FORMATS, *also]
    if config.table_format not in formats:
        pytest.skip(f"this process-level test runs in {', '.join(formats)}")
    if leg is not None and config.table_format != "delta" and leg.kind is not ClusterKind.APACHE:
        pytest.skip(f"{config.table_format} runs its Kafka-facing tests on Apache Kafka")


@pytest.fixture(params=FORMATS)
def sink_config(tmp_path: Path, request: pytest.FixtureRequest) -> SparkSinkConfig:
    return warehouse_config(tmp_path, request.param)


@pytest.fixture(scope="module", autouse=True)
def lake_session() -> Iterator[Any]:
    """This process's one local Spark session, started with the lake jars before any test:
    jars are fixed when a session starts, so a parquet-format sink opened first would leave
    the Delta and Iceberg tests without them."""
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


def spark_keys(config: SparkSinkConfig, table: str) -> Counter[tuple[int, int]]:
    """(partition, offset) counts of a table as a Spark session of this process reads it by
    name (registered from the warehouse, or in the Iceberg catalog)."""
    session = SparkTableSink(config).open()
    register_tables(session, config.warehouse, config.database, config.iceberg_catalog)
    frame = session.table(table_identifier(config, table)).select("partition", "offset")
    return Counter((int(r["partition"]), int(r["offset"])) for r in frame.collect())


def first_rows_stored(
    kafka: str, topic: str, partitions: int, config: SparkSinkConfig
) -> set[tuple[int, int]]:
    """Produce a few records at a time until the table holds some; returns them all."""
    produced: set[tuple[int, int]] = set()

    def stored() -> bool:
        produced.update(produce_tracked(kafka, topic, partitions, partitions))
        return bool(table_offsets(config, topic))

    assert wait_until(stored, timeout_s=120), "no writer stored rows"
    return produced


def committed(kafka: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10)}
    finally:
        consumer.close()


def create_again(kafka: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again under its name (a new topic id)."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([topic])[topic].result(timeout=30)

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
        except Exception as exc:  # still being deleted: TOPIC_ALREADY_EXISTS
            if "already exists" in str(exc) or "marked for deletion" in str(exc):
                return False
            raise
        return True

    assert wait_until(created, timeout_s=60), f"{topic} was not created again"


@pytest.mark.needs_create_topics
def test_a_topic_created_again_under_its_name_is_not_taken_for_the_one_before(
    kafka: str,
    topic_factory: Callable[..., str],
    sink_config: SparkSinkConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Offsets the table recorded are of the topic they were read from (its id): the new
    topic's records at offsets the earlier one had stored land too, none twice."""
    topic = topic_factory(2)
    table = sink_config.table_for(topic)
    group = f"g-{topic}"

    def read_until(expected: Counter[tuple[int, int]]) -> None:
        member = ThreadedMember(
            member_config(kafka, group, [topic], "spark-0"), SparkTableSink(sink_config)
        ).start()
        try:
            assert wait_until(lambda: key_counts(sink_config, table) == expected, 120), (
                f"table holds {sum(key_counts(sink_config, table).values())} rows, "
                f"expected {sum(expected.values())}"
            )
        finally:
            member.stop()

    first = produce_tracked(kafka, topic, 40, 2)
    read_until(Counter(first))
    create_again(kafka, topic, 2)
    second = produce_tracked(kafka, topic, 20, 2)
    assert second <= first  # the new topic's offsets are ones the table stored before
    with caplog.at_level(logging.WARNING):
        read_until(Counter(first) + Counter(second))
    assert any("was deleted and created again" in r.getMessage() for r in caplog.records)


def exists_again(kafka: str, topic: str) -> None:
    """Delete one-partition ``topic`` and wait until it exists again under its name: created
    by us, or by a member's own metadata request (aiokafka's allow auto-creation, and the
    broker's default is one partition), a new topic either way."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([topic])[topic].result(timeout=30)

    def exists() -> bool:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        except Exception as exc:  # being deleted, or auto-created already
            if "marked for deletion" in str(exc):
                return False
            if "already exists" not in str(exc):
                raise
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        return found is not None and found.error is None and len(found.partitions) == 1

    assert wait_until(exists, timeout_s=60), f"{topic} does not exist again"


@pytest.mark.needs_create_topics
def test_a_topic_created_again_while_its_member_reads_is_not_taken_for_the_one_before(
    kafka: str,
    topic_factory: Callable[..., str],
    sink_config: SparkSinkConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same, with the member reading throughout (not restarted): the new topic's
    records, at offsets the table stored of the earlier one, land once."""
    topic = topic_factory(1)
    table = sink_config.table_for(topic)
    member = ThreadedMember(
        member_config(kafka, f"g-{topic}", [topic], "spark-0"), SparkTableSink(sink_config)
    ).start()
    try:
        first = produce_tracked(kafka, topic, 40, 1)
        assert wait_until(lambda: key_counts(sink_config, table) == Counter(first), 120)
        with caplog.at_level(logging.WARNING):
            exists_again(kafka, topic)
            second = produce_tracked(kafka, topic, 20, 1)
            assert second <= first  # offsets the table stored of the earlier topic
            expected = Counter(first) + Counter(second)
            assert wait_until(lambda: key_counts(sink_config, table) == expected, 120), (
                f"table holds {sum(key_counts(sink_config, table).values())} rows, "
                f"expected {sum(expected.values())}"
            )
    finally:
        member.stop()
    assert any("was deleted and created again" in r.getMessage() for r in caplog.records)


def test_round_trip_rows_and_dead_letters_exactly_once(
    kafka: str, topic_factory: Callable[..., str], sink_config: SparkSinkConfig
) -> None:
    topic = topic_factory(3)
    produced = produce_tracked(kafka, topic, 900, 3, value_for=poison_every_50th)
    poison = {(i % 3, i // 3) for i in range(900) if i % 50 == 7}  # round-robin offsets
    group = f"g-{topic}"
    member = ThreadedMember(
        member_config(kafka, group, [topic], "spark-0"), SparkTableSink(sink_config)
    ).start()
    try:
        ends = {p: max(o for q, o in produced if q == p) for p in range(3)}
        wait_for_table(sink_config, topic, ends, timeout_s=120)
        # Kafka's commit follows the table's; the embedded broker refuses a leaving member's
        # last commit, so the member stays until it is in.
        nexts = {p: end + 1 for p, end in ends.items()}
        assert wait_until(lambda: committed(kafka, group, topic, 3) == nexts, timeout_s=60)
    finally:
        member.stop()
    table = sink_config.table_for(topic)
    assert key_counts(sink_config, table) == Counter(produced - poison)
    assert spark_keys(sink_config, table) == Counter(produced - poison)
    assert key_counts(sink_config, "dead_letters") == Counter(poison)
    spark = SparkTableSink(sink_config).open()
    dead = spark.table(table_identifier(sink_config, "dead_letters")).collect()
    assert Counter((r["partition"], r["offset"]) for r in dead) == Counter(poison)
    assert {bytes(r["value"]) for r in dead} == {POISON}
    assert all("UnicodeDecodeError" in r["error"] and r["topic"] == topic for r in dead)
    values = spark.table(table_identifier(sink_config, table)).select("value").collect()
    assert {r["value"] for r in values} == {
        poison_every_50th(i).decode() for i in range(900) if i % 50 != 7
    }
    assert committed(kafka, group, topic, 3) == {p: end + 1 for p, end in ends.items()}


def writer_logs(config: SparkSinkConfig) -> Path:
    """Where the writer processes of a test log (one file per identity, restarts append)."""
    return Path(config.warehouse).parent / "writer-logs"


def start_writer(
    kafka: str, group: str, topic: str, identity: str, config: SparkSinkConfig, *extra: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.spark_member_process", kafka, group, topic]
    command += [identity, config.warehouse, config.database, "--table-format"]
    command += [config.table_format, "--iceberg-catalog", config.iceberg_catalog, *extra]
    logs = writer_logs(config)
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{identity}.log").open("ab") as log:
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def wait_for_table(
    config: SparkSinkConfig, topic: str, ends: dict[int, int], timeout_s: float
) -> None:
    """Wait until the topic's table holds every partition up to ``ends``; if it does not,
    fail saying which partitions are behind and what each writer process logged last."""
    if wait_until(lambda: table_offsets(config, topic) == ends, timeout_s=timeout_s):
        return
    stored = table_offsets(config, topic)
    behind = {p: (stored.get(p), end) for p, end in ends.items() if stored.get(p) != end}
    pytest.fail(
        f"table of {topic} not caught up after {timeout_s:.0f} s; partition: (stored, produced) "
        f"{behind}\n" + writer_tails(config)
    )


def writer_tails(config: SparkSinkConfig) -> str:
    """The last lines every writer process of ``config``'s warehouse logged."""
    return "\n".join(
        f"--- {log.name} (last lines)\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        for log in sorted(writer_logs(config).glob("*.log"))
    )


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(60)


def test_three_processes_write_one_table_concurrently(
    kafka_cluster_handle: KafkaCluster,
    topic_factory: Callable[..., str],
    sink_config: SparkSinkConfig,
) -> None:
    process_formats(sink_config, "iceberg", leg=kafka_cluster_handle)
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(6)
    group = f"g-{topic}"
    # Nobody is killed here: a session timeout that three JVMs starting on two cores do not
    # outlast (the default of these tests is 1.5 s) only churns the group.
    writers = [
        start_writer(kafka, group, topic, f"w-{i}", sink_config, "--session-timeout-ms", "6000")
        for i in range(3)
    ]
    try:
        # Paced production starts once a writer stored rows (the JVMs start slowly on a
        # busy machine) and goes on while the group rebalances around the others.
        produced = first_rows_stored(kafka, topic, 6, sink_config)
        produced |= produce_tracked(kafka, topic, 4800, 6, pause_every=60, pause_s=0.2)
        ends = {p: max(o for q, o in produced if q == p) for p in range(6)}
        wait_for_table(sink_config, topic, ends, timeout_s=180)
        assert all(w.poll() is None for w in writers), "a writer died"
    finally:
        stop(writers)
    assert commits_of(sink_config, topic) > 1  # several batches landed in one table
    assert key_counts(sink_config, sink_config.table_for(topic)) == Counter(produced)


def commits_of(config: SparkSinkConfig, topic: str) -> int:
    """How many batches were committed into the topic's table."""
    root = table_root(config, config.table_for(topic))
    if config.table_format == "parquet":
        return len({p.name.split("+")[1] for p in root.glob("date=*/part-*.parquet")})
    history = (
        SparkTableSink(config)
        .open()
        .sql(
            f"SELECT * FROM {table_identifier(config, config.table_for(topic))}.snapshots"
            if config.table_format == "iceberg"
            else f"DESCRIBE HISTORY delta.`{root.as_posix()}`"
        )
    )
    return int(history.count()) - (1 if config.table_format == "delta" else 0)  # CREATE


def test_kill_between_table_write_and_commit_then_restart(
    kafka_cluster_handle: KafkaCluster,
    topic_factory: Callable[..., str],
    sink_config: SparkSinkConfig,
) -> None:
    process_formats(sink_config, "iceberg", leg=kafka_cluster_handle)
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(2)
    group = f"g-{topic}"
    produced = produce_tracked(kafka, topic, 600, 2)
    table = sink_config.table_for(topic)
    # A reader polls the table throughout (lake formats: parquet readers may see a dead
    # writer's files until the next publish rolls them back, as the README says).
    with contextlib.ExitStack() as polling:
        reader = None
        if sink_config.table_format != "parquet":
            reader = polling.enter_context(PollingReader(sink_config, table))
        dying = start_writer(kafka, group, topic, "w-0", sink_config, "--die-after-write")
        assert dying.wait(120) == -signal.SIGKILL
        written = table_offsets(sink_config, topic)
        assert written  # the table holds rows ...
        assert all(
            offset < 0 for offset in committed(kafka, group, topic, 2).values()
        )  # ... Kafka no commit
        produced |= produce_tracked(kafka, topic, 400, 2)
        restarted = start_writer(kafka, group, topic, "w-0", sink_config)
        try:
            ends = {p: max(o for q, o in produced if q == p) for p in range(2)}
            wait_for_table(sink_config, topic, ends, timeout_s=120)
        finally:
            stop([restarted])
    assert key_counts(sink_config, table) == Counter(produced)
    if reader is not None:
        assert reader.error is None
        assert reader.reads > 1
        assert reader.most_copies <= 1  # no read ever saw a (partition, offset) twice
        assert not reader.count_went_down


def group_size(kafka: str, group: str) -> int:
    """Members of ``group`` as the broker sees them (DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": kafka})
    return len(admin.describe_consumer_groups([group])[group].result(timeout=30).members)


def test_a_member_paused_past_its_session_timeout_adds_no_duplicates(
    kafka_cluster_handle: KafkaCluster,
    topic_factory: Callable[..., str],
    sink_config: SparkSinkConfig,
) -> None:
    process_formats(sink_config, "iceberg")
    if kafka_cluster_handle.kind is ClusterKind.EMBEDDED:
        pytest.skip("the embedded broker has no DescribeGroups to see the paused member go")
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = topic_factory(4)
    group = f"g-{topic}"
    writers = [start_writer(kafka, group, topic, f"w-{i}", sink_config) for i in range(2)]
    paused = writers[0]
    try:
        produced = first_rows_stored(kafka, topic, 4, sink_config)
        assert wait_until(lambda: group_size(kafka, group) == 2, timeout_s=120), (
            f"members: {group_size(kafka, group)}; writers' exit codes: "
            f"{[w.poll() for w in writers]}\n{writer_tails(sink_config)}"
        )
        # Paused while records keep coming: it is likely to hold batches it read, or to be
        # inside a commit.
        with ThreadPoolExecutor(1) as producing:
            more = producing.submit(
                produce_tracked, kafka, topic, 1200, 4, pause_every=100, pause_s=0.1
            )
            paused.send_signal(signal.SIGSTOP)
            produced |= more.result(120)
        # Its session (1.5 s) expires and the broker drops it; the other member is given its
        # partitions. (It can write them only once the paused one lets go of a partition it
        # was committing: a commit holds its partitions' locks.)
        assert wait_until(lambda: group_size(kafka, group) == 1, timeout_s=60), writer_tails(
            sink_config
        )
        paused.send_signal(signal.SIGCONT)  # the zombie wakes up with what it held
        produced |= produce_tracked(kafka, topic, 400, 4)
        ends = {p: max(o for q, o in produced if q == p) for p in range(4)}
        wait_for_table(sink_config, topic, ends, timeout_s=180)
    finally:
        paused.send_signal(signal.SIGCONT)
        stop(writers)
    assert key_counts(sink_config, sink_config.table_for(topic)) == Counter(produced)


def test_a_delta_version_another_process_created_is_refused_not_replaced(
    lake_session: Any, tmp_path: Path
) -> None:
    # Delta's own store for local paths checks that a version is absent, then renames onto
    # it (which replaces): two processes committing one version could both succeed.
    assert lake_session.conf.get(LOG_STORE_KEY) == LOG_STORE_CLASS
    jvm, hadoop = lake_session._jvm, lake_session._jsc.hadoopConfiguration()
    store = jvm.kafkaautoscaler.delta.ExclusiveLocalLogStore(hadoop)
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    version = log_dir / f"{7:020d}.json"

    def commit(action: str) -> None:
        actions = jvm.java.util.ArrayList()
        actions.add(action)
        store.write(
            jvm.org.apache.hadoop.fs.Path(version.as_uri()), actions.iterator(), False, hadoop
        )

    commit('{"commitInfo":{"writer":"first"}}')
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        commit('{"commitInfo":{"writer":"second"}}')
    assert version.read_text() == '{"commitInfo":{"writer":"first"}}\n'
    assert [path.name for path in log_dir.iterdir()] == [version.name]  # nothing staged left


class _VersionWriter:
    """Commits version 7 of a bare ``_delta_log`` through our store, in a thread of its own
    (the store may hold the write until version 6's checksum exists)."""

    def __init__(self, session: Any, log_dir: Path, checksum_wait_ms: int) -> None:
        jvm = session._jvm
        self._jvm = jvm
        self._hadoop = jvm.org.apache.hadoop.conf.Configuration(session._jsc.hadoopConfiguration())
        self._hadoop.setLong(
            jvm.kafkaautoscaler.delta.ExclusiveLocalLogStore.CHECKSUM_WAIT_KEY, checksum_wait_ms
        )
        self._store = jvm.kafkaautoscaler.delta.ExclusiveLocalLogStore(self._hadoop)
        self.log_dir = log_dir
        log_dir.mkdir()
        self._pool = ThreadPoolExecutor(max_workers=1)

    def version(self, number: int, extension: str = "json") -> Path:
        return self.log_dir / f"{number:020d}.{extension}"

    def commit_7(self) -> Any:
        """Starts the write; its future tells whether version 6's checksum existed when the
        write returned."""

        def write() -> bool:
            actions = self._jvm.java.util.ArrayList()
            actions.add('{"commitInfo":{}}')
            target = self._jvm.org.apache.hadoop.fs.Path(self.version(7).as_uri())
            self._store.write(target, actions.iterator(), False, self._hadoop)
            return self.version(6, "crc").exists()

        return self._pool.submit(write)

    def close(self) -> None:
        self.version(6, "crc").touch()  # lets a write still waiting go
        self._pool.shutdown(wait=True)


@pytest.fixture
def version_writer(lake_session: Any, tmp_path: Path) -> Iterator[_VersionWriter]:
    writer = _VersionWriter(lake_session, tmp_path / "_delta_log", checksum_wait_ms=600_000)
    writer.version(5, "crc").write_text("{}\n")  # checksums are being written
    writer.version(6).write_text("{}\n")  # version 6 just committed, its checksum not yet
    yield writer
    writer.close()


def test_a_commit_returns_once_the_previous_versions_checksum_is_written(
    version_writer: _VersionWriter,
) -> None:
    # Delta reads N-1.crc right after committing N when others committed in between; missing,
    # it rebuilds the whole table state in Spark jobs. The previous writer writes it just
    # after its own commit returns: the store waits for it while that version is fresh.
    pending = version_writer.commit_7()
    assert wait_until(version_writer.version(7).exists)  # committed (linked) ...
    version_writer.version(6, "crc").write_text("{}\n")
    assert pending.result(timeout=60)  # ... and returned only after the checksum appeared


def test_a_checksum_is_not_awaited_for_an_old_version(version_writer: _VersionWriter) -> None:
    an_hour_ago = version_writer.version(6).stat().st_mtime - 3600
    os.utime(version_writer.version(6), (an_hour_ago, an_hour_ago))
    assert not version_writer.commit_7().result(timeout=60)  # 600 s, had it waited


def test_a_checksum_is_not_awaited_where_none_are_written(
    version_writer: _VersionWriter,
) -> None:
    version_writer.version(5, "crc").unlink()  # the user turned Delta's checksums off
    assert not version_writer.commit_7().result(timeout=60)
    assert version_writer.version(7).exists()


def test_resume_offsets_come_from_the_table(sink_config: SparkSinkConfig) -> None:
    sink = SparkTableSink(sink_config)
    records = [Record("t", p, o, 0, None, b"v") for p in (0, 1) for o in range(10, 20)]
    sink.write_blocking("t", records_table(records))
    sink.write_blocking("t", records_table(records[:5]))  # a re-delivered prefix adds nothing
    wanted = [TopicPartition("t", p) for p in (0, 1, 2)]
    assert asyncio.run(sink.resume_offsets(wanted)) == {
        TopicPartition("t", 0): 20,
        TopicPartition("t", 1): 20,
    }
    assert sink.rows_skipped == 5


def test_the_next_owner_resumes_from_the_last_writers_record_unless_it_died_mid_commit(
    sink_config: SparkSinkConfig,
) -> None:
    if sink_config.table_format == "parquet":
        pytest.skip("the parquet format resumes from its ledger")
    first = SparkTableSink(sink_config)
    wanted = [TopicPartition("t", p) for p in (0, 1, 2)]
    asyncio.run(first.resume_offsets(wanted))
    records = [Record("t", p, o, 0, None, b"v") for p in (0, 1) for o in range(10, 20)]
    first.write_blocking("t", records_table(records))
    expected = {TopicPartition("t", 0): 20, TopicPartition("t", 1): 20}

    clean = SparkTableSink(sink_config)  # partition 2 has no writer's record: not asked
    assert asyncio.run(clean.resume_offsets(wanted[:2])) == expected
    assert clean._lake is not None and clean._lake.history_reads == 0

    # The last writer marked partition 1 and was killed before its commit returned.
    fence = PartitionFence(sink_config.warehouse_path / FENCE_DIR / sink_config.database)
    target = WriteTarget("t", "t", sink_config.dead_letter_table)
    with fence.locked(target, [1]):
        fence.write_stored(target, {1: None})
    after_kill = SparkTableSink(sink_config)
    assert asyncio.run(after_kill.resume_offsets(wanted)) == expected
    assert after_kill._lake is not None and after_kill._lake.history_reads > 0

    # The same topic into another table of the same database: that table's own offsets.
    other_config = dataclasses.replace(sink_config, table_template="{topic}_v2")
    other = SparkTableSink(other_config)
    assert asyncio.run(other.resume_offsets(wanted)) == {}
    other.write_blocking("t", records_table(records[:3]))
    assert key_counts(other_config, other_config.table_for("t")) == Counter(
        {(0, o): 1 for o in range(10, 13)}
    )


def test_two_pipelines_write_one_topic_into_two_tables_without_fencing_each_other(
    sink_config: SparkSinkConfig,
) -> None:
    if sink_config.table_format == "parquet":
        pytest.skip("the parquet format resumes from its ledger")
    archive_config = dataclasses.replace(sink_config, table_template="{topic}_archive")
    wanted = [TopicPartition("t", p) for p in (0, 1)]
    records = [
        Record("t", p, o, 0, None, POISON if o == 12 else b"v")
        for p in (0, 1)
        for o in range(10, 20)
    ]
    orders, archive = SparkTableSink(sink_config), SparkTableSink(archive_config)
    asyncio.run(orders.resume_offsets(wanted))
    asyncio.run(archive.resume_offsets(wanted))  # the same partitions, claimed for its table
    orders.write_blocking("t", records_table(records))
    assert orders.rows_fenced == 0
    # The archive pipeline restarts; with no record of its own it reads the history, where
    # the shared dead-letter table holds the orders pipeline's dead letters, not its own.
    restarted = SparkTableSink(archive_config)
    assert asyncio.run(restarted.resume_offsets(wanted)) == {}
    assert restarted._lake is not None and restarted._lake.history_reads > 0
    restarted.write_blocking("t", records_table(records))
    landed = Counter({(p, o): 1 for p in (0, 1) for o in range(10, 20) if o != 12})
    assert key_counts(sink_config, "t") == landed
    assert key_counts(archive_config, "t_archive") == landed
    assert key_counts(sink_config, "dead_letters") == Counter({(0, 12): 2, (1, 12): 2})


def test_the_delta_log_read_directly_holds_the_metadata_describe_history_shows(
    sink_config: SparkSinkConfig,
) -> None:
    if sink_config.table_format != "delta":
        pytest.skip("reads a Delta log")
    sink = SparkTableSink(sink_config)
    session = sink.open()
    root = table_root(sink_config, "t")
    for offset in range(3):  # offset-carrying commits of the sink
        sink.write_blocking("t", records_table([Record("t", 0, offset, 0, None, b"v")]))
    session.sql(f"ALTER TABLE delta.`{root}` SET TBLPROPERTIES (delta.checkpointInterval = 2)")
    rows = session.sql(f"SELECT * FROM delta.`{root}` LIMIT 1")
    rows.write.format("delta").mode("append").save(str(root))  # a commit without metadata
    rows.write.format("delta").mode("append").option("userMetadata", "{}").save(str(root))
    assert any(path.name.endswith(".checkpoint.parquet") for path in (root / LOG_DIR).iterdir())
    history = session.sql(f"DESCRIBE HISTORY delta.`{root}`").select("userMetadata").collect()
    described = [row["userMetadata"] for row in history]
    read = commit_metadata(root)
    assert len(read) == len(described) == 7  # create, 3 appends, properties, 2 appends
    assert sorted(read, key=str) == sorted(described, key=str)
    assert stored_offsets(read, "t") == {0: 2}


def test_a_commit_read_under_a_replaced_claim_is_refused(
    sink_config: SparkSinkConfig,
) -> None:
    # Delta: our log store checks the claims as it links the version; Iceberg: our JDBC
    # catalog as it swaps the metadata pointer.
    if sink_config.table_format == "parquet":
        pytest.skip("the offset ledger is fenced by the partitions' locks alone")
    sink = SparkTableSink(sink_config)
    session = sink.open()
    sink.write_blocking("t", records_table([Record("t", 0, 0, 0, None, b"v")]))  # claims 0
    fence = PartitionFence(sink_config.warehouse_path / FENCE_DIR / sink_config.database)
    directory = fence.directory(WriteTarget("t", "t", sink_config.dead_letter_table))
    current = (directory / "0.owner").read_text()
    name = table_identifier(sink_config, "t")
    rows = session.sql(f"SELECT * FROM {name}")

    def append(token: str) -> None:
        metadata = encode_offsets("t", {0: 9}, claims={0: token}, fence=str(directory))
        if sink_config.table_format == "delta":
            root = table_root(sink_config, "t")
            writer = rows.write.format("delta").mode("append").option("userMetadata", metadata)
            writer.save(str(root))
        else:
            rows.writeTo(name).option(f"snapshot-property.{SUMMARY_KEY}", metadata).append()

    before = commits_of(sink_config, "t")
    with pytest.raises(Exception, match="claimed by another writer") as refused:
        append("an-earlier-claim")
    assert "commit refused" in str(refused.value)
    assert commits_of(sink_config, "t") == before  # nothing landed
    gates = session._jvm.kafkaautoscaler.fence.PartitionGates
    assert gates.inUse() == 0  # a refused commit lets go of its gates
    append(current)
    assert commits_of(sink_config, "t") == before + 1
    assert key_counts(sink_config, "t") == Counter({(0, 0): 2})
    assert gates.inUse() == 0  # and a landed one: no gate is kept once unused


@pytest.mark.parametrize(("value_size", "rows", "tasks"), [(100, 2_000, 1), (1_000, 5_000, 2)])
@pytest.mark.parametrize("chunks", [1, 24])
def test_a_small_batch_is_one_spark_task_and_a_large_one_two(
    lake_session: Any, value_size: int, rows: int, tasks: int, chunks: int
) -> None:
    # A batch arrives in a chunk per fetched partition; Spark would make a task of each.
    records = [Record("t", o % 7, o, 0, None, b"v" * value_size) for o in range(rows)]
    whole = records_table(records)
    step = -(-rows // chunks)
    table = pa.concat_tables(whole.slice(start, step) for start in range(0, rows, step))
    assert table.column("offset").num_chunks == chunks
    frame = SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse"))._frame(
        lake_session, table
    )
    assert frame.rdd.getNumPartitions() == tasks
    offsets = sorted(row["offset"] for row in frame.select("offset").collect())
    assert offsets == list(range(rows))


def test_a_batch_of_dead_letters_only_is_written_once_even_when_read_again(
    sink_config: SparkSinkConfig,
) -> None:
    poison = [Record("t", 0, o, 0, None, POISON) for o in range(5)]
    SparkTableSink(sink_config).write_blocking("t", records_table(poison))
    assert key_counts(sink_config, "dead_letters") == Counter((0, o) for o in range(5))
    assert key_counts(sink_config, "t") == Counter()
    # A restarted writer that reads the batch again (its Kafka commit was lost).
    again = SparkTableSink(sink_config)
    asyncio.run(again.resume_offsets([TopicPartition("t", 0)]))
    again.write_blocking("t", records_table(poison))
    assert key_counts(sink_config, "dead_letters") == Counter((0, o) for o in range(5))


def stage_at_once(sink: SparkTableSink, topic: str, batches: list[list[Record]]) -> list[Any]:
    """Stage every batch at the same time, each in its own thread, as the consumer does."""
    with ThreadPoolExecutor(len(batches)) as pool:
        return list(
            pool.map(lambda batch: sink.stage_blocking(topic, records_table(batch)), batches)
        )


def numbered_batches(topic: str, count: int, value: bytes = b"ok") -> list[list[Record]]:
    """``count`` batches of 50 consecutive offsets on each of 3 partitions."""
    return [
        [Record(topic, p, b * 50 + o, 0, b"k", value) for p in range(3) for o in range(50)]
        for b in range(count)
    ]


def test_a_database_name_holds_one_warehouse_per_spark_session(
    sink_config: SparkSinkConfig, tmp_path: Path
) -> None:
    # The session's catalog knows the first warehouse's table by this name: a second sink
    # writing there would put its rows in the other warehouse's table.
    [batch] = numbered_batches("events", 1)
    SparkTableSink(sink_config).write_blocking("events", records_table(batch))
    elsewhere = dataclasses.replace(sink_config, warehouse=str(tmp_path / "elsewhere"))
    with pytest.raises(ConfigError, match=f"database {sink_config.database}: .*elsewhere"):
        SparkTableSink(elsewhere).write_blocking("events", records_table(batch))
    assert key_counts(sink_config, "events") == Counter((r.partition, r.offset) for r in batch)
    assert key_counts(elsewhere, "events") == Counter()


def test_a_warehouse_named_through_dot_dots_is_its_own_place(
    sink_config: SparkSinkConfig, tmp_path: Path
) -> None:
    # Spark reports the table's place normalized: the check above must not refuse it.
    winding = str(tmp_path / "elsewhere" / ".." / "warehouse")
    config = dataclasses.replace(sink_config, warehouse=winding)
    [batch] = numbered_batches("events", 1)
    SparkTableSink(config).write_blocking("events", records_table(batch))
    assert key_counts(sink_config, "events") == Counter((r.partition, r.offset) for r in batch)


def test_batches_staged_at_once_publish_in_order_and_discarded_ones_leave_nothing(
    sink_config: SparkSinkConfig,
) -> None:
    sink = SparkTableSink(sink_config)
    batches = numbered_batches("events", 3)
    staged = stage_at_once(sink, "events", batches)
    assert key_counts(sink_config, "events") == Counter()  # staged is not visible
    for batch in staged[:2]:
        asyncio.run(sink.publish(batch))
    asyncio.run(sink.discard(staged[2]))
    expected = Counter((r.partition, r.offset) for batch in batches[:2] for r in batch)
    assert key_counts(sink_config, "events") == expected
    assert table_offsets(sink_config, "events") == {0: 99, 1: 99, 2: 99}
    assert not sink._staging.exists() or not any(sink._staging.iterdir())
    with pytest.raises(TypeError, match="expected a StagedBatch"):
        asyncio.run(sink.publish(object()))


# Data files pyarrow wrote for the sink (delta_files, iceberg_files); Spark names its own
# part-00000-<uuid>-c000.snappy.parquet (Delta) and 00000-0-<uuid>-0-00001.parquet (Iceberg).
PYARROW_FILE = re.compile(
    r"/(part-)?[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}(\.snappy)?\.parquet$"
)


def table_file_paths(session: Any, config: SparkSinkConfig, table: str) -> list[str]:
    """The data files the Delta or Iceberg table's current version reads."""
    if config.table_format == "delta":
        return [str(path) for path in DeltaTable(str(table_root(config, table))).file_uris()]
    identifier = table_identifier(config, table)
    query = f"SELECT file_path FROM {identifier}.files"
    return [row["file_path"] for row in session.sql(query).collect()]


def write_through_connect(
    sink_config: SparkSinkConfig,
    *,
    file_appends: bool,
    then: Callable[[Any, SparkSinkConfig], None] | None = None,
) -> tuple[list[list[Record]], list[str]]:
    """Three batches of ``events`` written through a Connect server (one, then two staged
    at once), then ``then(session, config)``; the batches and the data files the table then
    reads."""
    warehouse = Path(sink_config.warehouse)
    catalog = sink_config.iceberg_catalog
    with SparkConnectServer(
        warehouse, iceberg_catalog=catalog, file_appends=file_appends
    ) as server:
        config = dataclasses.replace(sink_config, spark_remote=server.url)
        sink = SparkTableSink(config)
        batches = numbered_batches("events", 3)
        sink.write_blocking("events", records_table(batches[0]))
        for staged in stage_at_once(sink, "events", batches[1:]):  # one session, two threads
            sink.publish_blocking(staged)
        remote = sink.open()
        try:
            assert remote.table(table_identifier(config, "events")).count() == 450
            lake = config.table_format != "parquet"
            files = table_file_paths(remote, config, "events") if lake else []
            if then is not None:
                then(remote, config)
        finally:
            remote.stop()
    expected = Counter((r.partition, r.offset) for batch in batches for r in batch)
    assert key_counts(sink_config, "events") == expected
    assert table_offsets(sink_config, "events") == {0: 149, 1: 149, 2: 149}
    return batches, files


def test_spark_connect_writes_tables_the_local_session_reads(
    sink_config: SparkSinkConfig,
) -> None:
    """Delta and Iceberg batches: pyarrow's files, committed by the server's plugin."""
    process_formats(sink_config, "iceberg")
    then = refuses_files_it_cannot_see if sink_config.table_format == "delta" else None
    _, files = write_through_connect(sink_config, file_appends=True, then=then)
    if sink_config.table_format != "parquet":
        assert len(files) == 3 and all(PYARROW_FILE.search(path) for path in files), files


def refuses_files_it_cannot_see(session: Any, config: SparkSinkConfig) -> None:
    """A commit naming a file the server cannot see (a client on another file system) is
    refused, and nothing is committed."""
    root = table_root(config, "events")
    versions = len(list((root / LOG_DIR).glob("*.json")))
    unseen = DataFile("date=2026-11-26/part-unseen.snappy.parquet", 1, "{}")
    committer = DeltaFileCommitter()
    assert committer.refusal(session, root) is None
    with pytest.raises(FilesRefused) as refused:
        committer.commit(session, root, date(2026, 11, 26), [unseen], "{}")
    assert refused_class(refused.value.__cause__) == UNSEEN_FILE_REFUSED
    assert "does not see the data file" in str(refused.value)
    assert len(list((root / LOG_DIR).glob("*.json"))) == versions
    # Nor would it see the next one: Spark writes that table's files from then on.
    assert "does not see the data file" in (committer.refusal(session, root) or "")


def test_a_connect_server_without_the_plugin_has_spark_write_the_files(
    sink_config: SparkSinkConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """As a user's own Connect server: the missing plugin is said once, and Spark writes."""
    if sink_config.table_format != "delta":
        pytest.skip("the route is shared by both lake formats; one server start is enough")
    with caplog.at_level(logging.WARNING, logger="consumer_sdk.lake.jvm_appends"):
        _, files = write_through_connect(sink_config, file_appends=False)
    assert files and not any(PYARROW_FILE.search(path) for path in files), files
    said = [r.getMessage() for r in caplog.records if "does not load" in r.getMessage()]
    assert len(said) == 1 and "spark.connect.extensions.command.classes" in said[0], said


CONNECTED_CHILD = """
import sys
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import spark_session
session = spark_session(SparkSinkConfig(warehouse=sys.argv[1], spark_remote=sys.argv[2]))
session.sql("SELECT 1").collect()
print("ready", flush=True)
sys.stdin.readline()  # exits once told, after its server has stopped
"""


def test_a_process_whose_connect_server_is_gone_still_exits(tmp_path: Path) -> None:
    """pyspark's Connect client would ask the stopped server, at exit, to drop its ML cache
    and retry for about ten minutes; the sink's session does not ask."""
    with SparkConnectServer(tmp_path) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CONNECTED_CHILD, str(tmp_path), server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
    child.stdin.write("exit\n")
    child.stdin.flush()
    try:
        assert child.wait(timeout=120) == 0
    finally:
        child.kill()


class RefusingSession:
    """A session without a format's jars: every statement fails as Spark's would."""

    def __init__(
        self, message: str = "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta."
    ) -> None:
        self.message = message

    def sql(self, statement: str) -> None:
        raise RuntimeError(self.message)


ORPHANED = "(java.lang.IllegalStateException) Operation was orphaned because of an internal error."


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
@pytest.mark.parametrize(
    ("spark_says", "raised"),
    [
        ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta.", ConfigError),
        # A Spark Connect link reset once made a consumer exit for good, blaming the jars.
        (ORPHANED, RuntimeError),
    ],
    ids=["jars-missing", "link-reset"],
)
def test_only_a_missing_format_is_a_configuration_error_when_a_table_cannot_be_made(
    tmp_path: Path, table_format: str, spark_says: str, raised: type[Exception]
) -> None:
    root = tmp_path / "db.db" / "t"
    root.mkdir(parents=True)
    (root.parent / "_tables").mkdir()
    (root.parent / "_tables" / "t.json").write_text('{"columns": "`a` INT"}')
    with pytest.raises(raised) as failure:
        create_table(RefusingSession(spark_says), "db", "t", root, table_format)
    assert type(failure.value) is raised
    if raised is ConfigError:
        assert f"table_format {table_format} needs" in str(failure.value)


def test_prepare_creates_each_topics_table_before_any_batch(sink_config: SparkSinkConfig) -> None:
    sink = SparkTableSink(sink_config)
    asyncio.run(sink.start())
    asyncio.run(sink.prepare(["orders", "payments"]))
    for topic in ("orders", "payments"):
        assert key_counts(sink_config, sink_config.table_for(topic)) == Counter()
    sink.write_blocking("orders", records_table([Record("orders", 0, 7, 0, None, b"v")]))
    assert key_counts(sink_config, "orders") == Counter({(0, 7): 1})


def test_compaction_rewrites_small_batches_into_few_files_and_keeps_every_row(
    sink_config: SparkSinkConfig,
) -> None:
    if sink_config.table_format == "parquet":
        pytest.skip("parquet tables with the offset ledger are not compacted")
    sink = SparkTableSink(sink_config)
    # Two small files are enough (Iceberg's own default leaves fewer than 5 as they are).
    batches = numbered_batches("events", 2)
    for batch in batches:
        sink.write_blocking("events", records_table(batch))
    before = key_counts(sink_config, "events")
    session = sink.open()
    done = compact(session, sink_config, "events")
    assert done.files_before >= len(batches)
    assert done.files_after == 1  # one date partition, a few KiB of rows
    assert data_files(session, sink_config, "events") == 1
    assert (
        key_counts(sink_config, "events")
        == before
        == Counter((r.partition, r.offset) for batch in batches for r in batch)
    )
    assert table_offsets(sink_config, "events") == {0: 99, 1: 99, 2: 99}


def test_one_compaction_of_a_table_at_a_time_across_writers(tmp_path: Path) -> None:
    config = warehouse_config(tmp_path, "delta")
    descriptor = descriptor_path(table_root(config, "t"), "delta")
    descriptor.parent.mkdir(parents=True)
    descriptor.write_text('{"columns": "`a` INT", "format": "delta"}')
    with compacting_alone(config, "t") as first, compacting_alone(config, "t") as second:
        assert (first, second) == (True, False)  # a lock per open file, as another process's
    with compacting_alone(config, "t") as again:
        assert again


def test_the_sink_compacts_a_table_beside_its_appends_every_n_commits(
    sink_config: SparkSinkConfig,
) -> None:
    if sink_config.table_format == "parquet":
        pytest.skip("parquet tables with the offset ledger are not compacted")
    config = dataclasses.replace(sink_config, compact_every_commits=4)
    sink = SparkTableSink(config)
    batches = numbered_batches("events", 6)
    for batch in batches:
        sink.write_blocking("events", records_table(batch))
    compaction = sink._lake.compaction if sink._lake is not None else None
    assert compaction is not None
    compaction.wait()
    # One compaction, started by the 4th commit; the appends did not wait for it, so it
    # found 4 to 6 files, and up to 2 were appended while or after it ran.
    [done] = compaction.compactions
    assert done.table == "events" and 4 <= done.files_before <= 6
    assert 1 <= done.files_after <= 3
    assert 1 <= data_files(sink.open(), config, "events") <= 3
    expected = Counter((r.partition, r.offset) for batch in batches for r in batch)
    assert key_counts(config, "events") == expected
    assert table_offsets(config, "events") == {0: 299, 1: 299, 2: 299}
    # The next owner resumes where the appends ended, compaction commits in between.
    again = SparkTableSink(config)
    wanted = [TopicPartition("events", p) for p in range(3)]
    assert asyncio.run(again.resume_offsets(wanted)) == dict.fromkeys(wanted, 300)
    asyncio.run(sink.close())


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"warehouse": ""}, "warehouse"),
        ({"warehouse": "s3://bucket/lake"}, "warehouse"),
        ({"database": "Bad-Name"}, "database"),
        ({"table_template": "fixed"}, "table_template"),
        ({"value_format": "avro"}, "value_format"),
        ({"value_format": "json", "json_schema": "id"}, "json_schema"),
        ({"value_format": "json", "json_schema": "m MAP<INT, STRING>"}, "json_schema"),
        ({"json_epoch_unit": "minutes"}, "json_epoch_unit"),
        ({"table_format": "orc"}, "table_format"),
        ({"file_writer": "pandas"}, "file_writer"),
        ({"spark_remote": "http://x:1"}, "spark_remote"),
        ({"master": "mesos"}, "master"),
        ({"tables": {"orders": "Bad Table"}}, "tables"),
        ({"iceberg_keep_snapshots_secs": 30}, "iceberg_keep_snapshots_secs"),
        ({"compact_every_commits": -1}, "compact_every_commits"),
        ({"compact_every_commits": 5, "table_format": "parquet"}, "compact_every_commits"),
        ({"iceberg_keep_snapshots_secs": float("nan")}, "iceberg_keep_snapshots_secs"),
    ],
)
def test_bad_sink_config_names_the_field(overrides: dict[str, Any], field: str) -> None:
    values: dict[str, Any] = {"warehouse": "/tmp/w", **overrides}
    with pytest.raises(ConfigError, match=field):
        SparkSinkConfig(**values)


def test_sink_config_from_env() -> None:
    config = SparkSinkConfig.from_env(
        {
            "AUTOSCALER_SPARK_WAREHOUSE": "/tmp/w",
            "AUTOSCALER_SPARK_TABLES": "orders.v2=orders,clicks=web_clicks",
            "AUTOSCALER_SPARK_CONF": "spark.executor.memory=2g",
            "AUTOSCALER_SPARK_VALUE_FORMAT": "json",
            "AUTOSCALER_SPARK_JSON_SCHEMA": "id BIGINT, tags MAP<STRING, ARRAY<DATE>>",
            "AUTOSCALER_SPARK_JSON_EPOCH_UNIT": "s",
        }
    )
    assert config.table_for("orders.v2") == "orders"
    assert config.table_for("page-views.eu") == "page_views_eu"
    assert dict(config.spark_conf) == {"spark.executor.memory": "2g"}
    assert [f.name for f in config.json_fields()] == ["id", "tags"]
    assert config.json_epoch_unit == "s"
    with pytest.raises(ConfigError, match="AUTOSCALER_SPARK_TABLES"):
        SparkSinkConfig.from_env(
            {"AUTOSCALER_SPARK_WAREHOUSE": "/w", "AUTOSCALER_SPARK_TABLES": "x"}
        )
    with pytest.raises(ConfigError, match="AUTOSCALER_SPARK_WAREHOUSE"):
        SparkSinkConfig.from_env({})


@contextlib.contextmanager
def connect_sink_after_first(
    tmp_path: Path, batches: list[list[Record]]
) -> Iterator[tuple[SparkConnectServer, SparkSinkConfig, SparkTableSink]]:
    """A sink on a Spark Connect server of its own, once it wrote ``batches[0]``."""
    warehouse = tmp_path / "warehouse"
    with SparkConnectServer(warehouse) as server:
        config = SparkSinkConfig(warehouse=str(warehouse), spark_remote=server.url)
        sink = SparkTableSink(config)
        asyncio.run(sink.prepare(["events"]))
        sink.write_blocking("events", records_table(batches[0]))
        yield server, config, sink


def test_a_write_to_a_connect_server_that_is_gone_fails_within_seconds(tmp_path: Path) -> None:
    """Found by the soak: a consumer stopped while its Connect server was away did not exit
    (a write, in a thread, retried the server for the client's default ten minutes, and a
    process waits for its threads). A call now gives up after a few attempts; the sink's
    own retries, which a stop ends, take over. With the default this test would time out."""
    batches = numbered_batches("events", 2)
    with connect_sink_after_first(tmp_path, batches) as (server, config, sink):
        policies = sink.open().client.get_retry_policies()
        assert [p.max_retries for p in policies] == [CONNECT_CALL_RETRIES]
        server.kill()
        with pytest.raises(Exception) as gone:
            sink.write_blocking("events", records_table(batches[1]))
        assert not session_lost(gone.value)  # unreachable, not a lost session
    expected = Counter((r.partition, r.offset) for r in batches[0])
    assert key_counts(config, "events") == expected  # the failed write landed nothing


def test_a_sink_outlives_a_restart_of_its_connect_server(tmp_path: Path) -> None:
    """Found by the soak (benchmarks/soak.py): once the server restarted, every write of a
    running consumer failed with NO_ACTIVE_SESSION for as long as it lived. The attempt that
    finds the session gone fails; the next one (the consumer retries) writes."""
    batches = numbered_batches("events", 3)
    with connect_sink_after_first(tmp_path, batches) as (server, config, sink):
        server.kill()
        server.start()  # a new server on the same port: its catalog is empty
        with pytest.raises(Exception) as lost:
            sink.write_blocking("events", records_table(batches[1]))
        assert session_lost(lost.value)
        for batch in batches[1:]:
            sink.write_blocking("events", records_table(batch))
        assert asyncio.run(sink.resume_offsets([TopicPartition("events", 0)])) == {
            TopicPartition("events", 0): 150
        }
    expected = Counter((r.partition, r.offset) for batch in batches for r in batch)
    assert key_counts(config, "events") == expected  # once each: the failed attempt wrote none
