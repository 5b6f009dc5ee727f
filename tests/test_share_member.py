"""Share-group members of the SDK (KIP-932): records are written, then acknowledged, and the
Delta table holds each (topic, partition, offset) once however often the group delivers it:
the merge alone, concurrent merges, and members killed with -9 between a write and its
acknowledgement on Apache Kafka (the embedded broker has no share groups)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from benchmarks.support.lake_readers import key_counts, warehouse_config
from benchmarks.support.share_members import found_already_there, read_from_the_start
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.health import process_problems
from consumer_sdk.lake.merge_once import is_write_conflict, merge_once, merge_statement
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink
from consumer_sdk.share import ShareMember
from consumer_sdk.share import member as member_module
from consumer_sdk.share.delivery import DEFAULT_LIMIT
from consumer_sdk.share.member import by_topic, client_settings
from consumer_sdk.sink import Record, records_table
from contract.local_ports import free_port
from contract.settings import ConfigError
from local_kafka.apache_kafka import ApacheKafka
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import wait_until

ROOT = Path(__file__).parent.parent
POISON = b"\xff\xfe not utf-8"


def share_config(**overrides: Any) -> ConsumerConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": "localhost:9092",
        "group": "g",
        "topics": ("t",),
        "capacity": 10.0,
        "member_identity": "m-0",
        "group_type": "share",
    }
    return ConsumerConfig(**(values | overrides))


# The merge statement and its retries -------------------------------------------------------
def test_the_merge_bounds_the_target_by_each_partitions_offsets_and_matches_the_keys() -> None:
    statement = merge_statement("db.t", "v", {1: (5, 9), 0: (0, 3)}, with_topic="it's")
    assert "MERGE INTO db.t t USING v s" in statement
    assert (
        "(t.`partition` = 0 AND t.`offset` BETWEEN 0 AND 3) OR "
        "(t.`partition` = 1 AND t.`offset` BETWEEN 5 AND 9)"
    ) in statement
    assert "t.`topic` = 'it\\'s'" in statement
    assert "t.`partition` = s.`partition` AND t.`offset` = s.`offset`" in statement
    assert statement.endswith("WHEN NOT MATCHED THEN INSERT *")
    with pytest.raises(ValueError, match="offset ranges"):
        merge_statement("db.t", "v", {}, with_topic="t")
    # Iceberg: a matched clause that never acts, so that the commit is checked.
    iceberg = merge_statement("c.db.t", "v", {0: (0, 3)}, with_topic="t", table_format="iceberg")
    assert iceberg.endswith(
        "WHEN MATCHED AND s.`offset` < 0 THEN DELETE WHEN NOT MATCHED THEN INSERT *"
    )
    assert "WHEN MATCHED" not in statement
    with pytest.raises(ValueError, match="parquet"):
        merge_statement("db.t", "v", {0: (0, 3)}, with_topic="t", table_format="parquet")


class ConcurrentAppendException(Exception):
    """Named as Delta's."""


class FakeSession:
    """Fails the first ``conflicts`` statements with a conflict (or ``error``)."""

    def __init__(self, conflicts: int, error: Exception | None = None) -> None:
        self.conflicts, self.error = conflicts, error
        self.statements: list[str] = []
        self.views: set[str] = set()
        self.catalog = self

    def sql(self, statement: str) -> FakeSession:
        self.statements.append(statement)
        return self

    def collect(self) -> list[object]:
        if self.error is not None:
            raise self.error
        if len(self.statements) <= self.conflicts:
            raise ConcurrentAppendException("Files were added by a concurrent update")
        return [{"num_affected_rows": 2, "num_inserted_rows": 2}]

    def dropTempView(self, name: str) -> None:
        self.views.discard(name)


class FakeFrame:
    def __init__(self, session: FakeSession) -> None:
        self.session = session

    def createOrReplaceTempView(self, name: str) -> None:
        self.session.views.add(name)


def test_a_conflicting_merge_is_tried_again_and_another_error_is_raised_at_once() -> None:
    pauses: list[float] = []
    session = FakeSession(conflicts=2)
    inserted = merge_once(
        session, "db.t", FakeFrame(session), {0: (0, 1)}, "t", pause=pauses.append
    )
    assert inserted == 2 and len(session.statements) == 3
    assert len(pauses) == 2 and all(p > 0 for p in pauses)
    assert session.views == set()  # the batch's view is dropped
    refused = FakeSession(conflicts=0, error=RuntimeError("table not found"))
    with pytest.raises(RuntimeError, match="not found"):
        merge_once(refused, "db.t", FakeFrame(refused), {0: (0, 1)}, "t", pause=pauses.append)
    assert len(refused.statements) == 1 and refused.views == set()
    endless = FakeSession(conflicts=99)
    with pytest.raises(ConcurrentAppendException):
        merge_once(
            endless, "db.t", FakeFrame(endless), {0: (0, 1)}, "t", attempts=4, pause=lambda _s: None
        )
    assert len(endless.statements) == 4
    assert is_write_conflict(ConcurrentAppendException("x"))
    assert is_write_conflict(RuntimeError("ValidationException: Found conflicting files that"))
    assert not is_write_conflict(ValueError("a value"))


