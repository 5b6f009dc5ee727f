"""Capacity measured by the consumers: the report they commit, the meter that fills it, the
sidecar's estimate of it. Pure; times are given."""

from __future__ import annotations

import math

import pytest

from consumer_sdk.pipeline.drain import DrainMeter, backlog_behind
from contract.capacity import CapacityReport, CapacityReportError, decode, is_report
from sidecar.capacity import CapacityEstimate


def report(member: str, commits: int, measurements: int, rate: float) -> str:
    return CapacityReport(member, commits, measurements, rate, rate * 100, 10.0).encode()


# -- the report ------------------------------------------------------------------------------
def test_a_report_round_trips_and_fits_far_below_the_commit_metadata_limit() -> None:
    sent = CapacityReport("consumer-1-abc", 12, 3, 2310.5, 1_180_000.0, 21.4)
    text = sent.encode()
    assert is_report(text) and len(text) < 4096
    assert decode(text) == sent and decode(text).measured


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"cap":1,"m":"a","c":1,"n":1,"r":-5,"b":0,"s":1}', "r must be a finite number >= 0"),
        ('{"cap":1,"m":"a","c":1,"n":1,"r":NaN,"b":0,"s":1}', "r must be a finite number >= 0"),
        ('{"cap":1,"m":"a","c":1,"n":1,"r":1,"b":Infinity,"s":1}', "b must be a finite"),
        ('{"cap":1,"m":"","c":1,"n":1,"r":1,"b":0,"s":1}', "m must be a member id"),
        ('{"cap":1,"m":"a","c":-1,"n":1,"r":1,"b":0,"s":1}', "c must be an integer"),
        ('{"cap":1,"m":"a","c":1,"n":1.5,"r":1,"b":0,"s":1}', "n must be an integer"),
        ('{"cap":2,"m":"a","c":1,"n":1,"r":1,"b":0,"s":1}', "cap must be 1"),
        ('{"cap":1,"m":"a"', "not JSON"),
        ('{"cap":1,"m":"' + "a" * 600 + '"}', "at most 512 characters"),
    ],
)
def test_a_bad_report_is_refused_naming_its_field(text: str, field: str) -> None:
    with pytest.raises(CapacityReportError, match="capacity report: ") as refused:
        decode(text)
    assert field in str(refused.value) and "\n" not in str(refused.value)


def test_other_tools_metadata_is_not_taken_for_a_report() -> None:
    assert not is_report("") and not is_report(None) and not is_report("flink-checkpoint-7")


# -- the meter -------------------------------------------------------------------------------
def test_backlog_behind_counts_what_waits_past_each_partition() -> None:
    assert backlog_behind({"a": 100, "b": 50, "c": None}, {"a": 40, "b": 60, "c": 1}) == 60


def test_the_meter_measures_consecutive_saturated_batches_only() -> None:
    meter = DrainMeter(window_s=60, min_saturated_s=3)
    # Keeping up: no measurement however long.
    for t in range(10):
        assert not meter.written(float(t), 100, 10_000, saturated=False)
    # A run of saturated batches, one every 0.5 s of 1,000 records: the first anchors it.
    measured = [meter.written(10 + 0.5 * i, 1_000, 100_000, saturated=True) for i in range(9)]
    assert measured == [False] * 6 + [True] * 3  # 3 s of saturated intervals needed
    assert meter.records_per_s == pytest.approx(1_000 / 0.5)
    assert meter.bytes_per_s == pytest.approx(100_000 / 0.5)
    assert meter.saturated_s == pytest.approx(4.0)


def test_a_batch_that_keeps_up_breaks_the_run_so_idle_time_is_never_counted() -> None:
    meter = DrainMeter(window_s=60, min_saturated_s=1)
    meter.written(0.0, 1_000, 1, saturated=True)
    meter.written(1.0, 1_000, 1, saturated=True)  # 1,000/s over 1 s
    meter.written(2.0, 10, 1, saturated=False)
    meter.written(30.0, 1_000, 1, saturated=True)  # a new run: 28 s of waiting not counted
    meter.written(30.5, 1_000, 1, saturated=True)
    assert meter.records_per_s == pytest.approx(2_000 / 1.5)
    report_sent = meter.report("m-1", commits=9)
    assert (report_sent.member, report_sent.commits, report_sent.measurements) == ("m-1", 9, 2)


def test_the_report_says_nothing_was_measured_until_something_was() -> None:
    assert not DrainMeter().report("m-1", 0).measured


