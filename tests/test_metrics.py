"""Rscore, lower bound and Cardinal Bin Score on hand-computed cases."""

from __future__ import annotations

import pytest

from assignor import TopicPartition, bins_used, cbs, lower_bound, rscore

A, B, C = (TopicPartition("t", i) for i in range(3))


def test_rscore_counts_only_partitions_that_changed_consumer() -> None:
    speeds = {A: 30.0, B: 20.0, C: 50.0}
    previous = {A: "c0", B: "c0"}  # C is new: placing it costs nothing
    new = {A: "c0", B: "c1", C: "c1"}
    assert rscore(previous, new, speeds, 100.0) == pytest.approx(0.2)
    assert rscore({}, new, speeds, 100.0) == 0.0


def test_lower_bound() -> None:
    assert lower_bound({}, 10) == 0
    assert lower_bound({A: 0.0}, 10) == 1
    assert lower_bound({A: 5.0, B: 5.0}, 10) == 1  # exactly full
    assert lower_bound({A: 5.0, B: 5.1}, 10) == 2
    assert lower_bound({A: 25.0, B: 5.0, C: 6.0}, 10) == 3  # one above C, alone
    with pytest.raises(ValueError, match="capacity must be"):
        lower_bound({A: 1.0}, 0)


def test_cbs() -> None:
    scores = cbs({"x": [2, 4], "y": [3, 4], "z": [2, 5]})
    assert scores == pytest.approx({"x": 0.0, "y": 0.25, "z": 0.125})
    with pytest.raises(ValueError, match="equal length"):
        cbs({"x": [1], "y": [1, 2]})


def test_bins_used() -> None:
    assert bins_used({A: "c0", B: "c0", C: "c2"}) == 2
