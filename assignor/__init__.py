"""Partition-to-consumer assignment heuristics for Kafka consumer groups.

Pure Python, no I/O, no Kafka import: the Kafka plugin lives in ``assignor.plugin`` and is
imported only by those who use it.

>>> from assignor import TopicPartition, get_heuristic
>>> h = get_heuristic("repair")
>>> h.assign({TopicPartition("t", 0): 3.0, TopicPartition("t", 1): 4.0}, capacity=5.0)
{TopicPartition(topic='t', partition=0): 'c1', TopicPartition(topic='t', partition=1): 'c0'}
"""

from assignor.base import Heuristic
from assignor.metrics import bins_used, cbs, lower_bound, rscore
from assignor.registry import DEFAULT_HEURISTIC, HEURISTIC_NAMES, get_heuristic
from assignor.repair import Repair
from assignor.types import Assignment, Speeds, TopicPartition

__all__ = [
    "DEFAULT_HEURISTIC",
    "HEURISTIC_NAMES",
    "Assignment",
    "Heuristic",
    "Repair",
    "Speeds",
    "TopicPartition",
    "bins_used",
    "cbs",
    "get_heuristic",
    "lower_bound",
    "rscore",
]
