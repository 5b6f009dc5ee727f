"""The soak's fault schedule and figures (benchmarks.soak.faults, benchmarks.soak): pure
parts, no process touched."""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.soak.faults import FaultKind, delayed_start, schedule
from benchmarks.soak.native_memory import MIN_SAMPLE_S as MIN_NATIVE_SAMPLE_S
from benchmarks.soak.run import (
    RECOVERY_TARGET_S,
    InjectedFault,
    ProcessSample,
    Run,
    Sample,
    analyse,
    cut_short,
    fault_kinds,
    first_back,
    judged_at,
    missing_tools,
    not_judged_lines,
    omitted_line,
    process_sample,
    report,
    reread,
    result_name,
    steady_p99,
    unmeasured,
    with_error,
)
from benchmarks.soak.run import main as soak_main
from benchmarks.soak.slopes import slope_error_per_10_min

KINDS = tuple(FaultKind)


def test_the_schedule_is_seeded_spaced_and_fair() -> None:
    plan = schedule(7, 300.0, 3540.0, KINDS, session_s=6.0)
    assert plan == schedule(7, 300.0, 3540.0, KINDS, session_s=6.0)
    assert plan != schedule(8, 300.0, 3540.0, KINDS, session_s=6.0)
    assert len(plan) >= 40 and plan[0].at == 300.0
    assert all(f.at + f.duration <= 3540.0 for f in plan)
    for before, after in itertools.pairwise(plan):
        assert after.at - before.at >= 45.0  # one every 45-90 s ...
        assert after.at >= before.at + before.duration + 15.0  # ... after the last repair
    counts = Counter(f.kind for f in plan)
    assert set(counts) == set(KINDS) and max(counts.values()) - min(counts.values()) <= 1
    zombies = [f.duration for f in plan if f.kind is FaultKind.ZOMBIE]
    assert all(11.0 <= d <= 21.0 for d in zombies)  # past the 6 s session, 5-15 s more


def test_recovery_and_healthz_are_judged_per_fault() -> None:
    run = Run()
    lags = [100] * 63 + [5_000, 3_000, 900, 150, 100, 100] + [100] * 20  # 5,000 at 126 s
    run.samples = [
        Sample(t=2.0 * i, lag=lag, healthz=None if 120 <= 2 * i <= 126 else 200, replicas=2)
        for i, lag in enumerate(lags)
    ]
    # The sidecar down from 120 s to 126 s: lag is back under the p99 (100) at 134 s.
    run.faults = [InjectedFault(FaultKind.SIDECAR_KILL, 120.0, 126.0, "sidecar")]
    figures = analyse(run, warm_up_s=110.0, min_span_s=60.0)
    (fault,) = figures["faults"]
    assert figures["steady_lag_p99"] == 100
    assert fault["recovered_s"] == 134.0 - 126.0
    assert fault["healthz_as_expected"] == fault["healthz_samples"] == 4  # no answer: true


def test_a_fault_the_next_one_follows_within_the_target_is_cut_short_not_never() -> None:
    run = Run()
    # Lag 100 in the warm-up, then high from 120 s to the end: no fault sees it come back.
    run.samples = [
        Sample(t=2.0 * i, lag=100 if i < 60 else 9_000, healthz=200, replicas=2) for i in range(200)
    ]
    run.faults = [
        InjectedFault(FaultKind.NETWORK_CUT, 120.0, 170.0, "consumer soak-0"),  # next at +20 s
        InjectedFault(FaultKind.DISK_FULL, 190.0, 220.0, "warehouse"),  # next at +90 s
        InjectedFault(FaultKind.CONSUMER_KILL, 310.0, 311.0, "consumer soak-1"),  # the last
    ]
    cut, disk, kill = analyse(run, warm_up_s=110.0, min_span_s=60.0)["faults"]
    assert cut["recovered_s"] is None and cut["next_fault_after_s"] == 20.0
    assert cut_short(cut)
    assert disk["recovered_s"] is None and disk["next_fault_after_s"] == 90.0
    assert not cut_short(disk)  # 90 s was time enough: a real miss
    assert kill["next_fault_after_s"] is None and not cut_short(kill)
    assert not any(unmeasured(f) for f in (cut, disk, kill))  # the lag was read throughout


