"""The autoscaling benchmark's consumers as pods of a Deployment, sized by ours or by KEDA.

One control plane (kube-apiserver, kube-controller-manager with its HPA controller at
Kubernetes' 15 s sync, KEDA's operator and metrics server; :mod:`local_kube`) serves every
policy. Per policy, a namespace holds a Deployment ``consumers`` whose pods become consumer
processes through one :class:`~benchmarks.support.pod_runner.PodRunner`, whoever sizes it:

- ``sidecar``: our sidecar, ``--scaler kubernetes``, patches the Deployment's scale;
- ``keda-external``: our sidecar, ``--scaler keda``, answers KEDA's external scaler; the
  ScaledObject is the shipped example (examples/kubernetes/keda/scaledobject.yaml);
- ``keda-kafka``: KEDA's own Kafka scaler at a ``lagThreshold``, KEDA's and the HPA's defaults
  otherwise; our sidecar runs with ``--scaler none`` (it publishes the speeds our assignor packs
  by, and its /status gives the lag the benchmark samples);
- ``fixed``: nobody; the Deployment stays at its replicas.
"""

from __future__ import annotations

import contextlib
import copy
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoreV1Api
from kubernetes.utils import parse_quantity

from benchmarks.support.pod_runner import PodRunner
from contract.local_ports import free_port
from local_kube.control_plane import ControlPlane, create, dynamic, workload

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "kubernetes" / "keda" / "scaledobject.yaml"
WORKLOAD = "consumers"
SIZINGS = ("sidecar", "keda-external", "keda-kafka", "fixed")
GRACE_S = 30  # Kubernetes' default terminationGracePeriodSeconds


@dataclass(frozen=True)
class Sizing:
    """Who sizes a policy's Deployment (one of SIZINGS), its replicas at the start, and
    KEDA's lagThreshold for ``keda-kafka``."""

    kind: str
    replicas: int = 0
    lag_threshold: int = 0