# The member loop, against a fake client -----------------------------------------------------
class FakeMessage:
    def __init__(
        self, topic: str, partition: int, offset: int, error: object = None, deliveries: int = 1
    ) -> None:
        self._where, self._error, self._deliveries = (topic, partition, offset), error, deliveries

    def delivery_count(self) -> int:
        return self._deliveries

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._where[2])

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes:
        return f"v{self._where[2]}".encode()

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("h", b"1")] if self._where[2] == 0 else None

    def error(self) -> object:
        return self._error


class FakeClient:
    """Hands out ``polls`` one by one, then asks the member to stop."""

    def __init__(self, polls: list[list[FakeMessage]], member: Callable[[], ShareMember]) -> None:
        self.polls, self.member = polls, member
        self.events: list[tuple[str, Any]] = []
        self.refusals: dict[object, object] = {}  # what commit_sync answers
        self.out_of_flight: set[tuple[int, int]] = set()  # acknowledge raises for these
        self.commit_error: Exception | None = None

    def subscribe(self, topics: list[str]) -> None:
        self.events.append(("subscribe", topics))

    def poll(self, _timeout: float) -> list[FakeMessage]:
        if not self.polls:
            self.member().request_stop()
            return []
        return self.polls.pop(0)

    def acknowledge(self, message: FakeMessage, kind: Any) -> None:
        if (message.partition(), message.offset()) in self.out_of_flight:
            from confluent_kafka import IllegalStateException

            raise IllegalStateException("the record is no longer in flight")
        self.events.append(("ack", (message.partition(), message.offset(), int(kind))))

    def commit_sync(self) -> dict[object, object]:
        self.events.append(("commit", None))
        if self.commit_error is not None:
            raise self.commit_error
        return dict(self.refusals)

    def close(self) -> None:
        self.events.append(("close", None))


class RecordingSink:
    def __init__(self, failures: int = 0, on_failure: Callable[[], None] = lambda: None) -> None:
        self.failures, self.on_failure = failures, on_failure
        self.written: list[tuple[str, list[tuple[int, int]]]] = []
        self.prepared: list[tuple[str, ...]] = []

    async def write_once(self, topic: str, table: pa.Table) -> None:
        if self.failures:
            self.failures -= 1
            self.on_failure()
            raise OSError("disk full")
        keys = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))
        self.written.append((topic, keys))

    async def prepare_merges(self, topics: Sequence[str]) -> None:
        assert not self.written, "merges are prepared before any write"
        self.prepared.append(tuple(topics))


def run_member(polls: list[list[FakeMessage]], sink: RecordingSink) -> FakeClient:
    holder: list[ShareMember] = []
    client = FakeClient(polls, lambda: holder[0])
    member = ShareMember(
        share_config(), sink, client_factory=lambda _settings: client, admin_factory=None
    )
    holder.append(member)
    import asyncio

    asyncio.run(member.run_async())
    return client


