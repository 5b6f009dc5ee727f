"""The ``kubernetes`` scaler: the scale subresource of a Deployment or StatefulSet.

Before a Deployment scales down, the pods the assignor empties first get the lowest
pod-deletion-cost (:mod:`sidecar.scalers.pod_deletion`), so the ReplicaSet deletes them, not
pods still reading partitions.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api
from kubernetes.client.exceptions import ApiException

from sidecar.join_watch import MemberFailure
from sidecar.scalers.errors import ScalerError, explain
from sidecar.scalers.pod_deletion import DELETION_COST, DeletionMarker
from sidecar.scalers.pod_failures import PodFailures

__all__ = ["DELETION_COST", "KubernetesScaler", "ScalerError", "replicas_compare_and_set"]
log = logging.getLogger(__name__)
CONFLICT_RETRIES = 3


def replicas_compare_and_set(expected: int, replicas: int) -> list[dict[str, Any]]:
    """A JSON patch of the scale subresource that sets ``replicas`` only if they are still
    ``expected`` (the server answers 422 otherwise).

    A resourceVersion precondition would be the usual guard, but the scale's resourceVersion
    is the workload's: the controllers' status writes change it several times a second after
    every scale, so a conditional write keeps losing to them. The test operation guards only
    what the marking of pods depends on: the replica count read. At 0 the scale's spec has no
    replicas at all (the API omits a zero), so the guard is then an empty spec."""
    guard: dict[str, Any]
    if expected == 0:
        guard = {"op": "test", "path": "/spec", "value": {}}
    else:
        guard = {"op": "test", "path": "/spec/replicas", "value": expected}
    return [guard, {"op": "add", "path": "/spec/replicas", "value": replicas}]


class KubernetesScaler:
    """Reads and patches ``<kind>/<name>/scale`` in ``namespace``."""

    def __init__(self, api: ApiClient, namespace: str, kind: str, name: str) -> None:
        if kind not in ("deployment", "statefulset"):
            raise ValueError(f"kind must be deployment or statefulset, got {kind!r}")
        self.apps = AppsV1Api(api)
        self.marker = DeletionMarker(api, namespace)
        self.pods = PodFailures(api, namespace)
        self.namespace, self.kind, self.name = namespace, kind, name

    def _read(self) -> Any:
        try:
            if self.kind == "deployment":
                return self.apps.read_namespaced_deployment_scale(self.name, self.namespace)
            return self.apps.read_namespaced_stateful_set_scale(self.name, self.namespace)
        except ApiException as exc:
            raise explain(exc, f"reading {self.kind}/{self.name}/scale") from exc

    def _patch(self, body: list[dict[str, Any]]) -> None:
        if self.kind == "deployment":
            self.apps.patch_namespaced_deployment_scale(self.name, self.namespace, body)
        else:
            self.apps.patch_namespaced_stateful_set_scale(self.name, self.namespace, body)

    def problems(self) -> list[str]:
        """Pod health is Kubernetes' to report (CrashLoopBackOff): nothing here."""
        return []

    def failing_members(self) -> list[MemberFailure]:
        """The workload's pods that fail now (CrashLoopBackOff, ImagePullBackOff, ...)."""
        scale = self._read()
        return self.pods.failing(scale.status.selector if scale.status is not None else "")

    def replicas(self) -> int:
        """``spec.replicas`` of the scale subresource."""
        return int(self._read().spec.replicas or 0)

    def scale(self, replicas: int) -> None:
        """Set ``spec.replicas``; retries on a write conflict, re-reading first."""
        if not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas must be an integer >= 0, got {replicas!r}")
        for _ in range(CONFLICT_RETRIES):
            scale = self._read()
            current = int(scale.spec.replicas or 0)
            if replicas == current:
                return
            if replicas < current and self.kind == "deployment":
                self.marker.mark(scale.status.selector or "", replicas)
            try:
                self._patch(replicas_compare_and_set(current, replicas))
                log.info("scaled %s/%s from %d to %d", self.kind, self.name, current, replicas)
                return
            except ApiException as exc:
                if exc.status not in (409, 422):
                    raise explain(exc, f"scaling {self.kind}/{self.name}") from exc
                log.warning(
                    "replicas changed while scaling %s/%s: re-reading", self.kind, self.name
                )
        raise ScalerError(
            f"scaling {self.kind}/{self.name} kept conflicting "
            f"({CONFLICT_RETRIES} attempts); someone else is changing it"
        )

    def member_words(self) -> list[MemberFailure]:
        """None: a pod's log needs rights the sidecar is not given (its waiting reason and
        termination message are in failing_members)."""
        return []

    def close(self) -> None:
        """Nothing to release: the workload keeps running."""
        return None
