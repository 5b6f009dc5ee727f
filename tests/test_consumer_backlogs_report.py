"""The repeated-backlogs benchmark's figures (benchmarks.consumer_backlogs): pure, from samples."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.consumer_backlogs import allocator_environment, report, slopes


def drains(anon: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "cycle": i + 1,
            "records": 1000.0 * (i + 1),
            "anon_mib": mib,
            "rss_mib": mib + 60,
            "arrow_mib": 0.0,
            "objects": 100_000,
        }
        for i, mib in enumerate(anon)
    ]


def test_a_leak_has_a_slope_per_drain_and_a_working_set_has_none() -> None:
    leaking = drains([150.0] + [100.0 + 2.0 * i for i in range(1, 9)])  # the first drain apart
    whole, later = slopes(leaking, "anon_mib")
    assert whole == pytest.approx(2.0) and later == pytest.approx(2.0)
    level = drains([150.0] + [100.0, 104.0] * 4)
    whole, later = slopes(level, "anon_mib")
    assert whole is not None and abs(whole) < 0.5
    assert slopes(drains([1.0, 2.0, 3.0]), "anon_mib") == (None, None)  # too few drains
    assert slopes(leaking, "traced_mib") == (None, None)  # not traced


def test_the_report_has_a_row_per_drain_and_names_the_lines_that_grew() -> None:
    samples = drains([100.0 + i for i in range(7)])
    samples[-1] |= {"traced_mib": 30.0, "grew_at": [("sink.py:10", 1.5)]}
    for s in samples[:-1]:
        s["traced_mib"] = 25.0
    text = report(samples, ["# header"])
    rows = [line for line in text.splitlines() if line.startswith("| ") and "drain" not in line]
    assert len(rows) == len(samples) and rows[0].startswith("| 1 | 1,000 | 100.0 |")
    assert "- anonymous (MiB): +1.000 / +1.000" in text
    assert "`sink.py:10` +1.50" in text
    assert "glibc" not in text  # no heap figures in these samples: no such columns


def test_the_heap_columns_show_when_the_consumer_reported_them() -> None:
    samples = drains([100.0] * 6)
    for i, s in enumerate(samples):
        s |= {"heap_allocated_mib": 20.0, "heap_kept_free_mib": 5.0 + 0.5 * i}
    text = report(samples, ["# header"])
    assert "| glibc allocated (MiB) | glibc kept free (MiB) |" in text
    assert "- glibc kept free (MiB): +0.500 / +0.500" in text
    assert "- glibc allocated (MiB): +0.000 / +0.000" in text


def test_the_allocator_settings_reach_the_consumer_only_when_asked() -> None:
    assert allocator_environment(None, None) == {}
    assert allocator_environment("system", 2) == {
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_ARENA_MAX": "2",
    }
