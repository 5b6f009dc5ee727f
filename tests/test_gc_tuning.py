"""The consumer process's garbage-collector setting."""

from __future__ import annotations

import gc

from consumer_sdk.gc_tuning import YOUNG_GENERATION_THRESHOLD, tune_for_throughput


def test_only_the_young_generation_threshold_changes() -> None:
    before = gc.get_threshold()
    try:
        assert tune_for_throughput() == before
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)
