"""``--scaler keda``: KEDA scales the workload; this scaler only keeps the count the sidecar
wants, which KEDA reads through the external scaler (:mod:`sidecar.external_scaler`).

Given the Deployment's pods, a count that drops first marks the pods the assignor empties
first with the lowest pod-deletion-cost, as ``--scaler kubernetes`` does, so the HPA's
scale-down deletes them rather than pods still reading partitions. Marking is best effort:
the count is what KEDA needs. A refusal is logged (once until marking works again) and
counted as ``autoscaler_errors_total{kind="mark_pods"}``, never reported as unhealthy: a
liveness probe restarting the sizer would stop KEDA's answers too.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from sidecar import metrics
from sidecar.join_watch import MemberFailure

log = logging.getLogger(__name__)


class Marker(Protocol):
    """Marks the pods beyond a count to be deleted first, and says which fail."""

    def mark(self, keep: int) -> None:
        """Mark every live pod beyond the ``keep`` kept."""
        ...

    def failing(self) -> list[MemberFailure]:
        """The pods that fail now (CrashLoopBackOff, ImagePullBackOff, ...)."""
        ...


class KedaTarget:
    """The count KEDA is told; KEDA's HPA does the scaling."""

    def __init__(self, pods: Marker | None = None) -> None:
        self._lock = threading.Lock()  # the gRPC threads read what the loop writes
        self._count = 0
        self._pods = pods
        self._marking_failed = False

    def replicas(self) -> int:
        """The count last asked for (the HPA follows it within its tolerance)."""
        with self._lock:
            return self._count

    def scale(self, replicas: int) -> None:
        """Ask KEDA for ``replicas``: its next GetMetrics call reads them. Lowering it, mark
        the pods to go first."""
        if not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas must be an integer >= 0, got {replicas!r}")
        if self._pods is not None and replicas < self.replicas():
            try:
                self._pods.mark(replicas)
                self._marking_failed = False
            except Exception as exc:  # the scale-in matters more than which pod it takes
                metrics.ERRORS.labels("mark_pods").inc()
                if not self._marking_failed:
                    log.warning(
                        "pod-deletion-cost not set (the scale-down may take pods still "
                        "reading): %s",
                        exc,
                    )
                self._marking_failed = True
        with self._lock:
            self._count = replicas

    def problems(self) -> list[str]:
        """None: whether KEDA follows shows in KEDA's and the HPA's status."""
        return []

    def failing_members(self) -> list[MemberFailure]:
        """The Deployment's pods that fail now (none known without its pods: a StatefulSet's
        members are judged by whether they join)."""
        return self._pods.failing() if self._pods is not None else []

    def member_words(self) -> list[MemberFailure]:
        """None: a pod's log needs rights the sidecar is not given (its waiting reason and
        termination message are in failing_members)."""
        return []

    def close(self) -> None:
        """Nothing to release."""
