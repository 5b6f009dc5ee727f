"""The soak's grouping of process samples by incarnation."""

from __future__ import annotations

from benchmarks.soak.incarnations import by_incarnation, long_enough
from benchmarks.soak.native_memory import NativeSample
from benchmarks.soak.run import ProcessSample


def process(t: float, role: str, pid: int) -> ProcessSample:
    return ProcessSample(t=t, role=role, pid=pid, rss_mib=1.0, anon_mib=1.0, fds=3)


def test_a_restarted_process_is_a_new_incarnation_and_the_warm_up_is_left_out() -> None:
    samples = [process(t, "broker-1", 7) for t in (100, 400, 700)] + [
        process(t, "broker-1", 8) for t in (800, 900)
    ]
    grouped = by_incarnation(samples, warm_up_s=300)
    assert list(grouped) == [("broker-1", 7), ("broker-1", 8)]
    assert [s.t for s in grouped[("broker-1", 7)]] == [400, 700]
    assert [s.t for s in grouped[("broker-1", 8)]] == [800, 900]


def test_native_samples_group_the_same_way() -> None:
    samples = [NativeSample(t, "broker-2", 9, 700) for t in (300, 900, 1500)]
    assert by_incarnation(samples, 0) == {("broker-2", 9): samples}


def test_a_slope_needs_three_samples_over_the_span() -> None:
    three = [process(t, "sidecar", 1) for t in (0, 600, 1200)]
    assert long_enough(three, min_span_s=1200)
    assert not long_enough(three, min_span_s=1201)
    assert not long_enough(three[::2], min_span_s=1200)  # two samples