@dataclass
class Pods:
    """A policy's Deployment while it runs: what the sidecar needs to reach it, its consumer
    processes, and every change of its replicas seen (``hpa`` lines in the sidecar log's
    format, so the benchmark counts KEDA's scale events as it counts the sidecar's).

    ``replicas`` is the Deployment's scale as last read (what the HPA or the sidecar
    decided, which the processes follow with a delay); ``hpa_lag`` the total of the external
    metric at the HPA's last sync as its status reports it (KEDA's view of the lag), None
    until an HPA has synced."""

    namespace: str
    sidecar_env: dict[str, str]
    runner: PodRunner
    apps: AppsV1Api
    autoscaling: AutoscalingV2Api
    changes: list[str] = field(default_factory=list)
    replicas: int | None = None
    hpa_lag: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    def start(self) -> None:
        """Start the pods' processes and the watch of the Deployment's scale and HPA."""
        self.runner.start()
        self._watcher = threading.Thread(
            target=self._watch, name=f"watch-{self.namespace}", daemon=True
        )
        self._watcher.start()

    def stop_watching(self) -> None:
        """End the watch (the processes run on until the runner stops)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def running(self) -> int:
        """Consumer processes alive, stopping ones included: what the policy pays for."""
        return len(self.runner.running)

    def _watch(self) -> None:
        seen: int | None = None
        ticks = 0
        while not self._stop.wait(0.25):
            ticks += 1
            if ticks % 4 == 0:
                self.hpa_lag = self._hpa_lag()
            scale = self.apps.read_namespaced_deployment_scale(WORKLOAD, self.namespace)
            replicas = int(scale.spec.replicas or 0) if scale.spec is not None else 0
            self.replicas = replicas
            if seen is not None and replicas != seen:
                stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:23]
                way = "scale_up" if replicas > seen else "scale_down"
                self.changes.append(f"{stamp} hpa {way} {seen} -> {replicas}: Deployment scale")
            seen = replicas

    def _hpa_lag(self) -> float | None:
        """The external metric's total at the HPA's last sync: its average per pod times
        the pods it averaged over (the HPA's status; KEDA names its HPA keda-hpa-NAME)."""
        hpas = self.autoscaling.list_namespaced_horizontal_pod_autoscaler(self.namespace).items
        for status in (hpa.status for hpa in hpas if hpa.status is not None):
            for metric in status.current_metrics or []:
                current = metric.external.current if metric.external is not None else None
                if current is not None and current.average_value is not None:
                    average: Any = parse_quantity(current.average_value)  # type: ignore[no-untyped-call]
                    return float(average) * int(status.current_replicas or 0)
        return None

    def merged_log(self, sidecar_log: Path) -> str:
        """The sidecar's log, every pod's and the replica changes, in time order."""
        sources = [sidecar_log, *sorted(self.runner.log_dir.glob("*.log"))]
        lines = [line for path in sources for line in path.read_text(errors="replace").splitlines()]
        stamped = [line for line in [*lines, *self.changes] if _STAMP.match(line)]
        return "\n".join(sorted(stamped, key=lambda line: line[:23]))


_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


class KubeSite:
    """The control plane with KEDA, shared by every policy's namespace."""

    def __init__(self, plane: ControlPlane, max_replicas: int) -> None:
        self.plane = plane
        self.max_replicas = max_replicas

    @contextlib.contextmanager
    def workload(
        self, slug: str, sizing: Sizing, env: Mapping[str, str], out: Path, group: str
    ) -> Iterator[Pods]:
        """Namespace ``slug`` with the Deployment and, for KEDA, its ScaledObject; the pods
        run as processes of ``command`` with ``env`` until the block ends."""
        if sizing.kind not in SIZINGS:
            raise ValueError(f"sizing must be one of {', '.join(SIZINGS)}, got {sizing.kind!r}")
        admin = self.plane.client()  # one per policy: the policies run side by side
        namespace = slug[:63].strip("-")
        create(
            admin, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        create(admin, namespace, workload("Deployment", WORKLOAD, sizing.replicas, GRACE_S))
        sidecar_env = {
            "KUBECONFIG": str(self.plane.kubeconfig()),
            "AUTOSCALER_NAMESPACE": namespace,
            "AUTOSCALER_WORKLOAD_NAME": WORKLOAD,
            "AUTOSCALER_SCALER": "kubernetes" if sizing.kind == "sidecar" else "none",
        }
        if sizing.kind == "keda-external":
            port = free_port()
            sidecar_env |= {"AUTOSCALER_SCALER": "keda", "AUTOSCALER_KEDA_PORT": str(port)}
            create(admin, namespace, external_scaled_object(port, group))
        elif sizing.kind == "keda-kafka":
            bootstrap = env["AUTOSCALER_BOOTSTRAP_SERVERS"]
            body = kafka_scaled_object(bootstrap, group, sizing, self.max_replicas)
            create(admin, namespace, body)
        member = [sys.executable, "-m", "benchmarks.support.autoscale_member"]
        runner = PodRunner(
            CoreV1Api(admin),
            namespace,
            f"app={WORKLOAD}",
            member,
            out / "pods",
            env={"PYTHONPATH": str(ROOT), **env},  # a policy may run another tree's code
        )
        pods = Pods(namespace, sidecar_env, runner, AppsV1Api(admin), AutoscalingV2Api(admin))
        pods.start()
        try:
            yield pods
        finally:
            pods.stop_watching()
            if sizing.kind.startswith("keda"):
                scaled_objects = dynamic(admin).resources.get(
                    api_version="keda.sh/v1alpha1", kind="ScaledObject"
                )
                scaled_objects.delete(name=WORKLOAD, namespace=namespace)
            runner.stop(grace_s=GRACE_S)


def external_scaled_object(port: int, group: str) -> dict[str, Any]:
    """The shipped example ScaledObject, its trigger aimed at the sidecar on this machine."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    body["metadata"] = {"name": WORKLOAD}
    body["spec"]["scaleTargetRef"] = {"name": WORKLOAD}
    trigger = body["spec"]["triggers"][0]
    trigger["metadata"] = {"scalerAddress": f"127.0.0.1:{port}", "group": group}
    return body


def kafka_scaled_object(
    bootstrap: str, group: str, sizing: Sizing, max_replicas: int
) -> dict[str, Any]:
    """KEDA's Kafka scaler on the group's lag, KEDA's and the HPA's defaults but for two
    settings: at least one consumer (the trace never idles, so scaling to zero plays no part;
    from zero, KEDA's activation would wait for its 30 s polling) and ``offsetResetPolicy:
    earliest``, where the consumers start reading a partition with no committed offset."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": WORKLOAD},
        "spec": {
            "scaleTargetRef": {"name": WORKLOAD},
            "minReplicaCount": max(1, sizing.replicas),
            "maxReplicaCount": max_replicas,
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": bootstrap,
                        "consumerGroup": group,
                        "lagThreshold": str(sizing.lag_threshold),
                        "offsetResetPolicy": "earliest",
                    },
                }
            ],
        },
    }


def commit_start(bootstrap: str, group: str, topics: Sequence[str], partitions: int) -> None:
    """Offset 0 committed for ``group`` on every partition of ``topics``: the group exists
    before its first consumer, as a deployed group's does. KEDA's Kafka scaler without a
    ``topic`` finds the group's topics by its committed offsets; with none it describes an
    empty list of topics, which asks the broker for every topic in the cluster, and counts
    their whole logs (``offsetResetPolicy: earliest``) as the group's lag."""
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = [KafkaPartition(t, p, 0) for t in topics for p in range(partitions)]
        committer.commit(offsets=offsets, asynchronous=False)
    finally:
        committer.close()
