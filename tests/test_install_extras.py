"""What users install: the sdist and the wheel ``python -m build`` makes pass ``twine check``
and carry what runs outside a checkout (the compiled record decoder, the Java sources the
Spark sink builds, the jar locks); the install carries only what each part needs: the wheel
installed with only the ``sidecar`` extra into a fresh virtual environment runs the sidecar,
has no Spark and no test stack, and a command whose extra is missing says which one in one
line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from benchmarks.support.machine import copy_checkout
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
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel built from it by ``python -m build`` (from a copy of the
    tree, so the build leaves nothing in the checkout)."""
    work = tmp_path_factory.mktemp("build")
    source = copy_checkout(work / "source")
    dist = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(source)],
        check=True,
        capture_output=True,
    )
    (sdist,) = dist.glob("kafka_autoscaler-*.tar.gz")
    (wheel,) = dist.glob("kafka_autoscaler-*.whl")
    return sdist, wheel


def test_twine_accepts_both(distributions: tuple[Path, Path]) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, distributions)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


def test_the_wheel_carries_what_runs_outside_a_checkout(
    distributions: tuple[Path, Path],
) -> None:
    _, wheel = distributions
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(n.startswith("consumer_sdk/records/_kafka_records") for n in names)
    assert "consumer_sdk/lake/locks/spark-lake.lock" in names
    assert "local_kafka/locks/apache-kafka.lock" in names
    java = [n for n in names if n.startswith("consumer_sdk/lake/java/") and n.endswith(".java")]
    sources = sorted((ROOT / "consumer_sdk/lake/java").rglob("*.java"))
    assert len(java) == len(sources) > 0
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/"))]


def test_the_sdist_builds_the_decoder_from_its_source(distributions: tuple[Path, Path]) -> None:
    sdist, _ = distributions
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert "consumer_sdk/records/native/kafka_records.c" in names
    assert {"pyproject.toml", "README.md"} <= names


@pytest.fixture(scope="module")
def sidecar_only(
    tmp_path_factory: pytest.TempPathFactory, distributions: tuple[Path, Path]
) -> Path:
    """A fresh virtual environment holding the wheel with only its ``sidecar`` extra."""
    _, wheel = distributions
    env = tmp_path_factory.mktemp("install") / "venv"
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


def test_the_keda_scaler_without_its_extra_exits_2_in_one_line(sidecar_only: Path) -> None:
    ran = subprocess.run(
        [
            str(sidecar_only / "bin/kafka-autoscaler-sidecar"),
            *("--bootstrap-servers", "127.0.0.1:9", "--group", "g", "--topics", "t"),
            *("--capacity", "10", "--scaler", "keda", "--scaled-object", "so"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    (line,) = ran.stderr.splitlines()
    assert line == (
        "kafka-autoscaler-sidecar: error: --scaler keda needs the 'keda' extra (missing: "
        "grpc); install it with: pip install 'kafka-autoscaler[keda]'"
    )
