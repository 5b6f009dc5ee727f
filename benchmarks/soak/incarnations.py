"""Samples of long-lived processes, grouped by the incarnation that gave them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class ProcessSampled(Protocol):
    """A sample taken at ``t`` seconds of one process: its role and its pid."""

    @property
    def t(self) -> float: ...

    @property
    def role(self) -> str: ...

    @property
    def pid(self) -> int: ...


SampleT = TypeVar("SampleT", bound=ProcessSampled)


def by_incarnation(
    samples: Iterable[SampleT], warm_up_s: float
) -> dict[tuple[str, int], list[SampleT]]:
    """(role, pid) -> that incarnation's samples from the warm-up's end on, in their order.

    A restarted process is a new incarnation (a new pid): its growth starts afresh.
    """
    incarnations: dict[tuple[str, int], list[SampleT]] = {}
    for sample in samples:
        if sample.t >= warm_up_s:
            incarnations.setdefault((sample.role, sample.pid), []).append(sample)
    return incarnations


def long_enough(samples: list[SampleT], min_span_s: float) -> bool:
    """Whether an incarnation's samples are enough for a slope: three or more, over at
    least ``min_span_s`` seconds."""
    return len(samples) >= 3 and samples[-1].t - samples[0].t >= min_span_s
