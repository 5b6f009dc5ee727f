"""Autoscaling with real processes: one load trace, every policy on it, one Kafka cluster.

The trace: 2 topics x 12 partitions whose rates follow the paper's random walk (20-120
records/s each at the start), times 3 in the middle third, back in the last third. Per
policy, a fresh group on fresh topics; the sidecar (``python -m sidecar.cli``, local scaler)
starts and stops real consumer processes (``benchmarks/support/autoscale_member.py``: the SDK's
consumer writing a ledger through a downstream that drains C records/s, C being the capacity
every policy is told). Policies, in this order: ours (default heuristic, cooperative), ours
with eager rebalancing, KEDA-style at a few lagThreshold values (``--keda-lag-threshold``:
ceil(total lag / threshold), HPA 10 % tolerance, 300 s scale-down stabilisation, capped at
the partitions), and a fixed group at the largest size ours reached.

Measured per policy: consumer-seconds over the trace, total lag p50/p99/max in records and in
seconds of arrivals, end-to-end latency (record timestamp to ledger write) p50/p99 overall
and for records produced during the step up, rebalance generations, scale events, flaps (a
scale event reversed within the policy's scale-down window), records re-delivered and
missing. ``python -m benchmarks.autoscale [--cluster apache|embedded] [--duration 600]``
writes ``results/autoscale_<cluster>.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import itertools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from assignor import TopicPartition
from benchmarks.support.autoscale_member import FAIL_UNTIL_ENV, RATE_ENV
from benchmarks.support.kube_workload import KubeSite, Sizing, commit_start
from benchmarks.support.machine import (
    add_cluster_option,
    baseline_checkout,
    broker_line,
    machine_info,
    machine_line,
)
from benchmarks.support.report import RESULTS, publish
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from contract.local_ports import free_port
from examples.demo import fetch_status
from examples.demo_verdict import best_count, draining, drains_by_count
from examples.load import LoadGenerator, RateWalk
from local_kafka.clusters import ClusterKind, KafkaCluster, kafka_cluster
from sidecar.keda import HPA_SYNC_PERIOD_S
from sidecar.simulation import oracle_consumer_seconds, work_consumer_seconds

ROOT = Path(__file__).parent.parent
PARTITIONS = 12
TOPICS = 2
CAPACITY = 1000.0  # records/s a consumer's downstream drains, and what every policy is told
VALUE_BYTES = 200
SCALE_DOWN_WINDOW_S = 120.0  # ours (the sidecar's default)
BATCH_WAIT_S = 1.0  # AUTOSCALER_WAIT_TIME_SECS of every policy's consumers
KEDA_STABILISATION_S = 300.0
DURATION_S = 600.0
# On Kubernetes the trace is stretched so its low last third (400 s) outlasts the HPA's
# scale-down stabilisation (300 s): at 600 s KEDA never got to scale down inside the trace.
KUBE_DURATION_S = 1200.0
KEDA_THRESHOLDS = (1000, 5000, 20000)
# Apache Kafka's default: a group forming waits this long for more members to join (the
# suite's clusters set 0 so tests start at once; a user's broker has 3 s).
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "3000"}
GENERATION = re.compile(r"\(generation (\d+)\)|generation (\d+):")
# The consumers' timings: the SDK's defaults (the members set none).
CONSUMER_TIMINGS: dict[str, int] = {
    f.name: int(f.default)  # type: ignore[arg-type]  # both fields have int defaults
    for f in dataclasses.fields(ConsumerConfig)
    if f.name in ("session_timeout_ms", "heartbeat_interval_ms")
}
REPLAN = "asking the group to re-plan"  # a member above its capacity (consumer_sdk.consumer)
# A scale decision: the sidecar's (sidecar.app "scale_up 2 -> 3: ..."), or on Kubernetes a
# change of the Deployment's replicas whoever made it (benchmarks.support.kube_workload).
DECISION = re.compile(r"(?:sidecar\.app|hpa) (scale_up|scale_down) (\d+) -> (\d+)")
# A cooperative member's step: the partitions it gave up went to another member.
REVOKED = re.compile(r"generation \d+: kept \d+, revoked (\d+), added \d+")
REVOKED_PARTITIONS = re.compile(r"generation \d+ revoked: (.+)$")


@dataclass(frozen=True)
class Policy:
    """A name, the sidecar/consumer settings that make it, its scale-down window."""

    name: str
    env: dict[str, str]
    window_s: float
    sizing: Sizing | None = None  # who sizes the Deployment, with --platform kube
    # Seconds from the start during which every consumer exits at once (its sink cannot
    # start): does the policy scale into failure, and does it recover?
    failing_s: float = 0.0


@dataclass
class Run:
    """What one policy's run produced."""

    policy: Policy
    samples: list[dict[str, float]] = field(default_factory=list)
    latencies_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_latencies_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    redelivered: int = 0
    missing: int = 0
    generations: int = 0
    replans: int = 0
    peak: int = 0
    causes: list[Cause] = field(default_factory=list)
    scale_up_waits: list[float] = field(default_factory=list)
    scale_ups_early: int = 0
    moved: int = 0
    rscore: float | None = None  # None: the members' logs do not name what they revoked
    starts: int = 0  # consumer processes started while the consumers were failing


@dataclass
class Cause:
    """Something that makes the group rebalance, and the generations it took: every new
    generation until the next cause is counted as this one's."""

    kind: str  # "forming" (the first scale-up), "scale" or "re-plan"
    at: str  # the log's timestamp
    detail: str
    generations: int = 0


def trace(duration_s: float, seed: int, topics: Sequence[str]) -> RateWalk:
    """The load: the paper's walk, x3 in the middle third, x1 again in the last."""
    partitions = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    return RateWalk(
        partitions,
        low=20,
        high=120,
        delta=10,
        duration_s=duration_s,
        step_up=3.0,
        step_down=1.0,
        seed=seed,
    )


def sidecar_env(
    kafka: KafkaCluster, kind: ClusterKind, group: str, topics: Sequence[str], out: Path
) -> dict[str, str]:
    """The settings every policy shares."""
    member = f"{shlex.quote(sys.executable)} -m benchmarks.support.autoscale_member"
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AUTOSCALER_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "AUTOSCALER_GROUP": group,
        "AUTOSCALER_TOPICS": ",".join(topics),
        # Records/s on both brokers: the downstream's pace is in records, and bytes/s from
        # log sizes would convert it with an assumed record size (off by the batching).
        "AUTOSCALER_CAPACITY": str(CAPACITY),
        "AUTOSCALER_CAPACITY_UNIT": "records/s",
        "AUTOSCALER_SNAPSHOT_TOPIC": f"{group}.speeds",
        "AUTOSCALER_INTERVAL": "1",
        "AUTOSCALER_WINDOW": "8",
        "AUTOSCALER_MIN_WINDOW": "2",
        "AUTOSCALER_SCALE_DOWN_WINDOW": str(SCALE_DOWN_WINDOW_S),
        "AUTOSCALER_MAX_REPLICAS": str(PARTITIONS * len(topics)),
        "AUTOSCALER_SCALER": "local",
        "AUTOSCALER_CONSUMER_COMMAND": member,
        "AUTOSCALER_IDENTITY_PREFIX": "sink",
        "AUTOSCALER_HTTP_PORT": str(free_port()),
        "AUTOSCALER_LOCK_FILE": str(out / "sidecar.lock"),
        "AUTOSCALER_LEADER_DELAY_SECS": "0.1" if kind is ClusterKind.EMBEDDED else "0",
        "AUTOSCALER_WAIT_TIME_SECS": str(BATCH_WAIT_S),
        # About one second of the downstream's work per batch (the default 16 MiB would be
        # 80,000 records: 80 s of writing, which a revocation would wait for).
        "AUTOSCALER_BATCH_BYTES": str(int(CAPACITY * VALUE_BYTES)),
        "AUTOSCALER_SINK": f"ledger:{out}/{{identity}}.ledger",
        RATE_ENV: str(CAPACITY),
    }


