"""One real Kubernetes node (local_kube.node): the kubelet, kube-scheduler and containerd built
here from pinned sources join the real control plane, and pods of our sidecar image, loaded
from the local image store, run on it. The kubelet's probes read the sidecar's /healthz, and a
container killed under the kubelet is started again. Skipped with one line where the node
cannot run (binaries, root, runc, images), unless ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names
``kube-node`` (CI does)."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import watch
from kubernetes.client import AppsV1Api, CoordinationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from assignor.group_plan import removal_order
from benchmarks.support.lake_readers import key_counts
from consumer_sdk.lake.spark_config import SparkSinkConfig
from contract.local_ports import free_port
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.paced_load import PacedLoad
from local_kube.control_plane import ControlPlane, ControlPlaneUnavailable, control_plane, create
from local_kube.node import (
    POD_GATEWAY,
    Node,
    NodeUnavailable,
    api_server_env,
    node,
    node_problem,
    node_required,
    pod,
)
from tests.kafka_helpers import TrackedLoad
from tests.sdk_helpers import wait_until
from tests.test_helm_chart import CHART, run_helm

pytestmark = pytest.mark.kube_binaries  # make test runs these once the Go build ends
SIDECAR = "localhost/kafka-autoscaler-sidecar:latest"
CONSUMER = "localhost/kafka-autoscaler-consumer:latest"
WAIT_S = 90.0


def _unavailable(reason: str) -> None:
    if node_required():
        pytest.fail(f"the kube-node leg is required here but cannot run: {reason}")
    pytest.skip(f"kube-node leg skipped: {reason}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, Node]]:
    """A control plane with one node that has our two images; pods on its bridge reach the
    API server at the bridge's gateway."""
    problem = node_problem()
    if problem is not None:
        _unavailable(problem)
    try:
        with (
            control_plane(pod_addresses=(POD_GATEWAY,)) as plane,
            node(plane, images=[SIDECAR, CONSUMER]) as started,
        ):
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


@pytest.fixture
def restricted_namespace(cluster: tuple[ControlPlane, Node]) -> str:
    """A namespace where the "restricted" Pod Security Standard is enforced: a pod that
    runs as root, keeps a capability or has no seccomp profile is refused."""
    plane, _ = cluster
    name = f"r-{uuid.uuid4().hex[:8]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }
    create(plane.client(), None, namespace)
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


def sidecar_pod(kafka: ApacheKafka, name: str, port: int) -> dict[str, Any]:
    """The sidecar (``--scaler none``) on ``kafka``, its /healthz probed by the kubelet."""
    topic = f"node-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, 2)
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


@pytest.fixture
def pod_kafka() -> Iterator[ApacheKafka]:
    """Apache Kafka on the node's bridge. The node's tests take no leg of the session's
    clusters: a test parametrized by the leg would split the module in two and start the
    node (a minute) once per part."""
    with ApacheKafka(host=POD_GATEWAY) as kafka:
        yield kafka


def test_the_sidecar_pod_gets_ready_by_its_healthz_and_a_killed_one_is_started_again(
    cluster: tuple[ControlPlane, Node], namespace: str, pod_kafka: ApacheKafka
) -> None:
    plane, started = cluster
    name = "sizer"
    create(plane.client(), namespace, sidecar_pod(pod_kafka, name, free_port()))
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


# The chart on the node -------------------------------------------------------------------
RELEASE = "sink"
GRACE_S = 30
CAPACITY = 100  # records/s one consumer drains, as declared to the sidecar
PARTITIONS = 4


def chart_objects(
    plane: ControlPlane, kafka: ApacheKafka, topic: str, namespace: str, **overrides: Any
) -> list[dict[str, Any]]:
    """The chart rendered by Helm for pods on the node's bridge: Kafka and the API server at
    the bridge's gateway, the images the node has, a declared capacity of 100 records/s and
    short windows so a load step shows in seconds; ``overrides`` replace top-level values."""
    values = {
        "kafka": {"bootstrapServers": kafka.bootstrap_servers},
        "group": f"g-{topic}",
        "topics": [topic],
        "capacity": CAPACITY,
        "minReplicas": 1,
        "maxReplicas": 3,
        "scaleDownWindowSeconds": 5,
        "drainSeconds": 10,
        "waitTimeSeconds": 0.5,
        "extraSettings": {"AUTOSCALER_WINDOW": "6", "AUTOSCALER_MIN_WINDOW": "2"},
        "extraEnv": [{"name": k, "value": v} for k, v in api_server_env(plane).items()],
        "image": {
            name: {"repository": image.rsplit(":", 1)[0], "tag": "latest", "pullPolicy": "Never"}
            for name, image in (("consumer", CONSUMER), ("sidecar", SIDECAR))
        },
        "workload": {"terminationGracePeriodSeconds": GRACE_S},
        "consumer": {
            "args": ["--sink", "null"],  # named: the chart has no default sink
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        },
        "sidecar": {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}},
        **overrides,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values, file)
        file.flush()
        done = run_helm("template", RELEASE, str(CHART), "-f", file.name, "--namespace", namespace)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@dataclass
