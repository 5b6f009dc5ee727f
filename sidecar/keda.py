"""KEDA's Kafka scaler as the HPA applies it, for side-by-side comparisons with our policy:
the rule (pure) and a controller that drives the sidecar's scaler with it.

KEDA's metric is the total lag with ``lagThreshold`` as its per-replica target, so the HPA's
recommendation is ceil(total lag / lagThreshold), capped at the partition count (KEDA's
default ``allowIdleConsumers: false``). KEDA creates its HPA without ``behavior`` (unless the
ScaledObject sets ``advanced.horizontalPodAutoscalerConfig``), so the HPA controller
(pkg/controller/podautoscaler, Kubernetes' defaults) takes its older path: it decides once
per sync period (15 s), keeps the current count while the metric's ratio to its target
(average lag per replica / lagThreshold) is within 10 %, goes to the highest recommendation
of the last 300 s (its stabilisation window, both ways), and scales up to at most
max(2 x the current count, 4) per decision. The highest recommendation counts even once the
lag has fallen: a group that lagged 24 replicas' worth a minute ago keeps doubling towards
24. (The scale-up policies of ``behavior``'s defaults, max(+100 %, +4 pods) per 15 s, apply
only to an HPA that sets ``behavior``.)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from sidecar.controller import Action, Controller, ControllerConfig, Decision, Observation

HPA_TOLERANCE = 0.1
HPA_SCALE_DOWN_STABILISATION_S = 300.0
HPA_SYNC_PERIOD_S = 15.0
# The scale-up limit of an HPA without behavior: max(2 x current, 4) per decision.
HPA_SCALE_UP_FACTOR = 2
HPA_SCALE_UP_MINIMUM = 4


class KedaRule:
    """The replica count KEDA + HPA set over time (keeps the HPA's history: its
    recommendations of the last 300 s)."""

    def __init__(self, lag_threshold: float, sync_period_s: float = HPA_SYNC_PERIOD_S) -> None:
        if not (math.isfinite(lag_threshold) and lag_threshold > 0):
            raise ValueError(f"lag_threshold must be a finite number > 0, got {lag_threshold!r}")
        if not (math.isfinite(sync_period_s) and sync_period_s > 0):
            raise ValueError(f"sync_period_s must be a finite number > 0, got {sync_period_s!r}")
        self.lag_threshold = lag_threshold
        self.sync_period_s = sync_period_s
        self.next_sync: float | None = None
        self.history: deque[tuple[float, int]] = deque()

    def desired(self, t: float, total_lag: float, current: int, ceiling: int) -> int:
        """Replicas at time ``t`` for ``total_lag`` (never above ``ceiling``, at least 1):
        ``current`` between the HPA's syncs."""
        if self.next_sync is not None and t < self.next_sync:
            return current
        self.next_sync = t + self.sync_period_s
        recommended = max(1, min(ceiling, math.ceil(total_lag / self.lag_threshold)))
        if current and abs(total_lag / (current * self.lag_threshold) - 1) <= HPA_TOLERANCE:
            recommended = current
        while self.history and self.history[0][0] < t - HPA_SCALE_DOWN_STABILISATION_S:
            self.history.popleft()
        self.history.append((t, recommended))
        stabilised = max(d for _, d in self.history)
        limit = max(HPA_SCALE_UP_FACTOR * current, HPA_SCALE_UP_MINIMUM)
        return max(1, min(stabilised, limit, ceiling))


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
            f"-> {desired} (HPA: decides every {self.rule.sync_period_s:g} s, tolerance "
            f"{HPA_TOLERANCE:.0%}, the highest recommendation of the last "
            f"{HPA_SCALE_DOWN_STABILISATION_S:.0f} s, up to at most max("
            f"{HPA_SCALE_UP_FACTOR}x, {HPA_SCALE_UP_MINIMUM}) at once)"
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
