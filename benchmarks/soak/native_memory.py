"""A broker's memory by kind, from the JVM's native memory tracking.

A broker's anonymous memory can grow in its heap (committed whole at start in the soak), its
JIT's code cache, its classes' metadata, thread stacks, the GC's own structures, or memory
the JVM and its native libraries (compression, TLS) take with malloc. Started with
``-XX:NativeMemoryTracking=summary`` (``ApacheKafka(native_memory_tracking=True)``), a JVM
answers ``jcmd <pid> VM.native_memory summary`` with what it committed in each of its own
categories; what the process holds beyond that total (its anonymous memory minus the JVM's
committed memory) is what nothing in the JVM accounts for: native libraries' own mallocs and
memory glibc keeps after it is freed.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak.incarnations import by_incarnation, long_enough
from benchmarks.support.report import row

SAMPLE_S = 600.0  # a JVM attach each time: often enough for a slope over an hour or two
MIN_SAMPLE_S = 30.0  # each attach starts a jcmd JVM: more often would load the machine it measures
OUTSIDE = "anonymous minus JVM committed"  # what nothing in the JVM accounts for
_CATEGORY = re.compile(
    r"^-\s+(?P<name>[A-Za-z][\w ]*?)\s+\(reserved=\d+KB, committed=(?P<kib>\d+)KB"
)
_TOTAL = re.compile(r"^Total: reserved=\d+KB, committed=(?P<kib>\d+)KB")


@dataclass
class NativeSample:
    """One JVM's committed memory by category (KiB), with its anonymous memory then."""

    t: float
    role: str
    pid: int
    anon_kib: int
    committed_kib: dict[str, int] = field(default_factory=dict)


def parse_summary(text: str) -> dict[str, int]:
    """Category -> committed KiB of a ``VM.native_memory summary`` answer, with its total
    under ``Total``; empty when the answer holds no summary (tracking off, JVM gone)."""
    committed: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if match := _TOTAL.match(line):
            committed["Total"] = int(match["kib"])
        elif match := _CATEGORY.match(line):
            committed[match["name"]] = int(match["kib"])
    return committed if "Total" in committed else {}


def jcmd_beside(java: str) -> str:
    """The ``jcmd`` of the JDK that ``java`` belongs to."""
    return str(Path(os.path.realpath(java)).parent / "jcmd")


def native_sample(t: float, role: str, pid: int, jcmd: str) -> NativeSample | None:
    """``pid``'s summary now (None when it is gone or does not track its memory)."""
    try:
        answer = subprocess.run(
            [jcmd, str(pid), "VM.native_memory", "summary"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, subprocess.TimeoutExpired):
        return None
    committed = parse_summary(answer.stdout)
    anon = [line.split()[1] for line in status.splitlines() if line.startswith("RssAnon:")]
    if not committed or not anon:
        return None
    return NativeSample(t, role, pid, int(anon[0]), committed)


def native_growth(
    samples: Sequence[NativeSample], warm_up_s: float, min_span_s: float
) -> list[dict[str, Any]]:
    """For each incarnation sampled at least three times over ``min_span_s`` after the
    warm-up: each category's committed MiB first and last, and the part outside the JVM's
    accounts, largest change first."""
    growth = []
    for (role, pid), kept in sorted(by_incarnation(samples, warm_up_s).items()):
        if not long_enough(kept, min_span_s):
            continue
        first, last = kept[0], kept[-1]
        kinds = {
            name: (first.committed_kib.get(name, 0), last.committed_kib.get(name, 0))
            for name in {*first.committed_kib, *last.committed_kib}
        }
        kinds[OUTSIDE] = (
            first.anon_kib - first.committed_kib["Total"],
            last.anon_kib - last.committed_kib["Total"],
        )
        kinds["anonymous"] = (first.anon_kib, last.anon_kib)
        growth.append(
            {
                "role": role,
                "pid": pid,
                "minutes": round((last.t - first.t) / 60, 1),
                "kinds": {
                    name: [round(a / 1024, 1), round(b / 1024, 1)]
                    for name, (a, b) in sorted(
                        kinds.items(), key=lambda kind: -abs(kind[1][1] - kind[1][0])
                    )
                },
            }
        )
    return growth


def native_lines(
    growth: Sequence[dict[str, Any]], every_s: float = SAMPLE_S, shown: int = 8
) -> list[str]:
    """The report's section: per incarnation, the ``shown`` kinds that changed most, sampled
    every ``every_s`` seconds."""
    if not growth:
        return []
    lines = [
        "",
        "Brokers' memory by kind (the JVM's native memory tracking, committed MiB, first and "
        f"last sample after the warm-up, every {every_s / 60:g} minutes); "
        f"'{OUTSIDE}' is anonymous memory minus the JVM's committed total: native "
        "libraries' own allocations and memory glibc keeps after it is freed.",
    ]
    for g in growth:
        lines += [
            "",
            f"{g['role']} (pid {g['pid']}, {g['minutes']} minutes):",
            "",
            row("kind", "first -> last (MiB)", "change (MiB)"),
            "|---|---|---:|",
        ]
        for name, (first, last) in list(g["kinds"].items())[:shown]:
            lines.append(row(name, f"{first} -> {last}", f"{last - first:+.1f}"))
    return lines
