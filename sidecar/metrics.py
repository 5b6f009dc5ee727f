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
    "Last stable offset (read_committed) or end offset, minus committed offset",
    ["topic", "partition"],
    registry=REGISTRY,
)
OPEN_TRANSACTION = Gauge(
    "autoscaler_partition_open_transaction_seconds",
    "How long a transaction left open has held the partition's last stable offset below its "
    "end (read_committed consumers wait for it); absent when none does",
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
INFO = Gauge(
    "autoscaler_info",
    "1, labelled with the consumer group this sidecar sizes (join on job and instance to "
    "group the sidecar's other metrics by group)",
    ["group"],
    registry=REGISTRY,
)
MAX_REPLICAS = Gauge(
    "autoscaler_max_replicas", "The most replicas the controller may ask for", registry=REGISTRY
)
CAPACITY_DECLARED = Gauge(
    "autoscaler_capacity_declared",
    "What one consumer drains as configured (--capacity, or its initial value under auto)",
    registry=REGISTRY,
)
CAPACITY_MEASURED = Gauge(
    "autoscaler_capacity_measured",
    "What one consumer drains as the consumers measured it (NaN until measured)",
    registry=REGISTRY,
)
CAPACITY_IN_USE = Gauge(
    "autoscaler_capacity_in_use", "The capacity the controller sizes with", registry=REGISTRY
)
CAPACITY_AGE = Gauge(
    "autoscaler_capacity_measured_age_seconds",
    "Seconds since the measured capacity last took in a report (NaN: never)",
    registry=REGISTRY,
)
CAPACITY_MISMATCH = Gauge(
    "autoscaler_capacity_mismatch",
    "1 when the measured capacity has differed from the declared one by more than 25 % for "
    "several minutes",
    registry=REGISTRY,
)
CAPACITY_REPORTS_IGNORED = Counter(
    "autoscaler_capacity_reports_ignored",
    "Capacity reports ignored, by reason (malformed, absurd, not_member)",
    ["reason"],
    registry=REGISTRY,
)
DRAIN_CEILING = Gauge(
    "autoscaler_drain_ceiling_replicas",
    "The most consumers worth running: more did not drain more (0: no ceiling known)",
    registry=REGISTRY,
)
DECISIONS = Counter(
    "autoscaler_decisions_total", "Controller decisions", ["action"], registry=REGISTRY
)
KAFKA_REFUSED = Gauge(
    "autoscaler_kafka_connect_problem",
    "1 while this sidecar cannot connect to Kafka, by kind (unreachable, protocol, "
    "credentials, certificate, authorization)",
    ["kind"],
    registry=REGISTRY,
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
MEMBERS_FAILING = Gauge(
    "autoscaler_consumers_failing",
    "Consumers the scaler started that fail now (exited, CrashLoopBackOff, ImagePullBackOff)",
    registry=REGISTRY,
)
NOT_JOINING = Gauge(
    "autoscaler_consumers_not_joining",
    "1 while the consumers asked for are not joining the group (failing, or missing for 45 "
    "s): scale-ups are held",
    registry=REGISTRY,
)