def test_records_are_acknowledged_after_their_write_and_a_poll_is_split_by_topic() -> None:
    from confluent_kafka import AcknowledgeType

    sink = RecordingSink()
    poll = [FakeMessage("t", 1, 4), FakeMessage("t", 0, 7), FakeMessage("u", 0, 0)]
    poll.append(FakeMessage("t", 0, 9, error="a fetch error"))
    client = run_member([poll], sink)
    assert sink.prepared == [("t",)]
    assert sink.written == [("t", [(0, 7), (1, 4)]), ("u", [(0, 0)])]
    accept = int(AcknowledgeType.ACCEPT)
    kinds = [event for event, _ in client.events]
    assert kinds == ["subscribe", "ack", "ack", "ack", "commit", "close"]
    acked = {what for event, what in client.events if event == "ack"}
    assert acked == {(1, 4, accept), (0, 7, accept), (0, 0, accept)}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_records_refused_acknowledgements_and_client_errors_are_counted() -> None:
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    group = f"g-{uuid.uuid4().hex[:6]}"
    holder: list[ShareMember] = []
    poll = [FakeMessage("t", 0, 1), FakeMessage("t", 0, 2), FakeMessage("t", 3, 0)]
    client = FakeClient(
        [[FakeMessage("t", 0, 0, error="all brokers down")], poll], lambda: holder[0]
    )
    client.refusals = {KafkaTopicPartition("t", 3): "INVALID_RECORD_STATE"}
    client.out_of_flight = {(0, 2)}
    member = ShareMember(
        share_config(group=group),
        RecordingSink(),
        client_factory=lambda _s: client,
        admin_factory=None,
    )
    holder.append(member)
    import asyncio

    asyncio.run(member.run_async())
    records = "autoscaler_consumer_records_total"
    assert sample(records, group=group, topic="t", partition="0") == 2
    assert sample(records, group=group, topic="t", partition="3") == 1
    refused = "autoscaler_consumer_share_acknowledge_failures_total"
    assert sample(refused, group=group, topic="t") == 2 and member.acknowledge_failures == 2
    acked = [what for event, what in client.events if event == "ack"]
    assert [(p, o) for p, o, _ in acked] == [(0, 1), (3, 0)]  # the others still acknowledged
    assert sample("autoscaler_consumer_client_errors_total", group=group) == 1


def test_a_commit_the_client_cannot_make_counts_each_partition_once() -> None:
    from confluent_kafka import KafkaError, KafkaException

    holder: list[ShareMember] = []
    poll = [FakeMessage("t", 0, 1), FakeMessage("t", 0, 2), FakeMessage("t", 1, 0)]
    client = FakeClient([poll], lambda: holder[0])
    client.commit_error = KafkaException(KafkaError(KafkaError._TRANSPORT))
    member = ShareMember(
        share_config(), RecordingSink(), client_factory=lambda _s: client, admin_factory=None
    )
    holder.append(member)
    import asyncio

    asyncio.run(member.run_async())  # no exception: the records come again
    assert member.acknowledge_failures == 2 and member.records_written == 3


def test_a_write_that_fails_while_the_member_stops_releases_its_records() -> None:
    from confluent_kafka import AcknowledgeType

    holder: list[ShareMember] = []
    sink = RecordingSink(failures=1, on_failure=lambda: holder[0].request_stop())
    client = FakeClient([[FakeMessage("t", 0, 1)]], lambda: holder[0])
    member = ShareMember(
        share_config(), sink, client_factory=lambda _settings: client, admin_factory=None
    )
    holder.append(member)
    import asyncio

    asyncio.run(member.run_async())
    assert sink.prepared == [("t",)] and sink.written == []
    assert ("ack", (0, 1, int(AcknowledgeType.RELEASE))) in client.events
    assert member.records_written == 0


def test_a_stopping_member_writes_on_the_records_at_their_last_delivery_and_releases_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from confluent_kafka import AcknowledgeType

    holder: list[ShareMember] = []
    sink = RecordingSink(failures=2, on_failure=lambda: holder[0].request_stop())
    last = FakeMessage("t", 0, 2, deliveries=DEFAULT_LIMIT)
    client = FakeClient([[FakeMessage("t", 0, 1, deliveries=2), last]], lambda: holder[0])
    member = ShareMember(
        share_config(), sink, client_factory=lambda _settings: client, admin_factory=None
    )
    holder.append(member)
    import asyncio

    with caplog.at_level(logging.WARNING, logger="consumer_sdk.share.member"):
        asyncio.run(member.run_async())
    assert sink.written == [("t", [(0, 2)])]  # the last delivery, on its third try
    acked = [what for event, what in client.events if event == "ack"]
    assert acked == [(0, 1, int(AcknowledgeType.RELEASE)), (0, 2, int(AcknowledgeType.ACCEPT))]
    assert member.records_given_up == 0
    assert "1 record(s) at their last delivery (share.delivery.count.limit 5)" in caplog.text


def test_records_at_their_last_delivery_a_stopping_member_cannot_write_are_said_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(member_module, "LAST_DELIVERY_RETRY_S", 0.05)
    group = f"g-{uuid.uuid4().hex[:6]}"
    holder: list[ShareMember] = []
    sink = RecordingSink(failures=10**6, on_failure=lambda: holder[0].request_stop())
    poll = [FakeMessage("t", 3, offset, deliveries=DEFAULT_LIMIT) for offset in (7, 8, 9)]
    client = FakeClient([poll], lambda: holder[0])
    member = ShareMember(
        share_config(group=group), sink, client_factory=lambda _s: client, admin_factory=None
    )
    holder.append(member)
    import asyncio

    with caplog.at_level(logging.ERROR, logger="consumer_sdk.share.member"):
        asyncio.run(member.run_async())
    assert sink.written == [] and member.records_given_up == 3
    assert not [what for event, what in client.events if event == "ack"]  # never released
    given_up = "autoscaler_consumer_share_records_given_up_total"
    assert sample(given_up, group=group, topic="t") == 3
    assert "Kafka archives them, the table lacks them: t:3 offsets 7-9" in caplog.text


