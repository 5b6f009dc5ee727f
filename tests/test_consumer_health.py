"""The consumer's /healthz bookkeeping (consumer_sdk.health): problems set and cleared by
kind, a silent event loop past the session timeout, every registered consumer counted; a
share member's Kafka problem (consumer_sdk.share.reach)."""

from __future__ import annotations

import pytest

from consumer_sdk.health import (
    ConsumerHealth,
    process_problems,
    process_stalls,
    register,
    unregister,
)
from consumer_sdk.share.reach import KafkaReach
from contract.refusals import Kind, Refusal


def test_problems_are_set_and_cleared_by_kind_and_name_the_group() -> None:
    health = ConsumerHealth("orders", lambda: 0.0, stalled_after_s=10.0)
    assert health.problems() == []
    health.report("kafka", "cannot reach Kafka at k:9092 (bootstrap_servers)")
    health.report("sink", "the sink cannot start: no warehouse")
    assert health.problems() == [
        "group orders: cannot reach Kafka at k:9092 (bootstrap_servers)",
        "group orders: the sink cannot start: no warehouse",
    ]
    health.report("kafka", None)
    health.report("kafka", None)  # clearing twice is no error
    assert health.problems() == ["group orders: the sink cannot start: no warehouse"]


@pytest.mark.parametrize(("silent_s", "stalled"), [(9.9, False), (10.0, False), (10.1, True)])
def test_an_event_loop_silent_past_the_session_timeout_is_a_problem(
    silent_s: float, stalled: bool
) -> None:
    health = ConsumerHealth("orders", lambda: silent_s, stalled_after_s=10.0)
    lines = health.problems()
    assert bool(lines) is stalled
    health.report("kafka", "refused")  # not what a restart cures: /livez leaves it out
    assert health.stalled() == lines
    if stalled:
        assert "event loop has not run for 10 s" in lines[0] and "10 s" in lines[0]


def test_the_process_reports_every_registered_consumer_until_it_unregisters() -> None:
    first = ConsumerHealth("a", lambda: 0.0, stalled_after_s=10.0)
    second = ConsumerHealth("b", lambda: 0.0, stalled_after_s=10.0)
    first.report("kafka", "refused")
    second.report("sink", "down")
    register(first)
    register(second)
    try:
        assert {"group a: refused", "group b: down"} <= set(process_problems())
        assert not {"group a: refused", "group b: down"} & set(process_stalls())
    finally:
        unregister(first)
    assert "group a: refused" not in process_problems()
    unregister(second)
    unregister(second)  # a consumer closed twice
    assert "group b: down" not in process_problems()


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_bad_stall_threshold_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match="stalled_after_s must be > 0"):
        ConsumerHealth("g", lambda: 0.0, stalled_after_s=bad)


class NamedError:
    """Like confluent-kafka's KafkaError: a name() and a text."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return f"KafkaError{{code={self._name}}}"


def test_a_share_members_kafka_problem_shows_on_an_error_and_clears_when_kafka_answers() -> None:
    now = [0.0]
    health = ConsumerHealth("shares", lambda: 0.0, stalled_after_s=10.0)
    reach = KafkaReach(health, recheck_s=5.0, clock=lambda: now[0])
    reach.polled([NamedError("_PARTITION_EOF"), "a string"], delivered=False)
    assert health.problems() == [] and not reach.due()  # not about reaching Kafka
    reach.polled([NamedError("_ALL_BROKERS_DOWN")], delivered=False)
    assert health.problems() == [
        "group shares: the share consumer cannot reach Kafka or is refused: "
        "KafkaError{code=_ALL_BROKERS_DOWN}"
    ]
    assert reach.due()  # checked by connecting at once ...
    refused = Refusal(Kind.UNREACHABLE, "cannot connect to k:9092: refused (bootstrap_servers)")
    reach.diagnosed(refused)
    assert health.problems() == [f"group shares: {refused.line}"]
    assert not reach.due()  # ... then every recheck_s while it lasts
    reach.polled([NamedError("_TRANSPORT")], delivered=False)  # the outage, repeated
    assert health.problems() == [f"group shares: {refused.line}"] and not reach.due()
    now[0] = 5.0
    assert reach.due()
    reach.diagnosed(None)  # a broker took the connection
    assert health.problems() == [] and not reach.due()
    reach.polled([NamedError("SASL_AUTHENTICATION_FAILED")], delivered=True)
    assert health.problems() == []  # records came through in the same poll
