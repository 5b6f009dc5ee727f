"""The kubernetes scaler, Lease election, RBAC and manifests against a real kube-apiserver.

etcd, kube-apiserver and kube-controller-manager (deployment and replicaset controllers, so a
Deployment's scale really creates and deletes pods) run from the binaries ``make
kube-binaries`` builds; see local_kube/control_plane.py. No nodes: pods stay Pending, which is
enough for the ReplicaSet controller to create and delete them. Skipped when the binaries are
missing, unless ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names ``kube-apiserver`` (CI does).
The same scaler and Lease run against the in-process server in test_sidecar_kubernetes.py.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import (
    ApiClient,
    AppsV1Api,
    AuthenticationV1TokenRequest,
    CoordinationV1Api,
    CoreV1Api,
    V1Namespace,
    V1ObjectMeta,
    V1TokenRequestSpec,
    VersionApi,
)
from kubernetes.client.exceptions import ApiException

from assignor.group_plan import removal_order
from benchmarks.support.pod_runner import PodRunner
from local_kube.control_plane import (
    DISCOVERY_CACHE,
    IDENTITIES,
    IMAGE,
    ControlPlane,
    ControlPlaneUnavailable,
    control_plane,
    control_plane_required,
    create,
    discovery_cache,
    dynamic,
    workload,
)
from sidecar.config import parse_args
from sidecar.k8s_lease import KubernetesLease
from sidecar.scalers.kubernetes import DELETION_COST, KubernetesScaler, ScalerError

pytestmark = pytest.mark.kube_binaries  # make test runs these once the Go build ends
EXAMPLES = Path(__file__).parents[1] / "examples" / "kubernetes"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """One control plane for the module (starting one takes a few seconds)."""
    try:
        with control_plane() as started:
            yield started
    except ControlPlaneUnavailable as exc:
        if control_plane_required():
            pytest.fail(f"the kube-apiserver leg is required here but cannot start: {exc}")
        pytest.skip(f"kube-apiserver leg skipped: {exc}")


@pytest.fixture
def admin(plane: ControlPlane) -> ApiClient:
    """A client with the cluster-admin token."""
    return plane.client()


@pytest.fixture
def namespace(admin: ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    CoreV1Api(admin).create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
    yield name
    CoreV1Api(admin).delete_namespace(name)


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.2)  # the controllers act asynchronously; there is nothing to wait on
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def live_pods(admin: ApiClient, namespace: str, app: str) -> dict[str, dict[str, str]]:
    """Pod name -> annotations of the pods not being deleted."""
    pods = CoreV1Api(admin).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    live: dict[str, dict[str, str]] = {}
    for pod in pods:
        meta = pod.metadata
        if meta is not None and meta.name and meta.deletion_timestamp is None:
            live[meta.name] = dict(meta.annotations or {})
    return live


def pods_reach(admin: ApiClient, namespace: str, app: str, count: int) -> dict[str, Any]:
    """Wait until exactly ``count`` pods of ``app`` are live; returns them."""
    result: dict[str, Any] = wait_for(
        lambda: (pods := live_pods(admin, namespace, app)) and len(pods) == count and pods,
        f"{count} pods of {app}",
    )
    return result


def test_the_api_server_reports_the_kubernetes_version_it_was_built_from(admin: ApiClient) -> None:
    pins = Path(__file__).parents[1] / "scripts" / "kube_control_plane" / "kube" / "go.mod"
    pinned = next(
        line.split()[-1] for line in pins.read_text().splitlines() if "k8s.io/kubernetes " in line
    )
    served = VersionApi(admin).get_code()
    assert (served.git_version, served.git_tree_state) == (pinned, "clean")
    assert f"{served.major}.{served.minor}" == pinned.removeprefix("v").rsplit(".", 1)[0]


def test_the_nodes_kubelet_is_a_node_not_an_admin(plane: ControlPlane, namespace: str) -> None:
    # The Node authorizer limits the kubelet's token to its own node and the pods bound to
    # it: no secret of another namespace, no Deployment; the admin's token reads both.
    kubelet = plane.client(IDENTITIES["kubelet"][0])
    for denied in (
        lambda: CoreV1Api(kubelet).list_namespaced_secret(namespace),
        lambda: AppsV1Api(kubelet).list_namespaced_deployment(namespace),
    ):
        with pytest.raises(ApiException) as refused:
            denied()
        assert refused.value.status == 403
    admin = plane.client()
    assert CoreV1Api(admin).list_namespaced_secret(namespace).items == []


def test_deployment_scale_down_deletes_the_pods_the_assignor_emptied(
    admin: ApiClient, namespace: str
) -> None:
    create(admin, namespace, workload("Deployment", "sink", 4))
    pods_reach(admin, namespace, "sink", 4)
    scaler = KubernetesScaler(admin, namespace, "deployment", "sink")
    assert scaler.replicas() == 4
    scaler.scale(6)
    before = pods_reach(admin, namespace, "sink", 6)
    assert not any(DELETION_COST in annotations for annotations in before.values())

    emptied = removal_order({name: name for name in before})[:4]  # the assignor's order
    marked: dict[str, str | None] = {}
    write_scale = scaler._patch

    def look_then_write(
        body: list[dict[str, Any]],
    ) -> None:  # the pods as the scale write finds them
        pods = live_pods(admin, namespace, "sink")
        marked.update({name: annotations.get(DELETION_COST) for name, annotations in pods.items()})
        write_scale(body)

    scaler._patch = look_then_write  # type: ignore[method-assign]
    scaler.scale(2)
    assert sorted(name for name, cost in marked.items() if cost != "0") == sorted(emptied)
    assert sorted(int(marked[name] or 0) for name in emptied) == [-1000, -999, -998, -997]
    survivors = pods_reach(admin, namespace, "sink", 2)
    assert set(survivors) == set(before) - set(emptied)
    assert scaler.replicas() == 2


def test_statefulset_scales_through_its_scale_subresource(admin: ApiClient, namespace: str) -> None:
    create(admin, namespace, workload("StatefulSet", "sink", 1))
    scaler = KubernetesScaler(admin, namespace, "statefulset", "sink")
    scaler.scale(3)
    assert AppsV1Api(admin).read_namespaced_stateful_set("sink", namespace).spec.replicas == 3
    scaler.scale(1)
    assert scaler.replicas() == 1
    assert AppsV1Api(admin).read_namespaced_stateful_set("sink", namespace).spec.replicas == 1


def test_a_deployment_at_zero_scales_up_and_back(admin: ApiClient, namespace: str) -> None:
    # At 0 the scale's spec has no replicas (the API omits a zero): the guard of the write
    # must still hold then, or a workload scaled to zero never comes back.
    create(admin, namespace, workload("Deployment", "sink", 0))
    scaler = KubernetesScaler(admin, namespace, "deployment", "sink")
    scaler.scale(2)
    assert AppsV1Api(admin).read_namespaced_deployment("sink", namespace).spec.replicas == 2
    pods_reach(admin, namespace, "sink", 2)
    scaler.scale(0)
    assert scaler.replicas() == 0
    scaler.scale(1)
    assert scaler.replicas() == 1


def test_replicas_changed_between_read_and_write_are_read_again(
    admin: ApiClient, namespace: str
) -> None:
    create(admin, namespace, workload("Deployment", "sink", 1))
    scaler = KubernetesScaler(admin, namespace, "deployment", "sink")
    statuses: list[int] = []
    patch = scaler.apps.patch_namespaced_deployment_scale

    def racing_patch(name: str, ns: str, body: list[dict[str, Any]]) -> Any:
        if not statuses:  # someone else scales between our read and our write
            AppsV1Api(admin).patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": 2}})
        try:
            result = patch(name, ns, body)
        except ApiException as exc:
            statuses.append(exc.status or 0)
            raise
        statuses.append(200)
        return result

    scaler.apps.patch_namespaced_deployment_scale = racing_patch  # type: ignore[method-assign,assignment]
    scaler.scale(3)
    assert statuses == [422, 200]  # the server's test operation saw 2, not the 1 we read
    assert scaler.replicas() == 3


def test_a_missing_workload_says_what_to_check(admin: ApiClient, namespace: str) -> None:
    scaler = KubernetesScaler(admin, namespace, "deployment", "nope")
    with pytest.raises(ScalerError, match="HTTP 404: not found: check --namespace"):
        scaler.replicas()


class Clock:
    """A clock the test moves: lease expiry without waiting for it."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now


