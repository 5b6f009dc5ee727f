"""Never scale into failure: the watch over whether the consumers asked for are at work."""

from __future__ import annotations

import pytest

from sidecar.join_watch import JOIN_WITHIN_S, JoinWatch, MemberFailure

EXITED = MemberFailure("sink-0", "exited with 1 after 0.8 s (1 in a row): unsupported assignor")


def test_a_failing_member_is_a_problem_at_once_in_its_own_words() -> None:
    watch = JoinWatch()
    problem = watch.observe(10.0, asked=4, joined=0, failures=[EXITED])
    assert problem is not None
    line = problem.line(12.0)
    assert line.startswith("consumers are not joining the group: 0 of 4 joined, for 2 s")
    assert line.endswith("sink-0: exited with 1 after 0.8 s (1 in a row): unsupported assignor")
    two = watch.observe(13.0, 4, 0, [EXITED, MemberFailure("sink-1", "exited with 1")])
    assert two is not None and two.line(13.0).endswith("(and 1 more failing)")


def test_members_missing_are_a_problem_only_after_the_join_time() -> None:
    watch = JoinWatch()
    assert watch.observe(0.0, asked=3, joined=1, failures=[]) is None  # joining
    assert watch.observe(JOIN_WITHIN_S - 1, 3, 2, []) is None
    problem = watch.observe(JOIN_WITHIN_S, 3, 2, [])
    assert problem is not None and problem.since == 0.0
    assert problem.line(JOIN_WITHIN_S) == (
        f"consumers are not joining the group: 2 of 3 joined, for {JOIN_WITHIN_S:.0f} s"
    )
    # A shortfall that ends before the join time is forgotten: the next one counts anew.
    fresh = JoinWatch()
    fresh.observe(0.0, 3, 1, [])
    fresh.observe(5.0, 3, 3, [])
    assert fresh.observe(JOIN_WITHIN_S + 1, 3, 2, []) is None


def test_only_members_seen_again_lift_it() -> None:
    watch = JoinWatch()
    assert watch.observe(0.0, 2, 0, [EXITED]) is not None
    # Restarted, not joined yet: no failure reported this round, still held.
    assert watch.observe(3.0, 2, 1, []) is not None
    assert watch.observe(4.0, 2, 2, []) is None  # every consumer asked for joined
    assert watch.problem is None


def test_a_group_that_cannot_be_described_is_judged_by_the_failures_alone() -> None:
    watch = JoinWatch()
    assert watch.observe(0.0, 2, None, []) is None
    assert watch.observe(1.0, 2, None, [EXITED]) is not None
    assert watch.observe(2.0, 2, None, []) is None


def test_fewer_asked_than_members_is_no_shortfall() -> None:
    watch = JoinWatch()
    assert watch.observe(0.0, 2, 4, []) is None  # a scale-down under way
    assert watch.observe(JOIN_WITHIN_S * 2, 0, 0, []) is None


def test_the_join_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="join_within_s must be > 0"):
        JoinWatch(0.0)


def test_members_that_run_but_do_not_join_are_named_by_what_they_said_last() -> None:
    watch = JoinWatch()
    said = MemberFailure("sink-0", "running, last said: SASL authentication error")
    assert watch.observe(0.0, 2, 0, [], [said]) is None  # words alone are no failure
    problem = watch.observe(JOIN_WITHIN_S, 2, 0, [], [said])
    assert problem is not None
    assert problem.line(JOIN_WITHIN_S).endswith(
        "sink-0: running, last said: SASL authentication error"
    )
    assert watch.observe(JOIN_WITHIN_S + 1, 2, 2, [], [said]) is None  # joined: words or not