def run_policy(
    kafka: KafkaCluster,
    kind: ClusterKind,
    policy: Policy,
    duration_s: float,
    seed: int,
    site: KubeSite | None = None,
) -> Run:
    """One policy on fresh topics and a fresh group; returns its samples and ledgers read.
    With ``site``, its consumers are pods of a Deployment there (``policy.sizing``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", policy.name.lower()).strip("-")
    group = f"as-{slug}-{int(time.time())}"
    topics = [f"{group}-t{i}" for i in range(TOPICS)]
    broker = kafka.broker_handle()
    for topic in topics:
        broker.create_topic(topic, PARTITIONS, 1)
    broker.create_topic(f"{group}.speeds", 1, 1)
    out = Path(tempfile.mkdtemp(prefix=f"autoscale-{slug}-"))
    env = {**sidecar_env(kafka, kind, group, topics, out), **policy.env}
    port = int(env["AUTOSCALER_HTTP_PORT"])
    log_path = out / "sidecar.log"
    walk = trace(duration_s, seed, topics)
    result = Run(policy)
    with contextlib.ExitStack() as stack, log_path.open("w") as log:
        pods = None
        if site is not None:
            commit_start(kafka.bootstrap_servers, group, topics, PARTITIONS)
            sizing = policy.sizing or Sizing("sidecar")
            pods = stack.enter_context(site.workload(slug, sizing, env, out, group))
            env |= pods.sidecar_env
        if policy.failing_s:
            env[FAIL_UNTIL_ENV] = str(time.time() + policy.failing_s)
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli"], env=env, cwd=ROOT, stdout=log, stderr=log
        )
        load = LoadGenerator(kafka.bootstrap_servers, walk, value_bytes=VALUE_BYTES)
        load.start()
        started_at = datetime.now()  # the log's clock: local time
        speeds: list[tuple[float, dict[TopicPartition, float]]] = []
        try:
            while load.is_alive() or (
                result.samples
                and result.samples[-1]["lag"] > 0
                and load.elapsed() < duration_s + 120
            ):
                status = fetch_status(port)
                if pods is not None:  # what runs, whoever sized it
                    status["replicas"] = pods.running()
                elapsed = load.elapsed()
                sample = {
                    "t": elapsed,
                    "rate": sum(walk.current(elapsed).values()) if load.is_alive() else 0.0,
                    "replicas": float(status.get("replicas") or 0),
                    "lag": float(sum((status.get("lags") or {}).values())),
                    "ready": float(taken_in(status)),
                }
                if pods is not None and pods.replicas is not None:
                    sample["decided"] = float(pods.replicas)
                if pods is not None and pods.hpa_lag is not None:
                    sample["hpa_lag"] = pods.hpa_lag
                result.samples.append(sample)
                speeds.append((elapsed, walk.current(elapsed)))
                time.sleep(1.0)
        finally:
            load.stop()
            load.join(60)
            stopped_at = datetime.now()  # the log's clock: local time
            sidecar.send_signal(signal.SIGTERM)
            try:
                sidecar.wait(90)
            except subprocess.TimeoutExpired:
                sidecar.kill()
    warehouse = policy.env.get("AUTOSCALER_SPARK_WAREHOUSE")
    rows = _table_rows(Path(warehouse), topics) if warehouse else _ledger_rows(out)
    _count_rows(result, rows, load.acked, duration_s)
    log_text = log_path.read_text() if pods is None else pods.merged_log(log_path)
    result.moved = moved_partitions(log_text, stopped_at)
    result.rscore = summed_rscore(log_text, started_at, stopped_at, speeds)
    result.generations = generations_before(log_text, stopped_at)
    result.replans = log_text.count(REPLAN)
    result.causes = generations_by_cause(log_text, stopped_at)
    start_ups = scale_up_to_work(log_text)
    result.scale_up_waits, result.scale_ups_early = start_ups.waits, start_ups.early
    result.peak = int(max((s["replicas"] for s in result.samples), default=0))
    result.starts = starts_by(log_text, started_at, policy.failing_s)
    print(f"{policy.name}: done ({out})", flush=True)
    return result


def starts_by(log_text: str, started_at: datetime, within_s: float) -> int:
    """Consumer processes the sidecar started in the first ``within_s`` seconds."""
    until = started_at.timestamp() + within_s
    return sum(
        1
        for line in log_text.splitlines()
        if "sidecar.scalers.local started consumer" in line
        and (at := _logged_at(line)) is not None
        and at.timestamp() <= until
    )


def failing_figures(result: Run) -> dict[str, Any]:
    """While the consumers could not start, and after: the most replicas asked for, the
    processes started, and the seconds from the fix until the lag was back under 10 s of
    arrivals (None: never within the run)."""
    failing_s = result.policy.failing_s
    if not failing_s:
        return {}
    during = [s for s in result.samples if s["t"] <= failing_s]
    caught_up = next(
        (
            s["t"] - failing_s
            for s in result.samples
            if s["t"] > failing_s and s["rate"] > 0 and s["lag"] <= 10 * s["rate"]
        ),
        None,
    )
    return {
        "failing_s": failing_s,
        "peak_while_failing": int(max((s["replicas"] for s in during), default=0)),
        "starts_while_failing": result.starts,
        "caught_up_after_fix_s": caught_up,
    }


def failing_line(row: dict[str, Any]) -> str:
    """What a run with failing consumers shows: did it scale into failure, and recover."""
    caught = row["caught_up_after_fix_s"]
    return (
        f"- {row['policy']}: consumers failing for the first {row['failing_s']:.0f} s: at most "
        f"{row['peak_while_failing']} asked for, {row['starts_while_failing']} consumer "
        f"processes started meanwhile; lag back under 10 s of arrivals "
        + ("never within the run" if caught is None else f"{caught:.0f} s after the fix")
    )


def taken_in(status: Mapping[str, Any]) -> bool:
    """Whether the group has taken in the sidecar's count (/status): described stable with
    at least that many members, or, where not described, that many seen committing."""
    replicas = int(status.get("replicas") or 0)
    group = status.get("group_members") or {}
    if group.get("described"):
        return group.get("state") == "Stable" and int(group["described"]) >= replicas
    return int(group.get("reading") or 0) >= replicas


def _logged_at(line: str) -> datetime | None:
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return None


def generations_by_cause(log_text: str, until: datetime) -> list[Cause]:
    """The sidecar's scale decisions and the members' re-plan requests in the log, in order,
    each with the new generations that followed it before the next one (or ``until``)."""
    causes: list[Cause] = []
    counted = 0
    for line in log_text.splitlines():
        logged = _logged_at(line)
        if logged is None or logged >= until:
            continue
        decision = DECISION.search(line)
        if decision is not None:
            kind = "forming" if decision.group(2) == "0" else "scale"
            detail = f"{decision.group(2)} -> {decision.group(3)}"
            causes.append(Cause(kind, line[:23], detail))
        elif REPLAN in line:
            causes.append(Cause("re-plan", line[:23], "a member above its capacity"))
        match = GENERATION.search(line)
        if match is not None and causes:
            generation = int(match.group(1) or match.group(2))
            if generation > counted:
                causes[-1].generations += generation - counted
                counted = generation
    return causes


# A member that held nothing given partitions: the cooperative coordinator's line, or
# aiokafka's own at a new member's first join (the cooperative steps start after it).
NEW_MEMBER_WORKING = re.compile(
    r"generation \d+: kept 0, revoked 0, added [1-9]|Setting newly assigned partitions \{\w"
)


@dataclass(frozen=True)
class StartUps:
    """Seconds from each scale-up decision of a running group to the first member that
    held nothing being given partitions (the consumers it added at work), and how many
    scale-ups were decided before the one before them was at work (a staircase: the same
    backlog counted again, unless the load rose meanwhile)."""

    waits: list[float]
    early: int


def scale_up_to_work(log_text: str) -> StartUps:
    """The start-ups of ``log_text`` (a sidecar's log with its consumers'): see StartUps."""
    waits: list[float] = []
    early = 0
    decided: datetime | None = None
    for line in log_text.splitlines():
        logged = _logged_at(line)
        if logged is None:
            continue
        decision = DECISION.search(line)
        if decision is not None:
            up = decision.group(1) == "scale_up" and decision.group(2) != "0"
            if up and decided is not None:
                early += 1
            decided = logged if up else None
        elif decided is not None and NEW_MEMBER_WORKING.search(line):
            waits.append((logged - decided).total_seconds())
            decided = None
    return StartUps(waits, early)


def _matches_before(
    log_text: str, pattern: re.Pattern[str], until: datetime
) -> Iterator[re.Match[str]]:
    """Every match of ``pattern`` on a log line stamped before ``until``."""
    return (match for _, match in _stamped_matches_before(log_text, pattern, until))


def _stamped_matches_before(
    log_text: str, pattern: re.Pattern[str], until: datetime
) -> Iterator[tuple[datetime, re.Match[str]]]:
    """Every match of ``pattern`` on a log line stamped before ``until``, with the stamp."""
    for line in log_text.splitlines():
        match = pattern.search(line)
        logged = _logged_at(line) if match is not None else None
        if match is not None and logged is not None and logged < until:
            yield logged, match


def generations_before(log_text: str, until: datetime) -> int:
    """The highest group generation logged before ``until``: the policy's rebalances, not
    the round the benchmark's own stop of the sidecar (and so of every member) causes."""
    generations = (
        int(m.group(1) or m.group(2)) for m in _matches_before(log_text, GENERATION, until)
    )
    return max(generations, default=0)


