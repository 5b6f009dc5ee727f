"""A node for a control plane that has none: one local process per pod of a workload.

The benchmarks' Deployments live on a real kube-apiserver without a kubelet, so the ReplicaSet
controller creates and deletes pods that never run. :class:`PodRunner` plays the kubelet for
one label selector: every live pod gets a process (``command``, with ``POD_NAME`` set to the
pod's name, the member identity the SDK and the sidecar's scale-down order use); a pod marked
for deletion gets SIGTERM, SIGKILL after its grace period, and once its process has ended the
pod is removed, as a kubelet confirms a pod's end. A process that exits while its pod lives is
started again (``restartPolicy: Always``). Whatever sizes the workload (our sidecar, KEDA's
HPA), its consumers start and stop the same way, so start-up costs every policy the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds


@dataclass
class Running:
    """One pod's process, and when it was told to stop (None while it runs)."""

    process: subprocess.Popen[bytes]
    output: IO[bytes]
    grace_s: float = DEFAULT_GRACE_S
    stop_by: float | None = None
    restarts: int = 0


@dataclass
class PodRunner:
    """Runs ``command`` once per live pod matching ``selector`` in ``namespace``."""

    core: CoreV1Api
    namespace: str
    selector: str
    command: Sequence[str]
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    poll_s: float = 0.2
    running: dict[str, Running] = field(default_factory=dict)
    started: list[tuple[float, str]] = field(default_factory=list)
    ended: list[tuple[float, str]] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sync(self) -> None:
        """One pass: start what a live pod lacks, stop what a deleted pod still runs, remove
        the pods whose process has ended."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        live: dict[str, float] = {}  # pod name -> its terminationGracePeriodSeconds
        deleting: set[str] = set()
        for pod in pods:
            meta = pod.metadata
            if meta is None or not meta.name:
                continue
            if meta.deletion_timestamp is None:
                seconds = pod.spec.termination_grace_period_seconds if pod.spec else None
                live[meta.name] = DEFAULT_GRACE_S if seconds is None else float(seconds)
            else:
                deleting.add(meta.name)
        now = time.monotonic()
        for name in sorted(live):
            current = self.running.get(name)
            if current is None:
                self._start(name, live[name])
            elif current.process.poll() is not None:
                log.warning(
                    "pod %s: its process exited (%s); starting it again",
                    name,
                    current.process.returncode,
                )
                current.output.close()
                restarts = current.restarts + 1
                self._start(name, live[name])
                self.running[name].restarts = restarts
        for name, current in list(self.running.items()):
            if name in live:
                continue
            if current.stop_by is None:
                # The API server deletes a pod on no node with a grace of 0, or at once; on a
                # real node the kubelet would give it the grace its pod declared, so do we.
                current.stop_by = now + current.grace_s
                with contextlib.suppress(ProcessLookupError):
                    current.process.send_signal(signal.SIGTERM)
            elif current.process.poll() is None and now >= current.stop_by:
                current.process.kill()
            if current.process.poll() is not None:
                current.output.close()
                del self.running[name]
                self.ended.append((time.time(), name))
        for name in deleting:
            if name not in self.running:
                self._remove(name)

    def _start(self, name: str, grace_s: float) -> None:
        output = (self.log_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            list(self.command),
            env={**os.environ, **self.env, "POD_NAME": name},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running[name] = Running(process, output, grace_s)
        self.started.append((time.time(), name))

    def _remove(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:  # already gone: what we wanted
                raise

    def start(self) -> PodRunner:
        """Sync every ``poll_s`` in a thread until :meth:`stop`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)

        def loop() -> None:
            while not self._stopping.is_set():
                try:
                    self.sync()
                except ApiException as exc:  # the API server restarting: try again
                    log.warning("pod runner: %s", exc.reason)
                self._stopping.wait(self.poll_s)

        self._thread = threading.Thread(target=loop, name="pod-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop syncing, then every process (SIGTERM, SIGKILL after ``grace_s``)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        for current in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                current.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name, current in self.running.items():
            try:
                current.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                current.process.kill()
                current.process.wait()
            current.output.close()
            self.ended.append((time.time(), name))
        self.running.clear()
