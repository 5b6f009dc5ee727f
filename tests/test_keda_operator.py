"""The sidecar's external scaler driven by the real KEDA and the real HPA controller.

KEDA's operator and metrics server (built from kedacore/keda by ``make kube-binaries``; see
local_kube/keda.py) run against a real kube-apiserver whose kube-controller-manager runs
the HPA controller. A ScaledObject made from examples/kubernetes/keda/scaledobject.yaml points
its ``external`` trigger at the sidecar's KEDA service; the Deployment must follow the count the
sidecar answers, up and down, through KEDA's HPA. Skipped when the binaries are missing, unless
``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names ``keda`` (CI does).
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoreV1Api

from local_kafka.clusters import ClusterKind, KafkaCluster, required_legs
from local_kafka.secured import Certificates
from local_kube.control_plane import (
    ControlPlane,
    ControlPlaneUnavailable,
    control_plane,
    create,
    dynamic,
    workload,
)
from local_kube.keda import install_keda
from sidecar.external_scaler.answers import METRIC_NAME, Answers
from sidecar.external_scaler.server import ExternalScalerServer, Tls, serve_keda
from sidecar.scalers.keda_target import KedaTarget
from sidecar.scalers.pod_deletion import DELETION_COST, DeploymentPods
from tests.conftest import cluster_or_skip

pytestmark = pytest.mark.kube_binaries  # make test runs these once the Go build ends
EXAMPLE = Path(__file__).parents[1] / "examples" / "kubernetes" / "keda" / "scaledobject.yaml"
NAMESPACE = "shop"
HPA_SYNC_S = 1.0  # Kubernetes decides every 15 s; the same controller, sooner
WAIT_S = 90.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """A control plane with KEDA installed, for the module."""
    try:
        with control_plane(hpa_sync_period_s=HPA_SYNC_S) as started:
            install_keda(started)
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            create(started.client(), None, namespace)
            yield started
    except ControlPlaneUnavailable as exc:
        if "keda" in required_legs():
            pytest.fail(f"the keda leg is required here but cannot start: {exc}")
        pytest.skip(str(exc))


@contextlib.contextmanager
def sidecar(name: str, count: list[int | None]) -> Iterator[ExternalScalerServer]:
    """The sidecar's KEDA service for ScaledObject shop/``name``, answering ``count[0]``."""
    server = serve_keda("127.0.0.1", 0, Answers(name, NAMESPACE, name, lambda: count[0]))
    try:
        yield server
    finally:
        server.stop(grace_s=0)


def wait_for(what: str, check: Callable[[], bool], plane: ControlPlane) -> None:
    """Wait until ``check()`` holds; fail naming ``what`` with KEDA's and the HPA's logs."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)  # KEDA and the HPA act on their own intervals; nothing to await
    pytest.fail(
        f"{what} within {WAIT_S} s\n--- keda-operator\n{plane.log_tail('keda-operator')}"
        f"\n--- kube-controller-manager\n{plane.log_tail('kube-controller-manager')}"
    )


def scaled_object(name: str, scaler_port: int, **metadata: str) -> dict[str, Any]:
    """The example ScaledObject for Deployment ``name``, its trigger aimed at this machine."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    body["spec"]["scaleTargetRef"] = {"name": name}
    body["spec"]["pollingInterval"] = 1
    trigger = body["spec"]["triggers"][0]
    trigger["metadata"] = {
        **trigger["metadata"],
        "scalerAddress": f"127.0.0.1:{scaler_port}",
        "group": name,
        **metadata,
    }
    return body


def scaled(plane: ControlPlane, body: dict[str, Any]) -> None:
    """Create the ScaledObject ``body`` and the Deployment it names, at 1 replica."""
    name = body["spec"]["scaleTargetRef"]["name"]
    create(plane.client(), NAMESPACE, workload("Deployment", name, 1))
    create(plane.client(), NAMESPACE, body)


def replicas(plane: ControlPlane, name: str) -> int:
    scale = AppsV1Api(plane.client()).read_namespaced_deployment_scale(name, NAMESPACE)
    assert scale.spec is not None
    return int(scale.spec.replicas or 0)


