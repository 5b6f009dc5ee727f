"""The ``kubernetes`` scaler: the scale subresource of a Deployment or StatefulSet.

Before a Deployment scales down, the pods the assignor empties first get the lowest
``controller.kubernetes.io/pod-deletion-cost`` so the ReplicaSet deletes them, not pods
still reading partitions. The order is the assignor's own (assignor.group_plan.
removal_order on pod names, which are the members' identities). StatefulSets need no
marking: they remove the highest ordinals, which the assignor empties first.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from assignor.group_plan import removal_order

log = logging.getLogger(__name__)
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
CONFLICT_RETRIES = 3


class ScalerError(RuntimeError):
    """The platform refused to scale; the message says why and what to check."""


def explain(exc: ApiException, what: str) -> ScalerError:
    """A ScalerError for an API failure, with the likely fix for 403/404."""
    hint = {
        403: "forbidden: the sidecar's Role must allow get/patch on the workload's scale "
        "subresource, list/patch on pods and get/create/update on leases",
        404: "not found: check --namespace, --workload-kind and --workload-name",
    }.get(exc.status or 0, exc.reason or "")
    return ScalerError(f"{what} failed with HTTP {exc.status}: {hint}")


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
        self.core = CoreV1Api(api)
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
                self._mark_for_deletion(scale.status.selector or "", current - replicas)
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

    def _mark_for_deletion(self, selector: str, count: int) -> None:
        """Lowest deletion cost on the ``count`` pods removed first; 0 on the others."""
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as exc:
            raise explain(exc, "listing pods") from exc
        live: dict[str, dict[str, str]] = {}  # pod name -> its annotations
        for pod in pods:
            meta = pod.metadata
            if meta is not None and meta.name and meta.deletion_timestamp is None:
                live[meta.name] = dict(meta.annotations or {})
        for rank, name in enumerate(removal_order({n: n for n in live})):
            cost = str(-1000 + rank) if rank < count else "0"
            annotations = live[name]
            if annotations.get(DELETION_COST) == cost:
                continue
            try:
                self.core.patch_namespaced_pod(
                    name, self.namespace, {"metadata": {"annotations": {DELETION_COST: cost}}}
                )
            except ApiException as exc:
                raise explain(exc, f"annotating pod {name}") from exc

    def close(self) -> None:
        """Nothing to release: the workload keeps running."""
        return None