# -- the sidecar's estimate -------------------------------------------------------------------
def rounds(estimate: CapacityEstimate, per_member: dict[str, list[float]], members=None) -> None:  # type: ignore[no-untyped-def]
    """Each member reports its rates in turn, one per second, counters moving each time."""
    length = max(len(v) for v in per_member.values())
    for i in range(length):
        texts = [
            report(m, commits=i + 1, measurements=i + 1, rate=rates[min(i, len(rates) - 1)])
            for m, rates in per_member.items()
        ]
        estimate.observe(float(i), texts, members)


def test_the_estimate_is_the_median_of_members_so_one_outlier_does_not_move_it() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    rounds(estimate, {"a": [2_000.0] * 3, "b": [2_100.0] * 3, "c": [9_000.0] * 3})
    assert estimate.records_per_s == pytest.approx(2_100.0)
    assert estimate.in_use(1.0) == pytest.approx(2_100.0)
    assert estimate.in_use(50.0) == pytest.approx(2_100.0 * 50)  # bytes of log per record


def test_metadata_left_by_a_member_long_gone_is_never_fresh() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    for t in range(5):  # the same report every round: counters never move
        estimate.observe(float(t), [report("gone", 7, 7, 5_000.0)], None)
    assert estimate.records_per_s is None and estimate.in_use(1.0) == 1_000.0
    assert estimate.reading_members(5.0, within_s=15) == 0


def test_absurd_and_foreign_and_malformed_reports_are_ignored_and_counted() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    rounds(estimate, {"a": [2_000.0] * 3, "b": [2_000.0] * 3})
    estimate.observe(3.0, [report("a", 9, 9, 2_000.0 * 5_000)], frozenset({"a", "b"}))
    for commits in (9, 10):  # seen first, then moving: a foreign member committing
        estimate.observe(4.0, [report("intruder", commits, 9, 2_000.0)], frozenset({"a", "b"}))
    for _ in range(3):  # what a member that left wrote stays until the next commit: not foreign
        estimate.observe(4.5, [report("left", 3, 3, 2_000.0)], frozenset({"a", "b"}))
    estimate.observe(4.6, [], frozenset({"a", "b", "going"}))
    for commits in (1, 2):  # its last commits land as it leaves: not foreign either
        estimate.observe(4.7, [report("going", commits, 1, 2_000.0)], frozenset({"a", "b"}))
    estimate.observe(5.0, ['{"cap":1,"m":"b","c":1,"n":1,"r":-1,"b":0,"s":1}'], None)
    estimate.observe(6.0, ['{"cap":1,"m":"b","c":1,"n":1,"r":-1,"b":0,"s":1}'], None)  # again
    assert dict(estimate.rejected) == {"absurd": 1, "not_member": 1, "malformed": 1}
    assert estimate.records_per_s == pytest.approx(2_000.0)


def test_a_restarted_sidecar_sizes_by_its_previous_capacity_until_the_consumers_measure() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    assert estimate.published(50.0) is None  # nothing carried, nothing measured: their own
    assert estimate.carry_over(150_000.0, age_s=40.0)  # bytes/s, as the snapshot had it
    assert estimate.in_use(50.0) == estimate.published(50.0) == 150_000.0
    assert estimate.status(0.0, 50.0)["carried_over"] == 150_000.0
    rounds(estimate, {"a": [2_000.0] * 3})
    assert estimate.in_use(50.0) == estimate.published(50.0) == pytest.approx(100_000.0)


def test_a_carried_capacity_too_old_absurd_or_under_a_declared_one_is_not_taken() -> None:
    assert not CapacityEstimate(1_000.0, auto=True).carry_over(2_000.0, age_s=3_600.0)
    assert not CapacityEstimate(1_000.0, auto=True).carry_over(2_000.0, age_s=-3_600.0)
    assert not CapacityEstimate(1_000.0, auto=True).carry_over(5e6, age_s=1.0)
    assert not CapacityEstimate(1_000.0, auto=True).carry_over(math.nan, age_s=1.0)
    declared = CapacityEstimate(1_000.0, auto=False)
    assert not declared.carry_over(2_000.0, age_s=1.0)
    assert declared.in_use(1.0) == 1_000.0 and declared.published(1.0) is None


def test_when_reports_stop_the_last_estimate_stays_and_says_how_old_it_is() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    rounds(estimate, {"a": [3_000.0] * 3})
    for t in range(3, 300):
        estimate.observe(float(t), [], None)
    assert estimate.records_per_s == pytest.approx(3_000.0)
    assert estimate.age(300.0) == pytest.approx(298.0)
    assert estimate.status(300.0, 1.0)["measured_age_s"] == pytest.approx(298.0)