def moved_partitions(log_text: str, until: datetime) -> int:
    """Partitions cooperative members gave up to other members before ``until``, summed."""
    return sum(int(m.group(1)) for m in _matches_before(log_text, REVOKED, until))


def summed_rscore(
    log_text: str,
    started_at: datetime,
    until: datetime,
    speeds: Sequence[tuple[float, Mapping[TopicPartition, float]]],
) -> float | None:
    """The paper's Rscore summed over the run: every partition a member revoked before
    ``until``, weighed by its speed then (``speeds``: seconds since ``started_at``, rates of
    every partition) over C. None where the members' logs do not name what they revoked."""
    if not speeds:
        return None
    times = [t for t, _ in speeds]
    total, named = 0.0, False
    for logged, match in _stamped_matches_before(log_text, REVOKED_PARTITIONS, until):
        named = True
        elapsed = (logged - started_at).total_seconds()
        now = speeds[max(0, bisect.bisect_right(times, elapsed) - 1)][1]
        for item in match.group(1).split():
            topic, _, partition = item.rpartition(":")
            total += now.get(TopicPartition(topic, int(partition)), 0.0) / CAPACITY
    return total if named else None


def _ledger_rows(out: Path) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, offset, timestamp ms, written ms) of every ledger line."""
    rows: list[tuple[str, int, int, int, int]] = []
    for ledger in out.glob("*.ledger"):
        for line in ledger.read_text().splitlines():
            name, p, o, t, w = line.split()
            rows.append((name, int(p), int(o), int(t), int(w)))
    return rows


def _table_rows(warehouse: Path, topics: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """The same from the Delta tables the Spark sink wrote (written: the batch's ingest
    time), read with delta-rs: another engine than the one that wrote them."""
    from deltalake import DeltaTable

    from consumer_sdk.lake.spark_config import SparkSinkConfig
    from consumer_sdk.lake.spark_tables import table_root

    config = SparkSinkConfig(warehouse=str(warehouse), table_format="delta")
    rows: list[tuple[str, int, int, int, int]] = []
    for topic in topics:
        root = table_root(config, config.table_for(topic))
        if not root.exists():
            continue
        table = DeltaTable(str(root)).to_pyarrow_table(
            columns=["topic", "partition", "offset", "timestamp", "ingest_time"]
        )
        columns = [table.column(name).to_pylist() for name in table.column_names]
        for name, p, o, ts, ingested in zip(*columns, strict=True):
            rows.append(
                (name, int(p), int(o), int(ts.timestamp() * 1000), int(ingested.timestamp() * 1000))
            )
    return rows


def _count_rows(
    result: Run,
    rows: Sequence[tuple[str, int, int, int, int]],
    acked: set[tuple[str, int, int]],
    duration_s: float,
) -> None:
    seen: Counter[tuple[str, int, int]] = Counter()
    latencies: list[int] = []
    stepped: list[int] = []
    first_ts = min((r[3] for r in rows), default=0)
    for topic, partition, offset, ts, written in rows:
        key = (topic, partition, offset)
        seen[key] += 1
        if seen[key] == 1:
            latencies.append(written - ts)
            produced_at = (ts - first_ts) / 1000
            if duration_s / 3 <= produced_at < 2 * duration_s / 3:
                stepped.append(written - ts)
    result.latencies_ms = np.array(latencies, dtype=float)
    result.step_latencies_ms = np.array(stepped, dtype=float)
    result.redelivered = sum(n - 1 for n in seen.values())
    result.missing = len(acked - set(seen))


def scale_events(samples: Sequence[dict[str, float]]) -> list[tuple[float, int, int]]:
    """(time, from, to) whenever the replica count changed between two samples."""
    events = []
    for before, after in itertools.pairwise(samples):
        if after["replicas"] != before["replicas"] and before["replicas"] > 0:
            events.append((after["t"], int(before["replicas"]), int(after["replicas"])))
    return events


def decided_scale_events(causes: Sequence[Cause]) -> list[tuple[float, int, int]]:
    """(time, from, to) of the sidecar's scale decisions as its log times them (forming the
    group left out). Flaps are counted on these: the replica count sampled once a second
    shows a change up to a second late, enough to put a reversal the controller held for
    exactly the window a second inside it."""
    events = []
    for cause in causes:
        logged = _logged_at(cause.at)
        if cause.kind == "scale" and logged is not None:
            before, after = (int(n) for n in cause.detail.split(" -> "))
            events.append((logged.timestamp(), before, after))
    return events


def flaps(events: Sequence[tuple[float, int, int]], window_s: float) -> int:
    """Scale events that reverse the one before within ``window_s``."""
    count = 0
    for (t0, a0, b0), (t1, a1, b1) in itertools.pairwise(events):
        if t1 - t0 < window_s and (b0 - a0) * (b1 - a1) < 0:
            count += 1
    return count


def summarise(result: Run, duration_s: float) -> dict[str, Any]:
    """The table row of one run."""
    within = [s for s in result.samples if s["t"] <= duration_s]
    consumer_seconds = sum(a["replicas"] * (b["t"] - a["t"]) for a, b in itertools.pairwise(within))
    lags = np.array([s["lag"] for s in within] or [0.0])
    lag_s = np.array([s["lag"] / s["rate"] if s["rate"] > 0 else 0.0 for s in within] or [0.0])
    events = scale_events(result.samples)

    def pct(values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q)) if values.size else math.nan

    return {
        "policy": result.policy.name,
        "consumer_seconds": consumer_seconds,
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": float(lags.max()),
        "lag_s_p50": pct(lag_s, 50),
        "lag_s_p99": pct(lag_s, 99),
        "lag_s_max": float(lag_s.max()),
        "latency_p50_s": pct(result.latencies_ms, 50) / 1000,
        "latency_p90_s": pct(result.latencies_ms, 90) / 1000,
        "latency_p99_s": pct(result.latencies_ms, 99) / 1000,
        "step_latency_p99_s": pct(result.step_latencies_ms, 99) / 1000,
        "generations": result.generations,
        "scale_events": len(events),
        "generations_per_event": result.generations / max(1, len(events) + 1),
        "replans": result.replans,
        # Every cause of a rebalance: forming the group, scale events, members' re-plans.
        "generations_per_cause": result.generations / max(1, len(events) + 1 + result.replans),
        # The most generations one scale decision took (until the next cause).
        "most_generations_per_scale": max(
            (c.generations for c in result.causes if c.kind == "scale"), default=0
        ),
        "causes": [dataclasses.asdict(c) for c in result.causes],
        "scale_up_to_work_s": result.scale_up_waits,
        "scale_ups_before_work": result.scale_ups_early,
        "flaps": flaps(decided_scale_events(result.causes), result.policy.window_s),
        "redelivered": result.redelivered,
        "missing": result.missing,
        "peak": result.peak,
        "moved_partitions": result.moved,
        "moved_per_hour": result.moved * 3600 / duration_s,
        "rscore": result.rscore,
        **drain_figures(result.samples, result.policy.window_s),
        **failing_figures(result),
    }


def _trace_rates(duration_s: float, seed: int) -> Callable[[int], np.ndarray]:
    """The trace's rates per partition at a second (to be called second after second)."""
    walk = trace(duration_s, seed, [f"t{i}" for i in range(TOPICS)])

    def rates(second: int) -> np.ndarray:
        if second:
            walk.advance()
        return np.fromiter(walk.current(float(second)).values(), dtype=float)

    return rates


