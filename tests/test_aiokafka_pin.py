"""The aiokafka internals this project relies on. aiokafka is pinned to 0.14.x; if an
upgrade moves any of these, this test says which one instead of a late runtime error."""

from __future__ import annotations

import inspect

import aiokafka
import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.fetcher import Fetcher, FetchResult
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.consumer.subscription_state import SubscriptionState, TopicPartitionState
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.fetch import FetchRequest

from contract.kafka_client.log_dirs import DescribeLogDirsRequest, DescribeLogDirsRequest_v1


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


def test_internals_of_cooperative_rebalancing_still_exist() -> None:
    # consumer_sdk.kafka_client.cooperative overrides the two join steps, called from these places.
    assert "_on_join_prepare(prev_assignment)" in inspect.getsource(
        GroupCoordinator.ensure_active_group
    )
    rejoin = inspect.getsource(GroupCoordinator._do_rejoin_group)
    assert "await self._on_join_complete(" in rejoin
    # ... and shortens the back-off after a failed join or sync, read from this attribute.
    assert "self._retry_backoff_ms" in rejoin
    # The leader's assignment step, whose answer goes out as the SyncGroup right after it.
    leader = inspect.getsource(CoordinatorGroupRebalance._on_join_leader)
    assert "await self._coordinator._perform_assignment(response)" in leader
    assert leader.index("_perform_assignment") < leader.index("_send_sync_group_request")
    assert list(inspect.signature(GroupCoordinator._on_join_complete).parameters) == [
        "self",
        "generation",
        "member_id",
        "protocol",
        "member_assignment_bytes",
    ]
    for name in (
        "_lookup_assignor",
        "_stop_commit_offsets_refresh_task",
        "start_commit_offsets_refresh_task",
        "request_rejoin",
        "_start_heartbeat_task",  # idempotent: ensure_active_group calls it after the join
    ):
        assert callable(getattr(GroupCoordinator, name)), name
    assert "if self._heartbeat_task is None" in inspect.getsource(
        GroupCoordinator._start_heartbeat_task
    )
    # It is attached to the coordinator start() builds; begin_reassignment (which it skips)
    # is what makes getmany() wait during an eager rejoin.
    assert "self._coordinator = GroupCoordinator(" in inspect.getsource(
        aiokafka.AIOKafkaConsumer.start
    )
    assert "begin_reassignment()" in inspect.getsource(GroupCoordinator._on_join_prepare)
    assert "reassignment_in_progress" in inspect.getsource(Fetcher)
    # Retained partitions carry their positions into the new Assignment.
    assert callable(SubscriptionState.assign_from_subscribed)
    for name in ("seek", "pause", "has_valid_position", "position", "paused"):
        assert hasattr(TopicPartitionState, name), name


def test_internals_of_the_fetch_budget_still_exist() -> None:
    # consumer_sdk.kafka_client.fetch_budget: the fetch loop asks _get_actions_per_node for the
    # requests it starts (one per node, marked in _in_flight) and re-asks when records are
    # consumed; held results live in _records; a request's max bytes is read when it is built.
    routine = inspect.getsource(Fetcher._fetch_requests_routine)
    assert "self._get_actions_per_node(assignment)" in routine
    assert "self._in_flight.add(node_id)" in routine
    assert "self._wait_consume_future" in routine
    actions = inspect.getsource(Fetcher._get_actions_per_node)
    assert "self._records" in actions and "self._fetch_max_bytes" in actions
    assert "self._max_bytes" in inspect.getsource(FetchRequest.build)
    assert "_partition_records" in inspect.getsource(FetchResult.__init__)
