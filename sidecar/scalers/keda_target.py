"""``--scaler keda``: KEDA scales the workload; this scaler only keeps the count the sidecar
wants, which KEDA reads through the external scaler (:mod:`sidecar.external_scaler`)."""

from __future__ import annotations

import threading


class KedaTarget:
    """The count KEDA is told; KEDA's HPA does the scaling."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the gRPC threads read what the loop writes
        self._count = 0

    def replicas(self) -> int:
        """The count last asked for (the HPA follows it within its tolerance)."""
        with self._lock:
            return self._count

    def scale(self, replicas: int) -> None:
        """Ask KEDA for ``replicas``: its next GetMetrics call reads them."""
        with self._lock:
            self._count = replicas

    def problems(self) -> list[str]:
        """None: whether KEDA follows shows in KEDA's and the HPA's status."""
        return []

    def close(self) -> None:
        """Nothing to release."""