def oracle_seconds(duration_s: float, seed: int) -> float:
    """The physical limit on the same trace: ceil(total rate / C) every second, summed."""
    return oracle_consumer_seconds(_trace_rates(duration_s, seed), CAPACITY, int(duration_s))


def work_seconds(duration_s: float, seed: int) -> float:
    """All the trace's records / C: what consumers draining at most C each must spend,
    whatever lag they allow (below the oracle, which holds no lag)."""
    return work_consumer_seconds(_trace_rates(duration_s, seed), CAPACITY, int(duration_s))


def plot(runs: Sequence[Run], path: Path) -> None:
    """Replicas and total lag over time, a line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for run in runs:
        t = [s["t"] for s in run.samples]
        top.step(t, [s["replicas"] for s in run.samples], where="post", label=run.policy.name)
        bottom.plot(t, [s["lag"] for s in run.samples], label=run.policy.name)
    top.set_ylabel("consumers")
    bottom.set_ylabel("total lag (records)")
    bottom.set_yscale("symlog")
    bottom.set_xlabel("seconds")
    top.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


KEDA_TARGET_RATIO = 1.67  # ours uses at most 1/1.67 of a KEDA setting's consumer-seconds


def keda_verdict(
    ours: dict[str, Any], keda: dict[str, Any], oracle: float, work: float | None = None
) -> str:
    """Whether the KEDA target applies to ``keda`` (its p99 lag in seconds no better than
    ours) and holds (it uses at least 1.67x our consumer-seconds). Where 1/1.67 of its
    consumer-seconds is below the oracle, no policy reaches it without fewer consumers than
    the load needs (lag building); below ``work`` (all records / C), none that drains the
    trace reaches it at all. The line says which."""
    name, lag, ours_lag = keda["policy"], keda["lag_s_p99"], ours["lag_s_p99"]
    ratio = keda["consumer_seconds"] / max(1.0, ours["consumer_seconds"])
    if lag < ours_lag:
        return (
            f"- {name}: p99 lag {lag:.1f} s, better than ours ({ours_lag:.1f} s): the target "
            f"does not apply (it uses x{ratio:.2f} our consumer-seconds)"
        )
    verdict = "holds" if ratio >= KEDA_TARGET_RATIO else "MISSED"
    needed = keda["consumer_seconds"] / KEDA_TARGET_RATIO
    reach = "" if verdict == "holds" else _reach(needed, oracle, work)
    return (
        f"- {name}: p99 lag {lag:.1f} s, no better than ours ({ours_lag:.1f} s); it uses "
        f"x{ratio:.2f} our consumer-seconds (target >= {KEDA_TARGET_RATIO}: {verdict}){reach}"
    )


def _reach(needed: float, oracle: float, work: float | None) -> str:
    """What a missed target's ``needed`` consumer-seconds would take, when it lies below
    all the trace's records / C or below the oracle ('' when neither)."""
    if work is not None and needed < work:
        return (
            f"; it needs at most {needed:,.0f} consumer-s, below all the trace's records / C "
            f"({work:,.0f}): out of reach for any policy that drains the trace"
        )
    if needed < oracle:
        return (
            f"; it needs at most {needed:,.0f} consumer-s, below the oracle ({oracle:,.0f}): no "
            "policy gets there without running fewer consumers than the load needs"
        )
    return ""


