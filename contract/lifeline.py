"""What ties a consumer process to the sidecar that started it.

* ``AUTOSCALER_PARENT_PID``: the consumer asks the kernel for SIGTERM when that parent dies
  (Linux ``PR_SET_PDEATHSIG``), so a sidecar killed with -9 leaves no orphans behind: they
  flush, commit and leave the group as on any SIGTERM. If the parent is already gone when
  the consumer starts, it stops at once. Elsewhere than Linux it watches its parent id.
* ``AUTOSCALER_IDENTITY_LOCK``: a file the consumer holds locked (flock) for its whole life.
  The scaler starts a member identity only when nobody holds its lock, so a restarted
  sidecar never runs two members with one identity next to a consumer still exiting.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys
from pathlib import Path
from typing import IO

PARENT_ENV = "AUTOSCALER_PARENT_PID"
IDENTITY_LOCK_ENV = "AUTOSCALER_IDENTITY_LOCK"
# In a consumer's command or its --sink path: the member's identity (its group.instance.id).
IDENTITY_FIELD = "{identity}"
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Ask for SIGTERM when ``parent_pid`` (our parent) dies. False if it is already gone
    (we were re-parented), in which case the caller should stop."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    # Checked after the request: a parent that died just before it cannot be missed.
    return os.getppid() == parent_pid


def parent_alive(parent_pid: int) -> bool:
    """Whether our parent is still ``parent_pid`` (for platforms without PDEATHSIG)."""
    return os.getppid() == parent_pid


def hold_identity_lock(path: Path) -> IO[bytes] | None:
    """Lock ``path`` for the life of this process; None if another process holds it. Keep
    the returned file open: closing it releases the lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def identity_free(path: Path) -> bool:
    """Whether no process holds the identity lock at ``path`` now."""
    held = hold_identity_lock(path)
    if held is None:
        return False
    held.close()
    return True
