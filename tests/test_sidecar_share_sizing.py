"""Sizing a share group (``--group-type share``), pure: the controller's count, the loads the
sidecar publishes, the share-group responses it reads (any bytes from the network), and the
configuration it refuses."""

from __future__ import annotations

import random
import struct
from io import BytesIO
from typing import Any

import pytest

from assignor import TopicPartition
from contract.kafka_client.share_requests import (
    GROUP_ID_NOT_FOUND,
    DescribeShareGroupOffsetsResponse_v0,
    DescribeShareGroupOffsetsResponse_v1,
    ShareGroupDescribeResponse_v1,
    ShareResponseError,
    share_group_description,
    share_offsets,
)
from sidecar.controller import Action, Controller, ControllerConfig, Observation, share_demand
from sidecar.share_groups.loads import CHANGED, moved, partition_loads
from sidecar.share_groups.publisher import share_max_size

CAPACITY = 100.0
TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"


def hot(rate: float) -> dict[TopicPartition, float]:
    """One partition at ``rate`` records/s, one idle."""
    return {TopicPartition("t", 0): rate, TopicPartition("t", 1): 0.0}


def decide(speeds: dict[TopicPartition, float], **kwargs: Any) -> tuple[Action, int]:
    config = ControllerConfig(capacity=CAPACITY, max_replicas=50, group_type="share")
    controller = Controller(config, lambda: 0.0)
    controller.synchronise(1)
    decision = controller.step(Observation(0.0, speeds, **kwargs))
    return decision.action, decision.desired


def test_a_share_group_grows_past_its_partitions() -> None:
    # One partition at 4.5 consumers: a consumer group could never use more than 2 members.
    assert decide(hot(450.0)) == (Action.SCALE_UP, 5)


def test_the_brokers_cap_holds_a_share_group() -> None:
    assert decide(hot(4500.0), max_members=8) == (Action.SCALE_UP, 8)


def test_a_share_backlog_adds_members_to_drain_it() -> None:
    # 30 s of drain (the default) for 6,000 records: 200/s more, 2 consumers.
    lags = {TopicPartition("t", 0): 6000.0, TopicPartition("t", 1): 0.0}
    assert decide(hot(100.0), lags=lags) == (Action.SCALE_UP, 3)


def test_share_demand_is_the_load_rounded_up() -> None:
    assert share_demand({TopicPartition("t", 0): 250.0}, CAPACITY) == 3
    assert share_demand({TopicPartition("t", 0): 300.0}, CAPACITY) == 3  # exactly 3, not 4
    assert share_demand({TopicPartition("t", 0): 0.0}, CAPACITY) == 0


def test_a_consumer_group_is_still_capped_by_its_partitions() -> None:
    config = ControllerConfig(capacity=CAPACITY, max_replicas=50)
    controller = Controller(config, lambda: 0.0)
    controller.synchronise(1)
    assert controller.step(Observation(0.0, hot(450.0))).desired == 2


def test_loads_are_in_consumers_and_republished_only_when_moved() -> None:
    loads = partition_loads(hot(450.0), CAPACITY)
    assert loads == {TopicPartition("t", 0): 4.5, TopicPartition("t", 1): 0.0}
    assert moved(None, loads)
    nudged = {tp: load * (1 + CHANGED / 2) for tp, load in loads.items()}
    assert not moved(loads, nudged)
    assert moved(loads, {tp: load * (1 + 2 * CHANGED) for tp, load in loads.items()})
    assert moved(loads, {TopicPartition("t", 0): 4.5})  # a partition gone


def offsets_response(version: int, error: int = 0, lag: int = 7) -> bytes:
    partition = (0, 40, 0, *((lag,) if version else ()), 0, None, {})
    unread = (1, -1, 0, *((-1,) if version else ()), 0, None, {})
    response = (
        DescribeShareGroupOffsetsResponse_v1 if version else DescribeShareGroupOffsetsResponse_v0
    )
    groups: list[Any] = [("g", [("t", TOPIC_ID, [partition, unread], {})], error, None, {})]
    encoded: bytes = response(0, groups, {}).encode()
    return encoded


