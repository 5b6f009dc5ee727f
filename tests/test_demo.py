"""`make demo` keeps working: a short run end to end, nothing lost, its files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from local_kafka.clusters import ClusterKind, suite_cluster_kinds
from tests.conftest import skip_unless_runnable

ROOT = Path(__file__).parent.parent


KINDS = [k for k in suite_cluster_kinds() if k in (ClusterKind.EMBEDDED, ClusterKind.APACHE)]
# The secured leg (SASL_SSL, SCRAM, ACLs) is Apache Kafka's.
RUNS = [(k, False) for k in KINDS] + [(k, True) for k in KINDS if k is ClusterKind.APACHE]


@pytest.mark.parametrize(
    ("kind", "secured"), RUNS, ids=lambda v: v.value if isinstance(v, ClusterKind) else str(v)
)
def test_short_demo_run(kind: ClusterKind, secured: bool, tmp_path: Path) -> None:
    skip_unless_runnable(kind)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.demo",
            "--kafka",
            kind.value,
            "--duration",
            "12",
            "--no-live",
            "--scale-down-window",
            "4",
            "--warm-up-batches",
            "1",
            "--output",
            str(tmp_path),
            *(["--secured"] if secured else []),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run,) = list(tmp_path.iterdir())
    assert (run / "consumers_and_lag.png").stat().st_size > 10_000
    samples = json.loads((run / "samples.json").read_text())
    assert max(s["running"] for s in samples) >= 1  # the sidecar started consumers
    assert " 0 missing" in result.stdout and " 0 duplicated" in result.stdout
    assert "freshness, producer to committed row: p50 " in result.stdout
    table = run / "warehouse" / "kafka.db" / "demo_orders"
    assert list((table / "_delta_log").glob("*.json")) and list(table.glob("date=*/part-*.parquet"))
    if secured:
        # Rows landed: the consumers read as their own user (the sidecar's may not read the
        # topics), and the sidecar wrote its snapshots as its own (only it may).
        log = (run / "sidecar.log").read_text()
        assert "AuthorizationFailed" not in log and "refused" not in log
        for user in ("sidecar", "consumer"):
            password = (run / "tls" / f"{user}.password").read_text().strip()
            assert password not in log and password not in result.stdout + result.stderr


def test_the_live_screen_fits_80_by_24_and_says_who_holds_what() -> None:
    from examples.demo_view import clock, moved, screen

    topics = ("demo-orders", "demo-clicks")
    partitions = [f"{t}:{p}" for t in topics for p in range(12)]
    plan = {f"c{i}": partitions[2 * i : 2 * i + 2] for i in range(12)}
    status = {
        "replicas": 12,
        "capacity": {"mode": "auto", "initial": 500.0, "measured": 1000.0, "in_use": 1000.0},
        "drain_ceiling": {"replicas": 12},
        "unit": "records/s",
        "plan": plan,
        "speeds": dict.fromkeys(partitions, 450.0),
        "lags": dict.fromkeys(partitions, 10.0),
        "last_decision": {
            "action": "hold",
            "desired": 12,
            "planned_rscore": 0.45,
            "reason": "a reason far longer than any terminal line could show " * 3,
        },
    }
    before = {**plan, "c0": [partitions[0]], "c1": [partitions[1], *plan["c1"]]}
    lines = screen(status, 82.0, 60.0, 5400.0, moved(before, plan), topics)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("t = 60 s +  22 s draining")
    assert any(
        line.strip().startswith("c0") and "90%" in line and "o0 o1" in line for line in lines
    )
    assert lines[-1] == "last re-plan (Rscore 0.45) moved: demo-orders:1: c1->c0"
    assert any("capacity auto 500, measured 1000, at most 12 (drain)" in line for line in lines)
    assert clock(42.0, 60.0) == "t =   42 / 60 s"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--load-scale", "0"], "--load-scale must be in [0.05, 20], got 0.0"),
        (["--load-scale", "50"], "--load-scale must be in [0.05, 20], got 50.0"),
        (["--batch-wait", "0"], "--batch-wait must be in [0.01, 60] seconds, got 0.0"),
        (["--duration", "3"], "--duration must be >= 10 seconds, got 3.0"),
    ],
)
def test_a_bad_demo_flag_is_refused_in_one_line_before_anything_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.demo import main

    with pytest.raises(SystemExit) as stopped:
        main(flags)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2 and error.endswith(message) and "Traceback" not in error
