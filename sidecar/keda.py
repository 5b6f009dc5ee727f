"""KEDA's Kafka scaler as the HPA applies it, for side-by-side comparisons with our policy:
the rule (pure) and a controller that drives the sidecar's scaler with it.

desired = ceil(total lag / lagThreshold), capped at the partition count (KEDA's default
``allowIdleConsumers: false``); the HPA keeps the current count while the metric's ratio to
its target (average lag per replica / lagThreshold) is within 10 %, and scales down only to
the highest recommendation of the last 300 s (its default stabilisation window).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from sidecar.controller import Action, Controller, ControllerConfig, Decision, Observation

HPA_TOLERANCE = 0.1
HPA_SCALE_DOWN_STABILISATION_S = 300.0


class KedaRule:
    """The replica recommendation of KEDA + HPA over time (keeps its 300 s history)."""

    def __init__(self, lag_threshold: float) -> None:
        if not (math.isfinite(lag_threshold) and lag_threshold > 0):
            raise ValueError(f"lag_threshold must be a finite number > 0, got {lag_threshold!r}")
        self.lag_threshold = lag_threshold
        self.history: deque[tuple[float, int]] = deque()

    def desired(self, t: float, total_lag: float, current: int, ceiling: int) -> int:
        """Replicas for ``total_lag`` at time ``t`` (never above ``ceiling``, at least 1)."""
        desired = max(1, min(ceiling, math.ceil(total_lag / self.lag_threshold)))
        if current and abs(total_lag / (current * self.lag_threshold) - 1) <= HPA_TOLERANCE:
            desired = current
        self.history.append((t, desired))
        while self.history[0][0] < t - HPA_SCALE_DOWN_STABILISATION_S:
            self.history.popleft()
        if desired < current:
            desired = min(current, max(d for _, d in self.history))
        return desired


class KedaController(Controller):
    """Our controller's interface and guards (synchronise, stale data, replica bounds), the
    decision from :class:`KedaRule` instead of the packing."""

    def __init__(
        self, config: ControllerConfig, clock: Callable[[], float], lag_threshold: float
    ) -> None:
        super().__init__(config, clock)
        self.rule = KedaRule(lag_threshold)

    def _decide(self, now: float, current: int, observation: Observation) -> Decision:
        """Decide from the total lag of the observation."""
        ceiling = max(1, min(self.config.max_replicas, len(observation.speeds)))
        total = sum(observation.lags_in_records().values())  # lagThreshold counts records
        desired = max(self.config.min_replicas, self.rule.desired(now, total, current, ceiling))
        why = (
            f"KEDA: total lag {total:.0f} / lagThreshold {self.rule.lag_threshold:g} "
            f"-> {desired} (HPA tolerance {HPA_TOLERANCE:.0%}, "
            f"{HPA_SCALE_DOWN_STABILISATION_S:.0f} s scale-down stabilisation)"
        )
        action = (
            Action.SCALE_UP
            if desired > current
            else Action.SCALE_DOWN
            if desired < current
            else Action.HOLD
        )
        self.replicas = desired
        return Decision(now, action, current, desired, desired, why)
