"""The demo's commit analysis: log lines parsed, phases summarised."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchmarks.demo_pipeline import TableCommit, phase_summary, table_commits

LOG = [
    "2026-11-25 20:59:08,007 [sink-1] consumer_sdk.lake.lake_writer demo-orders: appended 232 "
    "row(s) and 0 dead letter(s) in 0.97 s (0.00 s waiting for the partitions' locks)",
    "2026-11-25 20:59:08,822 sidecar.app scale_up 3 -> 4: 4 consumer(s) needed",
    "2026-11-25 20:59:09,430 [sink-0] consumer_sdk.lake.lake_writer demo-clicks: appended 1268 "
    "row(s) and 2 dead letter(s) in 1.00 s (0.00 s waiting for the partitions' locks)",
]


def test_table_commits_are_read_from_the_consumers_log_lines() -> None:
    commits = table_commits(LOG)
    assert [(c.member, c.topic, c.rows, c.seconds) for c in commits] == [
        ("sink-1", "demo-orders", 232, 0.97),
        ("sink-0", "demo-clicks", 1270, 1.00),  # dead letters are rows committed too
    ]
    first = datetime.strptime("2026-11-25 20:59:08,007", "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert commits[1].at - commits[0].at == pytest.approx(1.423)
    assert commits[0].at == pytest.approx(first)


def test_phases_count_the_commits_ending_in_them_and_estimate_the_pipeline() -> None:
    origin = 1000.0
    samples = [
        {
            "t": float(t),
            "at": origin + t,
            "rate": 100.0 if 3 <= t < 6 else 10.0,
            "running": 2.0,
            "lag": float(t),
        }
        for t in range(9)
    ]
    commits = [
        TableCommit(origin + 1.5, "m", "a", 30, 0.5),
        TableCommit(origin + 4.0, "m", "a", 200, 1.0),
        TableCommit(origin + 5.0, "m", "b", 100, 2.0),
    ]
    before, step, after = phase_summary(samples, commits, 9.0)
    assert (before["commits_per_s"], before["rows_per_commit"]) == (pytest.approx(1 / 3), 30)
    assert step["rows_per_s"] == pytest.approx(300 / 3)
    assert step["commit_s"] == pytest.approx(1.5)
    assert step["pipeline_lag"] == pytest.approx(100.0 * 2 * 1.5)
    assert (step["lag_mean"], step["lag_last"]) == (4.0, 5.0)
    assert after["commits_per_s"] == 0 and after["pipeline_lag"] == 0
