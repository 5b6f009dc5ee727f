"""`make demo` keeps working: a short run end to end, nothing lost, its files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from consumer_sdk.clusters import ClusterKind, suite_cluster_kinds
from tests.conftest import skip_unless_runnable

ROOT = Path(__file__).parent.parent


KINDS = [k for k in suite_cluster_kinds() if k in (ClusterKind.EMBEDDED, ClusterKind.APACHE)]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.value)
def test_short_demo_run(kind: ClusterKind, tmp_path: Path) -> None:
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
            "--output",
            str(tmp_path),
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
    assert list((run / "warehouse" / "kafka.db" / "demo_orders").glob("date=*/part-*.parquet"))