def test_two_sidecars_one_scales_and_the_other_takes_over(admin: ApiClient, namespace: str) -> None:
    create(admin, namespace, workload("Deployment", "sink", 1))
    clock = Clock()
    sidecars = {
        identity: (
            KubernetesLease(admin, namespace, "kafka-autoscaler-sink", identity, 15, clock),
            KubernetesScaler(admin, namespace, "deployment", "sink"),
            target,
        )
        for identity, target in (("sidecar-a", 2), ("sidecar-b", 3))
    }

    def tick(identity: str) -> bool:
        lease, scaler, target = sidecars[identity]
        if not lease.acquire():  # as Sidecar.take_lead: only the holder scales
            return False
        scaler.scale(target)
        return True

    assert tick("sidecar-a") and not tick("sidecar-b")
    clock.now += datetime.timedelta(seconds=10)
    assert tick("sidecar-a") and not tick("sidecar-b")
    assert sidecars["sidecar-a"][1].replicas() == 2
    clock.now += datetime.timedelta(seconds=16)  # a stopped renewing 16 s ago
    assert tick("sidecar-b") and not tick("sidecar-a")
    assert sidecars["sidecar-b"][1].replicas() == 3
    spec = CoordinationV1Api(admin).read_namespaced_lease("kafka-autoscaler-sink", namespace).spec
    assert spec is not None
    assert spec.holder_identity == "sidecar-b"
    assert spec.lease_transitions == 1
    sidecars["sidecar-b"][0].release()
    assert tick("sidecar-a")  # released: taken at once


