"""Shared fixtures: the Kafka clusters every Kafka test runs against, and a topic factory.

Every test that takes ``kafka`` (a bootstrap string), ``kafka_cluster_handle`` or
``topic_factory`` runs once per kind of :func:`local_kafka.clusters.suite_cluster_kinds`:
the embedded broker (librdkafka's mock cluster in a child process) and Apache Kafka started
from its jars, or only the user's cluster when ``KAFKA_BOOTSTRAP_SERVERS`` is set. Test ids
end in the kind (``[embedded]``, ``[apache]``). Where Java or the jars are missing the Apache
leg is skipped with that one reason, unless ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names it
(CI does): then it fails. Tests needing an API the cluster lacks are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest

from contract.share_loads import SHARE_LOADS_TOPIC
from local_kafka.apache_kafka import ApacheKafka, ApacheKafkaUnavailable
from local_kafka.clusters import (
    Capability,
    ClusterKind,
    KafkaCluster,
    kafka_cluster,
    required_cluster_kinds,
    suite_cluster_kinds,
)

# Tests run benchmark code into temporary directories, on whatever the work tree holds; what
# they write is never a committed result (benchmarks refuse uncommitted code otherwise).
os.environ.setdefault("KAFKA_AUTOSCALER_BENCH_DIRTY", "1")

_MARKER_CAPABILITY = {
    "needs_create_topics": Capability.CREATE_TOPICS,
    "needs_describe_log_dirs": Capability.DESCRIBE_LOG_DIRS,
    "needs_transactions": Capability.TRANSACTIONS,
}


def skip_unless_runnable(kind: ClusterKind) -> None:
    """For tests that start a cluster of ``kind`` in another process: skip (or fail, if
    required) when Apache Kafka cannot start here."""
    if kind is not ClusterKind.APACHE:
        return
    from local_kafka.apache_kafka import java_executable, kafka_classpath

    try:
        java_executable()
        kafka_classpath()
    except ApacheKafkaUnavailable as exc:
        _skip_or_fail(kind, exc)


@contextlib.contextmanager
def cluster_or_skip(kind: ClusterKind, brokers: int | None = None) -> Iterator[KafkaCluster]:
    """Start a cluster of ``kind`` for a fixture; skip (or fail, if required) when Apache
    Kafka cannot start here."""
    try:
        with kafka_cluster(kind, brokers=brokers) as cluster:
            yield cluster
    except ApacheKafkaUnavailable as exc:
        _skip_or_fail(kind, exc)


def _skip_or_fail(kind: ClusterKind, reason: Exception) -> NoReturn:
    if kind in required_cluster_kinds():
        pytest.fail(f"the {kind.value} leg is required here but cannot start: {reason}")
    pytest.skip(f"{kind.value} leg skipped: {reason}")


@pytest.fixture(scope="session", autouse=True)
def _spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's local directories (the jars it copies, its block manager) under the run's
    temp directory, which pytest rotates: Spark deletes them at exit, but a process the
    tests kill -9 leaves about 80 MB in /tmp, and runs had filled a machine's disk."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-local")))
        yield


@pytest.fixture(scope="session", params=suite_cluster_kinds(), ids=lambda kind: kind.value)
def kafka_cluster_handle(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """The session's cluster of one kind, started once per kind."""
    with cluster_or_skip(request.param) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _skip_missing_capability(request: pytest.FixtureRequest) -> None:
    for marker, capability in _MARKER_CAPABILITY.items():
        if request.node.get_closest_marker(marker) is None:
            continue
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster_handle")
        if not cluster.supports(capability):
            pytest.skip(f"{cluster.kind.value} cluster lacks the {capability.value} API")


@pytest.fixture(scope="session")
def kafka(kafka_cluster_handle: KafkaCluster) -> str:
    """Bootstrap string of the session's Kafka cluster."""
    return kafka_cluster_handle.bootstrap_servers


@pytest.fixture(scope="session")
def topic_factory(kafka_cluster_handle: KafkaCluster) -> Callable[..., str]:
    """``topic_factory(partitions, prefix="t", replication=1)`` creates a unique topic."""
    return kafka_cluster_handle.create_topic


@pytest.fixture(scope="session")
def apache_with_assignor() -> Iterator[ApacheKafka]:
    """An Apache Kafka node that loads our broker-side assignors (KIP-848 and share groups),
    with the share loads topic (each group's plans topic is its own: its sidecar or its test
    makes it)."""
    skip_unless_runnable(ClusterKind.APACHE)
    with ApacheKafka(broker_assignor=True) as apache:
        apache.create_topic(SHARE_LOADS_TOPIC, 1, 1)
        yield apache
