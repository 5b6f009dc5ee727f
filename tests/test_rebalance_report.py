"""The rebalance benchmark's report (benchmarks.cooperative_rebalance): pure, from rows."""

from __future__ import annotations

from typing import Any

from benchmarks.cooperative_rebalance import report, summarise


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
    assert f"uniform {mean['uniform'] / mean['ours']:.2f}x overlap" in ratios
    assert ratios.endswith(f"static {mean['static'] / mean['ours']:.2f}x")