def contend(
    barrier: threading.Barrier, won: list[bool], index: int, lease: KubernetesLease
) -> None:
    """Try the lease at the same moment as the others."""
    barrier.wait()
    won[index] = lease.acquire()


def test_racing_sidecars_never_both_win_the_lease(admin: ApiClient, namespace: str) -> None:
    clock = Clock()
    for round_ in range(5):
        name = f"race-{round_}"
        leases = [
            KubernetesLease(admin, namespace, name, f"sidecar-{i}", 15, clock) for i in range(3)
        ]
        barrier = threading.Barrier(len(leases))
        won: list[bool] = [False] * len(leases)
        threads = [
            threading.Thread(target=contend, args=(barrier, won, index, lease))
            for index, lease in enumerate(leases)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(won) == 1, won
        holder = CoordinationV1Api(admin).read_namespaced_lease(name, namespace).spec
        assert holder is not None
        assert holder.holder_identity == f"sidecar-{won.index(True)}"


def manifests(*, secured: bool = False) -> list[dict[str, Any]]:
    """Every object of examples/kubernetes (``secured``: and of its secured/ and keda/
    variants, but for the ScaledObject: no KEDA CRDs here)."""
    documents: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.rglob("*.yaml") if secured else EXAMPLES.glob("*.yaml")):
        if path.name == "scaledobject.yaml":
            continue
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return documents


def dry_run(admin: ApiClient, namespace: str, documents: list[dict[str, Any]]) -> list[str]:
    """Server-side apply each of ``documents`` in dry-run mode; their kinds, in order."""
    client = dynamic(admin)
    for document in documents:
        resource = client.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        client.server_side_apply(
            resource,
            body=document,
            namespace=namespace if resource.namespaced else None,
            field_manager="kafka-autoscaler-tests",
            dry_run="All",
        )
    return [document["kind"] for document in documents]


