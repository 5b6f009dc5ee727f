"""A short run of the fuzzers (fuzz/): the C decoder under libFuzzer with ASan and UBSan,
the whole-fetch decoder, the control plane's and the record values' under atheris. The long
run's figures: benchmarks/results/fuzz.md."""

from __future__ import annotations

import os

import pytest

from fuzz import run


def test_a_short_fuzz_run_of_the_record_path_finds_nothing() -> None:
    try:
        runs = [
            run.fuzz_c(seconds=20),
            run.fuzz_python(seconds=20),
            run.fuzz_control_plane(seconds=15),
            run.fuzz_record_values(seconds=10),
        ]
    except run.FuzzUnavailable as exc:
        if os.environ.get("CI"):  # CI's machine installs clang (make fuzz-tools)
            pytest.fail(f"the fuzzers cannot run here: {exc}")
        pytest.skip(f"fuzzers unavailable: {exc}")
    for fuzzed in runs:
        assert fuzzed.crashes == 0, fuzzed
        assert fuzzed.executions > 1000, fuzzed  # it ran, on the seeds and past them
