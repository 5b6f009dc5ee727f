"""The hand-over rejoin waits for the other members' syncs, and is dropped when the member
rejoins for another reason first (consumer_sdk.cooperative.HandoverRejoin)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from consumer_sdk.cooperative import SYNC_GRACE_S, HandoverRejoin


@dataclass
class Timer:
    at: float
    call: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeLoop:
    """A clock moved by hand and the calls scheduled on it."""

    now: float = 100.0
    timers: list[Timer] = field(default_factory=list)

    def call_later(self, delay: float, call: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, call)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        for timer in sorted(self.timers, key=lambda t: t.at):
            if timer.at <= until and not timer.cancelled:
                self.timers.remove(timer)
                self.now = timer.at
                timer.call()
        self.now = until


def rejoin_counter() -> tuple[FakeLoop, HandoverRejoin, list[float]]:
    loop = FakeLoop()
    sent: list[float] = []
    rejoin = HandoverRejoin(lambda: sent.append(loop.now), loop.call_later, lambda: loop.now)
    return loop, rejoin, sent


def test_the_rejoin_goes_out_a_grace_after_the_sync_not_at_once() -> None:
    loop, rejoin, sent = rejoin_counter()
    rejoin.schedule(synced_at=loop.now)
    assert sent == [] and rejoin.pending
    loop.advance(SYNC_GRACE_S / 2)
    assert sent == []
    loop.advance(SYNC_GRACE_S / 2)
    assert sent == [100.0 + SYNC_GRACE_S]
    assert not rejoin.pending


def test_a_member_whose_callbacks_outlasted_the_grace_rejoins_at_once() -> None:
    loop, rejoin, sent = rejoin_counter()
    synced_at = loop.now
    loop.advance(2 * SYNC_GRACE_S)  # a revocation flushed and committed meanwhile
    rejoin.schedule(synced_at)
    assert sent == [loop.now]
    assert not rejoin.pending and loop.timers == []


def test_a_rejoin_started_otherwise_drops_the_scheduled_one() -> None:
    loop, rejoin, sent = rejoin_counter()
    rejoin.schedule(synced_at=loop.now)
    rejoin.cancel()  # a heartbeat heard of the round: the member is joining it already
    loop.advance(10 * SYNC_GRACE_S)
    assert sent == []
    assert not rejoin.pending


def test_scheduling_twice_sends_one_rejoin() -> None:
    loop, rejoin, sent = rejoin_counter()
    rejoin.schedule(synced_at=loop.now)
    loop.advance(SYNC_GRACE_S / 4)
    rejoin.schedule(synced_at=loop.now)
    loop.advance(10 * SYNC_GRACE_S)
    assert sent == [100.0 + SYNC_GRACE_S]
