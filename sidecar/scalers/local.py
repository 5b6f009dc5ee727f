"""The ``local`` scaler: SDK consumer processes on this machine, one per replica.

Replicas are numbered like StatefulSet pods: member identity ``<prefix>-<ordinal>``. Scaling
up starts the lowest free ordinals; scaling down stops the highest first, which are the
members the assignor empties first (assignor.group_plan.removal_order). Stopping sends
SIGTERM (the consumer flushes, commits and leaves the group), then SIGKILL after a timeout.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)


class LocalScaler:
    """Starts and stops ``command`` processes; the environment names each member."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        identity_prefix: str = "consumer",
        env: Mapping[str, str] | None = None,
        stop_timeout_s: float = 30.0,
        max_replicas: int = 64,
    ) -> None:
        if not command:
            raise ValueError("command must name the consumer program to run")
        if stop_timeout_s <= 0:
            raise ValueError(f"stop_timeout_s must be > 0, got {stop_timeout_s!r}")
        self.command = list(command)
        self.identity_prefix = identity_prefix
        self.env = dict(os.environ if env is None else env)
        self.stop_timeout_s = stop_timeout_s
        self.max_replicas = max_replicas
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def identity(self, ordinal: int) -> str:
        """Member identity of the replica with this ordinal."""
        return f"{self.identity_prefix}-{ordinal}"

    def replicas(self) -> int:
        """Replicas running now (exited ones are reaped and logged)."""
        for ordinal, process in list(self.processes.items()):
            code = process.poll()
            if code is not None:
                log.warning("consumer %s exited with %s", self.identity(ordinal), code)
                del self.processes[ordinal]
        return len(self.processes)

    def scale(self, replicas: int) -> None:
        """Run exactly ``replicas`` consumers."""
        if not isinstance(replicas, int) or not 0 <= replicas <= self.max_replicas:
            raise ValueError(f"replicas must be in [0, {self.max_replicas}], got {replicas!r}")
        current = self.replicas()
        if replicas > current:
            free = (o for o in range(self.max_replicas) if o not in self.processes)
            for ordinal in [next(free) for _ in range(replicas - current)]:
                env = {**self.env, "AUTOSCALER_MEMBER_IDENTITY": self.identity(ordinal)}
                self.processes[ordinal] = subprocess.Popen(self.command, env=env)
                log.info(
                    "started consumer %s (pid %d)",
                    self.identity(ordinal),
                    self.processes[ordinal].pid,
                )
        elif replicas < current:
            doomed = sorted(self.processes, reverse=True)[: current - replicas]
            self._stop(doomed)

    def close(self) -> None:
        """Stop every consumer."""
        self._stop(sorted(self.processes, reverse=True))

    def _stop(self, ordinals: Sequence[int]) -> None:
        for ordinal in ordinals:
            self.processes[ordinal].send_signal(signal.SIGTERM)
        for ordinal in ordinals:
            process = self.processes.pop(ordinal)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.error(
                    "consumer %s ignored SIGTERM for %.0f s: killed",
                    self.identity(ordinal),
                    self.stop_timeout_s,
                )
                process.kill()
                process.wait()
            log.info("stopped consumer %s (exit %s)", self.identity(ordinal), process.returncode)
