"""``kafka-autoscaler-assign``: run a heuristic on a JSON problem and print the assignment.

Input (a file, or ``-`` for stdin)::

    {"capacity": 100, "speeds": {"orders:0": 42.5, "orders:1": 7},
     "previous": {"orders:0": "c0"}, "members": ["c0", "c1"], "remove_first": ["c1"],
     "lags": {"orders:0": 1200}}

Only ``capacity`` and ``speeds`` are required. Output: the assignment (same key format), the
consumers used, the lower bound and the Rscore against ``previous``. The heuristic comes from
``--heuristic``, else ``AUTOSCALER_HEURISTIC``, else the default. Bad input exits with code 2
and a message naming the field.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from assignor.metrics import bins_used, lower_bound, rscore
from assignor.registry import DEFAULT_HEURISTIC, HEURISTIC_ENV, HEURISTIC_NAMES, get_heuristic
from assignor.types import TopicPartition

KNOWN_FIELDS = {"capacity", "speeds", "previous", "members", "remove_first", "lags"}


_PARTITION_NUMBER = re.compile(r"0|[1-9][0-9]{0,9}")  # ASCII, no leading zeros
MAX_PARTITION = 2**31 - 1


def parse_partition(key: str, field: str) -> TopicPartition:
    """``"topic:3"`` -> TopicPartition("topic", 3). The number is written the one way Kafka
    writes it (ASCII digits, no leading zero), so two keys never name one partition."""
    topic, sep, number = key.rpartition(":")
    if (
        not sep
        or not topic
        or not _PARTITION_NUMBER.fullmatch(number)
        or int(number) > MAX_PARTITION
    ):
        raise ValueError(
            f"{field} keys must look like TOPIC:PARTITION with PARTITION a number in "
            f"[0, {MAX_PARTITION}] without leading zeros, got {key[:80]!r}"
        )
    return TopicPartition(topic, int(number))


def _partition_map(raw: object, field: str) -> dict[TopicPartition, Any]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field} must be a JSON object of TOPIC:PARTITION keys")
    return {parse_partition(str(key), field): value for key, value in raw.items()}


def solve(document: object, heuristic_name: str) -> dict[str, Any]:
    """Validate ``document`` (parsed JSON), run the heuristic, return the JSON-ready result."""
    if not isinstance(document, Mapping):
        raise ValueError("input must be a JSON object with at least capacity and speeds")
    unknown = sorted(set(document) - KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; accepted: {sorted(KNOWN_FIELDS)}")
    for required in ("capacity", "speeds"):
        if required not in document:
            raise ValueError(f"{required} is required")
    speeds = _partition_map(document["speeds"], "speeds")
    previous = _partition_map(document.get("previous") or {}, "previous")
    lags = _partition_map(document["lags"], "lags") if "lags" in document else None
    heuristic = get_heuristic(heuristic_name)
    capacity = document["capacity"]
    new = heuristic.assign(
        speeds,
        capacity=capacity,
        previous=previous,
        members=document.get("members"),
        remove_first=document.get("remove_first"),
        lags=lags,
    )
    return {
        "heuristic": heuristic.name,
        "assignment": {f"{tp.topic}:{tp.partition}": owner for tp, owner in new.items()},
        "consumers": bins_used(new),
        "lower_bound": lower_bound(speeds, capacity),
        "rscore": rscore(previous, new, speeds, capacity),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kafka-autoscaler-assign``."""
    parser = argparse.ArgumentParser(
        prog="kafka-autoscaler-assign",
        description="Assign partitions to consumers by write speed (reads a JSON problem).",
    )
    parser.add_argument("input", help="JSON file, or - for stdin")
    parser.add_argument(
        "--heuristic",
        default=os.environ.get(HEURISTIC_ENV, DEFAULT_HEURISTIC),
        help=f"one of {', '.join(HEURISTIC_NAMES)} (env {HEURISTIC_ENV}; "
        f"default {DEFAULT_HEURISTIC})",
    )
    args = parser.parse_args(argv)
    try:
        text = sys.stdin.read() if args.input == "-" else Path(args.input).read_text()
        document = json.loads(text)
        result = solve(document, args.heuristic)
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        print(f"kafka-autoscaler-assign: error: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("kafka-autoscaler-assign: error: input is nested too deeply", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
