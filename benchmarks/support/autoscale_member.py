"""The consumer program of ``benchmarks/autoscale.py``: the SDK's command-line consumer with a
sink of the benchmark's own, ``ledger:PATH`` (``{identity}`` in PATH becomes the member
identity).

The ledger sink is a downstream of known capacity: it drains at most
``AUTOSCALER_BENCH_SINK_RECORDS_PER_SEC`` records/s (it waits as long as writing a batch would
take at that rate; the consumer keeps fetching and heartbeating meanwhile), then appends one
line per record, ``topic partition offset timestamp_ms written_ms``, and flushes: what the
benchmark reads back for end-to-end latency and re-deliveries. Without the pacing an SDK
consumer drains far more than the capacity it declares, and a lag-driven policy would look
better than it is.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from assignor import TopicPartition
from consumer_sdk import cli
from consumer_sdk.sink import Sink
from contract.settings import ConfigError

RATE_ENV = "AUTOSCALER_BENCH_SINK_RECORDS_PER_SEC"
# Unix time before which the ledger cannot start (a sink whose table or credentials are not
# there yet): the member exits with one line, as a misconfigured consumer does.
FAIL_UNTIL_ENV = "AUTOSCALER_BENCH_SINK_FAILS_UNTIL"


class PacedLedger:
    """A sink: an append-only ledger behind a downstream that drains ``rate`` records/s."""

    def __init__(self, path: Path, rate: float) -> None:
        self.handle = path.open("a")
        self.rate = rate
        self._free_at = 0.0

    async def write(self, topic: str, table: pa.Table) -> None:
        now = time.monotonic()
        self._free_at = max(now, self._free_at) + table.num_rows / self.rate
        await asyncio.sleep(self._free_at - now)
        written = int(time.time() * 1000)
        columns = (table.column(name).to_pylist() for name in ("partition", "offset", "timestamp"))
        lines = (f"{topic} {p} {o} {t} {written}\n" for p, o, t in zip(*columns, strict=True))
        self.handle.write("".join(lines))
        self.handle.flush()

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """The ledger tracks no offsets: resume from the committed ones (a re-delivery is
        what the benchmark counts)."""
        return {}


def ledger_sink(spec: str, identity: str) -> Sink:
    """``ledger:PATH`` paced by AUTOSCALER_BENCH_SINK_RECORDS_PER_SEC; other specs as the
    SDK's command line takes them."""
    if not spec.startswith("ledger:"):
        return cli.parse_sink(spec, identity)
    fails_until = float(os.environ.get(FAIL_UNTIL_ENV) or 0)
    if time.time() < fails_until:
        raise ConfigError(
            f"the ledger cannot start for another {fails_until - time.time():.0f} s "
            f"({FAIL_UNTIL_ENV})"
        )
    raw = os.environ.get(RATE_ENV, "")
    try:
        rate = float(raw)
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise ConfigError(f"{RATE_ENV} must be a number of records/s > 0, got {raw!r}")
    path = Path(spec.removeprefix("ledger:").replace("{identity}", identity))
    return PacedLedger(path, rate)


if __name__ == "__main__":
    sys.exit(cli.main(sink_factory=ledger_sink))