def test_the_estimate_decays_towards_new_measurements_by_its_half_life() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True, half_life_s=10.0)
    estimate.observe(0.0, [report("a", 1, 1, 2_000.0)], None)
    estimate.observe(1.0, [report("a", 2, 2, 2_000.0)], None)
    estimate.observe(11.0, [report("a", 3, 3, 4_000.0)], None)  # one half-life later
    assert estimate.records_per_s == pytest.approx(3_000.0)


def test_a_declared_capacity_far_from_the_measured_one_warns_after_minutes() -> None:
    estimate = CapacityEstimate(1_000.0, auto=False, warn_after_s=180.0)
    rounds(estimate, {"a": [2_000.0] * 3})
    assert estimate.in_use(1.0) == 1_000.0  # declared: measured only shown
    estimate.observe(100.0, [], None)
    assert estimate.warning(100.0, 1.0) is None
    estimate.observe(200.0, [], None)
    warning = estimate.warning(200.0, 1.0)
    assert warning is not None and "2000 differs from the declared 1000" in warning
    status = estimate.status(200.0, 1.0)
    assert status["declared"] == 1_000.0 and status["measured"] == pytest.approx(2_000.0)


def test_a_measured_capacity_within_the_tolerance_never_warns() -> None:
    estimate = CapacityEstimate(1_000.0, auto=False, warn_after_s=10.0)
    rounds(estimate, {"a": [1_200.0] * 30})
    assert estimate.warning(29.0, 1.0) is None and not math.isnan(estimate.in_use(1.0))


def test_members_seen_committing_lately_are_reading() -> None:
    estimate = CapacityEstimate(1_000.0)
    rounds(estimate, {"a": [0.0] * 3, "b": [0.0] * 3})
    assert estimate.reading_members(2.0, within_s=15) == 2
    assert estimate.records_per_s is None and estimate.rejected["absurd"] == 4  # 0/s, 2 rounds each
    assert estimate.reading_members(30.0, within_s=15) == 0


def test_members_measured_behind_lately_are_saturated() -> None:
    estimate = CapacityEstimate(1_000.0)
    rounds(estimate, {"a": [2_000.0] * 3, "b": [2_000.0] * 3, "c": [0.0] * 3})
    assert estimate.reading_members(2.0, within_s=15) == 3
    assert estimate.saturated_members(2.0, None) == 2  # c commits, never measured behind
    assert estimate.saturated_members(2.0, frozenset({"a", "c"})) == 1  # b left the group
    assert estimate.saturated_members(2.0 + estimate.fresh_s + 1, None) == 0


def test_the_groups_drain_per_consumer_stands_in_when_no_consumer_saturates() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True)
    estimate.observe(10.0, [], None, group_drain=(5, 3_555.0, 9.0))
    assert estimate.in_use(1.0) == pytest.approx(711.0)
    assert estimate.status(10.0, 1.0)["measured_by"] == "group drain"


def test_once_a_consumer_has_measured_the_groups_drain_no_longer_stands_in() -> None:
    estimate = CapacityEstimate(1_000.0, auto=True, fresh_s=60.0)
    estimate.observe(0.0, [], None, group_drain=(4, 4_000.0, 0.0))
    assert estimate.source == "group drain"
    rounds(estimate, {"a": [2_000.0] * 3})
    estimate.observe(100.0, [], None, group_drain=(4, 8_000.0, 99.0))  # reports old by now
    assert estimate.records_per_s == pytest.approx(2_000.0) and estimate.source == "consumers"


# -- the busy rate: what a consumer that keeps up shows of what it could drain ---------------
def busy_report(member: str, commits: int, busy_rate: float, busy_s: float = 30.0) -> str:
    """A consumer that never saturated (no measurement) but whose sink was busy."""
    return CapacityReport(member, commits, 0, 0.0, 0.0, 0.0, busy_rate, busy_s).encode()


def keeping_up(
    estimate: CapacityEstimate, start: int, rates: dict[str, float], rounds_: int
) -> None:
    """Members commit every second for ``rounds_`` seconds from ``start``, busy at ``rates``."""
    for t in range(start, start + rounds_):
        texts = [busy_report(m, t + 1, rate) for m, rate in rates.items()]
        estimate.observe(float(t), texts, None)


