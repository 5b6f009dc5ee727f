"""The aiokafka internals this project relies on. aiokafka is pinned to 0.14.x; if an
upgrade moves any of these, this test says which one instead of a late runtime error."""

from __future__ import annotations

import inspect

import aiokafka
import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import IncompatibleBrokerVersion

from sidecar.log_dirs import DescribeLogDirsRequest, DescribeLogDirsRequest_v1


def test_pinned_minor_version() -> None:
    assert aiokafka.__version__.startswith("0.14."), aiokafka.__version__


def test_internals_we_use_still_exist() -> None:
    # snapshot_cache and monitor: refresh metadata after topics()
    assert callable(AIOKafkaClient.force_metadata_update)  # returns an awaitable future
    # monitor: DescribeLogDirs goes through client.send with version negotiation
    assert inspect.iscoroutinefunction(AIOKafkaClient.send)
    request = DescribeLogDirsRequest([("t", 0)])
    assert isinstance(request.prepare({35: (0, 3)}), DescribeLogDirsRequest_v1)
    with pytest.raises(IncompatibleBrokerVersion):  # how the monitor detects no support
        request.prepare({})
    # consumer: the member's generation after a join travels in user_data
    source = inspect.getsource(GroupCoordinator)
    assert "self.generation" in source
    # consumer: start() waits for the first assignment (why a failed join raises from start)
    assert "wait_for_assignment" in inspect.getsource(aiokafka.AIOKafkaConsumer.start)
