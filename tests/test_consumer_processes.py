"""Consumer members as real processes: kill -9 loses nothing; SIGTERM flushes and commits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.support.cpu_load import oversubscribed
from benchmarks.support.sdk_member_process import read_rows, stats_path
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import wait_until

ROOT = Path(__file__).parent.parent


def start_member(
    kafka: str, group: str, topic: str, identity: str, out: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.support.sdk_member_process",
            kafka,
            group,
            topic,
            identity,
            str(out),
        ],
        cwd=ROOT,
    )


# Busy processes per core beside the test: none, or twice the cores (a fresh CI machine
# building and testing at once; a pod throttled by its CPU limit).
CPU_LOADS = {"idle": 0.0, "cores-oversubscribed-2x": 2.0}


@pytest.mark.parametrize("cpu_load", CPU_LOADS)
def test_killed_member_partitions_move_and_nothing_is_lost(
    kafka: str,
    kafka_cluster_handle: KafkaCluster,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    cpu_load: str,
) -> None:
    topic = topic_factory(6)
    group = f"g-{topic}"
    outs = [tmp_path / f"member-{i}.txt" for i in range(3)]
    produced: set[tuple[int, int]] = set()
    producer = threading.Thread(
        target=lambda: produced.update(produce_tracked(kafka, topic, 6000, 6, 300, 0.1))
    )
    with oversubscribed(CPU_LOADS[cpu_load]):
        members = [
            start_member(kafka, group, topic, f"sink-{i}", out) for i, out in enumerate(outs)
        ]
        try:
            # Trickle records until all three members have written some: the group is formed.
            def all_reading() -> bool:
                produced.update(produce_tracked(kafka, topic, 6, 6))
                return all(read_rows(o) for o in outs)

            assert wait_until(all_reading)
            producer.start()
            assert wait_until(lambda: sum(read_rows(o).total() for o in outs) > 1500)
            members[1].kill()  # kill -9: no flush, no commit, no LeaveGroup
            members[1].wait(10)
            producer.join(120)
            assert not producer.is_alive()
            assert wait_until(lambda: produced <= set().union(*map(read_rows, outs)), timeout_s=60)
        finally:
            for member in members:
                if member.poll() is None:
                    member.send_signal(signal.SIGTERM)
            for member in members:
                member.wait(30)
    rows = [read_rows(o) for o in outs]
    assert len(produced) >= 6000
    assert produced <= set().union(*rows)  # nothing lost
    total = sum(rows, Counter())
    duplicated = {key for key, n in total.items() if n > 1}
    if kafka_cluster_handle.kind is not ClusterKind.EMBEDDED:
        # Duplicates only for what the killed member wrote but had not committed. The
        # embedded broker rejects OffsetCommit during a rejoin (docs/architecture.md section 7), so
        # there the survivors' last batch before the eager rebalance comes back too.
        assert duplicated <= set(rows[1])
    # The survivors stayed members throughout, busy machine or not: no eviction while alive
    # (the failure this reproduces: 2 s loop stalls under load, survivors evicted).
    for survivor in (outs[0], outs[2]):
        stats = json.loads(stats_path(survivor).read_text())
        assert stats["membership_lost"] == 0, stats


def test_sigterm_flushes_commits_and_exits(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(2)
    group = f"g-{topic}"
    out = tmp_path / "member.txt"
    produced = produce_tracked(kafka, topic, 1000, 2)
    member = start_member(kafka, group, topic, "sink-0", out)
    try:
        assert wait_until(lambda: set(read_rows(out)) >= produced)
    finally:
        member.send_signal(signal.SIGTERM)
        assert member.wait(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        committed = consumer.committed([KafkaTopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    ends = {p: max(o for q, o in produced if q == p) + 1 for p in (0, 1)}
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert max(read_rows(out).values()) == 1


def test_a_consumer_that_cannot_reach_kafka_says_so_in_healthz_and_stops_at_once_on_sigterm(
    tmp_path: Path,
) -> None:
    from contract.local_ports import free_port

    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AUTOSCALER_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "AUTOSCALER_GROUP": "g",
        "AUTOSCALER_TOPICS": "t",
        "AUTOSCALER_CAPACITY": "10",
        "AUTOSCALER_METRICS_PORT": str(port),
    }
    member = subprocess.Popen(
        [sys.executable, "-m", "consumer_sdk.cli", "--sink", "null"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert member.stderr is not None
    seen: list[str] = []
    for line in member.stderr:  # bounded by the retry line: it comes within a second or two
        seen.append(line)
        if "joining group g failed" in line:
            break
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
    assert answer.value.code == 503
    health = answer.value.read().decode().splitlines()
    assert health[0] == "unhealthy" and health[1].startswith("group g: "), health
    assert env["AUTOSCALER_BOOTSTRAP_SERVERS"] in health[1], health
    # Alive all the same: a liveness probe must not restart it for Kafka's outage.
    live = urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=10)
    assert live.read() == b"ok\n"
    member.send_signal(signal.SIGTERM)
    assert member.wait(10) == 0  # not after the back-off, not with an error
    rest = member.stderr.read()
    output = "".join(seen) + rest
    assert "cannot" in output or "failed" in output
    for bad in ("Traceback", "Task exception was never retrieved", "Unclosed AIOKafkaConsumer"):
        assert bad not in output
