"""What a JVM's heap holds alive, from a class histogram taken after a full collection.

A broker's heap is committed and touched at start in the soak, so its resident memory says
nothing about what the heap holds: a leak there (a group's members, fetch sessions or
connections the broker never lets go) would not move its RSS. ``jcmd <pid>
GC.class_histogram`` runs a full collection first, so its total is the live set, and its rows
say which classes hold it. The collection is a pause of its own (a fraction of a second for
these heaps), so the soak takes one only with ``--live-heap``, every ``SAMPLE_S``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.soak.incarnations import by_incarnation, long_enough
from benchmarks.soak.slopes import slope_per_10_min
from benchmarks.support.report import row

SAMPLE_S = 300.0  # a full collection each time: rare enough not to shape what it measures
TOP_CLASSES = 12  # kept per sample, to name what grows without keeping every class
_ROW = re.compile(r"^\s*\d+:\s+(?P<instances>\d+)\s+(?P<bytes>\d+)\s+(?P<name>\S+)")
_TOTAL = re.compile(r"^Total\s+(?P<instances>\d+)\s+(?P<bytes>\d+)\s*$")
MIB = 1024 * 1024


@dataclass
class LiveHeapSample:
    """One JVM's live heap after a full collection: the total and its largest classes."""

    t: float
    role: str
    pid: int
    live_bytes: int
    top_classes: dict[str, int] = field(default_factory=dict)


def parse_histogram(text: str, top: int = TOP_CLASSES) -> tuple[int, dict[str, int]] | None:
    """(live bytes, the ``top`` classes' bytes) of a ``GC.class_histogram`` answer; None
    when it holds no histogram (the JVM gone, the attach refused)."""
    classes: dict[str, int] = {}
    total = None
    for line in text.splitlines():
        if match := _TOTAL.match(line):
            total = int(match["bytes"])
        elif (match := _ROW.match(line)) and len(classes) < top:
            classes[match["name"]] = classes.get(match["name"], 0) + int(match["bytes"])
    return None if total is None else (total, classes)


def live_heap_sample(t: float, role: str, pid: int, jcmd: str) -> LiveHeapSample | None:
    """``pid``'s live heap now (None when it is gone or does not answer)."""
    try:
        answer = subprocess.run(
            [jcmd, str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    parsed = parse_histogram(answer.stdout)
    if parsed is None:
        return None
    return LiveHeapSample(t, role, pid, parsed[0], parsed[1])


def live_heap_growth(
    samples: Sequence[LiveHeapSample],
    warm_up_s: float,
    min_span_s: float,
) -> list[dict[str, Any]]:
    """For each incarnation sampled long enough after the warm-up: its live heap first and
    last (MiB), its least-squares slope per 10 minutes, and the
    classes whose bytes changed most between its first and last sample."""
    growth = []
    for (role, pid), kept in sorted(by_incarnation(samples, warm_up_s).items()):
        if not long_enough(kept, min_span_s):
            continue
        first, last = kept[0], kept[-1]
        changes = {
            name: last.top_classes.get(name, 0) - first.top_classes.get(name, 0)
            for name in {*first.top_classes, *last.top_classes}
        }
        growth.append(
            {
                "role": role,
                "pid": pid,
                "minutes": round((last.t - first.t) / 60, 1),
                "live_first_mib": round(first.live_bytes / MIB, 1),
                "live_last_mib": round(last.live_bytes / MIB, 1),
                "live_mib_per_10_min": round(
                    slope_per_10_min([(s.t, s.live_bytes / MIB) for s in kept]), 2
                ),
                "classes_changed_most": [
                    [name, round(change / MIB, 2)]
                    for name, change in sorted(changes.items(), key=lambda c: -abs(c[1]))[:3]
                ],
            }
        )
    return growth


def live_heap_lines(growth: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section: each JVM incarnation's live heap and what changed most."""
    if not growth:
        return []
    lines = [
        "",
        "JVMs' live heap (a class histogram after a full collection, every "
        f"{SAMPLE_S / 60:g} minutes after the warm-up): what the heap holds alive, which its "
        "resident memory does not show. Classes: the three whose bytes changed most among "
        f"the {TOP_CLASSES} largest, first to last sample.",
        "",
        row("process", "pid", "minutes", "live heap first -> last (MiB)", "MiB / 10 min")
        + " classes changed most (MiB) |",
        "|---|---:|---:|---|---:|---|",
    ]
    for g in growth:
        changed = ", ".join(f"`{name}` {change:+.2f}" for name, change in g["classes_changed_most"])
        lines.append(
            row(
                g["role"],
                g["pid"],
                g["minutes"],
                f"{g['live_first_mib']} -> {g['live_last_mib']}",
                g["live_mib_per_10_min"],
                changed or "-",
            )
        )
    return lines
