"""Leader election on one machine: an exclusive, non-blocking file lock.

Several sidecars may watch the same group; only the one holding the lock scales, the
others keep measuring and publishing metrics. The lock is released when the holder exits,
however it exits (the kernel drops flock locks with the process). On Kubernetes a Lease
replaces this (sidecar.k8s_lease).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from typing import Protocol


class LockDirError(RuntimeError):
    """The lock's private directory cannot be trusted; the message says why and what to set."""


def default_lock_dir() -> Path:
    """Where the sidecar's locks live unless ``--lock-file`` says otherwise: a directory of
    this user's own (``/tmp`` is everyone's: a lock there could be a link planted by another
    user, or held by them)."""
    return Path(f"/tmp/kafka-autoscaler-{os.getuid()}")


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing; LockDirError when it is a link, not a
    directory, another user's, or writable by others."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    why = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        why = "is not a directory (a link or a file)"
    elif info.st_uid != os.getuid():
        why = f"belongs to uid {info.st_uid}, not {os.getuid()}"
    elif info.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    if why is not None:
        raise LockDirError(
            f"the lock directory {path} {why}: remove it, or set --lock-file "
            f"(AUTOSCALER_LOCK_FILE) to a path in a directory of this user's own"
        )


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
        # Never through a link: one planted at the lock's path would have us write elsewhere.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
