"""The ``local`` scaler: SDK consumer processes on this machine, one per replica.

Replicas are numbered like StatefulSet pods: member identity ``<prefix>-<ordinal>``, in the
environment (``AUTOSCALER_MEMBER_IDENTITY``) and wherever the command says ``{identity}`` (a
KIP-848 consumer's ``group.instance.id``, which the sidecar's plans name it by). Scaling
up starts the lowest free ordinals; scaling down stops the highest first, which are the
members the assignor empties first (assignor.group_plan.removal_order). Stopping sends
SIGTERM (the consumer flushes, commits and leaves the group) and does not wait: a stopping
consumer is reaped later, killed if it outlives ``stop_timeout_s``, and its ordinal is not
reused before it is gone (never two members with one identity).

A consumer that exits by itself crashed (consumers run until told to stop). Its ordinal is
restarted after a back-off that doubles with every crash in a row (1 s up to 60 s), by the
first :meth:`LocalScaler.replicas` after it (the sidecar asks every tick): the scaler keeps
the count it was last told, as a Deployment keeps its replicas, without waiting for the
controller to ask for a scale-up; a run of
``HEALTHY_RUN_S`` forgives the past. Three crashes in a row make it crash-looping: a problem
:meth:`LocalScaler.problems` reports (the sidecar shows it in /status, /healthz, metrics).

A consumer's stderr goes to the sidecar's, line by line, and its last line is kept: the
member's own words for why it exited (:meth:`LocalScaler.failing_members`, shown in /status).

Consumers die with the sidecar (:mod:`contract.lifeline`: SIGTERM when their parent
dies, even by kill -9) and hold a lock per member identity while they run; an identity whose
lock is still held (a consumer of a dead sidecar still flushing) is not started again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from contract.lifeline import IDENTITY_FIELD, IDENTITY_LOCK_ENV, PARENT_ENV, identity_free
from sidecar import metrics
from sidecar.join_watch import MemberFailure

log = logging.getLogger(__name__)

HEALTHY_RUN_S = 30.0
BACKOFF_S = (1.0, 60.0)  # after the first crash, and the longest
CRASH_LOOP = 3  # crashes in a row that make a member crash-looping
LAST_LINE_CHARS = 300  # of a consumer's last stderr line kept
TAIL_DRAIN_S = 1.0  # how long an exit waits for the rest of its stderr


class StderrTail:
    """Copies a process's stderr to the sidecar's, line by line, keeping the last non-empty
    line (a thread until the pipe closes)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.last = ""
        self._thread = threading.Thread(
            target=self._copy, args=(stream,), name="consumer-stderr", daemon=True
        )
        self._thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        with stream:
            for line in iter(stream.readline, b""):
                text = line.decode(errors="replace").strip()
                if text:
                    self.last = text[:LAST_LINE_CHARS]
                with contextlib.suppress(OSError, ValueError):  # our stderr closed: keep going
                    sys.stderr.buffer.write(line)
                    sys.stderr.buffer.flush()

    def finish(self) -> str:
        """The last line once the process's stderr has been read to its end (or
        :data:`TAIL_DRAIN_S` passed: a child of the consumer may hold it open)."""
        self._thread.join(TAIL_DRAIN_S)
        return self.last


