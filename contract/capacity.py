"""The capacity report: what one consumer measured it drains while saturated.

A consumer puts its latest report in the metadata of every offset commit (Kafka keeps a
string per committed partition, 4096 bytes by default); the sidecar already reads the
committed offsets, so the report reaches it with no channel of its own, on any cluster::

    {"cap": 1, "m": "consumer-0-5f2c...", "c": 118, "n": 7, "r": 2310.5, "b": 1180000.0,
     "s": 21.4, "w": 2405.0, "ws": 48.2}

``m`` the member id the group coordinator gave the consumer, ``c`` its commits so far (a
change shows the sidecar the member is reading), ``n`` its measurements so far (a change is
a new one), ``r`` and ``b`` records and bytes written per second while a backlog was
waiting behind every batch, over ``s`` seconds of such batches (0: nothing measured yet);
``w`` records written per second of the sink's busy time (some write in flight), over ``ws``
seconds of it, whether or not a backlog waited: what a consumer that keeps up shows of what it
could drain (reports without them, from older consumers, decode with zeros).
Counters, not clocks: the sidecar times freshness on its own clock, so skew does not matter.

Pure: encoding, decoding with field-by-field validation. No I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from assignor.validation import is_finite_number, is_integer

REPORT_VERSION = 1
# Far below Kafka's default offset.metadata.max.bytes (4096): a commit never fails for it.
MAX_REPORT_CHARS = 512
MAX_MEMBER_ID_CHARS = 255
_MARK = '{"cap"'


class CapacityReportError(ValueError):
    """A report that cannot be used, naming the field at fault and its accepted range."""


@dataclass(frozen=True)
class CapacityReport:
    """One consumer's latest measurement of what it drains (see the module docstring)."""

    member: str
    commits: int
    measurements: int
    records_per_s: float
    bytes_per_s: float
    saturated_s: float
    busy_records_per_s: float = 0.0
    busy_s: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the rates are a measurement (some saturated time behind them)."""
        return self.measurements > 0 and self.saturated_s > 0

    def encode(self) -> str:
        """The commit-metadata string."""
        return json.dumps(
            {
                "cap": REPORT_VERSION,
                "m": self.member,
                "c": self.commits,
                "n": self.measurements,
                "r": round(self.records_per_s, 3),
                "b": round(self.bytes_per_s, 3),
                "s": round(self.saturated_s, 3),
                "w": round(self.busy_records_per_s, 3),
                "ws": round(self.busy_s, 3),
            },
            separators=(",", ":"),
            allow_nan=False,
        )


def is_report(metadata: str | None) -> bool:
    """Whether commit metadata claims to be a capacity report (other tools write there too)."""
    return bool(metadata) and str(metadata).startswith(_MARK)


def decode(metadata: str) -> CapacityReport:
    """The report in ``metadata``; :class:`CapacityReportError` naming the field otherwise."""
    if len(metadata) > MAX_REPORT_CHARS:
        raise CapacityReportError(
            f"capacity report: at most {MAX_REPORT_CHARS} characters, got {len(metadata)}"
        )
    try:
        raw: Any = json.loads(metadata)
    except ValueError as exc:
        raise CapacityReportError(f"capacity report: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CapacityReportError("capacity report: must be a JSON object")
    if raw.get("cap") != REPORT_VERSION:
        raise CapacityReportError(
            f"capacity report: cap must be {REPORT_VERSION}, got {raw.get('cap')!r}"
        )
    member = raw.get("m")
    if not isinstance(member, str) or not 0 < len(member) <= MAX_MEMBER_ID_CHARS:
        raise CapacityReportError(
            f"capacity report: m must be a member id of 1 to {MAX_MEMBER_ID_CHARS} "
            f"characters, got {member!r}"
        )
    counts: dict[str, int] = {}
    for key in ("c", "n"):
        value = raw.get(key)
        if not (is_integer(value) and 0 <= value < 2**63):
            raise CapacityReportError(
                f"capacity report: {key} must be an integer in [0, 2^63), got {value!r}"
            )
        counts[key] = int(value)
    rates: dict[str, float] = {}
    for key in ("r", "b", "s", "w", "ws"):
        value = raw.get(key, 0.0) if key in ("w", "ws") else raw.get(key)
        if not (is_finite_number(value) and value >= 0):
            raise CapacityReportError(
                f"capacity report: {key} must be a finite number >= 0, got {value!r}"
            )
        rates[key] = float(value)
    return CapacityReport(
        member,
        counts["c"],
        counts["n"],
        rates["r"],
        rates["b"],
        rates["s"],
        rates["w"],
        rates["ws"],
    )