def test_kedas_hpa_scales_the_deployment_to_the_sidecars_count(plane: ControlPlane) -> None:
    count: list[int | None] = [3]
    with sidecar("orders-sink", count) as server:
        scaled(plane, scaled_object("orders-sink", server.port))
        wait_for("the Deployment at 3", lambda: replicas(plane, "orders-sink") == 3, plane)
        for wanted in (10, 11, 2):
            count[0] = wanted
            wait_for(
                f"the Deployment at the sidecar's {wanted}",
                lambda: replicas(plane, "orders-sink") == count[0],
                plane,
            )

    hpas = dynamic(plane.client()).resources.get(
        api_version="autoscaling/v2", kind="HorizontalPodAutoscaler"
    )
    hpa = hpas.get(name="keda-hpa-orders-sink", namespace=NAMESPACE).to_dict()
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"].endswith(METRIC_NAME)
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}


def test_a_scaled_object_the_sidecar_does_not_size_is_refused_and_not_scaled(
    plane: ControlPlane,
) -> None:
    count: list[int | None] = [4]
    log = plane.root / "keda-operator.log"
    with sidecar("orders-typo", count) as server:
        scaled(plane, scaled_object("payments", server.port))
        scaled(plane, scaled_object("orders-typo", server.port, groupp="orders"))
        wait_for(
            "KEDA's operator logging the sidecar's refusals",
            lambda: (
                "'shop/payments' is not sized here" in log.read_text(errors="replace")
                and "trigger metadata 'groupp'" in log.read_text(errors="replace")
            ),
            plane,
        )
    assert replicas(plane, "payments") == 1
    assert replicas(plane, "orders-typo") == 1


@pytest.fixture(scope="module")
def apache() -> Iterator[KafkaCluster]:
    """Apache Kafka for KEDA's own Kafka scaler: its client (sarama) cannot read the embedded
    broker's metadata answers ('error decoding packet: invalid length'). The module takes no
    leg of the session's clusters, which would split it and start KEDA twice."""
    with cluster_or_skip(ClusterKind.APACHE) as cluster:
        yield cluster


def test_kedas_kafka_scaler_sizes_a_deployment_by_the_groups_lag(
    plane: ControlPlane, apache: KafkaCluster
) -> None:
    # KEDA's own Kafka scaler, the peer of the benchmarks: replicas = ceil(total lag /
    # lagThreshold), at most the partitions. The group has committed offset 0 everywhere;
    # 5,000 records behind at lagThreshold 1,000 is 5 consumers. KEDA's HPA has no behavior,
    # so it ramps as sidecar/keda.py models it: at most max(2x, 4) per decision, 1 -> 4 -> 5
    # (behavior's default policies, max(+100 %, +4 pods), would go 1 -> 5 at once).
    kafka = apache.bootstrap_servers
    topic = apache.create_topic(6)
    group = f"keda-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    committer.commit(offsets=[KafkaPartition(topic, p, 0) for p in range(6)], asynchronous=False)
    committer.close()
    producer = Producer({"bootstrap.servers": kafka})
    for i in range(5000):
        producer.produce(topic, value=b"x", partition=i % 6)
    assert producer.flush(30) == 0
    name = f"lag-{group}"
    scaled(
        plane,
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "scaleTargetRef": {"name": name},
                "pollingInterval": 1,
                "minReplicaCount": 1,
                "maxReplicaCount": 10,
                "triggers": [
                    {
                        "type": "kafka",
                        "metadata": {
                            "bootstrapServers": kafka,
                            "consumerGroup": group,
                            "topic": topic,
                            "lagThreshold": "1000",
                        },
                    }
                ],
            },
        },
    )
    seen: list[int] = []

    def at_five() -> bool:
        now = replicas(plane, name)
        if not seen or seen[-1] != now:
            seen.append(now)
        return now == 5

    wait_for("the Deployment at ceil(5000 / 1000) = 5", at_five, plane)
    hpa = AutoscalingV2Api(plane.client()).read_namespaced_horizontal_pod_autoscaler(
        f"keda-hpa-{name}", NAMESPACE
    )
    assert hpa.spec is not None and hpa.spec.behavior is None
    assert seen == [1, 4, 5]


