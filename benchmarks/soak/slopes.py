"""Least-squares slopes of sampled figures, per 10 minutes, and how finely they are told."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def slope_per_10_min(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per 10 minutes."""
    times = [t for t, _ in points]
    values = [v for _, v in points]
    return statistics.linear_regression(times, values).slope * 600


def slope_error_per_10_min(points: Sequence[tuple[float, float]]) -> float | None:
    """The standard error of :func:`slope_per_10_min` (None with fewer than three points):
    how finely an hour of samples that swing can tell a slope at all."""
    if len(points) < 3:
        return None
    times = [t for t, _ in points]
    mean_t = statistics.fmean(times)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return None
    fit = statistics.linear_regression(times, [v for _, v in points])
    residuals = sum((v - fit.intercept - fit.slope * t) ** 2 for t, v in points)
    return math.sqrt(residuals / (len(points) - 2) / spread) * 600