def report(
    rows: list[dict[str, Any]], header: str, oracle: float, work: float | None = None
) -> str:
    """The markdown table, the targets and what they say."""
    lines = [
        header,
        "",
        "| policy | consumer-s | x oracle | lag p50 | lag p99 | lag max | lag p99 (s) | latency "
        "p50 (s) | latency p99 (s) | step-up p99 (s) | generations | scale events | gen/event "
        "| most gen per scale | re-plans | gen/cause | flaps | re-delivered | missing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {r['consumer_seconds']:,.0f} | "
            f"{r['consumer_seconds'] / oracle:.2f} | {r['lag_p50']:,.0f} | {r['lag_p99']:,.0f} | "
            f"{r['lag_max']:,.0f} | {r['lag_s_p99']:.1f} | {r['latency_p50_s']:.1f} | "
            f"{r['latency_p99_s']:.1f} | {r['step_latency_p99_s']:.1f} | {r['generations']} | "
            f"{r['scale_events']} | {r['generations_per_event']:.1f} | "
            f"{r.get('most_generations_per_scale', '')} | {r.get('replans', 0)} | "
            f"{r.get('generations_per_cause', r['generations_per_event']):.1f} | {r['flaps']} | "
            f"{r['redelivered']} | {r['missing']} |"
        )
    lines += ["", f"Oracle (packing lower bound, same trace): {oracle:,.0f} consumer-s."]
    if work is not None:
        lines.append(f"All the trace's records / C (any lag allowed): {work:,.0f} consumer-s.")
    lines.append("")
    failing = [failing_line(r) for r in rows if r.get("failing_s")]
    if failing:
        lines += [*failing, ""]
    if not rows or not rows[0]["policy"].startswith("ours (cooperative)"):
        return "\n".join(lines)  # the targets are ours against the others
    ours = rows[0]
    lines += [
        keda_verdict(ours, r, oracle, work) for r in rows[1:] if r["policy"].startswith("KEDA")
    ]
    lines += [capacity_verdict(ours, r) for r in rows[1:] if r["policy"].startswith("C ")]
    lines += [shared_verdict(r) for r in rows if r["policy"].startswith(SHARED)]
    lines.append(start_up_line(rows))
    most = ours.get("most_generations_per_scale", 0)
    lines.append(
        f"- ours: {ours['generations_per_event']:.1f} generations per scale event counting "
        f"every generation (re-plans' too); each scale decision took at most {most} "
        f"(target <= 2: {'holds' if most <= 2 else 'MISSED'}), {ours['flaps']} flaps (target "
        f"0), step-up p99 latency {ours['step_latency_p99_s']:.1f} s (target < 10)"
    )
    waits = ours.get("scale_up_to_work_s", [])
    if waits:
        lines.append(
            "- ours: from a scale-up decision to its first new consumer given partitions: "
            + ", ".join(f"{w:.1f}" for w in waits)
            + " s"
        )
    lines.append(staircase_line(rows))
    lines += ["", "What each rebalance cause of ours took (generations until the next cause):"]
    lines += [
        f"- {c['at']} {c['kind']} ({c['detail']}): {c['generations']}"
        for c in ours.get("causes", [])
    ]
    return "\n".join(lines)


def drain_figures(samples: Sequence[dict[str, float]], window_s: float) -> dict[str, Any]:
    """The group's drain by consumer count while a backlog waited and every consumer of the
    count had joined (examples.demo_verdict), the best count, and the longest time the group
    spent at a count that drained less than a smaller one did, counting only seconds with a
    backlog waiting (the shared-sink target: at most one scale-down window). Without a
    backlog the group drains its load, whatever its count: no second of it is slower."""
    as_running = [{**s, "running": s["replicas"]} for s in samples]
    drains = drains_by_count(as_running)
    worse = {n for n, d in drains.items() if any(m < n and dm > d for m, dm in drains.items())}
    longest = stretch = 0.0
    for a, b in itertools.pairwise(as_running):
        behind = int(a["replicas"]) in worse and draining(a)
        stretch = stretch + (b["t"] - a["t"]) if behind else 0.0
        longest = max(longest, stretch)
    return {
        "drains": {str(n): round(d, 1) for n, d in sorted(drains.items())},
        "best_count": best_count(drains),
        "slower_than_before_s": longest,
        "slower_bound_s": window_s,
    }


def shared_verdict(row: dict[str, Any]) -> str:
    """The shared-sink row against its targets."""
    best = row.get("best_count")
    peak_ok = best is None or row["peak"] <= best + 1
    slower_ok = row["slower_than_before_s"] <= row["slower_bound_s"]
    drains = ", ".join(f"{n}: {d:,.0f}/s" for n, d in row["drains"].items()) or "none measured"
    return (
        f"- {row['policy']}: drain by consumer count with a backlog waiting and every "
        f"consumer joined: {drains}; peak {row['peak']} consumers (target <= best {best} + 1: "
        f"{'holds' if peak_ok else 'MISSED'}); longest behind at a count that drained less "
        f"than a smaller one: {row['slower_than_before_s']:.0f} s (target <= one scale-down "
        f"window, "
        f"{row['slower_bound_s']:.0f} s: {'holds' if slower_ok else 'MISSED'})"
    )


def capacity_verdict(right: dict[str, Any], row: dict[str, Any]) -> str:
    """A mis-declared capacity's run against the run with C declared right: with
    ``--capacity auto`` both within 1.2x is the target."""
    seconds = row["consumer_seconds"] / max(1.0, right["consumer_seconds"])
    latency = row["latency_p99_s"] / max(1e-9, right["latency_p99_s"])
    target = ""
    if "auto" in row["policy"]:
        met = seconds <= 1.2 and latency <= 1.2
        target = f" (target <= 1.2x both: {'holds' if met else 'MISSED'})"
    return (
        f"- {row['policy']}: consumer-s {seconds:.2f}x, e2e p99 latency {latency:.2f}x of C "
        f"declared right{target}; peak {row['peak']} consumers (declared right: "
        f"{right['peak']})"
    )


def staircase_line(rows: Sequence[dict[str, Any]]) -> str:
    """Scale-ups decided before the previous one's consumers were at work, per run of ours
    (target: none, one scale-up per start-up time for the same backlog)."""
    ours = [r for r in rows if not r["policy"].startswith("KEDA")]
    counts = ", ".join(f"{r['policy']} {r['scale_ups_before_work']}" for r in ours)
    met = all(r["scale_ups_before_work"] == 0 for r in ours)
    return (
        f"- staircase, scale-ups decided before the one before was at work: {counts or 'none'}"
        f" (target 0: {'holds' if met else 'MISSED'})"
    )


def start_up_line(rows: Sequence[dict[str, Any]]) -> str:
    """From a scale-up decision to its first new consumer given partitions, every run's
    scale-ups together: p50/p99 and how many."""
    waits = np.array([w for r in rows for w in r.get("scale_up_to_work_s", [])], dtype=float)
    if not waits.size:
        return "- start-up: no scale-up of a running group to time"
    return (
        f"- start-up, scale-up decision to the first new consumer given partitions (every "
        f"run): p50 {np.percentile(waits, 50):.1f} s, p99 {np.percentile(waits, 99):.1f} s "
        f"over {waits.size} scale-ups"
    )


