"""The sidecar's Prometheus metrics (own registry, served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

REGISTRY = CollectorRegistry()
SPEED = Gauge(
    "autoscaler_partition_speed",
    "Measured write speed (capacity unit)",
    ["topic", "partition"],
    registry=REGISTRY,
)
LAG = Gauge(
    "autoscaler_partition_lag",
    "End offset minus committed offset",
    ["topic", "partition"],
    registry=REGISTRY,
)
DESIRED = Gauge("autoscaler_desired_replicas", "Replicas the controller wants", registry=REGISTRY)
ACTUAL = Gauge("autoscaler_actual_replicas", "Replicas running", registry=REGISTRY)
DEMAND = Gauge(
    "autoscaler_demand_replicas", "Consumers the heuristic packs the load into", registry=REGISTRY
)
PLAN_RSCORE = Gauge("autoscaler_plan_rscore", "Rscore of the latest plan", registry=REGISTRY)
LEADER = Gauge(
    "autoscaler_leader", "1 if this sidecar scales, 0 if it only watches", registry=REGISTRY
)
DECISIONS = Counter(
    "autoscaler_decisions_total", "Controller decisions", ["action"], registry=REGISTRY
)
ERRORS = Counter("autoscaler_errors_total", "Errors by kind", ["kind"], registry=REGISTRY)
SNAPSHOTS = Counter(
    "autoscaler_snapshots_published_total", "Speed snapshots published", registry=REGISTRY
)
CONSUMER_CRASHES = Counter(
    "autoscaler_consumer_crashes_total",
    "Consumers started by the local scaler that exited by themselves",
    registry=REGISTRY,
)
CRASH_LOOPING = Gauge(
    "autoscaler_consumers_crash_looping",
    "Consumers of the local scaler that crashed three times in a row or more",
    registry=REGISTRY,
)