class BrokersDown:
    """Like confluent-kafka's KafkaError for all brokers down."""

    def name(self) -> str:
        return "_ALL_BROKERS_DOWN"

    def __str__(self) -> str:
        return "all brokers down"


def test_healthz_says_while_kafka_is_out_of_reach_and_clears_when_records_come() -> None:
    holder: list[ShareMember] = []
    seen: list[list[str]] = []

    class WatchedClient(FakeClient):
        def poll(self, timeout: float) -> list[FakeMessage]:
            seen.append(process_problems())  # what /healthz answers now
            return super().poll(timeout)

    down = [FakeMessage("t", 0, 0, error=BrokersDown())]
    client = WatchedClient([down, [], [FakeMessage("t", 0, 1)], []], lambda: holder[0])
    nobody = f"127.0.0.1:{free_port()}"
    member = ShareMember(
        share_config(group="reach", bootstrap_servers=nobody),
        RecordingSink(),
        client_factory=lambda _s: client,
        admin_factory=None,
    )
    holder.append(member)
    import asyncio

    asyncio.run(member.run_async())
    assert seen[0] == []  # before the error
    (line,) = seen[1]  # what connecting directly found
    assert line.startswith(f"group reach: cannot reach Kafka at {nobody}")
    assert seen[2] == [line]  # the problem stays until Kafka answers ...
    assert seen[3] == []  # ... with records (and their commit)
    assert process_problems() == []  # a member that stopped is no longer counted


def test_the_client_is_set_for_explicit_acknowledgement_polls_and_security() -> None:
    config = share_config(
        share_max_poll_records=50,
        security_protocol="SSL",
        ssl_cafile=__file__,
        member_identity="m-3",
    )
    settings = client_settings(config)
    assert settings["share.acknowledgement.mode"] == "explicit"
    assert settings["max.poll.records"] == 50
    assert settings["client.id"] == f"kafka-autoscaler-{config.group}-m-3"  # the brokers see it
    assert settings["security.protocol"] == "SSL" and settings["ssl.ca.location"] == __file__


def test_by_topic_keeps_headers_and_timestamps() -> None:
    tables = by_topic([FakeMessage("t", 0, 0), FakeMessage("t", 0, 1)])
    expected = records_table(
        [
            Record("t", 0, 0, 1_700_000_000_000, None, b"v0", (("h", b"1"),)),
            Record("t", 0, 1, 1_700_000_000_001, None, b"v1"),
        ]
    )
    assert tables["t"].equals(expected)


def test_a_share_member_needs_group_type_share_and_the_type_is_checked() -> None:
    with pytest.raises(ConfigError, match="group_type"):
        ShareMember(share_config(group_type="consumer"), RecordingSink())
    with pytest.raises(ConfigError, match=r"group_type \(AUTOSCALER_GROUP_TYPE\).*consumer, share"):
        share_config(group_type="queue")


# Merges into a Delta table through Spark -------------------------------------------------------
@pytest.fixture(scope="module")
def spark_sink_session() -> Iterator[Any]:
    yield SparkTableSink(SparkSinkConfig(warehouse="/tmp/unused-warehouse")).open()


def sink_config(tmp_path: Path, table_format: str = "delta") -> SparkSinkConfig:
    return warehouse_config(tmp_path, table_format)


