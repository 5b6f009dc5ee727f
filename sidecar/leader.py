"""Leader election on one machine: an exclusive, non-blocking file lock.

Several sidecars may watch the same group; only the one holding the lock scales, the
others keep measuring and publishing metrics. The lock is released when the holder exits,
however it exits (the kernel drops flock locks with the process). On Kubernetes a Lease
replaces this (sidecar.k8s_lease).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Protocol


class Lease(Protocol):
    """Leader election as the sidecar uses it: try (never wait), ask, give up."""

    @property
    def held(self) -> bool:
        """Whether this sidecar leads."""
        ...

    def acquire(self) -> bool:
        """Take or renew leadership if possible; True if leading afterwards."""
        ...

    def release(self) -> None:
        """Step down."""
        ...


class FileLease:
    """``acquire()`` tries to take the lock (never waits); ``held`` says whether we have it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if free; True if held afterwards."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
