"""CPU time of a process and everything it started (a consumer and its Spark JVM, a Kafka
Connect worker), from /proc: what a benchmark divides work by to compare cost per core."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat_fields(entry: Path) -> list[str] | None:
    try:
        # The command name (field 2) may hold spaces and parentheses: split after its end.
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):  # gone meanwhile
        return None


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants, each with the children
    it has reaped (a reaped child counts once, in its parent; one left unreaped after it
    ended counts nowhere, so sample while the tree runs)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None:
            continue
        # After the name: state, ppid (fields[1]); utime, stime, cutime, cstime ([11:15]).
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = sum(int(f) for f in fields[11:15]) / _TICKS_PER_S
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, up in parents.items() if up == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(cpu.get(member, 0.0) for member in tree)