def test_example_manifests_pass_server_side_dry_run(admin: ApiClient, namespace: str) -> None:
    kinds = dry_run(admin, namespace, manifests(secured=True))
    plain = ["ConfigMap", "Deployment", "Role", "RoleBinding", "ServiceAccount"]
    # + secured/ and keda/
    assert sorted(kinds) == sorted([*plain, "ConfigMap", "Deployment", "Deployment", "Service"])
    assert (
        CoreV1Api(admin)
        .list_namespaced_config_map(namespace, field_selector="metadata.name=orders-sink")
        .items
        == []
    )  # dry run: nothing was stored


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "workload.kind=StatefulSet"],
        ["--set", "keda.enabled=true"],
        ["--set", "racks.enabled=true"],
    ],
    ids=["deployment", "statefulset", "keda", "racks"],
)
def test_the_charts_objects_pass_server_side_dry_run(
    admin: ApiClient, namespace: str, values: list[str]
) -> None:
    from tests.test_helm_chart import render

    # No KEDA CRDs on this control plane: the ScaledObject is left out.
    chart = [doc for doc in render(*values) if doc["kind"] != "ScaledObject"]
    applied = dry_run(admin, namespace, chart)
    assert {"ConfigMap", "Role", "RoleBinding", "Service", "ServiceAccount"} <= set(applied)
    assert {"Deployment", "StatefulSet"} & set(applied)


def sidecar_token(admin: ApiClient, namespace: str, service_account: str) -> str:
    """A token of ``service_account``, as the kubelet would mount it into the pod."""
    request = AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=[]))
    response = CoreV1Api(admin).create_namespaced_service_account_token(
        service_account, namespace, request
    )
    assert response.status is not None
    return str(response.status.token)


def forbidden(call: Callable[[], Any]) -> int:
    """The HTTP status ``call`` failed with (0 if it succeeded)."""
    try:
        call()
    except ApiException as exc:
        return exc.status or 0
    except ScalerError as exc:
        return 403 if "HTTP 403" in str(exc) else -1
    return 0


def test_the_example_role_allows_the_sidecar_and_nothing_more(
    plane: ControlPlane, admin: ApiClient, namespace: str
) -> None:
    for document in manifests():
        if document["kind"] != "ConfigMap":
            create(admin, namespace, document)
    create(admin, namespace, workload("Deployment", "other", 1))
    configmap = next(doc for doc in manifests() if doc["kind"] == "ConfigMap")
    deployment = next(doc for doc in manifests() if doc["kind"] == "Deployment")
    sidecar_env = next(
        container["env"]
        for container in deployment["spec"]["template"]["spec"]["containers"]
        if container["name"] == "sidecar"
    )
    environ = {
        **configmap["data"],
        **{var["name"]: var["value"] for var in sidecar_env if "value" in var},
        "AUTOSCALER_NAMESPACE": namespace,
    }
    config = parse_args([], environ)
    pods_reach(admin, namespace, config.workload_name, 1)
    other_namespace = f"{namespace}-x"
    CoreV1Api(admin).create_namespace(V1Namespace(metadata=V1ObjectMeta(name=other_namespace)))
    try:
        create(admin, other_namespace, workload("Deployment", "sink", 1))
        stranger = pods_reach(admin, other_namespace, "sink", 1)
        sidecar = plane.client(sidecar_token(admin, namespace, "orders-sink"))

        scaler = KubernetesScaler(sidecar, namespace, config.workload_kind, config.workload_name)
        scaler.scale(3)
        pods_reach(admin, namespace, config.workload_name, 3)
        scaler.scale(1)  # lists and annotates pods first
        pods_reach(admin, namespace, config.workload_name, 1)
        lease = KubernetesLease(sidecar, namespace, config.lease_name, "orders-sink-pod")
        assert lease.acquire() and lease.acquire()  # created, then renewed
        lease.release()

        core = CoreV1Api(sidecar)
        patch = {"metadata": {"annotations": {DELETION_COST: "-5"}}}
        assert (
            forbidden(lambda: KubernetesScaler(sidecar, namespace, "deployment", "other").scale(2))
            == 403
        )
        assert forbidden(lambda: core.list_namespaced_secret(namespace)) == 403
        assert forbidden(lambda: core.read_namespaced_secret("anything", namespace)) == 403
        assert (
            forbidden(
                lambda: core.patch_namespaced_pod(next(iter(stranger)), other_namespace, patch)
            )
            == 403
        )
        assert forbidden(lambda: core.list_namespaced_pod(other_namespace)) == 403
        assert (
            forbidden(
                lambda: AppsV1Api(sidecar).delete_namespaced_deployment(
                    config.workload_name, namespace
                )
            )
            == 403
        )
        assert (
            forbidden(
                lambda: KubernetesLease(
                    sidecar, namespace, "someone-elses-lease", "x"
                ).api.read_namespaced_lease("someone-elses-lease", namespace)
            )
            == 403
        )
    finally:
        CoreV1Api(admin).delete_namespace(other_namespace)