class PodWatch:
    """Every pod of a namespace as last seen (a watch in a thread), deleted ones included."""

    plane: ControlPlane
    namespace: str
    last: dict[str, Any] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """List, then watch on from the list's version, so that no deletion falls between
        two watches (a watch restarted afresh lists only the pods still there, and a pod
        deleted in between was never seen gone); listed afresh only when the version has
        expired, and then a pod no longer listed is gone."""
        api = CoreV1Api(self.plane.client())
        version: str | None = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    listed: Any = api.list_namespaced_pod(self.namespace)
                    names = {pod.metadata.name for pod in listed.items}
                    self.gone.update(name for name in self.last if name not in names)
                    self.last.update({pod.metadata.name: pod for pod in listed.items})
                    version = listed.metadata.resource_version
                watcher = watch.Watch()  # type: ignore[no-untyped-call]
                events = watcher.stream(  # type: ignore[no-untyped-call]
                    api.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=2,
                )
                for event in events:
                    name = event["object"].metadata.name
                    self.last[name] = event["object"]
                    version = event["object"].metadata.resource_version
                    if event["type"] == "DELETED":
                        self.gone.add(name)
            except Exception:  # an expired version (410) or a dropped connection: list again
                version = None
                self.stopping.wait(0.2)

    def live(self) -> list[str]:
        """Pods not being deleted, by name."""
        return sorted(
            name
            for name, seen in self.last.items()
            if name not in self.gone and seen.metadata.deletion_timestamp is None
        )

    def ready(self) -> list[str]:
        """Live pods whose every container is ready."""
        ready = []
        for name in self.live():
            statuses = self.last[name].status.container_statuses or []
            if len(statuses) == 2 and all(status.ready for status in statuses):
                ready.append(name)
        return ready


def install(plane: ControlPlane, namespace: str, objects: list[dict[str, Any]]) -> PodWatch:
    """Create the rendered objects (the cluster-scoped admission policy too); a started watch
    of the namespace's pods."""
    for obj in objects:
        scoped = not obj["kind"].startswith("ValidatingAdmissionPolicy")
        create(plane.client(), namespace if scoped else None, obj)
    pods = PodWatch(plane, namespace)
    threading.Thread(target=pods.run, daemon=True).start()
    return pods


def pods_explained(started: Node, pods: PodWatch) -> Callable[[], str]:
    """What to print when the chart's pods did not get where a test waited for."""

    def text() -> str:
        lines = [f"pods: {pods.live()} ready {pods.ready()} gone {sorted(pods.gone)}"]
        for name in pods.last:
            for container in ("sidecar", "consumer"):
                output = started.logs(pods.namespace, name, container)[-1500:]
                lines.append(f"--- {name} {container}:\n{output}")
        return "\n".join(lines)

    return text


def test_the_chart_scales_its_pods_with_the_load_and_the_lease_moves_with_its_holder(
    cluster: tuple[ControlPlane, Node], restricted_namespace: str
) -> None:
    """Installed on the node, the chart's sidecars (the Lease holder) scale the Deployment
    out for a load step, on after the holder's pod is deleted, and back in when the load
    stops; the pod deleted then is the one the assignor emptied, and its consumer exits
    cleanly within the grace period."""
    plane, started = cluster
    apps, leases = AppsV1Api(plane.client()), CoordinationV1Api(plane.client())
    with ApacheKafka(host=POD_GATEWAY) as kafka:
        topic = f"chart-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, PARTITIONS)
        objects = chart_objects(plane, kafka, topic, restricted_namespace)
        lease_name = next(o for o in objects if o["kind"] == "ConfigMap")["data"][
            "AUTOSCALER_LEASE_NAME"
        ]
        pods = install(plane, restricted_namespace, objects)
        why = pods_explained(started, pods)

        def replicas() -> int:
            spec = apps.read_namespaced_deployment(RELEASE, restricted_namespace).spec
            return int(spec.replicas or 0) if spec is not None else 0

        def holder() -> str | None:
            try:
                spec = leases.read_namespaced_lease(lease_name, restricted_namespace).spec
            except ApiException:
                return None
            return spec.holder_identity if spec is not None else None

        try:
            assert wait_until(
                lambda: len(pods.ready()) == 1 and holder() in pods.ready(), WAIT_S
            ), why()
            # 2 x 40 records/s per consumer: two consumers at 80 % of the declared 100.
            with PacedLoad(kafka.bootstrap_servers, topic, 160, PARTITIONS):
                assert wait_until(lambda: replicas() == 2 and len(pods.ready()) == 2, WAIT_S), why()
                first_holder = holder()
                assert first_holder is not None, why()
                CoreV1Api(plane.client()).delete_namespaced_pod(first_holder, restricted_namespace)
                assert wait_until(lambda: holder() not in (None, first_holder), WAIT_S), why()
                # The new holder measures from scratch: a burst from a producer starved while
                # the pod was replaced may move it a step out and back before it settles.
                assert wait_until(
                    lambda: replicas() == 2 and len(pods.ready()) == len(pods.live()) == 2,
                    WAIT_S,
                ), why()
            survivors = pods.ready()
            emptied = removal_order({name: name for name in survivors})[0]
            assert wait_until(
                lambda: replicas() == 1 and pods.live() == [n for n in survivors if n != emptied],
                WAIT_S,
            ), why()
            assert wait_until(lambda: emptied in pods.gone, GRACE_S), why()
            finished = pods.last[emptied].status.container_statuses
            consumer = next(c for c in finished if c.name == "consumer")
            assert consumer.state.terminated is not None, why()
            assert consumer.state.terminated.exit_code == 0, why()
            assert holder() in pods.live(), why()
        finally:
            pods.stopping.set()


