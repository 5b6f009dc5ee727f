"""Which of a workload's pods fail now, in Kubernetes' own words: a container waiting in
CrashLoopBackOff or ImagePullBackOff, one that just exited with an error, a pod the scheduler
cannot place. With ``terminationMessagePolicy: FallbackToLogsOnError`` (the chart sets it) a
crashed container's termination message is its last log lines: the consumer's own error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from sidecar.join_watch import MemberFailure
from sidecar.scalers.errors import explain

# Waiting reasons of a container that will not run as it is (kubelet's names); others, such
# as ContainerCreating and PodInitializing, are a start under way.
FAILING_WAITS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
MESSAGE_CHARS = 300  # of a pod's message or termination message kept


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:MESSAGE_CHARS] if lines else ""


def container_failure(status: Any) -> str | None:
    """Why a container (a V1ContainerStatus) fails now, None when it does not."""
    state = status.state
    last = status.last_state.terminated if status.last_state is not None else None
    waiting = state.waiting if state is not None else None
    terminated = state.terminated if state is not None else None
    if waiting is not None and waiting.reason in FAILING_WAITS:
        reason = f"{status.name}: {waiting.reason}"
        if last is not None:
            said = _last_line(last.message)
            reason += f", last exit code {last.exit_code}" + (f": {said}" if said else "")
        elif waiting.message:
            reason += f": {_last_line(waiting.message)}"
        return reason
    if terminated is not None and terminated.exit_code not in (0, None):
        said = _last_line(terminated.message) or terminated.reason or ""
        return f"{status.name}: exited with {terminated.exit_code}" + (f": {said}" if said else "")
    return None


def pod_failure(pod: Any) -> str | None:
    """Why a pod (a V1Pod) fails now: its first failing container, or the scheduler's
    refusal; None when it runs or is starting."""
    status = pod.status
    if status is None:
        return None
    for container in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        found = container_failure(container)
        if found is not None:
            return found
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"not scheduled ({condition.reason}): {_last_line(condition.message)}"
    return None


def failing_pods(pods: Iterable[Any]) -> list[MemberFailure]:
    """The live pods (not being deleted) that fail now, by name."""
    failures = []
    for pod in pods:
        meta = pod.metadata
        if meta is None or not meta.name or meta.deletion_timestamp is not None:
            continue
        found = pod_failure(pod)
        if found is not None:
            failures.append(MemberFailure(meta.name, found))
    return sorted(failures, key=lambda failure: failure.member)


class PodFailures:
    """Reads the pods matching a selector in ``namespace`` and says which fail."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace

    def failing(self, selector: str) -> list[MemberFailure]:
        """The failing pods of ``selector`` (none for an empty selector: the workload has
        no status yet, and an empty one would match every pod here)."""
        if not selector:
            return []
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as exc:
            raise explain(exc, "listing pods") from exc
        return failing_pods(pods)