def test_a_fault_whose_recovery_had_no_lag_figure_is_not_measured_not_never() -> None:
    run = Run()
    # The benchmark's reader has no figure from 200 s to 300 s; the lag is read again after.
    run.samples = [
        Sample(t=2.0 * i, lag=None if 100 <= i < 150 else 100, healthz=200, replicas=2)
        for i in range(200)
    ]
    run.faults = [
        InjectedFault(FaultKind.CONSUMER_KILL, 210.0, 211.0, "consumer soak-0"),  # next +89 s
        InjectedFault(FaultKind.CONSUMER_KILL, 300.0, 301.0, "consumer soak-1"),
    ]
    blind, seen = analyse(run, warm_up_s=110.0, min_span_s=60.0)["faults"]
    assert blind["recovered_s"] is None and unmeasured(blind) and not cut_short(blind)
    assert seen["recovered_s"] == 1.0 and not unmeasured(seen)


def test_growth_is_a_slope_per_incarnation_after_the_warm_up() -> None:
    run = Run()
    run.processes = [
        ProcessSample(
            t=60.0 * m, role="sidecar", pid=1, rss_mib=100 + 0.5 * m, anon_mib=60.0, fds=40
        )
        for m in range(30)
    ] + [
        ProcessSample(t=t, role="consumer soak-0", pid=pid, rss_mib=80, anon_mib=50.0, fds=30)
        for pid, t in ((2, 600.0), (2, 840.0), (3, 900.0))  # two lives of 4 and 0 minutes
    ]
    figures = analyse(run, warm_up_s=300.0, min_span_s=600.0)
    (sidecar,) = figures["growth"]  # the consumer lived too briefly to judge
    assert sidecar["role"] == "sidecar" and sidecar["rss_mib_per_10_min"] == 5.0
    assert sidecar["anon_mib_per_10_min"] == 0.0  # the growth was in mapped files
    assert sidecar["fds_per_10_min"] == 0.0
    assert sidecar["anon_late_mib_per_10_min"] == 0.0
    # What was not judged is said, with why: its lives were too short.
    unjudged = {"consumer soak-0": {"incarnations": 2, "longest_minutes": 4.0}}
    assert figures["growth_not_judged"] == unjudged
    (text,) = [line for line in not_judged_lines(unjudged) if line]
    assert "consumer soak-0 (2 incarnation(s), the longest 4.0 min)" in text


def test_a_warm_up_that_levels_off_shows_in_the_second_half_slope() -> None:
    run = Run()
    run.processes = [  # 2 MiB a minute for 10 minutes, then flat for 20
        ProcessSample(
            t=60.0 * m, role="broker 1", pid=9, rss_mib=0, anon_mib=2.0 * min(m, 10), fds=9
        )
        for m in range(31)
    ]
    (broker,) = analyse(run, warm_up_s=0.0, min_span_s=600.0)["growth"]
    assert broker["anon_mib_per_10_min"] > 5 and broker["anon_late_mib_per_10_min"] == 0.0


def test_a_slope_comes_with_how_finely_the_swings_let_it_be_told() -> None:
    steady = [(60.0 * m, 100.0 + 0.1 * m) for m in range(30)]  # 1 MiB per 10 min, no noise
    assert slope_error_per_10_min(steady) == pytest.approx(0.0, abs=1e-9)
    swinging = [(60.0 * m, 100.0 + 0.1 * m + (20.0 if m % 2 else -20.0)) for m in range(30)]
    wide = slope_error_per_10_min(swinging)
    # Same trend, swings of +-20 MiB: the error exceeds the 1 MiB target itself.
    assert wide is not None and wide > 1.0
    assert slope_error_per_10_min(steady[:2]) is None  # too few points
    assert slope_error_per_10_min([(60.0, 1.0)] * 3) is None  # no spread in time
    assert with_error(1.88, 1.484) == "1.88 ± 1.48" and with_error(0.5, None) == "0.5"