def test_a_consumer_killed_mid_batch_is_restarted_and_its_delta_table_holds_every_record_once(
    cluster: tuple[ControlPlane, Node], namespace: str, tmp_path: Path
) -> None:
    """The chart's consumer writing a Delta table on a hostPath volume through Spark, killed
    (SIGKILL) while records arrive: the kubelet starts it again, and delta-rs counts every
    acknowledged record exactly once."""
    plane, started = cluster
    lake = tmp_path / "lake"
    lake.mkdir()
    lake.chmod(0o777)  # the image's user is not this one
    with ApacheKafka(host=POD_GATEWAY) as kafka:
        topic = f"lake-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, PARTITIONS)
        objects = chart_objects(
            plane,
            kafka,
            topic,
            namespace,  # a hostPath for the table: not "restricted"
            capacity=1000,
            maxReplicas=1,
            batchBytes=262144,
            extraSettings={"AUTOSCALER_SPARK_WAREHOUSE": "/lake"},
            extraVolumes=[{"name": "lake", "hostPath": {"path": str(lake)}}],
            consumer={
                "args": ["--sink", "spark"],
                "extraVolumeMounts": [{"name": "lake", "mountPath": "/lake"}],
                "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
            },
        )
        pods = install(plane, namespace, objects)
        why = pods_explained(started, pods)
        config = SparkSinkConfig(warehouse=str(lake))
        table = config.table_for(topic)

        def landed() -> int:
            return sum(key_counts(config, table).values())

        def restarted() -> bool:
            statuses = pods.last[name].status.container_statuses or []
            consumer = next((c for c in statuses if c.name == "consumer"), None)
            return consumer is not None and consumer.restart_count >= 1

        try:
            with TrackedLoad(kafka.bootstrap_servers, topic, PARTITIONS) as load:
                assert wait_until(lambda: landed() > 0, 240.0), why()
                [name] = pods.live()
                assert started.kill(namespace, name, "consumer") == 1
                killed_at = landed()
                assert wait_until(restarted, WAIT_S), why()
                assert wait_until(lambda: landed() > killed_at, 240.0), why()
        finally:
            pods.stopping.set()
        acked = load.acked
        assert wait_until(lambda: landed() >= len(acked), 240.0), why()
        counts = key_counts(config, table)
        assert set(counts) == acked, why()
        assert set(counts.values()) == {1}, why()


def test_the_chart_does_not_scale_into_consumers_that_exit_at_once(
    cluster: tuple[ControlPlane, Node], restricted_namespace: str
) -> None:
    """Every consumer container exits at start (a sink setting it refuses): the sidecar holds
    the Deployment at the count it had when the failure showed, though the load asks for
    three, and says why in the consumer's own words (its termination message: the chart
    keeps the last log lines)."""
    plane, started = cluster
    apps = AppsV1Api(plane.client())
    with ApacheKafka(host=POD_GATEWAY) as kafka:
        topic = f"fails-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, PARTITIONS)
        consumer = {"args": ["--sink", "nowhere"], "resources": {"requests": {"cpu": "50m"}}}
        pods = install(
            plane,
            restricted_namespace,
            chart_objects(plane, kafka, topic, restricted_namespace, consumer=consumer),
        )
        why = pods_explained(started, pods)

        def replicas() -> int:
            spec = apps.read_namespaced_deployment(RELEASE, restricted_namespace).spec
            return int(spec.replicas or 0) if spec is not None else 0

        def said() -> list[str]:
            return [
                line
                for name in pods.live()
                for line in started.logs(restricted_namespace, name, "sidecar").splitlines()
                if "consumers are not joining the group" in line
            ]

        try:
            # 3 x 100 records/s: three consumers of the declared 100 are needed.
            with PacedLoad(kafka.bootstrap_servers, topic, 3 * CAPACITY, PARTITIONS):
                assert wait_until(lambda: bool(said()), WAIT_S), why()
                held = replicas()
                counts = []
                for _ in range(30):  # half a minute of the sidecar's decisions
                    counts.append(replicas())
                    time.sleep(1.0)
            line = said()[0]
            assert "--sink (AUTOSCALER_SINK) must be spark" in line, line
            assert "exited with 2" in line or "last exit code 2" in line, line
            assert max(counts) <= held < 3, (counts, why())
        finally:
            pods.stopping.set()
