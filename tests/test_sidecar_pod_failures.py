"""Which pods of a workload fail now, read from pod statuses as the API server writes them
(the kubernetes client's own models; the one-node cluster's test is in
test_sidecar_kubernetes)."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
)

from sidecar.join_watch import MemberFailure
from sidecar.scalers.pod_failures import failing_pods

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def container(
    state: V1ContainerState, last: V1ContainerStateTerminated | None = None
) -> V1ContainerStatus:
    return V1ContainerStatus(
        name="consumer",
        image="consumer:1",
        image_id="",
        ready=False,
        restart_count=3 if last else 0,
        state=state,
        last_state=V1ContainerState(terminated=last),
    )


def pod(
    name: str,
    *containers: V1ContainerStatus,
    conditions: list[V1PodCondition] | None = None,
    deleting: bool = False,
) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, deletion_timestamp=NOW if deleting else None),
        status=V1PodStatus(container_statuses=list(containers), conditions=conditions),
    )


def waiting(reason: str, message: str | None = None) -> V1ContainerState:
    return V1ContainerState(waiting=V1ContainerStateWaiting(reason=reason, message=message))


def test_crash_looping_pods_say_their_last_exit_and_log_line() -> None:
    crashed = V1ContainerStateTerminated(
        exit_code=2,
        reason="Error",
        message="starting\nConfigError: table_format delta needs Delta Lake\n",
    )
    found = failing_pods([pod("sink-1", container(waiting("CrashLoopBackOff"), crashed))])
    assert found == [
        MemberFailure(
            "sink-1",
            "consumer: CrashLoopBackOff, last exit code 2: "
            "ConfigError: table_format delta needs Delta Lake",
        )
    ]


def test_images_that_cannot_be_pulled_and_pods_that_cannot_be_placed_fail() -> None:
    unscheduled = V1PodCondition(
        type="PodScheduled", status="False", reason="Unschedulable", message="0/1 nodes: cpu"
    )
    found = failing_pods(
        [
            pod("sink-b", container(waiting("ImagePullBackOff", 'pull "consumer:9" failed'))),
            pod("sink-a", conditions=[unscheduled]),
        ]
    )
    assert found == [
        MemberFailure("sink-a", "not scheduled (Unschedulable): 0/1 nodes: cpu"),
        MemberFailure("sink-b", 'consumer: ImagePullBackOff: pull "consumer:9" failed'),
    ]


def test_starting_running_and_leaving_pods_do_not_fail() -> None:
    running = V1ContainerState(running=V1ContainerStateRunning(started_at=NOW))
    exited = V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=1))
    pods = [
        pod("sink-0", container(running)),
        pod("sink-1", container(waiting("ContainerCreating"))),
        pod("sink-2", container(exited), deleting=True),
        pod("sink-3"),
    ]
    assert failing_pods(pods) == []
    assert failing_pods([pod("sink-4", container(exited))]) == [
        MemberFailure("sink-4", "consumer: exited with 1")
    ]
