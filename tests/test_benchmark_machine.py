"""Results name the code they were measured on: uncommitted code is refused unless asked."""

from __future__ import annotations

import pytest

from benchmarks.support import machine


def test_uncommitted_code_is_refused_in_one_line_unless_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(machine, "code_at_start", lambda: "abc1234+")
    monkeypatch.delenv(machine.ALLOW_DIRTY_ENV, raising=False)
    with pytest.raises(machine.DirtyTree) as refused:
        machine.machine_line()
    assert refused.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "abc1234+" in said[0] and machine.ALLOW_DIRTY_ENV in said[0]
    monkeypatch.setenv(machine.ALLOW_DIRTY_ENV, "1")
    assert "code abc1234+." in machine.machine_line()


def test_committed_code_is_named_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "code_at_start", lambda: "abc1234")
    monkeypatch.delenv(machine.ALLOW_DIRTY_ENV, raising=False)
    assert "code abc1234." in machine.machine_line()
