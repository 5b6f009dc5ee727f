"""The install carries only what each part needs: the wheel installed with only the
``sidecar`` extra into a fresh virtual environment runs the sidecar, has no Spark and no test
stack, and a command whose extra is missing says which one in one line (exit 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from contract.extras import missing_extra_line, missing_modules
from kafka_autoscaler import launch

ROOT = Path(__file__).resolve().parent.parent


def test_missing_modules_names_those_not_found() -> None:
    present = {"here"}
    assert missing_modules(("here", "gone"), lambda m: m if m in present else None) == ["gone"]


def test_a_command_without_its_extra_says_which_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    command = launch.Command(
        "kafka-autoscaler-x", "assignor.cli:main", "spark", ("no_such_module_here",)
    )
    monkeypatch.setitem(launch.COMMANDS, command.name, command)
    assert launch.run(command.name) == launch.USAGE_ERROR
    err = capsys.readouterr().err
    assert err == missing_extra_line(command.name, "spark", ["no_such_module_here"]) + "\n"
    assert "pip install 'kafka-autoscaler[spark]'" in err


def test_a_command_with_its_extra_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's --help
        launch.run("kafka-autoscaler-assign", ["--help"])
    assert exited.value.code == 0
    assert "usage" in capsys.readouterr().out


@pytest.fixture(scope="module")
def sidecar_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel with only its ``sidecar`` extra."""
    work = tmp_path_factory.mktemp("install")
    source = work / "source"  # a copy, so the build leaves nothing in the checkout
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = work / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--wheel-dir", str(wheels), str(source)),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("kafka_autoscaler-*.whl")
    env = work / "venv"
    venv.create(env, with_pip=True)
    subprocess.run(
        [str(env / "bin/python"), "-m", "pip", "install", "--quiet", f"{wheel}[sidecar]"],
        check=True,
    )
    return env


def test_the_sidecar_extra_runs_the_sidecar_without_spark_or_tests(sidecar_only: Path) -> None:
    shown = subprocess.run(
        [str(sidecar_only / "bin/kafka-autoscaler-sidecar"), "--help"],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert "usage" in shown.stdout
    absent = ("pyspark", "pyarrow", "pandas", "pytest", "hypothesis", "testcontainers")
    found = subprocess.run(
        [
            str(sidecar_only / "bin/python"),
            "-c",
            "import importlib.util, sys; "
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))",
            *absent,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.split() == []


def test_the_consumer_without_its_extra_exits_2_in_one_line(sidecar_only: Path) -> None:
    ran = subprocess.run(
        [str(sidecar_only / "bin/kafka-autoscaler-consumer"), "--help"],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 2
    (line,) = ran.stderr.splitlines()
    assert line.startswith("kafka-autoscaler-consumer needs the 'consumer' extra (missing: ")
    assert "pyarrow" in line and "pip install 'kafka-autoscaler[consumer]'" in line
