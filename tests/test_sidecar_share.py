"""The sidecar sizing a share group (``--group-type share``, KIP-932) on Apache Kafka with our
share assignor: its local scaler starts plain confluent-kafka share consumers
(``examples/share_consumer.py``, no code of ours) of a known capacity; the group grows past
the partition count, the brokers' assignor gives the hot partition several members, and every
record written reaches a consumer. And share groups the broker refuses are one line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.support.rate_writer import RateWriter
from benchmarks.support.share_members import read_from_the_start
from contract.local_ports import free_port
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind, KafkaCluster
from local_kafka.processes import processes_mentioning
from tests.sdk_helpers import (
    example_consumer_command,
    local_sidecar_env,
    start_sidecar_process,
    stop_sidecar_process,
    wait_until,
)
from tests.sdk_helpers import sidecar_status as status

ROOT = Path(__file__).parent.parent
CONSUMER = ROOT / "examples" / "share_consumer.py"
CAPACITY = 100.0  # records/s each share consumer works through
RATES = (300, 50)  # records/s per partition: 3.5 consumers on 2 partitions


def rows(folder: Path) -> dict[str, set[tuple[int, int]]]:
    """Each consumer's (partition, offset)s, from every complete line it wrote."""
    found: dict[str, set[tuple[int, int]]] = {}
    for path in folder.glob("*.jsonl"):
        mine = found.setdefault(path.stem, set())
        for line in path.read_text().split("\n")[:-1]:
            row = json.loads(line)
            mine.add((row["partition"], row["offset"]))
    return found


def readers_of(folder: Path, partition: int) -> set[str]:
    return {name for name, read in rows(folder).items() if any(p == partition for p, _ in read)}


def running(folder: Path) -> int:
    return sum(str(CONSUMER) in words for words in processes_mentioning(str(folder)).values())


def share_sidecar(
    bootstrap: str, topic: str, consumer: str, port: int, folder: Path
) -> subprocess.Popen[str]:
    """A sidecar CLI process for share group ``g-<topic>``, the local scaler starting
    ``consumer``; its stderr is piped."""
    env = local_sidecar_env(
        bootstrap,
        topic,
        f"speeds-{topic}",
        consumer,
        http_port=port,
        lock_file=str(folder / "lock"),
        capacity=CAPACITY,
        max_replicas=8,
    )
    env |= {"AUTOSCALER_GROUP_TYPE": "share", "AUTOSCALER_SCALE_DOWN_WINDOW": "2"}
    return start_sidecar_process([], env, ROOT)


@pytest.fixture
def load(apache_with_assignor: ApacheKafka) -> Iterator[tuple[str, RateWriter]]:
    """A topic written at RATES until the writer is finished."""
    topic = f"share-{free_port()}"
    apache_with_assignor.create_topic(topic, len(RATES), 1)
    read_from_the_start(apache_with_assignor.bootstrap_servers, f"g-{topic}")
    writer = RateWriter(apache_with_assignor.bootstrap_servers, topic, RATES, b"x" * 50)
    writer.start()
    yield topic, writer
    writer.finish()


def test_the_sidecar_sizes_a_share_group_past_its_partitions(
    apache_with_assignor: ApacheKafka,
    load: tuple[str, RateWriter],
    tmp_path: Path,
) -> None:
    topic, writer = load
    delivered = writer.written
    bootstrap = apache_with_assignor.bootstrap_servers
    out = tmp_path / "out"
    out.mkdir()
    consumer = example_consumer_command(
        CONSUMER, bootstrap, topic, out, f"--records-per-second {CAPACITY:g}"
    )
    port = free_port()
    sidecar = share_sidecar(bootstrap, topic, consumer, port, tmp_path)
    try:

        def sized_and_published() -> bool:
            # The count is set when a round decides, the loads once their send returns.
            now = status(port)
            loads = (now.get("share_group") or {}).get("loads")
            return (now.get("replicas") or 0) >= 4 and loads is not None

        # 3.5 consumers of load on 2 partitions: a consumer group could use 2 at most.
        assert wait_until(sized_and_published, timeout_s=120), status(port)
        share = status(port)["share_group"]
        assert share["max_size_read"] and share["max_size"] >= 4
        assert share["problem"] is None
        loads = share["loads"]
        assert loads[f"{topic}-0"] > 2 * loads[f"{topic}-1"]  # 300/s against 50/s
        # The broker's reader takes the loads at the group's next assignment, which may come
        # after the sidecar's count.
        took = f"took the loads of group g-{topic}"
        assert wait_until(lambda: took in apache_with_assignor.node_log(1), timeout_s=60)
        # The broker's share assignor gives the hot partition several members.
        assert wait_until(lambda: len(readers_of(out, 0)) >= 3, timeout_s=120), rows(out).keys()
        writer.finish()  # no traffic: the group shrinks, and everything written was read
        assert wait_until(lambda: running(out) <= 1, timeout_s=120), status(port)
        assert wait_until(lambda: delivered <= set().union(*rows(out).values()), timeout_s=60), len(
            delivered - set().union(*rows(out).values())
        )
    finally:
        writer.finish()
        errors = stop_sidecar_process(sidecar)
    assert "Traceback" not in errors
    assert writer.unflushed == 0 and delivered


def test_a_cluster_without_share_groups_is_one_line(
    kafka_cluster_handle: KafkaCluster, tmp_path: Path
) -> None:
    if kafka_cluster_handle.kind is ClusterKind.APACHE:
        pytest.skip("Apache Kafka 4.3 has share groups: the embedded broker has none")
    bootstrap = kafka_cluster_handle.bootstrap_servers
    topic = kafka_cluster_handle.create_topic(2, prefix="noshare")
    port = free_port()
    idle = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(600)'"
    sidecar = share_sidecar(bootstrap, topic, idle, port, tmp_path)
    try:

        def said() -> list[str]:
            return [line for line in status(port).get("problems", []) if "no share groups" in line]

        assert wait_until(lambda: bool(said()), timeout_s=60), status(port)
        assert len(said()) == 1
        assert status(port)["healthy"] is False  # /healthz says so too
    finally:
        errors = stop_sidecar_process(sidecar)
    assert "Traceback" not in errors
    assert 1 <= sum("no share groups" in row for row in errors.splitlines()) <= 2