def test_faults_flag_names_the_kinds_it_accepts() -> None:
    assert fault_kinds("spark_kill, ZOMBIE") == (FaultKind.SPARK_KILL, FaultKind.ZOMBIE)
    with pytest.raises(argparse.ArgumentTypeError, match="--faults takes some of consumer_kill"):
        fault_kinds("spark_kill,meteor")
    with pytest.raises(argparse.ArgumentTypeError, match="got ' , '"):
        fault_kinds(" , ")


def test_a_run_leaving_out_faults_is_named_apart_and_says_what_it_left_out() -> None:
    every = [kind.name for kind in KINDS]
    assert result_name(every) == "soak" and omitted_line(every) == []
    assert omitted_line(None) == []
    some = ["ZOMBIE", "NETWORK_CUT"]
    assert result_name(some) == "soak_network_cut_zombie"
    (line,) = omitted_line(some)
    assert FaultKind.BROKER_KILL.value in line and FaultKind.ZOMBIE.value not in line


def test_a_run_on_another_lake_format_is_named_apart() -> None:
    every = [kind.name for kind in KINDS]
    assert result_name(every, "iceberg") == "soak_iceberg"
    assert result_name(["CONSUMER_KILL"], "parquet") == "soak_parquet_consumer_kill"
    assert result_name(every, "delta") == result_name(every)
    assert result_name(["SPARK_KILL"], "iceberg", compacting=True) == (
        "soak_iceberg_compacting_spark_kill"
    )
    assert result_name(every, producer="transactional") == "soak_transactional"
    assert result_name(["BROKER_KILL"], "iceberg", producer="transactional") == (
        "soak_iceberg_transactional_broker_kill"
    )


def test_a_finished_run_is_analysed_again_from_what_it_recorded(tmp_path: Path) -> None:
    recorded = {
        "duration_s": 600.0,
        "warm_up_s": 110.0,
        "steady_lag_p99": 1,  # stale figures of an older report: replaced
        "faults": [
            {"kind": "CONSUMER_KILL", "at": 210.0, "repaired": 211.0, "target": "consumer soak-0"},
            {"kind": "DISK_FULL", "at": 300.0, "repaired": 330.0, "target": "warehouse"},
        ],
        "samples": [
            {"t": 2.0 * i, "lag": None if 105 <= i < 140 else 100, "healthz": 200, "replicas": 1}
            for i in range(300)
        ],
        "processes": [],
    }
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(recorded))
    data = reread(path)
    kill, disk = data["faults"]
    assert data["steady_lag_p99"] == 100 and data["duration_s"] == 600.0
    assert kill["next_fault_after_s"] == 89.0 and unmeasured(kill)
    assert disk["recovered_s"] == 0.0 and not unmeasured(disk)


def test_a_fault_waits_for_the_last_ones_verdict_and_moves_the_rest_back() -> None:
    assert delayed_start(400.0, 0.0, None) == 400.0  # the first: as planned
    assert delayed_start(400.0, 0.0, 380.0) == 400.0  # judged in time
    assert delayed_start(400.0, 0.0, 431.0) == 431.0  # the last one's lag came back late
    assert delayed_start(470.0, 31.0, 450.0) == 501.0  # later faults keep the delay


def test_a_fault_is_judged_when_its_lag_is_back_or_the_target_has_passed() -> None:
    def samples(lags: list[int | None]) -> list[Sample]:
        return [
            Sample(t=100.0 + 2 * i, lag=lag, healthz=200, replicas=1) for i, lag in enumerate(lags)
        ]

    back = samples([9_000, 5_000, None, 80, 9_000])
    assert judged_at(back, repaired=101.0, p99=100) == 106.0
    assert judged_at(back, repaired=107.0, p99=100) is None  # not back, target not over
    high = samples([9_000] * 40)  # 100 ... 178 s
    assert judged_at(high, repaired=110.0, p99=100) == 110.0 + RECOVERY_TARGET_S
    assert judged_at([], repaired=110.0, p99=100) is None
    # The analysis bounds the search by the next fault: a lag back only after it is not this
    # fault's recovery.
    assert first_back(back, since=101.0, p99=100, until=106.0) is None
    assert first_back(back, since=101.0, p99=100, until=106.5) == 106.0


