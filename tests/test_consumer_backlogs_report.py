"""The repeated-backlogs benchmark's figures (benchmarks.consumer_backlogs): pure, from samples."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.consumer_backlogs import (
    SETTINGS,
    allocator_environment,
    parse_settings,
    report,
    rotated,
    slopes,
)


def drains(anon: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "cycle": i + 1,
            "records": 1000.0 * (i + 1),
            "anon_mib": mib,
            "rss_mib": mib + 60,
            "arrow_mib": 0.0,
            "objects": 100_000,
            "backlog_s": 10.0 + i,
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


def test_each_setting_has_its_table_and_names_the_lines_that_grew() -> None:
    samples = drains([100.0 + i for i in range(7)])
    samples[-1] |= {"traced_mib": 30.0, "grew_at": [("sink.py:10", 1.5)]}
    for s in samples[:-1]:
        s["traced_mib"] = 25.0
    text = report({"default": samples}, ["# header"])
    section = text.split("## `default`")[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "drain" not in line]
    assert len(rows) == len(samples) and rows[0].startswith("| 1 | 1,000 | 10.0 | 100.0 |")
    assert "- anonymous (MiB): +1.00 / +1.00" in section
    assert "`sink.py:10` +1.50" in section
    assert "glibc" not in section  # no heap figures in these samples: no such columns


def test_the_summary_puts_the_settings_side_by_side() -> None:
    level = drains([150.0] + [120.0, 124.0] * 4)
    growing = drains([100.0 + 3.0 * i for i in range(9)])
    for i, s in enumerate(growing):
        s |= {"heap_allocated_mib": 20.0, "heap_kept_free_mib": 5.0 + 0.5 * i}
    for s in level:
        s["anon_given_back_mib"] = s["anon_mib"] - 10.0
    text = report({"system": growing, "given_back": level}, ["# header"])
    summary = text.split("## Side by side")[1].split("## `")[0]
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `system`", "| `given_back`"]
    system, given_back = (r.split(" | ") for r in rows)
    assert system[1] == "100.0 -> 124.0 (103-124)" and system[2] == "+3.00 / +3.00"
    assert system[3] == "-" and system[4] == "-"  # nothing given back
    assert system[7] == "5.0 -> 9.0 (6-9)"
    assert given_back[3] == "140.0 -> 114.0 (110-114)" and given_back[5] == "-"
    assert given_back[-1] == "14.0 |"  # the median seconds a backlog
    assert "## `system`: Arrow's buffers on glibc" in text


def test_settings_are_named_once_and_reach_the_consumer_only_when_asked() -> None:
    assert [s.name for s in parse_settings("system, default")] == ["system", "default"]
    for bad in ("", "default,default", "jemalloc"):
        with pytest.raises(ValueError, match="--settings takes distinct names among default"):
            parse_settings(bad)
    assert allocator_environment(SETTINGS["default"]) == {}
    assert allocator_environment(SETTINGS["system"]) == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert {s.give_back for s in SETTINGS.values()} == {"", "loop", "thread"}


def test_each_round_starts_with_the_next_setting() -> None:
    names = ["a", "b", "c"]
    assert [rotated(names, k) for k in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert rotated([], 3) == []
