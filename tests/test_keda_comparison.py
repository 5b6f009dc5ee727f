"""The real-KEDA comparison's verdicts and its check of the simulator's KEDA model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.support.keda_comparison import (
    CommittedLag,
    cold_start,
    committed_lag,
    model_check,
    model_lines,
    startup_delays,
    table,
    verdicts,
)


def checked(
    samples: list[dict[str, float]],
    duration_s: int,
    rate: float = 10.0,
    trace: Callable[[], Callable[[int], np.ndarray]] | None = None,
    **options: Any,
) -> dict[str, float]:
    """The model check at lagThreshold 1,000 on 24 partitions of C = 1,000, each at ``rate``
    records/s (or ``trace``), nothing uncommitted unless calibrated."""
    return model_check(
        samples,
        1000,
        trace or (lambda: lambda _t: np.full(24, rate)),
        partitions=24,
        capacity=1000.0,
        duration_s=duration_s,
        uncommitted_s=0.0,
        **options,
    )


def row(policy: str, cost: float, p99: float, moved_per_hour: float = 100.0) -> dict[str, Any]:
    return {
        "policy": policy,
        "consumer_seconds": cost,
        "latency_p99_s": p99,
        "moved_per_hour": moved_per_hour,
        "missing": 0,
        "redelivered": 0,
    }


def test_a_keda_setting_cheaper_and_as_punctual_as_a_run_of_ours_dominates_it() -> None:
    rows = [
        row("ours (cooperative) #1", 2000, 10.0),
        row("ours (cooperative) #2", 2400, 12.0),
        row("KEDA lagThreshold=5000", 2300, 11.0),  # beats run 2 on both
        row("KEDA lagThreshold=1000", 6000, 9.0),
    ]
    lines = verdicts(rows, oracle=1500)
    dominance = next(line for line in lines if "dominates ours" in line)
    assert "MISSED" in dominance and "5000 dominates 1 of ours' 2 runs" in dominance


def test_keda_frontier_is_read_at_ours_mean_p99_and_compared_above_the_oracle() -> None:
    # Ours: 2,000 consumer-s at 10 s. KEDA's frontier between (8 s, 6,000) and (12 s, 3,000)
    # at 10 s is 4,500: 3,000 above the oracle of 1,500, 6x ours' 500.
    rows = [
        row("ours (cooperative)", 2000, 10.0, moved_per_hour=50),
        row("KEDA lagThreshold=1000", 6000, 8.0, moved_per_hour=400),
        row("KEDA lagThreshold=5000", 3000, 12.0, moved_per_hour=30),
    ]
    lines = verdicts(rows, oracle=1500)
    assert any("4,500 consumer-s, 6.0x" in line and "holds" in line for line in lines)
    moved = next(line for line in lines if line.startswith("- moved"))
    assert "ours 50" in moved and "400" in moved and "holds" in moved


def test_the_rule_replayed_on_the_measured_lag_follows_the_hpas_ramp() -> None:
    # 20,000 records behind from the start at lagThreshold 1,000: the HPA goes 1 -> 4 at its
    # first sync (max(2x, 4)), then doubles every 15 s up to the 20 recommended.
    samples = [{"t": float(t), "replicas": 1.0, "lag": 20_000.0} for t in range(60)]
    check = checked(samples, 60)
    assert check["replay_peak"] == 20  # 4, 8, 16, 20: ceil(20,000 / 1,000) caps the ramp
    assert check["real_consumer_seconds"] == 60
    assert check["replay_gap"] > 0


def test_the_rule_replayed_at_the_hpas_syncs_matches_the_replicas_the_hpa_decided() -> None:
    # The HPA's status shows 20,000 records at every 15 s sync and the Deployment follows the
    # ramp 4, 8, 16, 20: the rule fed those syncs decides the same, second by second.
    def decided(t: int) -> float:
        return 4.0 if t < 15 else 8.0 if t < 30 else 16.0 if t < 45 else 20.0

    samples = [
        {"t": float(t), "replicas": 1.0, "lag": 0.0, "decided": decided(t), "hpa_lag": 20_000.0}
        for t in range(70)
    ]
    check = checked(samples, 70, startup_s=5.0)
    assert check["startup_s"] == 5.0 and check["started_consumer_seconds"] >= 70
    assert check["hpa_replay_peak"] == 20
    assert check["hpa_replay_decided_gap"] == 0
    assert check["decided_peak"] == 20
    assert check["replay_decided_gap"] > 0  # the measured lag here (0) says 1 replica


def test_without_the_hpas_status_the_check_says_so_instead_of_replaying_nothing() -> None:
    samples = [{"t": float(t), "replicas": 2.0, "lag": 3000.0} for t in range(30)]
    check = checked(samples, 30)
    assert "hpa_replay_peak" not in check
    assert "started_consumer_seconds" not in check
    text = "\n".join(model_lines([check]))
    assert "not recorded" in text and "not measured" in text


def test_start_up_is_timed_from_a_rise_in_the_pods_to_the_group_stable_with_them() -> None:
    # 2 -> 4 pods at t=10, stable again at t=17; 4 -> 6 at t=30, then 6 -> 3 at t=33 before
    # the group took the 6 in (not a start-up); 3 -> 5 at t=40, stable at t=48.
    def pods(t: int) -> float:
        return 2.0 if t < 10 else 4.0 if t < 30 else 6.0 if t < 33 else 3.0 if t < 40 else 5.0

    stable = {range(0, 10), range(17, 30), range(36, 40), range(48, 60)}
    samples = [
        {"t": float(t), "replicas": pods(t), "ready": float(any(t in r for r in stable))}
        for t in range(60)
    ]
    assert startup_delays(samples) == [7.0, 8.0]


def test_the_sweep_takes_the_start_up_measured_on_consumer_pods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import simulate as sweep

    monkeypatch.setattr(sweep, "STARTED", tmp_path / "absent.json")
    assert sweep.startup_calibration()[0] is None
    measured = tmp_path / "autoscale_apache_kube.json"
    measured.write_text(
        json.dumps(
            {
                "machine": {"date_utc": "2026-12-01 19:00"},
                "model": [{"threshold": 1000, "startup_s": 2.5}, {"threshold": 5000}],
            }
        )
    )
    monkeypatch.setattr(sweep, "STARTED", measured)
    startup, text = sweep.startup_calibration()
    assert startup == 2.5 and "2.5 s" in text and "2026-12-01 19:00" in text


def test_the_cold_start_is_the_first_second_the_group_was_stable_with_a_consumer() -> None:
    samples = [
        {"t": 0.0, "replicas": 0.0, "ready": 1.0},  # nobody yet: stable, but not reading
        {"t": 3.0, "replicas": 1.0, "ready": 0.0},
        {"t": 6.5, "replicas": 1.0, "ready": 1.0},
        {"t": 9.0, "replicas": 4.0, "ready": 1.0},
    ]
    assert cold_start(samples) == 6.5
    assert cold_start(samples[:2]) == 0.0


def test_committed_lag_is_counted_in_seconds_of_arrivals_by_the_consumers_load() -> None:
    def trace():  # type: ignore[no-untyped-def]
        return lambda t: np.full(4, 100.0 if t < 70 else 200.0)  # 400, then 800 records/s

    run = [
        {"t": 10.0, "replicas": 1.0, "lag": 4000.0, "ready": 1.0},  # the cold start
        {"t": 61.0, "replicas": 1.0, "lag": 600.0, "ready": 1.0},  # 1.5 s at 0.4 busy
        {"t": 65.0, "replicas": 2.0, "lag": 9000.0, "ready": 0.0},  # rebalancing
        {"t": 75.0, "replicas": 8.0, "lag": 400.0, "ready": 1.0},  # 0.5 s at 0.1 busy
    ]
    other = [{"t": 80.0, "replicas": 1.0, "lag": 1600.0, "ready": 1.0}]  # 2 s at 0.8
    committed = committed_lag([run, other], trace, 90, capacity=1000.0)
    assert [band.tolist() for band in committed.by_load] == [[0.5], [], [1.5], [2.0]]
    draw = committed.drawn(seed=1)
    assert draw(0, 0.05) == 0.5 and draw(0, 0.45) == 1.5 and draw(0, 3.0) == 2.0
    assert draw(0, 0.2) in {0.5, 1.5, 2.0}  # an empty band draws from all


def test_every_simulation_of_the_check_runs_on_a_fresh_trace() -> None:
    # A trace drawn second after second (as the benchmark's random walk is): a simulation
    # that reused one would see its load continue where the previous one left off.
    def trace():  # type: ignore[no-untyped-def]
        calls = iter(range(10**6))
        return lambda _t: np.full(24, 20.0 if next(calls) < 60 else 2000.0)

    samples = [{"t": float(t), "replicas": 1.0, "lag": 0.0, "ready": 1.0} for t in range(60)]
    check = checked(
        samples,
        60,
        trace=trace,
        startup_s=3.0,  # the rebalance pause: the same model twice
        committed=CommittedLag((np.array([0.0]),) * 4),
    )
    assert check["model_peak"] == check["started_peak"] == 1
    assert check["model_consumer_seconds"] == check["started_consumer_seconds"] == 60
    assert check["calibrated_consumer_seconds"] == 60 and check["cold_start_s"] == 0.0


def test_the_model_calibrated_on_the_run_is_reported_beside_the_model_as_it_is() -> None:
    # A backlog from the start: read from t=10, and seen 2 s of arrivals late every second.
    samples = [
        {"t": float(t), "replicas": 1.0, "lag": 5000.0, "ready": float(t >= 10)} for t in range(90)
    ]
    check = checked(
        samples,
        90,
        rate=50.0,
        startup_s=3.0,
        committed=CommittedLag((np.array([2.0]),) * 4),
    )
    assert check["cold_start_s"] == 10.0
    assert check["committed_lag_p50_s"] == check["committed_lag_p90_s"] == 2.0
    # 1,200 records/s on one consumer of 1,000: the model as it is also falls behind, but
    # the calibrated one starts 10 s later and sees 2,400 more records at every sync.
    assert check["calibrated_peak"] >= check["started_peak"]
    assert check["calibrated_consumer_seconds"] > check["started_consumer_seconds"]
    text = "\n".join(model_lines([check]))
    assert "calibrated on this run" in text and "p50 2.00 s" in text
    assert "| 1,000 | 10.0 | 90 |" in text


def test_the_table_shows_rscore_where_measured_and_a_dash_where_not() -> None:
    full = {
        **row("ours (cooperative)", 2000, 10.0),
        **dict.fromkeys(("peak", "scale_events", "generations", "moved_partitions"), 1),
        **dict.fromkeys(("latency_p50_s", "latency_p90_s", "step_latency_p99_s"), 1.0),
        "lag_s_p99": 1.0,
    }
    lines = table([full | {"rscore": 2.25}, full | {"rscore": None}], oracle=1000)
    assert "Rscore" in lines[0]
    assert lines[2].split(" | ")[-3] == "2.2" and lines[3].split(" | ")[-3] == "-"