def describe_response(error: int = 0) -> bytes:
    member: tuple[Any, ...] = (
        "m1",
        None,
        3,
        "c",
        "/h",
        ["t"],
        ([(TOPIC_ID, "t", [0, 1], {})], {}),
        {},
    )
    group: tuple[Any, ...] = (error, None, "g", "Stable", 3, 3, "autoscaler-share", [member], 0, {})
    encoded: bytes = ShareGroupDescribeResponse_v1(0, [group], {}).encode()
    return encoded


def test_share_offsets_give_start_offsets_lags_and_topic_ids() -> None:
    v1 = share_offsets(
        DescribeShareGroupOffsetsResponse_v1.decode(BytesIO(offsets_response(1))), "g"
    )
    assert v1.start == {TopicPartition("t", 0): 40}  # partition 1 not read yet: -1
    assert v1.lag == {TopicPartition("t", 0): 7}
    assert v1.topic_ids == {"t": TOPIC_ID}
    v0 = share_offsets(
        DescribeShareGroupOffsetsResponse_v0.decode(BytesIO(offsets_response(0))), "g"
    )
    assert v0.start == v1.start and v0.lag == {}  # v0 has no lag (before KIP-1226)
    missing = DescribeShareGroupOffsetsResponse_v1.decode(
        BytesIO(offsets_response(1, GROUP_ID_NOT_FOUND))
    )
    assert share_offsets(missing, "g").exists is False
    with pytest.raises(ShareResponseError, match="error 15"):
        share_offsets(
            DescribeShareGroupOffsetsResponse_v1.decode(BytesIO(offsets_response(1, 15))), "g"
        )
    with pytest.raises(ShareResponseError, match="does not name group"):
        share_offsets(
            DescribeShareGroupOffsetsResponse_v1.decode(BytesIO(offsets_response(1))), "h"
        )


def test_a_share_group_description_gives_state_members_and_assignor() -> None:
    described = share_group_description(
        ShareGroupDescribeResponse_v1.decode(BytesIO(describe_response())), "g"
    )
    assert (described.state, described.member_ids, described.assignor) == (
        "Stable",
        frozenset({"m1"}),
        "autoscaler-share",
    )
    missing = ShareGroupDescribeResponse_v1.decode(BytesIO(describe_response(GROUP_ID_NOT_FOUND)))
    assert share_group_description(missing, "g").member_ids == frozenset()


@pytest.mark.parametrize(
    ("response", "parse"),
    [
        (DescribeShareGroupOffsetsResponse_v1, share_offsets),
        (ShareGroupDescribeResponse_v1, share_group_description),
    ],
)
def test_mangled_share_responses_are_refused_with_our_error_only(response: Any, parse: Any) -> None:
    valid = offsets_response(1) if parse is share_offsets else describe_response()
    chance = random.Random(20261204)
    parsed = refused = 0
    for _ in range(2000):
        mangled = bytearray(valid)
        for _ in range(chance.randint(1, 4)):
            at = chance.randrange(len(mangled))
            mangled[at : at + 1] = bytes([chance.randrange(256)]) * chance.randint(0, 2)
        try:
            decoded = response.decode(BytesIO(bytes(mangled)))
        except (ValueError, struct.error):  # aiokafka's decoder refused them: not ours to parse
            continue
        try:
            parse(decoded, "g")
            parsed += 1
        except ShareResponseError:
            refused += 1
    assert parsed and refused  # both outcomes met, nothing else raised


def test_the_brokers_share_max_size_is_read_from_describe_configs() -> None:
    from types import SimpleNamespace

    entry: tuple[Any, ...] = ("group.share.max.size", "50", True, 5, False, [])
    assert share_max_size([SimpleNamespace(resources=[(0, None, 4, "1", [entry])])]) == 50
    assert share_max_size([]) is None
    assert share_max_size([SimpleNamespace(resources=[(1, "no", 4, "1", [entry])])]) is None
