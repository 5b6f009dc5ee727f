"""How fresh a Delta table is: for each row, the time of the commit that added its data file
minus the row's Kafka timestamp, read from the log and the data files (no Spark).

A commit file's ``commitInfo.timestamp`` is when its writer committed, in the writer's clock;
a row's ``timestamp`` column is its Kafka timestamp (the producer's clock, or the broker's
with LogAppendTime). On one machine both are the same clock; across machines the figure
carries their skew.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from consumer_sdk.lake.delta.history import LOG_DIR


def file_visibility_s(
    path: Path, committed_ms: int, produced_after_ms: int, column: str = "timestamp"
) -> np.ndarray:
    """Seconds from each row's Kafka timestamp (``column``: a timestamp, or epoch ms) in the
    data file at ``path`` to ``committed_ms`` (epoch ms), for rows produced at or after
    ``produced_after_ms``."""
    stamps = pq.read_table(path, columns=[column], partitioning=None)
    in_ms = pc.cast(stamps.column(column), pa.timestamp("ms"), safe=False)
    millis: np.ndarray = pc.cast(in_ms, pa.int64()).to_numpy(zero_copy_only=False)
    kept: np.ndarray = (committed_ms - millis[millis >= produced_after_ms]) / 1000.0
    return kept


def row_visibility_s(table_root: Path, produced_after_ms: int = 0) -> tuple[np.ndarray, int]:
    """Seconds from each row's Kafka timestamp to the Delta commit that added its file, for
    rows produced at or after ``produced_after_ms`` (epoch ms); and how many data files the
    commits the log still holds added."""
    latencies: list[np.ndarray] = []
    files = 0
    for commit in sorted((table_root / LOG_DIR).glob("*.json")):
        committed_ms, added = None, []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                committed_ms = int(action["commitInfo"]["timestamp"])
            elif "add" in action:
                added.append(action["add"]["path"])
        files += len(added)
        if committed_ms is not None:
            latencies += [
                file_visibility_s(table_root / name, committed_ms, produced_after_ms)
                for name in added
            ]
    return (np.concatenate(latencies) if latencies else np.array([])), files
