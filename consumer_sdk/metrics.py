"""Prometheus metrics of the consumer SDK (process-wide registry, labelled by group)."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from consumer_sdk.health import process_problems, process_stalls
from contract.http_routes import health_route, metrics_route, serve_routes
from contract.refusals import Refusal
from contract.refusals import flags as refusal_flags

_served: set[int] = set()
_serve_lock = threading.Lock()

RECORDS = Counter(
    "autoscaler_consumer_records_total",
    "Records handed to the sink",
    ["group", "topic", "partition"],
)
BYTES = Counter(
    "autoscaler_consumer_bytes_total",
    "Bytes handed to the sink, as batch_bytes counts them (keys, values, headers and 34 B "
    "of fixed-width cells a record)",
    ["group", "topic", "partition"],
)
BATCHES = Counter("autoscaler_consumer_batches_total", "Batches flushed and committed", ["group"])
WRITE_RETRIES = Counter(
    "autoscaler_consumer_write_retries_total", "Sink writes retried", ["group", "topic"]
)
PARTITIONS_FENCED = Counter(
    "autoscaler_consumer_partitions_fenced_total",
    "Batches' partitions the sink refused because another member had claimed them",
    ["group"],
)
RESUME_LOOKUP_FAILURES = Counter(
    "autoscaler_consumer_resume_lookup_failures_total",
    "Times the sink could not say where new partitions resume (retried; they stay paused)",
    ["group"],
)
TOPICS_RECREATED = Counter(
    "autoscaler_consumer_topics_recreated_total",
    "Topics found deleted and created again under their name while read (read again from "
    "auto_offset_reset; the sink claims them under the new id)",
    ["group", "topic"],
)
SINK_START_FAILURES = Counter(
    "autoscaler_consumer_sink_start_failures_total",
    "Times the sink could not start or make its tables before joining (retried; the "
    "member joins once it has)",
    ["group"],
)
TABLE_STALENESS = Histogram(
    "autoscaler_consumer_table_staleness_seconds",
    "Per written batch and topic: seconds from its oldest record's Kafka timestamp to the "
    "moment its write returned (the records are in the sink from then: an upper bound of "
    "their visibility latency, backlog included)",
    ["group", "topic"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
)
TABLE_MAINTENANCE_SECONDS = Histogram(
    "autoscaler_consumer_table_maintenance_seconds",
    "How long a Delta checkpoint (and the log's clean-up) or an Iceberg snapshot expiry "
    "took, run beside the appends",
    ["table"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
TABLE_MAINTENANCE_FAILURES = Counter(
    "autoscaler_consumer_table_maintenance_failures_total",
    "Delta checkpoints or Iceberg snapshot expiries that failed (tried again later; the "
    "table stays correct, readers replay more of its log or metadata)",
    ["table"],
)
TABLE_COMPACTION_SECONDS = Histogram(
    "autoscaler_consumer_table_compaction_seconds",
    "How long a compaction of a table's small files took, run beside the appends "
    "(compact_every_commits)",
    ["table"],
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
TABLE_COMPACTION_FAILURES = Counter(
    "autoscaler_consumer_table_compaction_failures_total",
    "Compactions beside the appends that failed (tried again after the next commits; the "
    "table stays correct, readers only read more files)",
    ["table"],
)
COMMIT_FAILURES = Counter(
    "autoscaler_consumer_commit_failures_total",
    "Offset commits that failed (records may be re-delivered)",
    ["group"],
)
THROUGHPUT = Gauge(
    "autoscaler_consumer_throughput_bytes_per_second",
    "Bytes per second of the last flushed batch window",
    ["group"],
)
THROUGHPUT_RECORDS = Gauge(
    "autoscaler_consumer_throughput_records_per_second",
    "Records per second of the last flushed batch window",
    ["group"],
)
DRAIN_MEASURED = Gauge(
    "autoscaler_consumer_drain_measured_records_per_second",
    "Records per second this consumer wrote while a backlog waited behind every batch (its "
    "measured capacity, reported to the sidecar in its offset commits)",
    ["group"],
)
DRAIN_BUSY = Gauge(
    "autoscaler_consumer_drain_busy_records_per_second",
    "Records per second this consumer wrote per second its sink was busy, backlog or not (what "
    "a consumer that keeps up shows of what it could drain; reported to the sidecar too)",
    ["group"],
)
ASSIGNOR_FALLBACKS = Counter(
    "autoscaler_assignor_fallbacks_total", "Leader assignments that fell back to sticky", ["group"]
)
ASSIGNOR_REPACKS = Counter(
    "autoscaler_assignor_repacks_total",
    "Leader assignments packed from scratch: the sticky plan overloaded a member",
    ["group"],
)
ASSIGNOR_RACK_BLIND = Counter(
    "autoscaler_assignor_rack_blind_total",
    "Leader assignments packed without racks although members declared theirs (the leader "
    "logs why once per reason)",
    ["group"],
)
# PluginStats field -> the counter that exports it.
PLUGIN_COUNTERS = {
    "fallbacks": ASSIGNOR_FALLBACKS,
    "repacks": ASSIGNOR_REPACKS,
    "rack_blind": ASSIGNOR_RACK_BLIND,
}
SNAPSHOTS_IGNORED = Counter(
    "autoscaler_snapshots_ignored_total", "Speed snapshots ignored", ["group", "reason"]
)
SNAPSHOT_READER_FAILURES = Counter(
    "autoscaler_snapshot_reader_failures_total",
    "Times the speed snapshot reader stopped (unreachable broker, ...) and was restarted",
    ["group"],
)
PARTITIONS_RELEASED = Counter(
    "autoscaler_consumer_partitions_released_total",
    "Revoked partitions given up without writing their pending records (the sink fences)",
    ["group"],
)
PARTITIONS_LOST = Counter(
    "autoscaler_consumer_partitions_lost_total",
    "Partitions dropped unwritten and uncommitted because the coordinator no longer knew "
    "this member (evicted, or a round ended without it)",
    ["group"],
)
HANDOVERS = Counter(
    "autoscaler_consumer_handovers_total",
    "Partitions given in a one-round hand-over, by how their wait for the old owner ended: "
    "released (its commit said so), unmarked (a later round no longer counted it as read "
    "by the old owner) or timed_out (after max_poll_interval_ms)",
    ["group", "outcome"],
)
HANDOVER_WAIT = Histogram(
    "autoscaler_consumer_handover_wait_seconds",
    "How long a partition given in a one-round hand-over waited for its old owner's release",
    ["group"],
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)
PARTITIONS_RECLAIMED = Counter(
    "autoscaler_consumer_partitions_reclaimed_total",
    "Partitions the group still gives this member claimed again after another writer's "
    "claim overwrote its own (a late claim of a member that lost them, or a paused one)",
    ["group"],
)
REPLANS = Counter(
    "autoscaler_consumer_replans_total",
    "Re-plans this member asked for (it stayed above capacity)",
    ["group"],
)
REPLANS_SKIPPED = Counter(
    "autoscaler_consumer_replans_skipped_total",
    "Re-plans this member did not ask for: it stayed above capacity, but the speeds need "
    "more members than the group has (the sidecar scales up instead)",
    ["group"],
)
LEAVES = Counter(
    "autoscaler_consumer_leaves_total",
    "Times this member left its group, by how: handed_over (its partitions moved while it "
    "read them), timed_out (the hand-over did not finish in leave_handover_secs), at_once",
    ["group", "outcome"],
)
KAFKA_REFUSED = Gauge(
    "autoscaler_consumer_kafka_connect_problem",
    "1 while this consumer cannot join its group, by kind (unreachable, protocol, "
    "credentials, certificate, authorization)",
    ["group", "kind"],
)


def flag_refusal(group: str, found: Refusal | None) -> None:
    """Set ``group``'s :data:`KAFKA_REFUSED`: 1 for the kind ``found`` is, 0 for the others
    (all 0 when it is None)."""
    for kind, flag in refusal_flags(found).items():
        KAFKA_REFUSED.labels(group, kind.value).set(flag)


POLL_ERRORS = Counter(
    "autoscaler_consumer_poll_errors_total",
    "Errors raised while polling (retried)",
    ["group", "error"],
)

BATCHES_REFUSED = Counter(
    "autoscaler_consumer_record_batches_refused_total",
    "Record batches the decoder refused (malformed, or past max_record_batch_bytes once "
    "inflated): each became a dead-letter row at its last offset",
    ["topic"],
)
CORRUPT_FETCHES = Counter(
    "autoscaler_consumer_corrupt_fetches_total",
    "Fetched message sets whose batches could not be told apart or failed their CRC (fetched "
    "again; the position stays)",
    ["topic"],
)
PARTITIONS_STUCK = Gauge(
    "autoscaler_consumer_partitions_stuck",
    "Partitions of this member whose fetches failed their checks (CRC) at one offset 3 "
    "times or more in a row: paused between tries, nothing of them skipped",
    ["group"],
)
MEMBERSHIP_LOST = Counter(
    "autoscaler_consumer_membership_lost_total",
    "Times the coordinator refused this member's id or generation while it was in the group "
    "(evicted after a session without heartbeats, or a round that ended without it)",
    ["group"],
)
SHARE_ACKNOWLEDGE_FAILURES = Counter(
    "autoscaler_consumer_share_acknowledge_failures_total",
    "Share-group acknowledgements the broker refused (a lock expired during the write, or "
    "the member was fenced): the records come again, and the table takes them once",
    ["group", "topic"],
)
SHARE_RECORDS_GIVEN_UP = Counter(
    "autoscaler_consumer_share_records_given_up_total",
    "Records at their last share-group delivery (share.delivery.count.limit) that a stopping "
    "member could not write within its grace: Kafka archives them, so the table lacks them",
    ["group", "topic"],
)
CLIENT_ERRORS = Counter(
    "autoscaler_consumer_client_errors_total",
    "Errors the share consumer's Kafka client reported (a broker out of reach, ...)",
    ["group"],
)
LOOP_LATENESS = Histogram(
    "autoscaler_consumer_event_loop_lateness_seconds",
    "How late the consumer's event loop ran a timer (heartbeats wait as long)",
    ["group"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
)


def serve(port: int) -> None:
    """Serve ``/metrics``, ``/healthz`` and ``/livez`` (:mod:`consumer_sdk.health`, every
    consumer of the process) on every interface's ``port``, once per process and port."""
    with _serve_lock:
        if port not in _served:
            routes = {
                "/metrics": metrics_route(REGISTRY),
                "/healthz": health_route(process_problems, lambda: True),
                "/livez": health_route(process_stalls, lambda: True),
            }
            serve_routes("", port, routes, "consumer-http")
            _served.add(port)