def test_the_steady_p99_leaves_out_the_first_minute_and_missing_figures() -> None:
    def sample(t: float, lag: int | None) -> Sample:
        return Sample(t=t, lag=lag, healthz=200, replicas=1)

    kept = [sample(60, 100), sample(80, 120)]
    noisy = [sample(10, 50_000), kept[0], sample(70, None), kept[1], sample(200, 9_000)]
    assert steady_p99(noisy, warm_up_s=100.0) == steady_p99(kept, warm_up_s=100.0)
    assert steady_p99(noisy, warm_up_s=100.0) < steady_p99(noisy, warm_up_s=300.0)
    assert steady_p99(kept[:1], warm_up_s=100.0) == 0  # one figure: no p99


def test_the_soak_names_the_commands_it_lacks_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert missing_tools([FaultKind.ZOMBIE]) == ["mount (Debian: mount)"]
    assert missing_tools([FaultKind.NETWORK_CUT]) == [
        "mount (Debian: mount)",
        "nft (Debian: nftables)",
    ]
    for tool in ("mount", "nft"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    assert missing_tools(list(FaultKind)) == []


def test_a_native_memory_interval_below_the_floor_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as refused:
        soak_main(["--broker-nmt", "--broker-nmt-every", "5"])
    assert refused.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(
        f"--broker-nmt-every must be at least {MIN_NATIVE_SAMPLE_S:.0f} seconds, got 5"
    )


def test_log_segments_are_told_apart_from_the_descriptors_the_target_judges(
    tmp_path: Path,
) -> None:
    # This process with a partition's segment open: counted apart from its other files.
    segment = tmp_path / "orders-0" / f"{0:020d}.log"
    segment.parent.mkdir()
    segment.write_bytes(b"")
    with segment.open("rb"), (tmp_path / "server.log").open("w"):
        sample = process_sample(0.0, "broker-1", os.getpid())
    assert sample is not None and sample.segment_fds == 1 and sample.fds > 1

    def broker(m: int) -> ProcessSample:  # a segment rolled every 10 minutes, 200 others
        return ProcessSample(60.0 * m, "broker-1", 9, 0, 0, 200 + m // 10, m // 10)

    run = Run(processes=[broker(m) for m in range(31)])
    (figures,) = analyse(run, warm_up_s=0.0, min_span_s=600.0)["growth"]
    assert figures["fds_per_10_min"] > 0.9 and figures["other_fds_per_10_min"] == 0.0
    assert (figures["segment_fds_first"], figures["segment_fds_last"]) == (0, 3)
    older = Run(processes=[replace(broker(m), segment_fds=None) for m in range(31)])
    (uncounted,) = analyse(older, warm_up_s=0.0, min_span_s=600.0)["growth"]
    assert "other_fds_per_10_min" not in uncounted  # an older run's samples did not count them
    context = {
        "machine": "Machine: a test",
        "broker": "Broker: none",
        **{"duration_s": 1860.0, "warm_up_s": 0.0, "seed": 7},
        **{"produced": 1, "missing": 0, "duplicated": 0, "failed_sends": 0},
    }
    counted = report(analyse(run, 0.0, 600.0), context).splitlines()
    (row_of_broker,) = [line for line in counted if line.startswith("| broker-1 |")]
    assert row_of_broker.endswith("| 0 -> 3 | 0.0 |")
    assert any("other fds / 10 min" in line for line in counted)
    assert not any(
        "other fds" in line for line in report(analyse(older, 0.0, 600.0), context).splitlines()
    )
