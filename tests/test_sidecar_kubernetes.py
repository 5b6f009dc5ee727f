"""The kubernetes scaler and Lease election: the real client against our in-process API."""

from __future__ import annotations

import datetime

import pytest

from sidecar.k8s_lease import KubernetesLease
from sidecar.metrics import REGISTRY
from sidecar.scalers.keda_target import KedaTarget
from sidecar.scalers.kubernetes import DELETION_COST, KubernetesScaler, ScalerError
from sidecar.scalers.pod_deletion import DeploymentPods
from tests.fake_kube import FakeKube

LABELS = {"app": "sink"}


def test_deployment_scale_up_and_down_marks_the_pods_to_remove() -> None:
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 3, LABELS)
        for name in ("sink-5f7b-a1", "sink-5f7b-b2", "sink-5f7b-c3"):
            kube.add_pod(name, LABELS)
        kube.add_pod("other-pod", {"app": "other"})
        scaler = KubernetesScaler(kube.client(), "default", "deployment", "sink")
        assert scaler.replicas() == 3
        scaler.scale(5)
        assert scaler.replicas() == 5
        assert not any(pod["annotations"] for pod in kube.pods.values())  # up: no marking
        kube.scales[("default", "deployments", "sink")]["replicas"] = 3
        scaler.scale(1)
        assert scaler.replicas() == 1
        costs = {
            name: pod["annotations"].get(DELETION_COST) for (_, name), pod in kube.pods.items()
        }
    # removal_order puts identities ending in a higher ordinal first: c3, then b2, go.
    assert costs == {
        "sink-5f7b-c3": "-1000",
        "sink-5f7b-b2": "-999",
        "sink-5f7b-a1": "0",
        "other-pod": None,
    }


def test_statefulset_relies_on_ordinals() -> None:
    with FakeKube() as kube:
        kube.add_workload("statefulset", "sink", 4, LABELS)
        kube.add_pod("sink-0", LABELS)
        scaler = KubernetesScaler(kube.client(), "default", "statefulset", "sink")
        scaler.scale(2)
        assert scaler.replicas() == 2
        assert not any(method == "PATCH" and "/pods/" in path for method, path, _ in kube.requests)


def test_a_workload_at_zero_scales_up_and_back_to_zero() -> None:
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 0, LABELS)
        scaler = KubernetesScaler(kube.client(), "default", "deployment", "sink")
        assert scaler.replicas() == 0
        scaler.scale(2)
        assert scaler.replicas() == 2
        scaler.scale(0)
        assert scaler.replicas() == 0
        scaler.scale(1)
        assert scaler.replicas() == 1


def test_conflict_is_retried_after_rereading() -> None:
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 1, LABELS)
        kube.fail_next("PATCH", "/scale", 422)  # replicas changed between read and write
        scaler = KubernetesScaler(kube.client(), "default", "deployment", "sink")
        scaler.scale(3)
        assert scaler.replicas() == 3
        patches = [r for r in kube.requests if r[0] == "PATCH"]
        assert len(patches) == 2


def test_forbidden_and_missing_workloads_say_what_to_fix() -> None:
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 1, LABELS)
        kube.fail_next("PATCH", "/scale", 403)
        scaler = KubernetesScaler(kube.client(), "default", "deployment", "sink")
        with pytest.raises(ScalerError, match="HTTP 403: forbidden: the sidecar's Role must"):
            scaler.scale(2)
        missing = KubernetesScaler(kube.client(), "default", "deployment", "nope")
        with pytest.raises(ScalerError, match="HTTP 404: not found: check --namespace"):
            missing.replicas()
    with pytest.raises(ValueError, match="kind must be deployment or statefulset"):
        KubernetesScaler(kube.client(), "default", "daemonset", "x")


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now


