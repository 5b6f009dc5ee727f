"""The capacity estimate: what one consumer drains, measured by the consumers themselves.

Every consumer puts its drain measurement (contract.capacity) in the metadata of its offset
commits; the monitor reads it back with the committed offsets. This module turns those
reports into one robust, decaying estimate:

* a report counts once its counters change while the sidecar watches (metadata left by a
  consumer long gone is never fresh); a member whose commit counter moved recently is
  *reading* (the start-up count uses that where the cluster cannot describe groups);
* the estimate is the median over members with a fresh measurement (one slow or fast
  member does not move it), followed by an exponential average with ``half_life_s``;
* a report that cannot be decoded, that claims 1000x the others (or a thousandth), or that
  comes from a member the coordinator does not list is ignored and counted by reason;
* when reports stop, the last estimate stays, with its age;
* consumers that batch whatever they fetched never saturate one batch (each takes the whole
  backlog); for them the group's drain while it was saturated, over its consumer count,
  stands in until a consumer measures (sidecar.drain_ceiling measures it);
* a group sized by too low a capacity never falls behind, so it never measures more: while no
  saturated measurement is fresh, the consumers' *busy* rate (records written per second their
  sink was busy; the median over members reading, with ``MIN_BUSY_S`` of it) may raise the
  estimate, never lower it (small batches make a sink with a fixed cost per write look slower
  than it is). It is scaled by the ratio of the saturated measurement to the busy rate the
  last time both were measured (at most 1: where fetching or decoding limits a consumer, its
  sink's rate overstates it). Raised too high, the group falls behind, saturates and measures;
* with a declared capacity, a measured one more than ``tolerance`` away from it for
  ``warn_after_s`` is a warning; with ``--capacity auto`` the measured one is used;
* under ``--capacity auto``, a restarted sidecar starts from the capacity its previous
  incarnation published (:meth:`CapacityEstimate.carry_over`) until the reports measure again:
  the consumers' old reports are never fresh, so it would otherwise size by the initial value.

Pure: the caller gives the time and the reports; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from contract.capacity import CapacityReport, CapacityReportError, decode, is_report

REJECT_REASONS = ("malformed", "absurd", "not_member")
# A member that committed within this many seconds is reading (its reports' counter moved).
READING_WITHIN_S = 15.0
# A member's busy rate counts once its sink was busy this long in the report's window.
MIN_BUSY_S = 5.0
# A previous incarnation's capacity is carried over if it was published at most this long ago
# (a restart; after a longer gap the consumers may have been redeployed).
CARRY_OVER_MAX_AGE_S = 900.0


@dataclass
class _Member:
    report: CapacityReport
    active_at: float | None = None  # when its commit counter last moved
    measured_at: float | None = None  # when its measurement last changed


class CapacityEstimate:
    """See the module docstring. Rates are in records/s; :meth:`in_unit` converts."""

    def __init__(
        self,
        declared: float,
        *,
        auto: bool = False,
        half_life_s: float = 60.0,
        fresh_s: float = 120.0,
        tolerance: float = 0.25,
        warn_after_s: float = 180.0,
        absurd_factor: float = 1000.0,
    ) -> None:
        self.declared = declared
        self.auto = auto
        self.half_life_s = half_life_s
        self.fresh_s = fresh_s
        self.tolerance = tolerance
        self.warn_after_s = warn_after_s
        self.absurd_factor = absurd_factor
        # The consumers' reports: median then exponential average, and when it last moved.
        self.reported: float | None = None
        self.reported_at: float | None = None
        # The group's drain over its consumer count while a backlog waited (the drain
        # ceiling's measurement), and when it was measured.
        self.group_share: float | None = None
        self.group_share_at: float | None = None
        # What is used: the reports while fresh, else the group's share when fresher.
        self.records_per_s: float | None = None
        self.estimated_at: float | None = None
        self.source: str | None = None
        # The members' busy rate (see the module doc), when it last moved, and the ratio of
        # the saturated measurement to it the last time both were taken.
        self.busy: float | None = None
        self.busy_at: float | None = None
        self.calibration = 1.0
        self.rejected: Counter[str] = Counter()
        self.last_rejection: str | None = None
        self._members: dict[str, _Member] = {}
        self._rejected_keys: set[tuple[str, int, int]] = set()
        self._differs_since: float | None = None
        self._ever_members: set[str] = set()
        # What the previous sidecar published (in the sizing unit), used until a measurement.
        self.carried: float | None = None

    def carry_over(self, capacity: float, age_s: float) -> bool:
        """Under ``--capacity auto``, size with ``capacity`` (in the sizing unit: what the
        previous sidecar published ``age_s`` ago) until the consumers' reports measure;
        whether it was taken (not under a declared capacity, not older than
        ``CARRY_OVER_MAX_AGE_S`` either way of the clocks, not ``absurd_factor`` away from
        the initial value)."""
        sane = math.isfinite(capacity) and capacity > 0
        if not (self.auto and sane and abs(age_s) <= CARRY_OVER_MAX_AGE_S):
            return False
        if not self.declared / self.absurd_factor <= capacity <= self.declared * self.absurd_factor:
            return False
        self.carried = capacity
        return True

    def observe(
        self,
        now: float,
        metadata: Iterable[str],
        member_ids: frozenset[str] | None,
        group_drain: tuple[int, float, float] | None = None,
        per_record: float | None = 1.0,
    ) -> None:
        """Take in this round's commit metadata; ``member_ids``: the group's members as the
        coordinator lists them (None when it cannot be asked: no membership check);
        ``group_drain``: (consumers, records/s, when measured) of the group's drain while a
        backlog waited, if known; ``per_record``: the sizing unit per record (see
        :meth:`in_unit`; None when not known)."""
        if group_drain is not None:
            count, rate, at = group_drain
            if count > 0 and rate > 0 and (self.group_share_at is None or at > self.group_share_at):
                self.group_share, self.group_share_at = rate / count, at
        latest: dict[str, CapacityReport] = {}
        for text in metadata:
            if not is_report(text):
                continue
            try:
                report = decode(text)
            except CapacityReportError as exc:
                self._reject("malformed", ("", hash(text), 0), str(exc))
                continue
            held = latest.get(report.member)
            if held is None or report.commits > held.commits:
                latest[report.member] = report
        if member_ids is not None:
            if len(self._ever_members) > 10_000:  # bounded: members come and go for ever
                self._ever_members = set(self._members)
            self._ever_members |= member_ids
        new_sample = False
        for member, report in latest.items():
            key = (member, report.commits, report.measurements)
            if member_ids is not None and member not in member_ids:
                # Metadata a member left behind stays until the partition's next commit, and
                # its last commits land as it leaves; a report still moving from a member
                # never seen in the group is a foreign one.
                seen = self._members.setdefault(member, _Member(report))
                moved = report.commits != seen.report.commits
                seen.report = report
                if moved and member not in self._ever_members:
                    self._reject("not_member", key, f"member {member} is not in the group")
                continue
            if self._observe_member(now, member, report, key):
                new_sample = True
        self._update_busy(now, member_ids)
        if new_sample:
            self._update(now, member_ids)
        self._choose(now, per_record)
        self._track_difference(now, per_record)

    def _choose(self, now: float, per_record: float | None) -> None:
        """The consumers' reports once there is one (they measure each member saturated);
        until then the group's drain per consumer while it was saturated (batching consumers
        that keep up with every fetch never saturate one batch, but a group far behind
        drains at its pace). Never the group's share once a consumer has measured: a group
        drain divides by members that may not all have been busy. While neither is fresh,
        the calibrated busy rate where it is higher (see the module doc)."""
        if self.reported is not None:
            self.records_per_s, self.estimated_at, self.source = (
                self.reported,
                self.reported_at,
                "consumers",
            )
        elif self.group_share is not None:
            self.records_per_s, self.estimated_at, self.source = (
                self.group_share,
                self.group_share_at,
                "group drain",
            )
        if self.busy is None or self._saturated_lately(now):
            return
        floor = self.records_per_s
        if floor is None and per_record:  # raise above the carried or declared only
            floor = (self.carried if self.carried is not None else self.declared) / per_record
        lifted = self.busy * self.calibration
        if floor is not None and lifted > floor:
            self.records_per_s, self.estimated_at, self.source = lifted, self.busy_at, "busy time"

    def _saturated_lately(self, now: float) -> bool:
        """Whether a saturated measurement (a consumer's or the group's) is fresh."""
        return any(
            at is not None and now - at <= self.fresh_s
            for at in (self.reported_at, self.group_share_at)
        )

    def _update_busy(self, now: float, member_ids: frozenset[str] | None) -> None:
        """The median busy rate of members reading lately with enough busy time; kept
        when none has (the last value stays, as the saturated one does)."""
        values = [
            m.report.busy_records_per_s
            for name, m in self._members.items()
            if m.active_at is not None
            and now - m.active_at <= self.fresh_s
            and m.report.busy_s >= MIN_BUSY_S
            and m.report.busy_records_per_s > 0
            and (member_ids is None or name in member_ids)
        ]
        if values:
            self.busy, self.busy_at = statistics.median(values), now

    def _observe_member(
        self, now: float, member: str, report: CapacityReport, key: tuple[str, int, int]
    ) -> bool:
        """Record ``member``'s report; whether it is a new measurement to use."""
        seen = self._members.get(member)
        if seen is None:  # first sighting: a baseline, perhaps left by a member long gone
            self._members[member] = _Member(report)
            return False
        if report.commits != seen.report.commits:
            seen.active_at = now
        changed = report.measurements != seen.report.measurements
        seen.report = report
        if not (changed and report.measured):
            return False
        reference = self._reference(now, member)
        value = report.records_per_s
        if value <= 0 or (
            reference is not None
            and not reference / self.absurd_factor <= value <= reference * self.absurd_factor
        ):
            against = "" if reference is None else f" against {reference:.0f}/s"
            self._reject("absurd", key, f"member {member} reports {value:.0f}/s{against}")
            return False
        seen.measured_at = now
        return True

    def _reference(self, now: float, member: str) -> float | None:
        """What a new measurement of ``member`` is checked against: the median of the
        others' fresh ones, else the estimate."""
        others = [
            m.report.records_per_s
            for name, m in self._members.items()
            if name != member and self._fresh(now, m)
        ]
        return statistics.median(others) if others else self.reported

    def _fresh(self, now: float, member: _Member) -> bool:
        return member.measured_at is not None and now - member.measured_at <= self.fresh_s

    def _update(self, now: float, member_ids: frozenset[str] | None) -> None:
        values = [
            m.report.records_per_s
            for name, m in self._members.items()
            if self._fresh(now, m) and (member_ids is None or name in member_ids)
        ]
        if not values:
            return
        median = statistics.median(values)
        if self.reported is None or self.reported_at is None:
            self.reported = median
        else:
            weight = 1.0 - math.pow(0.5, max(0.0, now - self.reported_at) / self.half_life_s)
            self.reported += (median - self.reported) * weight
        self.reported_at = now
        if self.busy is not None and self.busy_at == now:  # both measured this round
            self.calibration = min(1.0, self.reported / self.busy)

    def _reject(self, reason: str, key: tuple[str, int, int], why: str) -> None:
        if key in self._rejected_keys:
            return
        if len(self._rejected_keys) >= 10_000:  # bounded: a member may go on sending them
            self._rejected_keys.clear()
        self._rejected_keys.add(key)
        self.rejected[reason] += 1
        self.last_rejection = why

    def saturated_members(self, now: float, member_ids: frozenset[str] | None) -> int:
        """Members (of ``member_ids`` when known) with a fresh saturated measurement: each
        was behind, writing as fast as it can, lately."""
        return sum(
            1
            for name, m in self._members.items()
            if self._fresh(now, m) and (member_ids is None or name in member_ids)
        )

    def reading_members(self, now: float, within_s: float) -> int:
        """Members whose commit counter moved in the last ``within_s`` seconds."""
        return sum(
            1
            for m in self._members.values()
            if m.active_at is not None and now - m.active_at <= within_s
        )

    def in_unit(self, per_record: float | None) -> float | None:
        """The estimate in the sizing unit: records/s times ``per_record`` (1 for records/s,
        bytes of log a record for bytes/s; None when not known: no estimate)."""
        return self.in_unit_of(self.records_per_s, per_record)

    @staticmethod
    def in_unit_of(records_per_s: float | None, per_record: float | None) -> float | None:
        """``records_per_s`` in the sizing unit (None when either is not known)."""
        if not records_per_s or per_record is None or per_record <= 0:
            return None
        return records_per_s * per_record

    def in_use(self, per_record: float | None) -> float:
        """The capacity to size with: under ``--capacity auto`` the measured one once there
        is a measurement, else the carried-over one; else the declared (or initial) one."""
        published = self.published(per_record)
        return published if published is not None else self.declared

    def published(self, per_record: float | None) -> float | None:
        """The capacity the snapshot gives the consumers (their assignor packs by it, a
        member judges its overload by it): under ``--capacity auto`` the measured one, else
        the carried-over one; None otherwise (they use the one they were configured with)."""
        if not self.auto:
            return None
        measured = self.in_unit(per_record)
        return measured if measured is not None else self.carried

    def _track_difference(self, now: float, per_record: float | None) -> None:
        measured = self.records_per_s
        if self.auto or measured is None or not per_record:
            self._differs_since = None
            return
        declared = self.declared / per_record
        differs = abs(measured - declared) > self.tolerance * declared
        if not differs:
            self._differs_since = None
        elif self._differs_since is None:
            self._differs_since = now

    def warning(self, now: float, per_record: float | None) -> str | None:
        """A line when the measured capacity has differed from the declared one by more than
        the tolerance for ``warn_after_s``; None otherwise."""
        since = self._differs_since
        measured = self.in_unit(per_record)
        if since is None or measured is None or now - since < self.warn_after_s:
            return None
        return (
            f"measured capacity {measured:.0f} differs from the declared {self.declared:.0f} "
            f"by more than {self.tolerance:.0%} for {now - since:.0f} s: set --capacity to "
            f"the measured value or to auto"
        )

    def age(self, now: float) -> float | None:
        """Seconds since the estimate last took in a measurement (None: never)."""
        return None if self.estimated_at is None else now - self.estimated_at

    def status(self, now: float, per_record: float | None) -> dict[str, Any]:
        """What /status shows of the capacity."""
        age = self.age(now)
        return {
            "mode": "auto" if self.auto else "declared",
            "declared" if not self.auto else "initial": self.declared,
            "measured": self.in_unit(per_record),
            "measured_age_s": None if age is None else round(age, 1),
            "measured_by": self.source,
            "busy_rate": None if self.busy is None else self.in_unit_of(self.busy, per_record),
            "busy_calibration": round(self.calibration, 3),
            "in_use": self.in_use(per_record),
            "carried_over": self.carried,
            "members_measured": sum(1 for m in self._members.values() if self._fresh(now, m)),
            "members_reading": self.reading_members(now, READING_WITHIN_S),
            "reports_ignored": {reason: self.rejected[reason] for reason in REJECT_REASONS},
            "last_ignored": self.last_rejection,
            "warning": self.warning(now, per_record),
        }
