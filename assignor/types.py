"""The small vocabulary every heuristic speaks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


Speeds = Mapping[TopicPartition, float]
"""Write speed of every partition, in the same unit as the capacity."""

Assignment = dict[TopicPartition, str]
"""Partition -> consumer (member) id."""