def test_lease_elects_one_leader_and_fails_over() -> None:
    clock = Clock()
    with FakeKube() as kube:
        a = KubernetesLease(kube.client(), "default", "autoscaler", "sidecar-a", 15, clock)
        b = KubernetesLease(kube.client(), "default", "autoscaler", "sidecar-b", 15, clock)
        assert a.acquire() and a.held
        assert not b.acquire() and not b.held
        clock.now += datetime.timedelta(seconds=10)
        assert a.acquire()  # renewed
        clock.now += datetime.timedelta(seconds=10)
        assert not b.acquire()  # renewed 10 s ago: still a's
        clock.now += datetime.timedelta(seconds=20)  # a stopped renewing
        assert b.acquire() and b.held
        assert not a.acquire() and not a.held
        spec = kube.leases[("default", "autoscaler")]["spec"]
        assert spec["holderIdentity"] == "sidecar-b" and spec["leaseTransitions"] == 1
        b.release()
        assert a.acquire()  # released: taken at once


def test_lease_race_has_one_winner() -> None:
    clock = Clock()
    with FakeKube() as kube:
        a = KubernetesLease(kube.client(), "default", "l", "a", 15, clock)
        b = KubernetesLease(kube.client(), "default", "l", "b", 15, clock)
        kube.fail_next("POST", "/leases", 409)  # b created it first
        assert not a.acquire()
        kube.fail_next("GET", "/leases/l", 403)
        assert not b.acquire()  # forbidden reads never make a leader


def test_under_keda_a_lower_count_marks_the_pods_the_hpa_should_delete() -> None:
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 3, LABELS)
        for name in ("sink-5f7b-a1", "sink-5f7b-b2", "sink-5f7b-c3"):
            kube.add_pod(name, LABELS)
        kube.add_pod("other-pod", {"app": "other"})
        target = KedaTarget(DeploymentPods(kube.client(), "default", "sink"))
        target.scale(3)  # up from nothing: KEDA is told 3, no pod is marked
        assert target.replicas() == 3
        assert not any(pod["annotations"] for pod in kube.pods.values())
        target.scale(1)
        costs = {
            name: pod["annotations"].get(DELETION_COST) for (_, name), pod in kube.pods.items()
        }
        assert target.replicas() == 1
        # KEDA scales the Deployment, not the sidecar: its replicas are untouched here.
        assert kube.scales[("default", "deployments", "sink")]["replicas"] == 3
    assert costs == {
        "sink-5f7b-c3": "-1000",
        "sink-5f7b-b2": "-999",
        "sink-5f7b-a1": "0",
        "other-pod": None,
    }


def test_under_keda_a_refused_marking_still_lowers_the_count_and_is_counted() -> None:
    errors = REGISTRY.get_sample_value("autoscaler_errors_total", {"kind": "mark_pods"}) or 0.0
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 2, LABELS)
        for name in ("sink-5f7b-a1", "sink-5f7b-b2"):
            kube.add_pod(name, LABELS)
        kube.fail_next("GET", "/pods", 403)
        target = KedaTarget(DeploymentPods(kube.client(), "default", "sink"))
        target.scale(2)
        target.scale(1)
        assert target.replicas() == 1
        assert target.problems() == []  # not unhealthy: a liveness probe would restart it
    after = REGISTRY.get_sample_value("autoscaler_errors_total", {"kind": "mark_pods"})
    assert after == errors + 1
    with pytest.raises(ValueError, match="replicas must be an integer >= 0"):
        target.scale(-1)


def test_a_scale_without_a_selector_yet_marks_no_pod() -> None:
    # A Deployment whose controller has not written its status: an empty selector would
    # list, and mark, every pod of the namespace.
    with FakeKube() as kube:
        kube.add_workload("deployment", "sink", 2, LABELS)
        kube.scales[("default", "deployments", "sink")]["selector"] = ""
        kube.add_pod("sink-5f7b-a1", LABELS)
        kube.add_pod("other-pod", {"app": "other"})
        target = KedaTarget(DeploymentPods(kube.client(), "default", "sink"))
        target.scale(2)
        target.scale(0)
        assert target.replicas() == 0
        assert not any(pod["annotations"] for pod in kube.pods.values())
        assert not any(method == "GET" and "/pods" in path for method, path, _ in kube.requests)