def test_the_meter_counts_the_sinks_busy_time_once_however_many_writes_overlap() -> None:
    meter = DrainMeter(window_s=60)
    meter.busy(0.0, 1.0, 500)
    meter.busy(0.5, 2.0, 500)  # overlaps the first from 0.5 to 1.0: 1 s more, not 1.5
    meter.busy(10.0, 10.5, 250)  # the 8 s idle between is not busy time
    assert meter.busy_s == pytest.approx(2.5)
    assert meter.busy_records_per_s == pytest.approx(1_250 / 2.5)
    meter.busy(100.0, 101.0, 100)  # the window has moved past the others
    assert meter.busy_s == pytest.approx(1.0) and meter.busy_records_per_s == pytest.approx(100.0)
    sent = meter.report("m-1", commits=4)
    assert not sent.measured and sent.busy_records_per_s == pytest.approx(100.0)


def test_the_busy_rate_travels_in_the_report_and_older_reports_decode_without_it() -> None:
    sent = CapacityReport("m-1", 3, 0, 0.0, 0.0, 0.0, 987.5, 42.0)
    assert decode(sent.encode()) == sent
    older = decode('{"cap":1,"m":"m-1","c":1,"n":1,"r":10,"b":0,"s":1}')
    assert (older.busy_records_per_s, older.busy_s) == (0.0, 0.0)
    with pytest.raises(CapacityReportError, match="ws must be a finite number >= 0"):
        decode('{"cap":1,"m":"a","c":1,"n":1,"r":1,"b":0,"s":1,"w":5,"ws":-1}')


def test_a_group_sized_by_too_low_a_capacity_is_raised_by_its_busy_rate() -> None:
    # Declared 500/s, consumers write 1,000/s while busy and never fall behind.
    estimate = CapacityEstimate(500.0, auto=True)
    keeping_up(estimate, 0, {"a": 990.0, "b": 1_000.0, "c": 1_020.0}, rounds_=3)
    assert estimate.in_use(1.0) == pytest.approx(1_000.0)
    status = estimate.status(3.0, 1.0)
    assert status["measured_by"] == "busy time" and status["busy_rate"] == pytest.approx(1_000.0)


def test_a_busy_rate_below_the_capacity_in_use_never_lowers_it() -> None:
    # Small batches into a sink with a fixed cost per write look slow: not a measurement.
    estimate = CapacityEstimate(1_000.0, auto=True)
    keeping_up(estimate, 0, {"a": 300.0, "b": 320.0}, rounds_=5)
    assert estimate.in_use(1.0) == 1_000.0 and estimate.records_per_s is None
    for t in range(10, 13):  # then saturated: 2,000/s measured
        estimate.observe(float(t), [report("a", t, t, 2_000.0)], None)
    keeping_up(estimate, 300, {"a": 300.0, "b": 320.0}, rounds_=5)  # stale by now
    assert estimate.in_use(1.0) == pytest.approx(2_000.0) and estimate.source == "consumers"


def test_a_fresh_saturated_measurement_wins_over_the_busy_rate() -> None:
    estimate = CapacityEstimate(500.0, auto=True, fresh_s=120.0)
    for t in range(3):  # saturated at 800/s while its sink's busy rate says 1,000/s
        text = CapacityReport("a", t + 1, t + 1, 800.0, 0.0, 10.0, 1_000.0, 30.0).encode()
        estimate.observe(float(t), [text], None)
    assert estimate.in_use(1.0) == pytest.approx(800.0)
    assert estimate.calibration == pytest.approx(0.8)
    # Long after, keeping up: the busy rate counts as 0.8 of itself (fetching and decoding
    # limited this consumer, not its sink), so it does not raise the estimate above 800.
    keeping_up(estimate, 500, {"a": 1_000.0}, rounds_=3)
    assert estimate.in_use(1.0) == pytest.approx(800.0) and estimate.source == "consumers"
    keeping_up(estimate, 600, {"a": 1_500.0}, rounds_=3)  # the sink got faster
    assert estimate.in_use(1.0) == pytest.approx(1_200.0) and estimate.source == "busy time"


def test_a_declared_capacity_below_what_the_consumers_write_while_busy_warns() -> None:
    estimate = CapacityEstimate(500.0, auto=False, warn_after_s=60.0)
    keeping_up(estimate, 0, {"a": 1_000.0}, rounds_=70)
    assert estimate.in_use(1.0) == 500.0  # declared: the busy rate is only shown
    warning = estimate.warning(69.0, 1.0)
    assert warning is not None and "1000 differs from the declared 500" in warning
