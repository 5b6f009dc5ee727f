"""What the autoscale benchmark counts as a scale event and as a flap (its targets use them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from assignor import TopicPartition
from benchmarks.autoscale import (
    CAPACITY,
    Cause,
    Policy,
    Run,
    StartUps,
    decided_scale_events,
    flaps,
    generations_before,
    generations_by_cause,
    keda_verdict,
    kube_policies,
    main,
    moved_partitions,
    oracle_seconds,
    run_side_by_side,
    scale_events,
    scale_up_to_work,
    summed_rscore,
    work_seconds,
)
from benchmarks.support.autoscale_member import RATE_ENV, ledger_sink
from consumer_sdk.sink import Record, records_table


def samples(*replicas: int) -> list[dict[str, float]]:
    return [{"t": float(10 * i), "replicas": float(r)} for i, r in enumerate(replicas)]


def test_scale_events_are_changes_of_a_running_group() -> None:
    # 0 -> 2 is the group's start, not a scale event; then up, up, down.
    assert scale_events(samples(0, 2, 2, 3, 5, 5, 4)) == [(30.0, 2, 3), (40.0, 3, 5), (60.0, 5, 4)]


def test_a_flap_is_a_reversal_within_the_window() -> None:
    events = scale_events(samples(3, 2, 3, 3, 3, 2))  # down at 10, up at 20, down at 50
    assert flaps(events, window_s=120) == 2
    assert flaps(events, window_s=15) == 1  # only the up 10 s after the down
    assert flaps(scale_events(samples(2, 3, 4, 5)), window_s=120) == 0  # steps one way


def test_the_ledger_sink_writes_a_line_per_record_of_the_table_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RATE_ENV, "1000000")
    sink = ledger_sink(f"ledger:{tmp_path}/{{identity}}.ledger", "sink-3")
    records = [Record("t", p, o, 1_000 + o, None, b"v", ()) for p, o in [(0, 5), (2, 7), (0, 6)]]
    asyncio.run(sink.write("t", records_table(records)))
    lines = (tmp_path / "sink-3.ledger").read_text().splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["t", "0", "5", "1005"],
        ["t", "2", "7", "1007"],
        ["t", "0", "6", "1006"],
    ]
    assert asyncio.run(sink.resume_offsets([TopicPartition("t", 0)])) == {}


def test_generations_are_counted_until_the_benchmark_stops_the_sidecar() -> None:
    log = "\n".join(
        [
            "2026-11-24 17:50:38,649 aiokafka Joined group 'g' (generation 1) with member_id a",
            "2026-11-24 17:59:12,161 consumer_sdk.cooperative group g generation 13: kept 4",
            "not a log line (generation 99)",
            "2026-11-24 18:00:32,985 aiokafka Joined group 'g' (generation 14) with member_id a",
        ]
    )
    assert generations_before(log, datetime(2026, 11, 24, 18, 0, 31)) == 13
    assert generations_before(log, datetime(2026, 11, 24, 18, 1)) == 14
    assert generations_before(log, datetime(2026, 11, 24, 17, 0)) == 0


def test_each_generation_counts_for_the_last_cause_before_it() -> None:
    def joined(second: int, generation: int, member: str) -> str:
        at = f"2026-11-24 18:00:{second:02d},000"
        return f"{at} [{member}] Joined group 'g' (generation {generation})"

    log = "\n".join(
        [
            "2026-11-24 18:00:00,000 sidecar.app scale_up 0 -> 2: 2 consumer(s) needed",
            joined(3, 1, "sink-0"),
            joined(3, 1, "sink-1"),  # the same generation, another member: counted once
            "2026-11-24 18:00:10,000 sidecar.app scale_up 2 -> 3: 3 consumer(s) needed",
            joined(12, 2, "sink-0"),
            "2026-11-24 18:00:12,500 consumer_sdk.cooperative group g generation 3: kept 4",
            "2026-11-24 18:00:20,000 [sink-1] load 1125 above capacity 1000 for 30 s: asking "
            "the group to re-plan",
            joined(21, 5, "sink-2"),  # generation 4 was never logged: still two
            "2026-11-24 18:00:30,000 sidecar.app scale_down 3 -> 2: 2 consumer(s) needed",
            joined(31, 6, "sink-0"),
            joined(50, 7, "sink-0"),  # after the benchmark stopped the sidecar
        ]
    )
    causes = generations_by_cause(log, datetime(2026, 11, 24, 18, 0, 40))
    assert [(c.kind, c.detail, c.generations) for c in causes] == [
        ("forming", "0 -> 2", 1),
        ("scale", "2 -> 3", 2),
        ("re-plan", "a member above its capacity", 2),
        ("scale", "3 -> 2", 1),
    ]


def test_a_scale_up_is_at_work_when_a_member_that_held_nothing_gets_partitions() -> None:
    log = "\n".join(
        [
            "2026-11-24 18:00:00,000 sidecar.app scale_up 0 -> 2: forming, not counted",
            "2026-11-24 18:00:03,000 [sink-0] group g generation 1: kept 0, revoked 0, added 12",
            "2026-11-24 18:00:10,000 sidecar.app scale_up 2 -> 3: 3 consumer(s) needed",
            "2026-11-24 18:00:11,000 [sink-0] group g generation 2: kept 8, revoked 4, added 0",
            "2026-11-24 18:00:12,500 [sink-2] group g generation 3: kept 0, revoked 0, added 4",
            "2026-11-24 18:00:12,600 [sink-3] group g generation 3: kept 0, revoked 0, added 1",
            "2026-11-24 18:00:20,000 sidecar.app scale_down 3 -> 2: not a scale-up",
            "2026-11-24 18:00:21,000 [sink-0] group g generation 4: kept 0, revoked 0, added 4",
            "2026-11-24 18:00:30,000 sidecar.app scale_up 2 -> 3: a new member's first join",
            "2026-11-24 18:00:31,000 [sink-3] aiokafka.consumer.group_coordinator Setting newly "
            "assigned partitions set() for group g",
            "2026-11-24 18:00:33,250 [sink-3] aiokafka.consumer.group_coordinator Setting newly "
            "assigned partitions {TopicPartition(topic='t', partition=5)} for group g",
        ]
    )
    assert scale_up_to_work(log) == StartUps([2.5, 3.25], early=0)
    # A second scale-up before the first one's consumers are at work: a staircase step.
    stair = log.replace(
        "2026-11-24 18:00:11,000 [sink-0] group g generation 2: kept 8, revoked 4, added 0",
        "2026-11-24 18:00:11,000 sidecar.app scale_up 3 -> 4: the same backlog again",
    )
    assert scale_up_to_work(stair) == StartUps([1.5, 3.25], early=1)


def keda_row(policy: str, consumer_seconds: float, lag_s_p99: float) -> dict[str, object]:
    return {"policy": policy, "consumer_seconds": consumer_seconds, "lag_s_p99": lag_s_p99}


def test_the_keda_target_applies_only_where_keda_lags_no_less_than_ours() -> None:
    ours = keda_row("ours (cooperative)", 2000.0, 8.0)
    better = keda_verdict(ours, keda_row("KEDA lagThreshold=1000", 9000.0, 4.0), 1800.0)
    assert "does not apply" in better and "x4.50" in better
    held = keda_verdict(ours, keda_row("KEDA lagThreshold=5000", 3400.0, 8.0), 1800.0)
    assert "holds" in held and "MISSED" not in held and "oracle" not in held


def test_a_missed_keda_target_says_when_it_lies_below_the_oracle() -> None:
    ours = keda_row("ours (cooperative)", 2000.0, 8.0)
    reachable = keda_verdict(ours, keda_row("KEDA lagThreshold=5000", 3100.0, 9.0), 1800.0)
    assert "MISSED" in reachable and "oracle" not in reachable  # 3100 / 1.67 = 1856 >= 1800
    below = keda_verdict(ours, keda_row("KEDA lagThreshold=20000", 2100.0, 30.0), 1800.0)
    assert "MISSED" in below and "at most 1,257 consumer-s, below the oracle (1,800)" in below
    # Below all the records / C too: out of reach whatever lag a policy allows.
    beyond = keda_verdict(ours, keda_row("KEDA lagThreshold=20000", 2100.0, 30.0), 1800.0, 1400.0)
    assert "below all the trace's records / C (1,400): out of reach" in beyond


def test_all_records_over_capacity_lies_below_the_oracle_and_follows_the_trace() -> None:
    # The oracle rounds every second up to whole consumers; the work bound does not.
    oracle, work = oracle_seconds(60.0, 7), work_seconds(60.0, 7)
    assert 0 < work <= oracle
    assert oracle - work < 60  # at most one consumer per second apart
    assert work_seconds(60.0, 8) != work  # another seed, another trace


def test_flaps_are_timed_by_the_sidecars_decisions() -> None:
    causes = [
        Cause("forming", "2026-11-25 23:17:29,787", "0 -> 2"),
        Cause("scale", "2026-11-25 23:23:50,413", "5 -> 6"),
        Cause("re-plan", "2026-11-25 23:23:51,887", "a member above its capacity"),
        Cause("scale", "2026-11-25 23:25:50,655", "6 -> 2"),
    ]
    events = decided_scale_events(causes)
    assert [(a, b) for _, a, b in events] == [(5, 6), (6, 2)]
    assert events[1][0] - events[0][0] == pytest.approx(120.242)
    assert flaps(events, window_s=120) == 0  # held the whole window
    assert flaps(events, window_s=121) == 1


def test_drain_figures_find_the_best_count_and_the_time_spent_slower() -> None:
    from benchmarks.autoscale import drain_figures, shared_verdict

    samples = []
    t, lag = 0.0, 20_000.0
    # 3 consumers drain 3,000/s; then 6 drain 2,000/s for 200 s (under 5,000/s of load).
    for replicas, drain, seconds in ((3, 3_000.0, 40), (6, 2_000.0, 200)):
        for _ in range(seconds):
            samples.append({"t": t, "replicas": float(replicas), "rate": 4_000.0, "lag": lag})
            lag += 4_000.0 - drain
            t += 1.0
    figures = drain_figures(samples, window_s=120.0)
    assert figures["best_count"] == 3
    assert figures["drains"]["3"] == pytest.approx(3_000.0)
    assert figures["slower_than_before_s"] == pytest.approx(199.0)
    row = {"policy": "shared", "peak": 6, **figures}
    line = shared_verdict(row)
    assert "target <= best 3 + 1: MISSED" in line and "120 s: MISSED" in line


def test_time_at_a_slower_count_counts_only_while_a_backlog_waits_and_all_have_joined() -> None:
    from benchmarks.autoscale import drain_figures

    samples = []
    t, lag = 0.0, 5_000.0
    # 1 consumer drains 3,000/s (its load: the lag holds); 2 drain 2,000/s: first 5 s
    # joining (nothing drained, not counted), 30 s behind under 3,000/s, then the load
    # stops: 25 s paying the backlog off, 200 s with none (nothing waits: not slower).
    phases = [(1, 3_000.0, 3_000.0, 40, 1.0), (2, 0.0, 3_000.0, 5, 0.0)]
    phases += [(2, 2_000.0, 3_000.0, 30, 1.0), (2, 2_000.0, 0.0, 225, 1.0)]
    for replicas, drain, rate, seconds, ready in phases:
        for _ in range(seconds):
            sample = {"t": t, "replicas": float(replicas), "rate": rate, "lag": lag}
            samples.append({**sample, "ready": ready})
            lag = max(0.0, lag + rate - drain)
            t += 1.0
    figures = drain_figures(samples, window_s=120.0)
    assert figures["drains"] == {"1": 3_000.0, "2": 2_000.0}
    assert figures["best_count"] == 1
    # 260 s at 2 consumers, but behind for the 30 s under load and the 25 s paying off.
    assert figures["slower_than_before_s"] == pytest.approx(55.0)


def test_the_group_has_taken_in_its_count_when_described_stable_or_seen_committing() -> None:
    from benchmarks.autoscale import taken_in

    def status(state: str | None, described: int | None, reading: int) -> dict[str, object]:
        members = {"state": state, "described": described, "reading": reading}
        return {"replicas": 3, "group_members": members}

    assert taken_in(status("Stable", 3, 0))
    assert not taken_in(status("PreparingRebalance", 3, 3))
    assert not taken_in(status("Stable", 2, 3))
    assert taken_in(status(None, None, 3))  # not described: members seen committing
    assert not taken_in(status(None, None, 2))


def test_a_capacity_row_is_judged_against_the_row_declared_right() -> None:
    from benchmarks.autoscale import capacity_verdict

    right = {"consumer_seconds": 1_000.0, "latency_p99_s": 10.0, "peak": 5}
    auto = {"policy": "C declared 2x, --capacity auto", "peak": 5}
    assert "holds" in capacity_verdict(
        right, {**auto, "consumer_seconds": 1_150.0, "latency_p99_s": 11.0}
    )
    missed = capacity_verdict(right, {**auto, "consumer_seconds": 1_000.0, "latency_p99_s": 30.0})
    assert "e2e p99 latency 3.00x" in missed and "MISSED" in missed


def test_moved_partitions_sum_what_members_gave_up_before_the_stop() -> None:
    log = "\n".join(
        [
            "2026-11-29 10:00:01,000 consumer_sdk.cooperative group g generation 2: kept 3, "
            "revoked 2, added 0 partition(s)",
            "2026-11-29 10:00:01,500 consumer_sdk.cooperative group g generation 2: kept 0, "
            "revoked 0, added 2 partition(s)",
            "2026-11-29 10:00:05,000 consumer_sdk.cooperative group g generation 3: kept 1, "
            "revoked 4, added 0 partition(s)",  # the benchmark's own stop: not counted
        ]
    )
    assert moved_partitions(log, datetime(2026, 11, 29, 10, 0, 4)) == 2


def test_rscore_weighs_each_partition_revoked_before_the_stop_by_its_speed_then() -> None:
    tp = TopicPartition
    started = datetime(2026, 11, 29, 10, 0, 0)
    # Rates seen each second: t0:1 runs at 500 records/s until 2 s, then at 100.
    speeds = [
        (0.0, {tp("as-x-t0", 1): 500.0, tp("as-x-t1", 3): 250.0}),
        (2.0, {tp("as-x-t0", 1): 100.0, tp("as-x-t1", 3): 250.0}),
    ]
    log = "\n".join(
        [
            "2026-11-29 10:00:01,000 consumer_sdk.cooperative group g generation 2 revoked: "
            "as-x-t0:1 as-x-t1:3",  # at 1 s: (500 + 250) / C
            "2026-11-29 10:00:03,000 consumer_sdk.cooperative group g generation 3 revoked: "
            "as-x-t0:1",  # at 3 s: 100 / C
            "2026-11-29 10:00:05,000 consumer_sdk.cooperative group g generation 4 revoked: "
            "as-x-t1:3",  # the benchmark's own stop: not counted
        ]
    )
    until = datetime(2026, 11, 29, 10, 0, 4)
    assert summed_rscore(log, started, until, speeds) == (500 + 250 + 100) / CAPACITY
    # A log from before the SDK named its revoked partitions: not measured, not zero.
    counts_only = "2026-11-29 10:00:01,000 x group g generation 2: kept 3, revoked 2, added 0"
    assert summed_rscore(counts_only, started, until, speeds) is None


def test_kubernetes_replica_changes_count_as_decisions() -> None:
    log = "\n".join(
        [
            "2026-11-29 10:00:00,000 hpa scale_up 1 -> 4: Deployment scale",
            "2026-11-29 10:00:02,000 x (generation 2)",
            "2026-11-29 10:00:20,000 hpa scale_down 4 -> 2: Deployment scale",
            "2026-11-29 10:00:21,000 x (generation 3)",
        ]
    )
    causes = generations_by_cause(log, datetime(2026, 11, 29, 11, 0))
    assert [(c.kind, c.detail, c.generations) for c in causes] == [
        ("scale", "1 -> 4", 2),
        ("scale", "4 -> 2", 1),
    ]


def test_a_baseline_runs_beside_each_run_of_ours_from_its_own_tree(tmp_path: Path) -> None:
    policies = kube_policies(["ours"], [], repeats=2, baseline=("04dc331", tmp_path))
    assert [p.name for p in policies] == [
        "ours (cooperative) #1",
        "ours at 04dc331 #1",
        "ours (cooperative) #2",
        "ours at 04dc331 #2",
    ]
    assert policies[0].env == {}
    assert policies[1].env == {"PYTHONPATH": str(tmp_path), "PYTHONSAFEPATH": "1"}


def test_ours_runs_beside_kedas_settings_and_the_fixed_group_waits_for_ours() -> None:
    policies = kube_policies(["ours", "keda", "ours-keda"], [1000, 5000], repeats=3)
    assert [p.name for p in policies] == [
        "ours (cooperative) #1",
        "KEDA lagThreshold=1000",
        "ours (cooperative) #2",
        "KEDA lagThreshold=5000",
        "ours (cooperative) #3",
        "ours through KEDA's external scaler",
    ]

    def run(policy: Policy) -> Run:
        done = Run(policy)
        done.peak = 6 if policy.name.startswith("ours (cooperative)") else 3
        return done

    def fixed(runs: Sequence[Run]) -> Policy | None:
        peaks = [r.peak for r in runs if r.policy.name.startswith("ours (cooperative)")]
        return Policy(f"fixed {max(peaks)}", {}, 0.0) if peaks else None

    runs = run_side_by_side(policies, 2, run, fixed)
    assert [r.policy.name for r in runs][-2:] == [
        "ours through KEDA's external scaler",
        "fixed 6",
    ]
    assert len(runs) == len(policies) + 1


def test_the_fixed_group_runs_alone_when_nothing_else_was_chosen() -> None:
    runs = run_side_by_side([], 2, Run, lambda _runs: Policy("fixed 1", {}, 0.0))
    assert [r.policy.name for r in runs] == ["fixed 1"]


def test_a_kube_side_run_never_takes_the_full_comparisons_name() -> None:
    from benchmarks.autoscale import KEDA_THRESHOLDS, KUBE_POLICY_KINDS, kube_result_name
    from local_kafka.clusters import ClusterKind

    full = kube_result_name(ClusterKind.APACHE, KUBE_POLICY_KINDS, KEDA_THRESHOLDS)
    assert full == "autoscale_apache_kube"
    side = kube_result_name(ClusterKind.APACHE, ["ours", "keda"], [500])
    assert side == "autoscale_apache_kube_ours_keda_lag500"
    assert kube_result_name(ClusterKind.APACHE, KUBE_POLICY_KINDS, [500, 1000]) != full
    assert kube_result_name(ClusterKind.APACHE, ["ours"], [500]) == "autoscale_apache_kube_ours"


def test_remodel_rewrites_only_the_model_part_of_a_kubernetes_result(tmp_path: Path) -> None:
    # One consumer, then two from t=20 (stable again at t=25), 3,000 records behind.
    timeline = [
        [float(t), 1.0 + (t >= 20), 3000.0, float(not 20 <= t < 25), None, None] for t in range(90)
    ]
    data = {
        "duration_s": 90.0,
        "seed": 7,
        "rows": [],
        "model": [],
        "timelines (t, consumers, ...)": {"KEDA lagThreshold=1000": timeline, "ours": timeline},
    }
    result = tmp_path / "autoscale_apache_kube.json"
    result.write_text(json.dumps(data))
    result.with_suffix(".md").write_text(
        "# header\n\n| table |\n\nThe simulator's KEDA rule (sidecar/keda.py) old text\n"
    )
    assert main(["--remodel", str(result)]) == 0
    text = result.with_suffix(".md").read_text()
    assert text.startswith("# header\n\n| table |\n\nModel checks re-computed")
    assert "old text" not in text and "calibrated on this run" in text
    assert main(["--remodel", str(result)]) == 0  # again: the part is replaced, not added
    assert result.with_suffix(".md").read_text().count("re-computed") == 1
    (check,) = json.loads(result.read_text())["model"]
    assert check["threshold"] == 1000 and check["real_consumer_seconds"] == 20 + 2 * 70
    assert "calibrated_consumer_seconds" in check
