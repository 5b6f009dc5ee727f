"""Never scale into failure, on Apache Kafka: a sidecar whose consumers cannot join the group
holds at the count it first started, says why in the members' own words, and sizes again
once they join (issue: 0 -> 4 -> ... -> 9 while no member could join)."""

from __future__ import annotations

import shlex
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.support.rate_writer import RateWriter
from contract.local_ports import free_port
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.kip848_helpers import CONSUMER, RATES, kip848_sidecar, planned_and_held
from tests.sdk_helpers import example_consumer_command, stop_sidecar_process, wait_until
from tests.sdk_helpers import sidecar_status as status

WATCH_S = 20.0  # how long a held count is watched (the run grew 4 -> 6 in 20 s)


def loaded_topic(bootstrap: str, topic: str) -> Iterator[tuple[str, RateWriter]]:
    """``topic`` written at RATES until the writer is finished."""
    writer = RateWriter(bootstrap, topic, RATES, b"x" * 50)
    writer.start()
    yield topic, writer
    writer.finish()


@pytest.fixture
def plain_load(kafka_cluster_handle: KafkaCluster) -> Iterator[tuple[str, RateWriter]]:
    """A loaded topic on the suite's Apache Kafka, whose brokers lack our assignor."""
    if kafka_cluster_handle.kind is not ClusterKind.APACHE:
        pytest.skip("the embedded broker runs no KIP-848 groups")
    topic = kafka_cluster_handle.create_topic(len(RATES), prefix="joinfail")
    yield from loaded_topic(kafka_cluster_handle.bootstrap_servers, topic)


@pytest.fixture
def assignor_load(apache_with_assignor: ApacheKafka) -> Iterator[tuple[str, RateWriter]]:
    topic = f"joinfix-{free_port()}"
    apache_with_assignor.create_topic(topic, len(RATES), 1)
    yield from loaded_topic(apache_with_assignor.bootstrap_servers, topic)


def watch_counts(port: int, seconds: float) -> list[int]:
    """The replica counts /status shows, twice a second for ``seconds``."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.append(status(port).get("replicas") or 0)
        time.sleep(0.5)
    return seen


def not_joining(port: int) -> dict[str, list[dict[str, str]]] | None:
    found: dict[str, list[dict[str, str]]] | None = status(port).get("not_joining")
    return found


def member_command(bootstrap: str, topic: str, folder: Path) -> str:
    """The KIP-848 example consumer for the local scaler, writing into ``folder/out``."""
    out = folder / "out"
    out.mkdir()
    return example_consumer_command(CONSUMER, bootstrap, topic, out, "--instance-id {identity}")


def healthz(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
        return answer.status, answer.read().decode()


def test_members_refused_by_the_brokers_are_not_multiplied(
    kafka_cluster_handle: KafkaCluster, plain_load: tuple[str, RateWriter], tmp_path: Path
) -> None:
    topic, _ = plain_load
    bootstrap = kafka_cluster_handle.bootstrap_servers
    consumer = member_command(bootstrap, topic, tmp_path)
    port = free_port()
    sidecar = kip848_sidecar(bootstrap, topic, consumer, port, tmp_path, max_replicas=len(RATES))
    try:
        assert wait_until(lambda: not_joining(port) is not None, timeout_s=90), status(port)
        counts = watch_counts(port, WATCH_S)
        page = status(port)
        found = not_joining(port)
        assert found is not None and found["failing"], page
        # Why, at once: the brokers lack the assignor the members name (the sidecar read
        # their configuration), or the members' own error once they exit on it.
        assert all("assignor" in f["reason"].lower() for f in found["failing"]), found
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"autoscaler_consumers_not_joining 1.0" in metrics
        assert page["last_decision"]["demand"] > max(counts), page["last_decision"]
    finally:
        errors = stop_sidecar_process(sidecar)
    (first,) = [line for line in errors.splitlines() if " scale_up 0 -> " in line]
    started = int(first.split(" scale_up 0 -> ")[1].split(":")[0])
    assert " scale_up " not in errors.split(first)[1]  # never a second scale-up
    assert max(counts) <= started, counts
    assert sum("no scale-up until they join" in line for line in errors.splitlines()) == 1


def test_sizing_resumes_once_the_members_join(
    apache_with_assignor: ApacheKafka, assignor_load: tuple[str, RateWriter], tmp_path: Path
) -> None:
    topic, _ = assignor_load
    bootstrap = apache_with_assignor.bootstrap_servers
    fixed = tmp_path / "sink-ready"
    member = member_command(bootstrap, topic, tmp_path)
    # A sink that cannot start until its table exists: exits with one line, as a consumer
    # with a bad password or a missing table does.
    check = (
        f"test -e {shlex.quote(str(fixed))} || {{ echo 'sink: the table is missing' >&2; exit 3; }}"
    )
    consumer = f"sh -c {shlex.quote(f'{check}; exec {member}')}"
    port = free_port()
    sidecar = kip848_sidecar(bootstrap, topic, consumer, port, tmp_path, max_replicas=len(RATES))
    try:
        assert wait_until(lambda: not_joining(port) is not None, timeout_s=90), status(port)
        found = not_joining(port)
        assert found is not None
        assert found["failing"][0]["reason"].endswith("sink: the table is missing"), found
        fixed.touch()
        assert wait_until(lambda: not_joining(port) is None, timeout_s=120), status(port)

        # Sizing again: the group reaches the count its load needs and reads as planned.
        def sized() -> bool:
            page = status(port)
            decision = page["last_decision"] or {}
            return planned_and_held(port) and page["replicas"] >= (decision.get("demand") or 0)

        assert wait_until(sized, timeout_s=60), status(port)
        assert "not joining" not in status(port)["last_decision"]["reason"]
        assert healthz(port) == (200, "ok\n")
    finally:
        errors = stop_sidecar_process(sidecar)
    assert "scaling resumes" in errors
