"""Which ``__consumer_offsets`` partition coordinates a group (local_kafka.group_coordinators):
pure, checked against Java's definition of ``String.hashCode``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from local_kafka.group_coordinators import (
    ProbeFailed,
    java_string_hash,
    offsets_partition,
    probe_groups,
    wait_in_child,
)


def java_definition(text: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] in unbounded integers, then wrapped to 32-bit signed."""
    total = sum(ord(c) * int(31 ** (len(text) - 1 - i)) for i, c in enumerate(text)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


@pytest.mark.parametrize("text", ["", "a", "soak", "g-t-afb2ca19ee", "x" * 40, "grüße"])
def test_the_hash_is_javas_string_hashcode(text: str) -> None:
    assert java_string_hash(text) == java_definition(text)


def test_the_smallest_int_hash_maps_to_partition_zero() -> None:
    # Java's best-known String whose hashCode is Integer.MIN_VALUE, where Math.abs stays negative.
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert offsets_partition("polygenelubricants", 7) == 0


def test_one_probe_group_lands_on_each_partition() -> None:
    groups = probe_groups(10)
    assert [offsets_partition(g, 10) for g in groups] == list(range(10))
    assert len(set(groups)) == 10
    with pytest.raises(ValueError, match="partitions must be an integer >= 1"):
        probe_groups(0)


def test_a_child_that_answers_is_believed() -> None:
    answer = [sys.executable, "-c", "print('noise'); print('[\"g-1\"]')"]
    assert wait_in_child("x:1", 3, time.monotonic() + 60, command=answer) == ["g-1"]


def test_a_child_that_dies_is_started_again_until_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = tmp_path / "starts"
    monkeypatch.setenv("STARTS", str(starts))
    dies_twice = (
        "import os, pathlib, signal; p = pathlib.Path(os.environ['STARTS']); "
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); "
        "os.kill(os.getpid(), signal.SIGABRT) if len(p.read_text()) < 3 else print('[]')"
    )
    command = [sys.executable, "-c", dies_twice]
    assert wait_in_child("x:1", 3, time.monotonic() + 120, command=command) == []
    assert starts.read_text() == "xxx"  # two aborts, then the answer


@pytest.mark.parametrize(
    ("script", "shown"),
    [
        ("import no_such_module", "ModuleNotFoundError: No module named 'no_such_module'"),
        ("raise SystemExit(3)", "(nothing on stderr)"),
    ],
)
def test_a_child_that_fails_by_itself_stops_the_wait_with_its_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, shown: str
) -> None:
    starts = tmp_path / "starts"
    monkeypatch.setenv("STARTS", str(starts))
    counted = (
        "import os, pathlib; p = pathlib.Path(os.environ['STARTS']); "
        f"p.write_text(p.read_text() + 'x' if p.exists() else 'x'); {script}"
    )
    command = [sys.executable, "-c", counted]
    with pytest.raises(ProbeFailed, match=r"exited with \d+: ") as failed:
        wait_in_child("x:1", 3, time.monotonic() + 120, command=command)
    assert str(failed.value).endswith(shown)
    assert starts.read_text() == "x"  # started once, not again


def test_past_the_deadline_every_probe_group_is_still_waiting() -> None:
    assert wait_in_child("x:1", 3, time.monotonic() - 1) == probe_groups(3)