@dataclass
class _Crashes:
    """An ordinal's crashes in a row."""

    count: int
    last_code: int
    next_start: float
    ran_s: float = 0.0
    last_line: str = ""


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    started: float
    stderr: StderrTail | None = None


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
        lock_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        racks: Sequence[str] = (),
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
        # One folder per sidecar (the CLI keeps it beside its leader lock, so a restarted
        # sidecar finds its predecessor's consumers); a private one when not given.
        self.lock_dir = lock_dir or Path(tempfile.mkdtemp(prefix="kafka-autoscaler-members-"))
        self.clock = clock
        # Consumer ORDINAL is in rack racks[ORDINAL % len(racks)] (AUTOSCALER_CLIENT_RACK), as
        # a Deployment spread over zones puts its pods in turn; empty: no rack.
        self.racks = tuple(racks)
        self.running: dict[int, _Running] = {}
        self.stopping: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self.crashes: dict[int, _Crashes] = {}
        self.desired = 0  # the count last asked for, kept through crashes

    @property
    def processes(self) -> dict[int, subprocess.Popen[bytes]]:
        """The running consumers' processes by ordinal."""
        return {ordinal: run.process for ordinal, run in self.running.items()}

    def identity(self, ordinal: int) -> str:
        """Member identity of the replica with this ordinal."""
        return f"{self.identity_prefix}-{ordinal}"

    def identity_lock(self, ordinal: int) -> Path:
        """The lock file the consumer of this ordinal holds while it runs."""
        return self.lock_dir / f"{self.identity(ordinal)}.lock"

    def replicas(self) -> int:
        """The replicas asked for, as a Deployment's ``spec.replicas`` (a crashed consumer
        waiting out its back-off still counts: it was asked for and will be started
        again); tends the processes first (:meth:`running_count`)."""
        self._tend()
        return self.desired

    def running_count(self) -> int:
        """Consumers running now (crashed ones are reaped and counted, stopping ones are
        reaped or killed when overdue, crashed ones whose back-off has ended started)."""
        self._tend()
        return len(self.running)

    def _tend(self) -> None:
        now = self.clock()
        for ordinal, run in list(self.running.items()):
            code = run.process.poll()
            if code is None:
                if now - run.started >= HEALTHY_RUN_S:
                    self.crashes.pop(ordinal, None)
                continue
            del self.running[ordinal]
            last_line = run.stderr.finish() if run.stderr is not None else ""
            self._crashed(ordinal, code, now - run.started, now, last_line)
        self._reap_stopping(now)
        if len(self.running) < self.desired:  # crashed ones whose back-off has ended
            self._fill(self.desired - len(self.running), now)
        metrics.CRASH_LOOPING.set(len(self.crash_looping()))

    def _crashed(self, ordinal: int, code: int, ran_s: float, now: float, last_line: str) -> None:
        previous = self.crashes.get(ordinal)
        count = 1 if previous is None or ran_s >= HEALTHY_RUN_S else previous.count + 1
        backoff = min(BACKOFF_S[1], BACKOFF_S[0] * 2 ** (count - 1))
        self.crashes[ordinal] = _Crashes(count, code, now + backoff, ran_s, last_line)
        metrics.CONSUMER_CRASHES.inc()
        log.warning(
            "consumer %s exited with %s after %.1f s (crash %d in a row); restart in %.0f s%s",
            self.identity(ordinal),
            code,
            ran_s,
            count,
            backoff,
            f"; its last line: {last_line}" if last_line else "",
        )

    def _reap_stopping(self, now: float) -> None:
        for ordinal, (process, deadline) in list(self.stopping.items()):
            if process.poll() is None and now < deadline:
                continue
            if process.poll() is None:
                log.error(
                    "consumer %s ignored SIGTERM for %.0f s: killed",
                    self.identity(ordinal),
                    self.stop_timeout_s,
                )
                process.kill()
                process.wait()
            del self.stopping[ordinal]
            log.info("stopped consumer %s (exit %s)", self.identity(ordinal), process.returncode)

    def crash_looping(self) -> list[int]:
        """Ordinals that crashed :data:`CRASH_LOOP` times in a row or more."""
        return sorted(o for o, c in self.crashes.items() if c.count >= CRASH_LOOP)

    def problems(self) -> list[str]:
        """One line per crash-looping consumer."""
        now = self.clock()
        lines = []
        for ordinal in self.crash_looping():
            crash = self.crashes[ordinal]
            lines.append(
                f"consumer {self.identity(ordinal)} is crash-looping: exited {crash.count} "
                f"times in a row (last exit code {crash.last_code}); next start in "
                f"{max(0.0, crash.next_start - now):.0f} s"
            )
        return lines

    def failing_members(self) -> list[MemberFailure]:
        """The consumers that exited and wait for their restart, with their exit code and
        last stderr line (one restarted is judged by whether it joins: sidecar.join_watch)."""
        failures = []
        for ordinal, crash in sorted(self.crashes.items()):
            if ordinal in self.running:
                continue
            said = f": {crash.last_line}" if crash.last_line else ""
            failures.append(
                MemberFailure(
                    self.identity(ordinal),
                    f"exited with {crash.last_code} after {crash.ran_s:.1f} s "
                    f"({crash.count} in a row){said}",
                )
            )
        return failures

    def member_words(self) -> list[MemberFailure]:
        """Each running consumer's last stderr line (those that said nothing left out)."""
        return [
            MemberFailure(self.identity(ordinal), f"running, last said: {run.stderr.last}")
            for ordinal, run in sorted(self.running.items())
            if run.stderr is not None and run.stderr.last
        ]

    def scale(self, replicas: int) -> None:
        """Run ``replicas`` consumers: start the lowest free ordinals (an ordinal backing off
        after a crash keeps its place and starts when its back-off ends), stop the highest."""
        if not isinstance(replicas, int) or not 0 <= replicas <= self.max_replicas:
            raise ValueError(f"replicas must be in [0, {self.max_replicas}], got {replicas!r}")
        self.desired = replicas
        running = self.running_count()  # fills up to ``replicas``, back-offs permitting
        if replicas < running:
            self._stop(sorted(self.running, reverse=True)[: running - replicas])
        # A crashed ordinal no longer asked for is not started again: forget its crashes.
        wanted = len(self.running) + sum(1 for o in self.crashes if o not in self.running)
        for ordinal in sorted(self.crashes, reverse=True):
            if wanted <= replicas:
                break
            if ordinal not in self.running:
                del self.crashes[ordinal]
                wanted -= 1

    def _fill(self, count: int, now: float) -> None:
        """Start the ``count`` lowest free ordinals, but for those backing off after a
        crash (they keep their place) and those whose earlier consumer still runs."""
        free = [
            o for o in range(self.max_replicas) if o not in self.running and o not in self.stopping
        ]
        for ordinal in free[:count]:
            crash = self.crashes.get(ordinal)
            if crash is not None and crash.next_start > now:
                continue
            if not identity_free(self.identity_lock(ordinal)):
                log.warning(
                    "%s still runs (an earlier consumer): not started twice",
                    self.identity(ordinal),
                )
                continue
            self._start(ordinal, now)

    def _start(self, ordinal: int, now: float) -> None:
        env = {
            **self.env,
            "AUTOSCALER_MEMBER_IDENTITY": self.identity(ordinal),
            PARENT_ENV: str(os.getpid()),
            IDENTITY_LOCK_ENV: str(self.identity_lock(ordinal)),
        }
        if self.racks:
            env["AUTOSCALER_CLIENT_RACK"] = self.racks[ordinal % len(self.racks)]
        identity = self.identity(ordinal)
        command = [word.replace(IDENTITY_FIELD, identity) for word in self.command]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
        assert process.stderr is not None
        self.running[ordinal] = _Running(process, now, StderrTail(process.stderr))
        log.info("started consumer %s (pid %d)", identity, process.pid)

    def _stop(self, ordinals: Sequence[int]) -> None:
        deadline = self.clock() + self.stop_timeout_s
        for ordinal in ordinals:
            run = self.running.pop(ordinal)
            run.process.send_signal(signal.SIGTERM)
            self.stopping[ordinal] = (run.process, deadline)

    def close(self) -> None:
        """Stop every consumer and wait for them (at most ``stop_timeout_s``, then kill)."""
        self.desired = 0
        self._stop(sorted(self.running, reverse=True))
        for process, deadline in list(self.stopping.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - self.clock()))
        self._reap_stopping(float("inf"))