def test_kedas_scale_down_deletes_the_pods_the_sidecar_marked(plane: ControlPlane) -> None:
    # The sidecar as --scaler keda runs it: the count KEDA reads, and before it drops, the
    # pods the assignor empties first get the lowest pod-deletion-cost. The HPA scales the
    # Deployment down and its ReplicaSet deletes exactly those.
    name = "refunds-sink"
    target = KedaTarget(DeploymentPods(plane.client(), NAMESPACE, name))
    target.scale(4)
    core = CoreV1Api(plane.client())

    def live() -> dict[str, str | None]:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app={name}").items
        metas = [p.metadata for p in pods if p.metadata is not None and p.metadata.name]
        return {
            str(m.name): (m.annotations or {}).get(DELETION_COST)
            for m in metas
            if m.deletion_timestamp is None
        }

    server = serve_keda("127.0.0.1", 0, Answers(name, NAMESPACE, name, target.replicas))
    try:
        scaled(plane, scaled_object(name, server.port))
        wait_for("4 pods", lambda: replicas(plane, name) == 4 and len(live()) == 4, plane)
        target.scale(2)
        marked = {pod for pod, cost in live().items() if cost not in (None, "0")}
        assert len(marked) == 2
        wait_for("2 pods", lambda: replicas(plane, name) == 2 and len(live()) == 2, plane)
    finally:
        server.stop(grace_s=0)
    assert not marked & set(live())


def test_kedas_hpa_scales_through_the_scaler_over_mutual_tls_and_not_without_a_certificate(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """The sidecar's service with TLS and a client CA: KEDA given caCert, tlsClientCert and
    tlsClientKey (a TriggerAuthentication over a Secret) scales; KEDA without the client
    certificate gets no answer, and its Deployment stays where it was."""
    pki = Certificates.make(tmp_path / "pki")
    served = pki.serving("keda-scaler", "sizer", ["127.0.0.1"])
    client = pki.client("keda-operator")
    tls = Tls(str(served.certificate), str(served.key), str(pki.ca.certificate))
    name, stranger = f"mtls-{uuid.uuid4().hex[:6]}", f"nocert-{uuid.uuid4().hex[:6]}"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": {
            "ca.crt": pki.ca.certificate.read_text(),
            "tls.crt": client.certificate.read_text(),
            "tls.key": client.key.read_text(),
        },
    }
    params = {"caCert": "ca.crt", "tlsClientCert": "tls.crt", "tlsClientKey": "tls.key"}
    authentication = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "secretTargetRef": [
                {"parameter": parameter, "name": name, "key": key}
                for parameter, key in params.items()
            ]
        },
    }
    counts: dict[str, int | None] = {name: 4, stranger: 4}
    answers = Answers(name, NAMESPACE, name, lambda: counts[name])
    server = serve_keda("127.0.0.1", 0, answers, tls=tls)
    try:
        create(plane.client(), NAMESPACE, secret)
        create(plane.client(), NAMESPACE, authentication)
        trusted = scaled_object(name, server.port)
        trusted["spec"]["triggers"][0]["authenticationRef"] = {"name": name}
        scaled(plane, trusted)
        wait_for("the Deployment at 4 over mutual TLS", lambda: replicas(plane, name) == 4, plane)
        # The CA alone (no client certificate): the handshake fails, nothing scales.
        ca_only = {
            **authentication,
            "metadata": {"name": stranger, "namespace": NAMESPACE},
            "spec": {"secretTargetRef": [{"parameter": "caCert", "name": name, "key": "ca.crt"}]},
        }
        create(plane.client(), NAMESPACE, ca_only)
        anonymous = scaled_object(stranger, server.port, group=name)
        anonymous["spec"]["triggers"][0]["authenticationRef"] = {"name": stranger}
        scaled(plane, anonymous)

        def refused() -> list[str]:
            return [
                line
                for line in plane.log_tail("keda-operator").splitlines()
                if stranger in line and "code = Unavailable" in line
            ]

        wait_for(
            "KEDA refused at the handshake without a client certificate",
            lambda: bool(refused()),
            plane,
        )
        assert replicas(plane, stranger) == 1
    finally:
        server.stop(grace_s=0)