# C declared at these multiples of what the consumers drain, with and without --capacity auto.
MISDECLARED = (0.5, 2.0)
POLICY_KINDS = ("ours", "eager", "keda", "fixed", "capacity", "shared", "failing")
# The "failing" rows: consumers that cannot start for the first third of the trace.
FAILING_SHARE = 1 / 3
FAILING_KEDA_THRESHOLD = 1000
OURS = "ours (cooperative)"
KEDA = "KEDA lagThreshold="
SHARED = "shared Spark Connect sink"


def shared_sink_policy(server_url: str, warehouse: Path) -> Policy:
    """Every consumer writes Delta tables through one Spark Connect server on this machine
    (the demo's set-up): the group's drain stops rising with its size; capacity measured."""
    return Policy(
        f"{SHARED}, --capacity auto",
        {
            "AUTOSCALER_SINK": "spark",
            "AUTOSCALER_SPARK_REMOTE": server_url,
            "AUTOSCALER_SPARK_WAREHOUSE": str(warehouse),
            "AUTOSCALER_SPARK_TABLE_FORMAT": "delta",
            "AUTOSCALER_WRITES_IN_FLIGHT": "1",
            "AUTOSCALER_BATCH_BYTES": str(16 << 20),
            "AUTOSCALER_CAPACITY": "auto",
            "AUTOSCALER_CAPACITY_INITIAL": str(CAPACITY),
        },
        SCALE_DOWN_WINDOW_S,
    )


KUBE_POLICY_KINDS = ("ours", "ours-keda", "keda", "fixed")
THROUGH_KEDA = "ours through KEDA's external scaler"


def kube_policies(
    chosen: Sequence[str],
    thresholds: Sequence[int],
    repeats: int,
    baseline: tuple[str, Path] | None = None,
) -> list[Policy]:
    """The Kubernetes comparison's policies in running order: each run of ours beside a KEDA
    setting (run side by side, both meet the same noise), or beside ours at the
    ``baseline`` (revision, its work tree), then ours through KEDA; the fixed group is added
    once ours has run (it needs ours' peak)."""
    ours = [
        Policy(
            OURS if repeats == 1 else f"{OURS} #{i + 1}",
            {},
            SCALE_DOWN_WINDOW_S,
            Sizing("sidecar"),
        )
        for i in range(repeats if "ours" in chosen else 0)
    ]
    keda = [
        Policy(f"{KEDA}{t}", {}, KEDA_STABILISATION_S, Sizing("keda-kafka", 1, t))
        for t in (thresholds if "keda" in chosen else ())
    ]
    partners: list[Policy] = []  # ours at the baseline, beside each run of ours first
    if baseline is not None:
        revision, tree = baseline
        # The sidecar and the pods import the tree's code: first on the path, and the
        # working directory (this checkout) left off it.
        env = {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
        partners = [
            Policy(
                f"ours at {revision}" + ("" if repeats == 1 else f" #{i + 1}"),
                env,
                SCALE_DOWN_WINDOW_S,
                Sizing("sidecar"),
            )
            for i in range(repeats)
        ]
    paired = [
        p for pair in itertools.zip_longest(ours, partners + keda) for p in pair if p is not None
    ]
    if "ours-keda" in chosen:
        paired.append(Policy(THROUGH_KEDA, {}, SCALE_DOWN_WINDOW_S, Sizing("keda-external")))
    return paired


def run_side_by_side(
    policies: Sequence[Policy],
    parallel: int,
    run: Callable[[Policy], Run],
    fixed: Callable[[Sequence[Run]], Policy | None] | None = None,
) -> list[Run]:
    """``parallel`` policies at a time, in order; the policy ``fixed(runs so far)`` fills
    the first batch with room once it is not None (it may need a run of ours first)."""
    runs: list[Run] = []
    queue = list(policies)
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while queue or fixed is not None:
            batch, queue = queue[:parallel], queue[parallel:]
            if len(batch) < parallel and fixed is not None:
                last = fixed(runs)
                if last is not None or not batch:  # not ready with nothing left: never
                    batch += [last] if last is not None else []
                    fixed = None
            runs += list(pool.map(run, batch))
    return runs


def kube_main(args: argparse.Namespace, kind: ClusterKind, chosen: Sequence[str]) -> int:
    """``--platform kube``: the consumers are a Deployment's pods, sized by ours or KEDA."""
    from benchmarks.support import keda_comparison
    from local_kube.control_plane import control_plane
    from local_kube.keda import install_keda

    thresholds = [int(t) for t in args.keda.split(",") if t]
    baseline = (args.baseline, baseline_checkout(args.baseline)) if args.baseline else None
    policies = kube_policies(chosen, thresholds, args.repeats, baseline)

    def fixed(runs: Sequence[Run]) -> Policy | None:
        ours = [r for r in runs if r.policy.name.startswith(OURS)]
        if "ours" in chosen and not ours:
            return None
        peak = max([1, *(r.peak for r in ours)])
        return Policy(
            f"fixed at ours' peak ({peak})", {}, SCALE_DOWN_WINDOW_S, Sizing("fixed", peak)
        )

    with (
        kafka_cluster(kind, apache_settings=BROKER_SETTINGS) as kafka,
        control_plane(hpa_sync_period_s=HPA_SYNC_PERIOD_S) as plane,
    ):
        install_keda(plane)
        site = KubeSite(plane, PARTITIONS * TOPICS)
        broker = broker_line(kafka)
        runs = run_side_by_side(
            policies,
            args.parallel,
            lambda policy: run_policy(kafka, kind, policy, args.duration, args.seed, site),
            fixed if "fixed" in chosen else None,
        )
    rows = [summarise(r, args.duration) for r in runs]
    oracle = oracle_seconds(args.duration, args.seed)
    checks = model_checks({r.policy.name: r.samples for r in runs}, args.duration, args.seed)
    header = kube_header(args, broker)
    text = "\n".join(
        [
            header,
            "",
            *keda_comparison.table(rows, oracle),
            "",
            f"Oracle (packing lower bound, same trace): {oracle:,.0f} consumer-s.",
            "",
            *keda_comparison.verdicts(rows, oracle),
            *keda_comparison.model_lines(checks),
        ]
    )
    name = kube_result_name(kind, chosen, thresholds)
    if args.baseline:
        name += f"_vs_{args.baseline}"
    timelines = {
        r.policy.name: [
            [
                round(s["t"], 1),
                s["replicas"],
                s["lag"],
                s["ready"],
                s.get("decided"),
                s.get("hpa_lag"),
            ]
            for s in r.samples
        ]
        for r in runs
    }
    data = {
        "broker": broker,
        "duration_s": args.duration,
        "seed": args.seed,
        "oracle_consumer_seconds": oracle,
        "rows": rows,
        "model": checks,
        "timelines (t, consumers, lag, group stable with all of them, Deployment replicas, "
        "lag at the HPA's last sync)": timelines,
    }
    publish(name, text, data, write=not args.no_write)
    if not args.no_write:
        plot(runs, RESULTS / f"{name}.png")
    return 0


def model_checks(
    samples: Mapping[str, Sequence[Mapping[str, float]]], duration_s: float, seed: int
) -> list[dict[str, float]]:
    """The simulator's KEDA model checked against every real-KEDA run of ``samples`` (by
    policy name), calibrated on every run's consumers."""
    from benchmarks.support import keda_comparison

    def trace() -> Callable[[int], np.ndarray]:
        return _trace_rates(duration_s, seed)

    # Start-up and the committed lag are the pod runner's and the consumers', the same
    # whoever sizes the group.
    delays = [d for s in samples.values() for d in keda_comparison.startup_delays(s)]
    committed = keda_comparison.committed_lag(samples.values(), trace, int(duration_s), CAPACITY)
    return [
        keda_comparison.model_check(
            runs,
            float(name.removeprefix(KEDA)),
            trace,
            PARTITIONS * TOPICS,
            CAPACITY,
            int(duration_s),
            uncommitted_s=BATCH_WAIT_S / 2,
            startup_s=float(np.median(delays)) if delays else None,
            committed=committed,
        )
        for name, runs in samples.items()
        if name.startswith(KEDA)
    ]


RECOMPUTED = "Model checks re-computed"


def remodel(path: Path, *, write: bool = True) -> int:
    """Check the current simulator against a committed Kubernetes run (its JSON's
    timelines): print the model part; with ``write``, rewrite it in the run's markdown and
    JSON, saying at which code."""
    from benchmarks.support import keda_comparison

    data = json.loads(path.read_text())
    key = next(k for k in data if k.startswith("timelines"))
    samples = {
        name: [
            {
                "t": t,
                "replicas": replicas,
                "lag": lag,
                "ready": ready,
                **({"decided": decided} if decided is not None else {}),
                **({"hpa_lag": hpa_lag} if hpa_lag is not None else {}),
            }
            for t, replicas, lag, ready, decided, hpa_lag in timeline
        ]
        for name, timeline in data[key].items()
    }
    duration = float(data.get("duration_s", KUBE_DURATION_S))
    checks = model_checks(samples, duration, int(data.get("seed", 7)))
    data["model"] = checks
    now = machine_info()
    data["model_recomputed"] = f"{now['date_utc']} UTC, code {now['code']}"
    markdown = path.with_suffix(".md")
    text = markdown.read_text()
    marks = (text.find(RECOMPUTED), text.find(keda_comparison.MODEL_INTRO))
    kept = text[: min((m for m in marks if m >= 0), default=len(text))].rstrip("\n")
    lines = keda_comparison.model_lines(checks)
    lines[1:1] = [
        f"{RECOMPUTED} from this run's timelines on {data['model_recomputed']} "
        "(python -m benchmarks.autoscale --remodel).",
        "",
    ]
    if write:
        markdown.write_text(kept + "\n" + "\n".join(lines) + "\n")
        path.write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines))
    return 0


