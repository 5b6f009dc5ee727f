"""One real Kubernetes node (local_kube.node): the kubelet, kube-scheduler and containerd built
here from pinned sources join the real control plane, and pods of our sidecar image, loaded
from the local image store, run on it. The kubelet's probes read the sidecar's /healthz, and a
container killed under the kubelet is started again. Skipped with one line where the node
cannot run (binaries, root, runc, images), unless ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names
``kube-node`` (CI does)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from contract.local_ports import free_port
from local_kafka.clusters import KafkaCluster
from local_kube.control_plane import ControlPlane, ControlPlaneUnavailable, control_plane, create
from local_kube.node import Node, NodeUnavailable, node, node_problem, node_required, pod
from tests.sdk_helpers import wait_until

SIDECAR = "localhost/kafka-autoscaler-sidecar:latest"
WAIT_S = 90.0


def _unavailable(reason: str) -> None:
    if node_required():
        pytest.fail(f"the kube-node leg is required here but cannot run: {reason}")
    pytest.skip(f"kube-node leg skipped: {reason}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, Node]]:
    """A control plane with one node that has the sidecar image."""
    problem = node_problem()
    if problem is not None:
        _unavailable(problem)
    try:
        with control_plane() as plane, node(plane, images=[SIDECAR]) as started:
            yield plane, started
    except (ControlPlaneUnavailable, NodeUnavailable) as exc:
        _unavailable(str(exc))


@pytest.fixture
def namespace(cluster: tuple[ControlPlane, Node]) -> str:
    plane, _ = cluster
    name = f"t-{uuid.uuid4().hex[:8]}"
    create(
        plane.client(), None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def pod_status(plane: ControlPlane, namespace: str, name: str) -> Any:
    return CoreV1Api(plane.client()).read_namespaced_pod(name, namespace).status


def container_state(plane: ControlPlane, namespace: str, name: str) -> Any:
    """The pod's one container's status (None before the kubelet reported one)."""
    statuses = pod_status(plane, namespace, name).container_statuses or []
    return statuses[0] if statuses else None


def explain(cluster: tuple[ControlPlane, Node], namespace: str, name: str) -> Callable[[], str]:
    """What to print when a pod did not get where a test waited for."""
    plane, started = cluster

    def text() -> str:
        return (
            f"{pod_status(plane, namespace, name)}\n--- container output:\n"
            f"{started.logs(namespace, name, name)[-2000:]}\n--- kubelet:\n"
            f"{started.log_tail('kubelet')}"
        )

    return text


def test_a_pod_of_the_sidecar_image_runs_to_completion_on_the_node(
    cluster: tuple[ControlPlane, Node], namespace: str
) -> None:
    plane, started = cluster
    body = pod("help", SIDECAR, ["kafka-autoscaler-sidecar", "--help"])
    create(plane.client(), namespace, body)
    why = explain(cluster, namespace, "help")

    def finished() -> bool:
        return pod_status(plane, namespace, "help").phase in ("Succeeded", "Failed")

    assert wait_until(finished, WAIT_S), why()
    state = container_state(plane, namespace, "help")
    assert state.state.terminated.exit_code == 0, why()
    assert pod_status(plane, namespace, "help").phase == "Succeeded"
    assert "--bootstrap-servers" in started.logs(namespace, "help", "help")  # the CLI's help


def sidecar_pod(kafka: KafkaCluster, name: str, port: int) -> dict[str, Any]:
    """The sidecar (``--scaler none``) on ``kafka``, its /healthz probed by the kubelet."""
    topic = kafka.create_topic(2, prefix="node")
    probe = {
        "httpGet": {"host": "127.0.0.1", "path": "/healthz", "port": port},
        "periodSeconds": 1,
        "failureThreshold": 3,
    }
    env = {
        "AUTOSCALER_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "AUTOSCALER_GROUP": f"g-{name}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": "1000",
        "AUTOSCALER_SCALER": "none",
        "AUTOSCALER_HTTP_PORT": str(port),
    }
    body = pod(name, SIDECAR, ["kafka-autoscaler-sidecar"], restartPolicy="Always")
    container = body["spec"]["containers"][0]
    container["env"] = [{"name": key, "value": value} for key, value in env.items()]
    container["readinessProbe"] = probe
    container["livenessProbe"] = {**probe, "initialDelaySeconds": 30}
    return body


def test_the_sidecar_pod_gets_ready_by_its_healthz_and_a_killed_one_is_started_again(
    cluster: tuple[ControlPlane, Node], namespace: str, kafka_cluster_handle: KafkaCluster
) -> None:
    plane, started = cluster
    name = "sizer"
    create(plane.client(), namespace, sidecar_pod(kafka_cluster_handle, name, free_port()))
    why = explain(cluster, namespace, name)

    def ready() -> bool:
        state = container_state(plane, namespace, name)
        return state is not None and bool(state.ready)

    assert wait_until(ready, WAIT_S), why()
    assert container_state(plane, namespace, name).restart_count == 0
    assert started.kill(namespace, name, name) == 1

    def restarted_and_ready() -> bool:
        state = container_state(plane, namespace, name)
        return state is not None and state.restart_count >= 1 and bool(state.ready)

    assert wait_until(restarted_and_ready, WAIT_S), why()
    assert "Traceback" not in started.logs(namespace, name, name)