def batch(
    partition_offsets: dict[int, range], poison: frozenset[tuple[int, int]] = frozenset()
) -> pa.Table:
    """Records of topic t; those at ``poison`` (partition, offset) are not text."""
    records = [
        Record("t", p, o, 1_700_000_000_000, None, POISON if (p, o) in poison else f"r{o}".encode())
        for p, offsets in sorted(partition_offsets.items())
        for o in offsets
    ]
    return records_table(records)


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_repeated_and_overlapping_batches_land_each_offset_once(
    spark_sink_session: Any, tmp_path: Path, table_format: str
) -> None:
    config = sink_config(tmp_path, table_format)
    sink = SparkTableSink(config)
    sink.prepare_merges_blocking(["t"])
    assert not key_counts(config, config.table_for("t"))
    first = batch({0: range(0, 60), 1: range(0, 30)}, poison=frozenset({(0, 7)}))
    sink.write_once_blocking("t", first)
    sink.write_once_blocking("t", first)  # delivered again: nothing new
    sink.write_once_blocking("t", batch({0: range(40, 100)}, poison=frozenset({(0, 7), (0, 77)})))
    if table_format == "delta":  # Iceberg does not say how many rows a merge inserted
        assert (sink.rows_written, sink.dead_letters_written, sink.rows_skipped) == (128, 2, 110)
    rows = key_counts(config, config.table_for("t"))
    dead = key_counts(config, config.dead_letter_table)
    assert dead == Counter({(0, 7): 1, (0, 77): 1})
    expected = {(0, o) for o in range(100) if o not in (7, 77)} | {(1, o) for o in range(30)}
    assert set(rows) == expected and set(rows.values()) == {1}


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_concurrent_merges_of_the_same_records_land_each_once(
    spark_sink_session: Any, tmp_path: Path, table_format: str
) -> None:
    config = sink_config(tmp_path, table_format)
    SparkTableSink(config).prepare_blocking(["t"])
    batches = [batch({0: range(i * 20, i * 20 + 50), 1: range(0, 10)}) for i in range(3)]
    errors: list[BaseException] = []

    def writer(order: list[pa.Table]) -> None:
        try:
            sink = SparkTableSink(config)
            for table in order:
                sink.write_once_blocking("t", table)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(batches[i:] + batches[:i],)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert errors == []
    rows = key_counts(config, config.table_for("t"))
    assert set(rows) == {(0, o) for o in range(90)} | {(1, o) for o in range(10)}
    assert set(rows.values()) == {1}


def test_parquet_tables_take_no_share_member_writes(
    spark_sink_session: Any, tmp_path: Path
) -> None:
    sink = SparkTableSink(sink_config(tmp_path, "parquet"))
    with pytest.raises(ConfigError, match=r"table_format \(AUTOSCALER_SPARK_TABLE_FORMAT\)"):
        sink.write_once_blocking("t", batch({0: range(3)}))


# Members killed between a write and its acknowledgement, on Apache Kafka ----------------------
def start_member(
    bootstrap: str, group: str, topic: str, name: str, config: SparkSinkConfig, *extra: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.spark_member_process", bootstrap, group, topic]
    command += [name, config.warehouse, config.database, "--share", *extra]
    logs = Path(config.warehouse).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def test_members_killed_after_writing_before_acknowledging_lose_and_repeat_nothing(
    apache_with_assignor: ApacheKafka, tmp_path: Path
) -> None:
    bootstrap = apache_with_assignor.bootstrap_servers
    topic = f"share-sink-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    apache_with_assignor.create_topic(topic, 2, 1)
    # The shortest lock the broker allows by default, so the killed member's records come
    # back sooner than the default 30 s.
    read_from_the_start(bootstrap, group, lock_duration_ms=15_000)
    produced = produce_tracked(
        bootstrap, topic, 600, 2, value_for=lambda i: POISON if i % 97 == 5 else f"r{i}".encode()
    )
    config = sink_config(tmp_path)
    # Alone at first, so that it is given records: it writes its first poll and dies.
    dying = start_member(bootstrap, group, topic, "dying", config, "--die-after-write")
    assert dying.wait(timeout=240) == -signal.SIGKILL
    assert key_counts(config, config.table_for(topic)), "the killed member wrote nothing"
    members = [start_member(bootstrap, group, topic, name, config) for name in ("a", "b")]
    try:

        def all_stored() -> bool:
            rows = key_counts(config, config.table_for(topic))
            dead = key_counts(config, config.dead_letter_table)
            return len(set(rows) | set(dead)) == len(produced)

        assert wait_until(all_stored, timeout_s=300), "the members did not store every record"
        # The killed member's records come again once their locks expire (15 s), and a
        # merge finds them there already.
        logs = Path(config.warehouse).parent / "logs"
        assert wait_until(lambda: found_already_there(logs.glob("*.log")) > 0, timeout_s=180)
    finally:
        for member in members:
            member.send_signal(signal.SIGTERM)
        exits = [member.wait(timeout=120) for member in members]
    rows = key_counts(config, config.table_for(topic))
    dead = key_counts(config, config.dead_letter_table)
    assert set(rows) | set(dead) == produced and not set(rows) & set(dead)
    assert set(rows.values()) == {1} and set(dead.values()) == {1}, "a record is in twice"
    assert len(dead) == sum(1 for i in range(600) if i % 97 == 5)
    assert exits == [0, 0]
