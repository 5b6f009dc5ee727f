"""Build and run the fuzzers (the record path's two, the control plane's, the record values');
report executions, crashes and the slowest input.

``python -m fuzz.run --seconds 20`` (the short run the suite makes) or ``make fuzz`` (the long
run whose figures are committed to benchmarks/results/fuzz.md). The C decoder's harness is
built with clang's libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, and run with a
64 MiB malloc limit: an input under 1 MiB that allocates more is a finding. Crashing inputs
are kept in .cache/fuzz/crashes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from fuzz import seeds

ROOT = Path(__file__).parent.parent
CACHE = Path(os.environ.get("KAFKA_AUTOSCALER_CACHE", ROOT / ".cache")) / "fuzz"
HARNESS_SOURCES = [
    ROOT / "fuzz/records_section.c",
    ROOT / "consumer_sdk/records/native/kafka_records.c",
]
SANITIZERS = "-fsanitize=fuzzer,address,undefined"


class FuzzUnavailable(RuntimeError):
    """clang with libFuzzer (or atheris) is missing here."""


@dataclass
class FuzzRun:
    """What one fuzzer did."""

    target: str
    executions: int
    seconds: float
    crashes: int
    slowest_input_s: float
    peak_rss_mb: int
    new_units: int


def build_harness() -> Path:
    """The C harness, built with sanitizers (again only when a source changed)."""
    clang = shutil.which("clang")
    if clang is None:
        raise FuzzUnavailable("clang is not installed (Debian: clang libclang-rt-14-dev)")
    binary = CACHE / "records_section"
    newest = max(source.stat().st_mtime for source in HARNESS_SOURCES)
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            clang,
            "-g",
            "-O1",
            SANITIZERS,
            "-fno-sanitize-recover=undefined",
            *map(str, HARNESS_SOURCES),
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise FuzzUnavailable(f"clang could not build the harness: {done.stderr.strip()[-300:]}")
    return binary


def _libfuzzer_flags(seconds: float | None, runs: int | None, name: str) -> list[str]:
    crashes = CACHE / "crashes" / name
    crashes.mkdir(parents=True, exist_ok=True)
    flags = [
        "-timeout=5",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={crashes}/",
        "-seed=1",
    ]
    if seconds is not None:
        flags.append(f"-max_total_time={int(seconds)}")
    if runs is not None:
        flags.append(f"-runs={runs}")
    return flags


def _run(target: str, command: list[str], corpus: str, seed_files: list[bytes]) -> FuzzRun:
    corpus_dir = CACHE / "corpus" / corpus
    corpus_dir.mkdir(parents=True, exist_ok=True)
    seed_dir = seeds.write(CACHE / "seeds" / corpus, seed_files)
    started = time.monotonic()
    done = subprocess.run(
        [*command, str(corpus_dir), str(seed_dir)], capture_output=True, text=True, cwd=ROOT
    )
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", output))
    crashed = done.returncode != 0
    if crashed:
        tail = "\n".join(output.splitlines()[-25:])
        print(f"{target}: the fuzzer stopped with {done.returncode}:\n{tail}", file=sys.stderr)
    slowest = float(stats.get("slowest_unit_time_sec", 0))
    return FuzzRun(
        target,
        int(stats.get("number_of_executed_units", 0)),
        round(elapsed, 1),
        int(crashed),
        slowest,
        int(stats.get("peak_rss_mb", 0)),
        int(stats.get("new_units_added", 0)),
    )


def fuzz_c(seconds: float | None = None, runs: int | None = None) -> FuzzRun:
    """The C decoder under libFuzzer, ASan and UBSan, with a 64 MiB malloc limit."""
    binary = build_harness()
    flags = [*_libfuzzer_flags(seconds, runs, "c"), "-malloc_limit_mb=64", "-max_len=1048576"]
    return _run(
        "C decoder (libFuzzer, ASan, UBSan)",
        [str(binary), *flags],
        "section",
        seeds.section_seeds(),
    )


def _atheris(
    module: str, flags: list[str], target: str, corpus: str, seed_files: list[bytes]
) -> FuzzRun:
    """Run the atheris harness ``fuzz.<module>`` with libFuzzer ``flags``."""
    try:
        import atheris  # noqa: F401
    except ImportError as exc:
        raise FuzzUnavailable("atheris is not installed (the dev extra has it)") from exc
    return _run(target, [sys.executable, "-m", f"fuzz.{module}", *flags], corpus, seed_files)


def fuzz_python(seconds: float | None = None, runs: int | None = None) -> FuzzRun:
    """The whole-fetch decoder under atheris."""
    flags = _libfuzzer_flags(seconds, runs, "py")
    return _atheris(
        "whole_fetch", flags, "whole-fetch decoder (atheris)", "fetch", seeds.fetch_seeds()
    )


def fuzz_control_plane(seconds: float | None = None, runs: int | None = None) -> FuzzRun:
    """The capacity report and speed snapshot decoders (and the estimate) under atheris."""
    return _atheris(
        "control_plane",
        [*_libfuzzer_flags(seconds, runs, "control"), "-max_len=4096"],
        "capacity report and snapshot decoders (atheris)",
        "control",
        seeds.control_plane_seeds(),
    )


def fuzz_record_values(seconds: float | None = None, runs: int | None = None) -> FuzzRun:
    """Record values (JSON against nested column schemas) into table columns, under
    atheris."""
    return _atheris(
        "record_values",
        [*_libfuzzer_flags(seconds, runs, "values"), "-max_len=4096"],
        "record values into columns (atheris)",
        "values",
        seeds.record_value_seeds(),
    )


def report(runs: Sequence[FuzzRun]) -> str:
    """The markdown table of ``runs``."""
    from benchmarks.support.machine import machine_line

    lines = [
        "# Fuzzing what is read from the network: the record path, record values, the control "
        "plane",
        "",
        machine_line(),
        "Seeds: real batches of every codec (fuzz/seeds.py); `python -m fuzz.run` (see its doc).",
        "",
        "| target | executions | seconds | crashes, hangs, sanitizer reports | slowest input "
        "| peak RSS | corpus units added |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(
            f"| {run.target} | {run.executions:,} | {run.seconds:.0f} | {run.crashes} "
            f"| {run.slowest_input_s:g} s | {run.peak_rss_mb} MiB | {run.new_units} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both fuzzers; non-zero if either found anything."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, help="each fuzzer's time")
    parser.add_argument("--c-runs", type=int, help="executions of the C harness")
    parser.add_argument("--python-runs", type=int, help="executions of the whole-fetch harness")
    parser.add_argument("--control-runs", type=int, help="executions of the control-plane harness")
    parser.add_argument("--values-runs", type=int, help="executions of the record-values harness")
    parser.add_argument("--write", action="store_true", help="commit-ready results file")
    args = parser.parse_args(argv)
    if args.write:
        from benchmarks.support.machine import require_committed_code

        # Now, not when the table is written 20 minutes on: the figures name the code that
        # ran, and a tree left dirty is refused before the run, not after it.
        require_committed_code()
    counts = (args.c_runs, args.python_runs, args.control_runs, args.values_runs)
    if args.seconds is None and None in counts:
        # Without a bound libFuzzer runs for ever: every harness needs its count.
        parser.error("give --seconds, or every harness's --*-runs")
    try:
        runs = [
            fuzz_c(args.seconds, args.c_runs),
            fuzz_python(args.seconds, args.python_runs),
            fuzz_control_plane(args.seconds, args.control_runs),
            fuzz_record_values(args.seconds, args.values_runs),
        ]
    except FuzzUnavailable as exc:
        print(f"fuzzing: {exc}", file=sys.stderr)
        return 2
    table = report(runs)
    if args.write:
        from benchmarks.support.report import publish

        publish("fuzz", table, {"runs": [asdict(run) for run in runs]})
    else:
        print(table)
    return 1 if any(run.crashes for run in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
