"""The open-transaction rule: a last stable offset below the high watermark, unmoved across
two readings."""

from __future__ import annotations

from assignor import TopicPartition
from sidecar.open_transactions import OpenTransactions, held_open_line

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_a_stable_offset_stuck_below_the_end_is_flagged_at_the_second_reading() -> None:
    tracker = OpenTransactions()
    assert tracker.observe(10.0, {A: 100}, {A: 150}) == {}
    held = tracker.observe(15.0, {A: 100}, {A: 220})
    assert set(held) == {A}
    assert (held[A].stable, held[A].end, held[A].since, held[A].waiting) == (100, 220, 10.0, 120)
    assert tracker.observe(20.0, {A: 100}, {A: 260})[A].since == 10.0  # open since the first
    assert "orders:0: a transaction is open" in held_open_line(A, held[A])


def test_transactions_that_commit_between_readings_are_never_flagged() -> None:
    tracker = OpenTransactions()
    flagged = [
        tracker.observe(5.0 * i, {A: 100 * i, B: 40}, {A: 100 * i + 30, B: 40}) for i in range(1, 6)
    ]
    assert flagged == [{}] * 5


def test_a_transaction_that_ends_is_no_longer_flagged_and_a_new_one_starts_over() -> None:
    tracker = OpenTransactions()
    tracker.observe(0.0, {A: 100}, {A: 150})
    assert A in tracker.observe(5.0, {A: 100}, {A: 150})
    assert tracker.observe(10.0, {A: 151}, {A: 151}) == {}  # ended: stable reaches the end
    assert tracker.observe(15.0, {A: 151}, {A: 170}) == {}  # a new one: seen once so far
    assert tracker.observe(20.0, {A: 151}, {A: 190})[A].since == 15.0
    assert tracker.observe(25.0, {}, {A: 190}) == {}  # not read this round: not flagged
