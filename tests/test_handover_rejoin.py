"""The leader of a round that withholds partitions (and gives none) holds its SyncGroup back
for the rest of the grace, so every follower's sync is answered with it; other rounds are
answered at once (consumer_sdk.kafka_client.cooperative.leader_sync_wait and the coordinator's
assignment step)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from consumer_sdk.kafka_client.cooperative import (
    LEADER_SYNC_GRACE_S,
    CooperativeCoordinator,
    leader_sync_wait,
)


def test_a_round_without_hand_over_is_answered_at_once() -> None:
    assert leader_sync_wait(False, 0.0) == 0.0


def test_a_hand_over_round_waits_the_rest_of_the_grace() -> None:
    spent = LEADER_SYNC_GRACE_S / 4
    assert leader_sync_wait(True, spent) == pytest.approx(LEADER_SYNC_GRACE_S - spent)


def test_an_assignment_slower_than_the_grace_adds_no_wait() -> None:
    assert leader_sync_wait(True, 2 * LEADER_SYNC_GRACE_S) == 0.0


@pytest.mark.parametrize("hold", [True, False])
def test_the_leader_waits_only_when_its_assignor_holds_the_sync_back(
    monkeypatch: pytest.MonkeyPatch, hold: bool
) -> None:
    planned = {"a": ConsumerProtocolMemberAssignment(0, [("t", [0])], b"{}")}

    async def plan(self: Any, response: Any) -> dict[str, ConsumerProtocolMemberAssignment]:
        return planned

    waits: list[float] = []

    async def record_wait(seconds: float) -> None:
        waits.append(seconds)

    class Assignor:
        hold_sync_back = hold

    monkeypatch.setattr(GroupCoordinator, "_perform_assignment", plan)
    monkeypatch.setattr(asyncio, "sleep", record_wait)
    coordinator = object.__new__(CooperativeCoordinator)
    monkeypatch.setattr(coordinator, "_lookup_assignor", lambda name: Assignor, raising=False)
    response = SimpleNamespace(group_protocol="autoscaler")
    answered = asyncio.run(coordinator._perform_assignment(response))
    assert answered is planned
    if hold:
        assert len(waits) == 1 and 0 < waits[0] <= LEADER_SYNC_GRACE_S
    else:
        assert waits == []
