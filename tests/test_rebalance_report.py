"""The rebalance benchmark's report (benchmarks.cooperative_rebalance): pure, from rows."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cooperative_rebalance import RENDERED, report, report_from, summarise


def run(protocol: str, pause: float, scenario: str = "scale-in 11->10") -> dict[str, Any]:
    return {
        "profile": "client defaults",
        "protocol": protocol,
        "scenario": scenario,
        "moved": 9,
        "pause_partition_s": pause,
        "settle_s": 3.0,
        "redelivered": 0,
        "redelivered_unmoved": 0,
        "settled": True,
    }


PAUSES = {
    "ours": (10.9, 14.2, 10.3),
    "uniform": (13.7, 10.6, 7.6),  # its range overlaps ours
    "static": (103.4, 81.2, 83.2),  # does not
}


def test_the_report_gives_each_cells_range_and_says_when_two_ranges_overlap() -> None:
    rows = [run(name, pause) for name, pauses in PAUSES.items() for pause in pauses]
    text = report(summarise(rows), "# header", reference="ours")
    assert "| 10.30-14.20 |" in text and "| 7.60-13.70 |" in text
    (ratios,) = [line for line in text.splitlines() if line.startswith("- scale-in")]
    mean = {name: sum(ps) / 3 for name, ps in PAUSES.items()}

    def t(name: str) -> float:  # Welch's, from its definition
        a, b = PAUSES[name], PAUSES["ours"]
        error = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
        return (statistics.mean(a) - statistics.mean(b)) / error

    assert f"uniform {mean['uniform'] / mean['ours']:.2f}x overlap t={t('uniform'):+.1f}" in ratios
    assert ratios.endswith(f"static {mean['static'] / mean['ours']:.2f}x t={t('static'):+.1f}")


def test_a_committed_run_is_rendered_again_from_its_rows_keeping_its_header(
    tmp_path: Path,
) -> None:
    rows = [run(name, pause) for name, pauses in PAUSES.items() for pause in pauses]
    result = tmp_path / "rebalance.json"
    result.write_text(json.dumps({"machine": {"code": "abc1234"}, "rows": rows}))
    header = "# Partition pause\n\nMachine: a machine; run 2026-12-04 16:22 UTC, code abc1234."
    result.with_suffix(".md").write_text(header + "\n\n## Timings: old\n\n| old table |\n")
    assert report_from([result]) == 0
    text = result.with_suffix(".md").read_text()
    assert text.startswith(header + "\n" + RENDERED) and "| old table |" not in text
    assert "| 10.30-14.20 |" in text
    saved = json.loads(result.read_text())
    assert saved["machine"] == {"code": "abc1234"} and len(saved["summary"]) == len(PAUSES)
    assert result.with_suffix(".png").stat().st_size > 0
    # Rendered twice, the header keeps one note of it.
    assert report_from([result]) == 0
    assert result.with_suffix(".md").read_text().count(RENDERED) == 1


def test_a_file_without_rows_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "other.json"
    result.write_text(json.dumps({"machine": {}}))
    result.with_suffix(".md").write_text("# other\n")
    assert report_from([result]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("--report-from:") and "no rows" in line


def test_several_runs_are_pooled_and_printed_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = []
    for i, name in enumerate(("first", "second")):
        result = tmp_path / f"{name}.json"
        rows = [run(p, pause + i) for p, pauses in PAUSES.items() for pause in pauses]
        result.write_text(json.dumps({"machine": {}, "rows": rows}))
        result.with_suffix(".md").write_text(
            f"# {name}\n\nMachine: machine {i}.\n\n## Timings: x\n"
        )
        files.append(result)
    assert report_from(files) == 0
    text = capsys.readouterr().out
    assert "Pooled: the rows of 2 runs." in text
    assert (
        "- first.json: Machine: machine 0." in text and "- second.json: Machine: machine 1." in text
    )
    assert "| scale-in 11->10 | ours | 6 |" in text  # three runs from each file
    assert all("## Timings" in f.with_suffix(".md").read_text() for f in files)  # unchanged
    assert not any(f.with_suffix(".png").exists() for f in files)