# A consumer stand-in for the pod runner: says it started, and that it stopped on SIGTERM.
POD_PROCESS = (
    "import os, signal, sys, time\n"
    "name = os.path.join(os.environ['MARKS'], os.environ['POD_NAME'])\n"
    "def stop(*_):\n"
    "    time.sleep(0.5)\n"  # a consumer handing its partitions over takes a moment
    "    open(name + '.stopped', 'w').close()\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "open(name + '.started', 'w').close()\n"
    "while True:\n"
    "    time.sleep(1)\n"
)


def pod_runner(admin: ApiClient, namespace: str, selector: str, marks: Path) -> PodRunner:
    """A started runner of :data:`POD_PROCESS` for the pods ``selector`` picks."""
    return PodRunner(
        CoreV1Api(admin),
        namespace,
        selector,
        [sys.executable, "-c", POD_PROCESS],
        marks / "logs",
        env={"MARKS": str(marks)},
        poll_s=0.05,
    ).start()


def test_the_pod_runner_runs_one_process_per_live_pod(
    admin: ApiClient, namespace: str, tmp_path: Path
) -> None:
    create(admin, namespace, workload("Deployment", "sink", 3))
    runner = pod_runner(admin, namespace, "app=sink", tmp_path)
    try:
        pods = pods_reach(admin, namespace, "sink", 3)
        wait_for(
            lambda: {p.stem for p in tmp_path.glob("*.started")} == set(pods),
            "a process started per pod, named by its pod",
        )
        KubernetesScaler(admin, namespace, "deployment", "sink").scale(1)
        (survivor,) = pods_reach(admin, namespace, "sink", 1)
        # The deleted pods' processes got SIGTERM and their pod's grace period (the API server
        # removes these unscheduled pods at once or with a grace of 0: a SIGKILL then would
        # leave no mark).
        wait_for(
            lambda: {p.stem for p in tmp_path.glob("*.stopped")} == set(pods) - {survivor},
            "the deleted pods' processes stopped",
        )
        wait_for(
            lambda: (
                [
                    pod.metadata.name
                    for pod in CoreV1Api(admin).list_namespaced_pod(namespace).items
                    if pod.metadata is not None
                ]
                == [survivor]
            ),
            "the deleted pods removed once their processes ended",
        )
        wait_for(lambda: set(runner.running) == {survivor}, "the ended processes forgotten")
        runner.running[survivor].process.kill()  # a crash: the pod lives, so it restarts
        wait_for(
            lambda: (
                runner.running[survivor].restarts == 1
                and runner.running[survivor].process.poll() is None
            ),
            "the crashed process started again",
        )
    finally:
        runner.stop()
    assert runner.running == {}
    assert (tmp_path / f"{survivor}.stopped").exists()