def kube_result_name(kind: ClusterKind, chosen: Sequence[str], thresholds: Sequence[int]) -> str:
    """``autoscale_<cluster>_kube``, the full comparison; a subset of the policies or other
    lagThresholds name themselves, so a side run never replaces the full table."""
    name = f"autoscale_{kind.value}_kube"
    if set(chosen) != set(KUBE_POLICY_KINDS):
        name += "_" + "_".join(chosen)
    if "keda" in chosen and tuple(thresholds) != KEDA_THRESHOLDS:
        name += "_lag" + "_".join(map(str, thresholds))
    return name


def kube_header(args: argparse.Namespace, broker: str) -> str:
    """What the Kubernetes run is."""
    return "\n".join(
        [
            f"# Ours against the real KEDA: consumer pods on Kubernetes ({TOPICS} topics x "
            f"{PARTITIONS} partitions, {args.duration:.0f} s trace, seed {args.seed})",
            "",
            machine_line(),
            broker,
            "Control plane: kube-apiserver and kube-controller-manager (its HPA controller "
            f"syncing every {HPA_SYNC_PERIOD_S:g} s, Kubernetes' default) and KEDA's operator "
            "and metrics server, built from pinned sources (make kube-binaries). Every "
            "policy's consumers are the pods of one Deployment, run as local processes by "
            "one pod runner (benchmarks/support/pod_runner.py: SIGTERM on deletion, 30 s "
            f"grace), {args.parallel} policies side by side. Every consumer's downstream "
            f"drains {CAPACITY:g} records/s, the capacity ours is told. Ours: the sidecar "
            "(--scaler kubernetes) with its defaults. Ours through KEDA: the sidecar's "
            "external scaler, examples/kubernetes/keda/scaledobject.yaml. KEDA "
            "lagThreshold=N: KEDA's Kafka scaler with KEDA's and the HPA's defaults "
            "(pollingInterval 30 s, tolerance 10 %, scale-down stabilisation 300 s, "
            "scale-up to at most max(2x, 4) replicas per decision: KEDA's HPA has no "
            "behavior) but minReplicaCount 1 and "
            "offsetResetPolicy earliest (see benchmarks/support/kube_workload.py). Every "
            "group has offset 0 committed on its partitions before it starts, as a deployed "
            "group has (without, KEDA's Kafka scaler counts every topic of the cluster). The "
            "sidecar runs beside it with --scaler none, so the group is packed by our "
            "assignor either way. Consumer-s: consumer processes alive, sampled every "
            "second; e2e latency: ledger write - record timestamp; moved partitions: "
            "partitions revoked from one member for another (the members' logs).",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every policy on one cluster and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_cluster_option(parser)
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of load (default 600; with --platform kube 1200, so that the HPA's 300 s "
        "scale-down window can end inside the trace's last third)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keda", default=",".join(map(str, KEDA_THRESHOLDS)), help="lagThreshold values"
    )
    parser.add_argument(
        "--policies",
        default="",
        help=f"comma-separated subset of {','.join(POLICY_KINDS)} (default: all; a subset "
        "writes results/autoscale_<cluster>_<subset>.*, not the full comparison); with "
        f"--platform kube, of {','.join(KUBE_POLICY_KINDS)}",
    )
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--platform",
        choices=("local", "kube"),
        default="local",
        help="local: the sidecar starts consumer processes (default); kube: they are a "
        f"Deployment's pods, sized by ours or the real KEDA (policies "
        f"{','.join(KUBE_POLICY_KINDS)}; writes results/autoscale_<cluster>_kube.*, a subset or "
        "other --keda values with their names appended)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of ours (kube only)")
    parser.add_argument("--parallel", type=int, default=2, help="policies at once (kube only)")
    parser.add_argument(
        "--baseline",
        default="",
        help="with --platform kube: a revision whose sidecar and consumers run beside each "
        "run of ours (another commit's code side by side; writes *_vs_<revision>)",
    )
    parser.add_argument(
        "--remodel",
        type=Path,
        default=None,
        help="re-check the simulator against a committed Kubernetes run (its .json) and "
        "rewrite that result's model part; runs nothing else",
    )
    args = parser.parse_args(argv)
    if args.remodel is not None:
        if not args.remodel.is_file():
            parser.error(f"--remodel: a results .json file, got {args.remodel}")
        return remodel(args.remodel, write=not args.no_write)
    if args.duration is None:
        args.duration = KUBE_DURATION_S if args.platform == "kube" else DURATION_S
    if not (math.isfinite(args.duration) and args.duration >= 60):
        parser.error(f"--duration: seconds >= 60, got {args.duration:g}")
    kinds = KUBE_POLICY_KINDS if args.platform == "kube" else POLICY_KINDS
    chosen = [p for p in args.policies.split(",") if p] or list(kinds)
    if any(p not in kinds for p in chosen):
        parser.error(f"--policies: a comma-separated subset of {','.join(kinds)}")
    if args.repeats < 1 or args.parallel < 1:
        parser.error("--repeats and --parallel: integers >= 1")
    if args.baseline and (args.platform != "kube" or "ours" not in chosen):
        parser.error("--baseline: only with --platform kube and ours among --policies")
    kind = ClusterKind(args.cluster)
    if args.platform == "kube":
        return kube_main(args, kind, chosen)
    runs: list[Run] = []
    with kafka_cluster(kind, apache_settings=BROKER_SETTINGS) as kafka:
        broker = broker_line(kafka)
        policies: list[Policy] = []
        if "ours" in chosen:
            policies.append(Policy("ours (cooperative)", {}, SCALE_DOWN_WINDOW_S))
        if "eager" in chosen:
            policies.append(
                Policy(
                    "ours, eager rebalancing",
                    {"AUTOSCALER_REBALANCE_PROTOCOL": "eager"},
                    SCALE_DOWN_WINDOW_S,
                )
            )
        if "keda" in chosen:
            policies += [
                Policy(
                    f"KEDA lagThreshold={threshold}",
                    {"AUTOSCALER_KEDA_LAG_THRESHOLD": threshold},
                    KEDA_STABILISATION_S,
                )
                for threshold in args.keda.split(",")
                if threshold
            ]
        if "capacity" in chosen:
            for factor in MISDECLARED:
                declared = str(CAPACITY * factor)
                policies += [
                    Policy(
                        f"C declared {factor:g}x",
                        {"AUTOSCALER_CAPACITY": declared},
                        SCALE_DOWN_WINDOW_S,
                    ),
                    Policy(
                        f"C declared {factor:g}x, --capacity auto",
                        {"AUTOSCALER_CAPACITY": "auto", "AUTOSCALER_CAPACITY_INITIAL": declared},
                        SCALE_DOWN_WINDOW_S,
                    ),
                ]
        if "failing" in chosen:
            failing_s = args.duration * FAILING_SHARE
            policies += [
                Policy(
                    f"ours, consumers failing the first {failing_s:.0f} s",
                    {},
                    SCALE_DOWN_WINDOW_S,
                    failing_s=failing_s,
                ),
                Policy(
                    f"KEDA lagThreshold={FAILING_KEDA_THRESHOLD}, consumers failing the first "
                    f"{failing_s:.0f} s",
                    {"AUTOSCALER_KEDA_LAG_THRESHOLD": str(FAILING_KEDA_THRESHOLD)},
                    KEDA_STABILISATION_S,
                    failing_s=failing_s,
                ),
            ]
        for policy in policies:
            runs.append(run_policy(kafka, kind, policy, args.duration, args.seed))
        if "shared" in chosen:
            warehouse = Path(tempfile.mkdtemp(prefix="autoscale-shared-")) / "warehouse"
            warehouse.mkdir()
            with SparkConnectServer(warehouse) as spark:
                shared = shared_sink_policy(spark.url, warehouse)
                runs.append(run_policy(kafka, kind, shared, args.duration, args.seed))
        if "fixed" in chosen:
            peak = max(1, runs[0].peak if runs else 1)
            fixed = Policy(
                f"fixed at ours' peak ({peak})" if "ours" in chosen else f"fixed ({peak})",
                {"AUTOSCALER_MIN_REPLICAS": str(peak), "AUTOSCALER_MAX_REPLICAS": str(peak)},
                SCALE_DOWN_WINDOW_S,
            )
            runs.append(run_policy(kafka, kind, fixed, args.duration, args.seed))
    rows = [summarise(r, args.duration) for r in runs]
    oracle = oracle_seconds(args.duration, args.seed)
    work = work_seconds(args.duration, args.seed)
    header = "\n".join(
        [
            f"# Autoscaling real consumer processes ({TOPICS} topics x {PARTITIONS} partitions, "
            f"{args.duration:.0f} s trace, seed {args.seed})",
            "",
            machine_line(),
            broker,
            f"Every consumer's downstream drains {CAPACITY:g} records/s, the capacity every "
            "policy is told. Consumers: the SDK's default timings "
            f"({CONSUMER_TIMINGS['session_timeout_ms'] / 1000:g} s session, "
            f"{CONSUMER_TIMINGS['heartbeat_interval_ms'] / 1000:g} s heartbeat), "
            "1 s batch wait, batches of about one second of that downstream's work. Ours: the "
            "sidecar's defaults (scale-down window "
            f"{SCALE_DOWN_WINDOW_S:g} s, drain 30 s). Broker: group.initial.rebalance.delay.ms "
            f"{BROKER_SETTINGS['group.initial.rebalance.delay.ms']} (Kafka's default). "
            "KEDA-style: ceil(total lag / lagThreshold), 10 % tolerance, 300 s "
            "stabilisation, same consumers (cooperative). Lag sampled "
            "every second from the sidecar; latency = ledger write time - record timestamp. "
            "Generations: until the benchmark stops the sidecar (its stop is not the policy's). "
            "gen/event: generations / (scale events + 1, forming the group); re-plans: "
            "members above capacity asking the group to re-plan (drift, no scale event; "
            "sooner the further over, at most 30 s); gen/cause: generations / (scale events "
            "+ 1 + re-plans); most gen per scale: the most generations one scale decision "
            "of the sidecar took (each new generation counts for the last decision or "
            "re-plan request logged before it).",
        ]
    )
    if "capacity" in chosen:
        header += (
            "\n\nC rows: the sidecar and its consumers are told C at "
            + " or ".join(f"{f:g}x" for f in MISDECLARED)
            + f" the downstream's {CAPACITY:g} records/s; with --capacity auto, from that "
            "value until the consumers' measurement arrives."
        )
    if "failing" in chosen:
        header += (
            "\n\nFailing rows: for the first third of the trace every consumer exits at once "
            "(its sink cannot start: one line, exit code 2), as consumers with a wrong "
            "password, a missing table or a missing broker assignor do; then they start. "
            f"KEDA-style at lagThreshold {FAILING_KEDA_THRESHOLD} beside ours."
        )
    if "shared" in chosen:
        header += (
            f"\n\n{SHARED}: instead of the paced ledger, every consumer writes Delta tables "
            "through one Spark Connect server (local[2]) on this machine, 16 MiB batches, one "
            "write in flight, --capacity auto from 1000 records/s; rows read back with "
            "delta-rs, latency = the batch's ingest time - record timestamp."
        )
    subset = "" if set(chosen) == set(POLICY_KINDS) else "_" + "_".join(chosen)
    name = f"autoscale_{kind.value}{subset}"
    publish(
        name,
        report(rows, header, oracle, work),
        {
            "broker": broker,
            "oracle_consumer_seconds": oracle,
            "work_consumer_seconds": work,
            "rows": rows,
        },
        write=not args.no_write,
    )
    if not args.no_write:
        plot(runs, RESULTS / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
