"""aiokafka's fetcher held to a byte budget of fetched records the consumer has not taken.

aiokafka keeps one in-flight fetch per broker and, while the consumer is busy elsewhere (a
full write pipeline), goes on fetching every partition it does not hold: what it holds grows
to (partitions) x (per-partition ask). A fetcher given a budget (:func:`limit_fetch_ahead`)
sends no fetch while the bytes it holds, with what responses in flight were asked for, reach
the budget, and asks the responses it sends (one per broker) for shares of what is left
(:func:`consumer_sdk.records.fetch_sizes.fetch_room`); it fetches again as soon as the consumer
takes records (aiokafka wakes its fetch loop then) or :func:`wake_fetcher` says the budget
grew. Fetchers without a budget behave as aiokafka's.

This reaches into aiokafka's fetcher (``_get_actions_per_node``, ``_records``,
``_in_flight``, ``_fetch_max_bytes``, ``_wait_consume_future``) and its fetch request
(``_max_bytes``), which is why the aiokafka minor version is pinned
(tests/test_aiokafka_pin.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aiokafka.consumer import fetcher

from consumer_sdk.records.fetch_sizes import fetch_room

_BUDGET = "_autoscaler_fetch_budget"
_ASKED = "_autoscaler_fetch_asked"  # node -> bytes its in-flight response may hold
_original_actions: Any = fetcher.Fetcher._get_actions_per_node


def held_bytes(results: Iterable[Any]) -> int:
    """Bytes of fetched records not yet taken, over the fetcher's per-partition results
    (errors hold none)."""
    total = 0
    for result in results:
        records = getattr(result, "_partition_records", None)
        held = getattr(records, "held_bytes", None)
        if held is not None:  # the columnar path's records: the undecoded bytes
            total += int(held)
            continue
        raw = getattr(getattr(records, "_records", None), "data", None)
        if raw is not None:  # aiokafka's records over the raw bytes they were made from
            total += len(raw)
    return total


def _budgeted_actions(self: Any, assignment: Any) -> Any:
    given: int | Callable[[], int] | None = getattr(self, _BUDGET, None)
    if given is None:
        return _original_actions(self, assignment)
    budget = given() if callable(given) else given
    fetches, resets, timeout, invalid_metadata, resumes = _original_actions(self, assignment)
    if not fetches:  # nothing to size (the loop wakes on every consumed partition)
        return fetches, resets, timeout, invalid_metadata, resumes
    # What responses still in flight were asked for counts as held: they may all land
    # before the consumer takes anything.
    asked: dict[int, int] = getattr(self, _ASKED, {})
    asked = {node: size for node, size in asked.items() if node in self._in_flight}
    held = held_bytes(self._records.values()) + sum(asked.values())
    size = fetch_room(budget, held, self._fetch_max_bytes, len(fetches))
    if size is None:
        fetches = []  # the loop wakes again when the consumer takes records
    else:
        for node, request in fetches:
            request._max_bytes = size
            asked[node] = size
    setattr(self, _ASKED, asked)
    return fetches, resets, timeout, invalid_metadata, resumes


def install() -> None:
    """Let fetchers given a budget keep to it (idempotent; others are untouched)."""
    fetcher.Fetcher._get_actions_per_node = _budgeted_actions


def limit_fetch_ahead(client: Any, budget_bytes: int | Callable[[], int]) -> bool:
    """Hold a started aiokafka consumer's fetcher to ``budget_bytes`` (a number, or a
    function asked before every fetch: a budget that shrinks and grows with what the
    consumer holds); False if it has no fetcher yet."""
    install()
    found = getattr(client, "_fetcher", None)
    if found is None:
        return False
    setattr(found, _BUDGET, budget_bytes)
    return True


def wake_fetcher(client: Any) -> None:
    """Let the fetcher plan its fetches again now: its budget grew without records being
    taken from it (the consumer handed a batch to its sink), which is what otherwise wakes
    it, so it would sleep until its poll interval."""
    found = getattr(client, "_fetcher", None)
    waiting = getattr(found, "_wait_consume_future", None)
    if waiting is not None and not waiting.done():
        waiting.set_result(None)
