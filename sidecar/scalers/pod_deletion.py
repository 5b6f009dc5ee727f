"""Which pods a Deployment's scale-down deletes: the ones the assignor empties first.

A ReplicaSet scaling down deletes the pods with the lowest
``controller.kubernetes.io/pod-deletion-cost`` first (among pods equally scheduled, running
and ready). Before a scale-down, the pods beyond the count kept get the lowest costs, in the
assignor's own order (assignor.group_plan.removal_order on pod names, which are the members'
identities), so the pods that go are not the ones still reading partitions. StatefulSets
need no marking: they remove the highest ordinals, which the assignor empties first.
"""

from __future__ import annotations

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from assignor.group_plan import removal_order
from sidecar.join_watch import MemberFailure
from sidecar.scalers.errors import explain
from sidecar.scalers.pod_failures import PodFailures

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


class DeletionMarker:
    """Annotates the live pods matching a selector in ``namespace``."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace

    def mark(self, selector: str, keep: int) -> None:
        """Lowest deletion cost on the live pods beyond the ``keep`` kept, removed first
        lowest; 0 on the others (a pod marked before and kept this time is cleared)."""
        if not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
        if not selector:  # no status yet: an empty selector would match every pod here
            return
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as exc:
            raise explain(exc, "listing pods") from exc
        live: dict[str, dict[str, str]] = {}  # pod name -> its annotations
        for pod in pods:
            meta = pod.metadata
            if meta is not None and meta.name and meta.deletion_timestamp is None:
                live[meta.name] = dict(meta.annotations or {})
        removed = len(live) - keep
        for rank, name in enumerate(removal_order({n: n for n in live})):
            cost = str(-1000 + rank) if rank < removed else "0"
            if live[name].get(DELETION_COST) == cost:
                continue
            try:
                self.core.patch_namespaced_pod(
                    name, self.namespace, {"metadata": {"annotations": {DELETION_COST: cost}}}
                )
            except ApiException as exc:
                raise explain(exc, f"annotating pod {name}") from exc


class DeploymentPods:
    """The pods of one Deployment, for a scaler that does not set its replicas itself (KEDA's
    HPA does): marks the ones to go before the count it is told drops."""

    def __init__(self, api: ApiClient, namespace: str, name: str) -> None:
        self.apps = AppsV1Api(api)
        self.marker = DeletionMarker(api, namespace)
        self.pods = PodFailures(api, namespace)
        self.namespace, self.name = namespace, name

    def _selector(self) -> str:
        try:
            scale = self.apps.read_namespaced_deployment_scale(self.name, self.namespace)
        except ApiException as exc:
            raise explain(exc, f"reading deployment/{self.name}/scale") from exc
        selector = scale.status.selector if scale.status is not None else None
        return selector or ""

    def mark(self, keep: int) -> None:
        """Mark the Deployment's pods beyond ``keep`` to be deleted first."""
        self.marker.mark(self._selector(), keep)

    def failing(self) -> list[MemberFailure]:
        """The Deployment's pods that fail now."""
        return self.pods.failing(self._selector())
