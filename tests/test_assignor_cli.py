"""The ``kafka-autoscaler-assign`` command: JSON in, assignment out, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assignor.cli import main


def run(tmp_path: Path, document: object, *flags: str) -> tuple[int, str, str]:
    source = tmp_path / "problem.json"
    source.write_text(json.dumps(document))
    result = subprocess.run(
        [sys.executable, "-m", "assignor.cli", str(source), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stdout, result.stderr


def test_assigns_and_reports(tmp_path: Path) -> None:
    previous = {"orders:0": "c0", "orders:1": "c0"}
    document = {
        "capacity": 10,
        "speeds": {"orders:0": 6, "orders:1": 5, "clicks:0": 4},
        "previous": previous,
    }
    code, out, _ = run(tmp_path, document, "--heuristic", "mbf")
    assert code == 0
    result = json.loads(out)
    assert result["heuristic"] == "mbf"
    assert set(result["assignment"]) == {"orders:0", "orders:1", "clicks:0"}
    assert result["consumers"] == result["lower_bound"] == 2
    moved = sum(result["assignment"][k] != v for k, v in previous.items())
    assert moved >= 1 and result["rscore"] > 0


def test_heuristic_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "p.json"
    source.write_text(json.dumps({"capacity": 1, "speeds": {"t:0": 0.5}}))
    monkeypatch.setenv("AUTOSCALER_HEURISTIC", "ffd")
    assert main([str(source)]) == 0
    assert json.loads(capsys.readouterr().out)["heuristic"] == "ffd"


@pytest.mark.parametrize(
    ("document", "flags", "message"),
    [
        ({"capacity": 10}, (), "speeds is required"),
        ({"capacity": -1, "speeds": {"t:0": 1}}, (), "capacity must be a finite number > 0"),
        ({"capacity": 1, "speeds": {"t0": 1}}, (), "speeds keys must look like TOPIC:PARTITION"),
        ({"capacity": 1, "speeds": {"t:0": "fast"}}, (), r"speeds\[t:0\] must be a finite"),
        ({"capacity": 1, "speeds": {}, "colour": 1}, (), "unknown field"),
        ({"capacity": 1, "speeds": {}}, ("--heuristic", "nope"), "heuristic must be one of"),
        ([1, 2], (), "input must be a JSON object"),
        # Hostile inputs that used to end in a traceback or be taken silently.
        ({"capacity": 10**400, "speeds": {"t:0": 1}}, (), "capacity must be a finite number"),
        ({"capacity": 1, "speeds": {"t:0": 10**400}}, (), r"speeds\[t:0\] must be a finite"),
        ({"capacity": 1, "speeds": {"t:0": 1}, "lags": {"t:0": -(10**400)}}, (), "lags"),
        ({"capacity": 1, "speeds": {"t:0": 1}, "remove_first": 5}, (), "remove_first must be"),
        (
            {"capacity": 1, "speeds": {"t:0": 1}, "members": ["a"], "remove_first": [["a"]]},
            (),
            "remove_first must be a list of member ids",
        ),
        ({"capacity": 1, "speeds": {"t:0": 1, "t:00": 5}}, (), "without leading zeros"),
        ({"capacity": 1, "speeds": {"t:\u0661": 1}}, (), "without leading zeros, got 't:"),
        ({"capacity": 1, "speeds": {"t:99999999999": 1}}, (), r"in \[0, 2147483647\]"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path, document: object, flags: tuple[str, ...], message: str
) -> None:
    code, _, err = run(tmp_path, document, *flags)
    assert code == 2
    assert pytest.importorskip("re").search(message, err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_input_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    source = tmp_path / "deep.json"
    source.write_text("[" * 100_000 + "]" * 100_000)
    result = subprocess.run(
        [sys.executable, "-m", "assignor.cli", str(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "kafka-autoscaler-assign: error: input is nested too deeply"
