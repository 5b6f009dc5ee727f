"""Busy processes that oversubscribe this machine's cores, for tests and benchmarks of a
consumer on a machine with less CPU than it wants (a CI runner, a Kubernetes CPU limit)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

# Each spinner ends by itself after this long, should its parent die without stopping it.
SPIN_LIMIT_S = 900
_SPIN = f"import time\nend = time.monotonic() + {SPIN_LIMIT_S}\nwhile time.monotonic() < end: pass"


def spinners_for(factor: float) -> int:
    """How many busy processes make the runnable threads ``factor`` times the cores."""
    return max(1, round(factor * (os.cpu_count() or 1)))


@contextlib.contextmanager
def oversubscribed(factor: float) -> Iterator[int]:
    """Keep ``factor`` x the cores busy with spinning processes (none for factor 0) while
    the block runs; yields how many there are."""
    count = spinners_for(factor) if factor > 0 else 0
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
    try:
        yield count
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
