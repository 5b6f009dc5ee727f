"""A member the coordinator no longer knows (evicted while it could still fetch, or a round
that ended without it) loses its partitions, Kafka's ``onPartitionsLost``: the listener
drops them at once, never flushing or committing them, and the member joins again claiming
nothing, even when the refusal came in the middle of a cooperative rejoin that claimed them
(consumer_sdk.kafka_client.cooperative)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor.member_data import decode_member_data
from assignor.plugin import MemberState, build_assignor
from assignor.types import TopicPartition
from consumer_sdk.kafka_client.cooperative import CooperativeCoordinator

OWNED = {KafkaTopicPartition("t", p) for p in range(3)}


class Listener:
    def __init__(self) -> None:
        self.heard: list[tuple[str, set[KafkaTopicPartition]]] = []

    async def on_partitions_lost(self, lost: set[KafkaTopicPartition]) -> None:
        await asyncio.sleep(0)  # the consumer's own step may take a turn of the loop
        self.heard.append(("lost", set(lost)))

    async def on_partitions_revoked(self, revoked: set[KafkaTopicPartition]) -> None:
        self.heard.append(("revoked", set(revoked)))


def rejoining_member(listener: Listener) -> tuple[CooperativeCoordinator, MemberState]:
    """A coordinator in the middle of a cooperative rejoin, still reading ``OWNED``."""
    loop = asyncio.get_running_loop()
    state = MemberState(
        "m-0",
        "repair",
        10.0,
        generation=7,
        owned=tuple(TopicPartition(tp.topic, tp.partition) for tp in sorted(OWNED)),
        cooperative=True,
        holding=True,
        releases=True,
    )
    coordinator: Any = object.__new__(CooperativeCoordinator)
    coordinator.group_id, coordinator.generation, coordinator.member_id = "g", 7, "m-0-id"
    coordinator._closing = loop.create_future()
    coordinator._rejoin_needed_fut = loop.create_future()
    coordinator._subscription = SimpleNamespace(
        subscription=SimpleNamespace(assignment=SimpleNamespace(tps=frozenset(OWNED))),
        listener=listener,
    )
    coordinator.autoscaler_state = state
    coordinator.rejoining, coordinator.eager_round = True, False
    coordinator.lost, coordinator.losing = set(), None
    return coordinator, state


def test_a_refused_member_id_mid_rejoin_loses_its_partitions_and_claims_nothing() -> None:
    async def run() -> tuple[Listener, CooperativeCoordinator, MemberState]:
        listener = Listener()
        coordinator, state = rejoining_member(listener)
        coordinator.reset_generation()  # JoinGroup answered UNKNOWN_MEMBER_ID
        coordinator.reset_generation()  # and again: told once
        await coordinator._partitions_lost_told()
        return listener, coordinator, state

    listener, coordinator, state = asyncio.run(run())
    assert listener.heard == [("lost", OWNED)]  # never revoked: nothing flushed or committed
    assert coordinator.eager_round and coordinator.generation == -1
    assert coordinator.member_id == ""  # joins as a new member
    sent = build_assignor(state, lambda: None).metadata(["t"])
    claimed = decode_member_data(sent.user_data)
    assert claimed is not None and not claimed.holding and claimed.owned == ()
    assert claimed.generation == -1


def test_a_member_that_closes_loses_nothing() -> None:
    async def run() -> Listener:
        listener = Listener()
        coordinator, _ = rejoining_member(listener)
        coordinator._closing.set_result(None)  # LeaveGroup sent: the reset is ours
        coordinator.reset_generation()
        await coordinator._partitions_lost_told()
        return listener

    assert asyncio.run(run()).heard == []
