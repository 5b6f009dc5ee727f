"""What the demo shows while it runs, from the sidecar's /status (pure: text in, text out).

The screen fits 80 x 24: a header of fixed width, one line per consumer of the plan (how
full it is against its capacity, and which partitions it holds, numbered), and what the
last re-plan moved. Piped output gets one plain line per second instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

WIDTH = 80
MAX_CONSUMER_LINES = 14
BAR = 10


def short(partition: str, topics: Sequence[str]) -> str:
    """``demo-orders:3`` -> ``o3`` (the topic's first letter after its prefix)."""
    topic, _, number = partition.rpartition(":")
    letter = topic.rsplit("-", 1)[-1][:1] if topic in topics else topic[:1]
    return f"{letter}{number}"


def moved(before: Mapping[str, Sequence[str]], after: Mapping[str, Sequence[str]]) -> list[str]:
    """Partitions whose consumer changed between two plans, as ``p: old->new``."""
    old = {p: c for c, ps in before.items() for p in ps}
    new = {p: c for c, ps in after.items() for p in ps}
    return [f"{p}: {old[p]}->{c}" for p, c in sorted(new.items()) if p in old and old[p] != c]


def clock(elapsed: float, duration: float) -> str:
    """``t =  42 / 60 s`` during the load, ``t = 60 s + 22 s draining`` after it."""
    if elapsed <= duration:
        return f"t = {elapsed:4.0f} / {duration:.0f} s"
    return f"t = {duration:.0f} s + {elapsed - duration:3.0f} s draining"


def header(status: Mapping[str, Any], elapsed: float, duration: float, rate: float) -> list[str]:
    """Two lines of fixed layout: numbers, then the last decision cut to the width."""
    decision = status.get("last_decision") or {}
    lag = sum((status.get("lags") or {}).values())
    first = (
        f"{clock(elapsed, duration):<28} {rate:6.0f} rec/s in  lag {lag:7.0f}  "
        f"consumers {status.get('replicas', '-')!s:>2}/{decision.get('desired', '-')!s:<2}"
    )
    reason = f"{decision.get('action', 'starting')}: {decision.get('reason', '')}"
    return [first[:WIDTH], reason[:WIDTH]]


def consumer_lines(status: Mapping[str, Any], topics: Sequence[str]) -> list[str]:
    """One line per consumer of the plan: load against capacity, bar, partitions held."""
    plan: Mapping[str, Sequence[str]] = status.get("plan") or {}
    speeds: Mapping[str, float] = status.get("speeds") or {}
    capacity = float((status.get("capacity") or {}).get("in_use") or 0) or 1.0
    lines = []
    for consumer in sorted(plan, key=lambda c: (len(c), c))[:MAX_CONSUMER_LINES]:
        held = plan[consumer]
        load = sum(speeds.get(p, 0.0) for p in held) / capacity
        filled = min(BAR, round(load * BAR))
        bar = "#" * filled + "." * (BAR - filled)
        names = " ".join(short(p, topics) for p in held)
        lines.append(f"{consumer:>4} {load:5.0%} [{bar}] {names}"[:WIDTH])
    if len(plan) > MAX_CONSUMER_LINES:
        lines.append(f"     ... and {len(plan) - MAX_CONSUMER_LINES} more consumers")
    return lines


def capacity_text(status: Mapping[str, Any]) -> str:
    """The capacity sized with, declared (or initial) and measured side by side."""
    capacity: Mapping[str, Any] = status.get("capacity") or {}
    measured = capacity.get("measured")
    given = capacity.get("declared", capacity.get("initial"))
    shown = f"{capacity.get('mode', 'declared')} {given:.0f}" if given is not None else "-"
    if measured is not None:
        shown += f", measured {measured:.0f}"
    ceiling = (status.get("drain_ceiling") or {}).get("replicas")
    return f"capacity {shown}" + (f", at most {ceiling} (drain)" if ceiling else "")


def screen(
    status: Mapping[str, Any],
    elapsed: float,
    duration: float,
    rate: float,
    last_moves: Sequence[str],
    topics: Sequence[str],
) -> list[str]:
    """The whole live screen, at most 24 lines of at most 80 characters."""
    unit = status.get("unit", "records/s")
    lines = header(status, elapsed, duration, rate)
    lines.append(f"plan ({unit}, {capacity_text(status)}; o=orders c=clicks):"[:WIDTH])
    lines += consumer_lines(status, topics)
    rscore = (status.get("last_decision") or {}).get("planned_rscore", 0.0)
    moves = ", ".join(last_moves) if last_moves else "nothing"
    lines.append(f"last re-plan (Rscore {rscore:.2f}) moved: {moves}"[:WIDTH])
    return lines[:24]


def plain_line(status: Mapping[str, Any], elapsed: float, duration: float, rate: float) -> str:
    """One line per second for a pipe or a log file."""
    return " | ".join(header(status, elapsed, duration, rate))