def test_a_pod_deleted_with_no_grace_still_gives_its_process_the_declared_grace(
    admin: ApiClient, namespace: str, tmp_path: Path
) -> None:
    # The finalizer keeps the deleted pod visible, deletionGracePeriodSeconds 0 (what the API
    # server gives a pod on no node), until the test lets it go.
    hold = "kafka-autoscaler.test/hold"
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "held", "labels": {"app": "held"}, "finalizers": [hold]},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "consumer", "image": IMAGE}],
        },
    }
    create(admin, namespace, pod)
    core = CoreV1Api(admin)
    runner = pod_runner(admin, namespace, "app=held", tmp_path)
    try:
        wait_for(lambda: (tmp_path / "held.started").exists(), "the pod's process started")
        core.delete_namespaced_pod("held", namespace)
        deleted = core.read_namespaced_pod("held", namespace).metadata
        assert deleted is not None
        assert deleted.deletion_timestamp is not None
        assert deleted.deletion_grace_period_seconds == 0
        wait_for(lambda: "held" not in runner.running, "the process ended")
        assert (tmp_path / "held.stopped").exists()  # SIGTERM, and time to hand over
    finally:
        runner.stop()
        core.patch_namespaced_pod(
            "held", namespace, [{"op": "remove", "path": "/metadata/finalizers"}]
        )


def test_each_threads_dynamic_client_keeps_its_own_discovery_cache(admin: ApiClient) -> None:
    # Clients sharing one cache file read each other's half-written JSON.
    caches: list[Path] = []

    def discover() -> None:
        dynamic(admin)
        caches.append(discovery_cache(admin))

    discover()
    elsewhere = threading.Thread(target=discover)
    elsewhere.start()
    elsewhere.join()
    assert len(set(caches)) == 2
    assert all(cache.parent == DISCOVERY_CACHE and cache.is_file() for cache in caches)


def test_the_charts_sidecar_account_may_patch_a_pods_deletion_cost_and_nothing_else(
    plane: ControlPlane, admin: ApiClient, namespace: str
) -> None:
    """The Role cannot say which fields of a pod may be patched; the chart's
    ValidatingAdmissionPolicy does: with the sidecar's own token, the pod-deletion-cost
    annotation changes, an image, a label or another annotation does not."""
    from tests.test_helm_chart import render

    wanted = {"ServiceAccount", "Role", "RoleBinding"} | {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    chart = [doc for doc in render("--namespace", namespace) if doc["kind"] in wanted]
    assert {doc["kind"] for doc in chart} == wanted
    cluster_scoped = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for document in chart:
        create(admin, None if document["kind"] in cluster_scoped else namespace, document)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sink-0", "labels": {"app": "sink"}},
            "spec": {"containers": [{"name": "consumer", "image": IMAGE}]},
        }
        create(admin, namespace, pod)
        core = CoreV1Api(plane.client(sidecar_token(admin, namespace, "sink")))

        def patched(body: dict[str, Any]) -> int:
            return forbidden(lambda: core.patch_namespaced_pod("sink-0", namespace, body))

        image = {"spec": {"containers": [{"name": "consumer", "image": "evil/image:1"}]}}
        refused = wait_for(
            lambda: (
                forbidden(
                    lambda: core.patch_namespaced_pod("sink-0", namespace, image, dry_run="All")
                )
                == 403
            ),
            "the policy in force",
        )
        assert refused
        assert patched({"metadata": {"annotations": {DELETION_COST: "-1000"}}}) == 0
        assert patched({"metadata": {"annotations": {DELETION_COST: "0"}}}) == 0
        assert patched(image) == 403
        assert patched({"metadata": {"labels": {"app": "elsewhere"}}}) == 403
        assert patched({"metadata": {"annotations": {"other": "x"}}}) == 403
        assert patched({"metadata": {"finalizers": ["example.com/hold"]}}) == 403
        read = CoreV1Api(admin).read_namespaced_pod("sink-0", namespace)
        assert read.spec is not None and read.metadata is not None
        assert read.spec.containers[0].image == IMAGE
        assert read.metadata.annotations == {DELETION_COST: "0"}
        assert read.metadata.labels == {"app": "sink"}
        # The admin (another account) is not limited by it.
        CoreV1Api(admin).patch_namespaced_pod(
            "sink-0", namespace, {"metadata": {"labels": {"tier": "x"}}}
        )
    finally:
        client = dynamic(admin)
        for document in chart:
            if document["kind"] in cluster_scoped:
                resource = client.resources.get(
                    api_version=document["apiVersion"], kind=document["kind"]
                )
                resource.delete(name=document["metadata"]["name"])
