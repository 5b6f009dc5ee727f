"""`make demo` keeps working: a short run end to end, nothing lost, its files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_short_demo_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.demo",
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
