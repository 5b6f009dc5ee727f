"""The compaction command's period: rounds until stopped, failures reported, bad flags refused."""

from __future__ import annotations

import threading

import pytest

from consumer_sdk.lake.compact import main, run_periodically
from contract.settings import ConfigError


def test_rounds_run_until_stopped_and_a_failed_round_does_not_end_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop = threading.Event()
    outcomes = iter([RuntimeError("the table is busy\nstack..."), None, None])
    calls: list[int] = []

    def round_() -> None:
        calls.append(len(calls))
        outcome = next(outcomes)
        if len(calls) == 3:
            stop.set()
        if outcome is not None:
            raise outcome

    assert run_periodically(round_, 0.0, stop) == 3
    assert calls == [0, 1, 2]
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["kafka-autoscaler-compact: compaction failed (the table is busy); next in 0 s"]


def test_wrong_settings_end_the_rounds() -> None:
    def round_() -> None:
        raise ConfigError("table_format parquet: tables with the offset ledger are not compacted")

    with pytest.raises(ConfigError):
        run_periodically(round_, 0.0, threading.Event())


@pytest.mark.parametrize("every", ["0", "-5", "nan", "inf"])
def test_a_bad_period_is_one_line_naming_the_flag(
    every: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--every", every]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--every must be a number of seconds > 0" in error[0]
