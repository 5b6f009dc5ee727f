"""The CPU of a process tree, as benchmarks compare sinks' cost per core."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.support.process_cpu import tree_cpu_seconds

# A grandchild spends 0.3 s of CPU, says so, then waits for its stdin to close.
_BURN = (
    "import sys, time\n"
    "while time.process_time() < 0.3: pass\n"
    "print('burnt', flush=True); sys.stdin.read()\n"
)
_PARENT = (
    "import subprocess, sys\n"
    f"child = subprocess.Popen([sys.executable, '-c', {_BURN!r}], stdout=sys.stdout)\n"
    "sys.stdin.read(); child.kill(); child.wait()\n"
)


def test_a_trees_cpu_counts_the_descendants_it_started() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert parent.stdout is not None and parent.stdin is not None
    try:
        assert parent.stdout.readline() == b"burnt\n"
        assert tree_cpu_seconds(parent.pid) >= 0.3
    finally:
        parent.stdin.close()
        parent.wait(30)


def test_a_process_that_is_gone_counts_nothing() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert tree_cpu_seconds(gone.pid) == 0.0
