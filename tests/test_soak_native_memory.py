"""The soak's reading of a broker's memory by kind (the JVM's native memory tracking)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak.native_memory import (
    OUTSIDE,
    NativeSample,
    jcmd_beside,
    native_growth,
    native_lines,
    native_sample,
    parse_summary,
)

# The shape of a JDK 17 answer to ``jcmd <pid> VM.native_memory summary`` (trimmed).
SUMMARY = """12345:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=1900000KB, committed=640000KB
       malloc: 33002KB #289898
       mmap:   reserved=2045948KB, committed=667988KB

-                 Java Heap (reserved=524288KB, committed=524288KB)
                            (mmap: reserved=524288KB, committed=524288KB)

-                     Class (reserved=1049844KB, committed=7348KB)
                            (classes #9243)
                            (    reserved=65536KB, committed=42432KB)

-                      Code (reserved=249162KB, committed=23342KB)
                            (malloc=1234KB #5678)

-    Native Memory Tracking (reserved=4558KB, committed=4558KB)

-                        GC (reserved=58648KB, committed=80464KB)
"""


def test_a_summary_gives_each_category_and_its_total() -> None:
    committed = parse_summary(SUMMARY)
    total = committed.pop("Total")
    assert set(committed) == {"Java Heap", "Class", "Code", "Native Memory Tracking", "GC"}
    assert sum(committed.values()) == total  # the lines inside a category are not counted
    assert committed["Native Memory Tracking"] == 4558


@pytest.mark.parametrize(
    "answer",
    ["", "12345:\nNative memory tracking is not enabled\n", "com.sun.tools.attach failed"],
)
def test_an_answer_without_a_summary_gives_nothing(answer: str) -> None:
    assert parse_summary(answer) == {}


def sample(t: float, pid: int, anon_mib: float, code_mib: float, gc_mib: float) -> NativeSample:
    committed = {"Java Heap": 512 * 1024, "Code": int(code_mib * 1024), "GC": int(gc_mib * 1024)}
    committed["Total"] = sum(committed.values())
    return NativeSample(t, "broker-1", pid, int(anon_mib * 1024), committed)


def test_growth_splits_each_incarnation_by_kind_largest_change_first() -> None:
    samples = [
        sample(100, 7, 700, 20, 50),  # before the warm-up's end: left out
        sample(300, 7, 700, 22, 50),
        sample(900, 7, 705, 24, 50),
        sample(1800, 7, 712, 26, 51),
        sample(1800, 8, 650, 20, 50),  # a new incarnation sampled once: not judged
    ]
    [grown] = native_growth(samples, warm_up_s=300, min_span_s=1200)
    assert (grown["role"], grown["pid"], grown["minutes"]) == ("broker-1", 7, 25.0)
    kinds = grown["kinds"]
    assert kinds["anonymous"] == [700.0, 712.0]
    assert kinds["Code"] == [22.0, 26.0]
    # Anonymous memory minus what the JVM committed: 12 MiB grew, 5 of it in the JVM's own.
    first_outside = 700 - (512 + 22 + 50)
    assert kinds[OUTSIDE] == [first_outside, first_outside + 12 - 5]
    changes = [abs(last - first) for first, last in kinds.values()]
    assert changes == sorted(changes, reverse=True)
    assert kinds["Java Heap"] == [512.0, 512.0]


def test_an_incarnation_that_lived_too_briefly_is_not_judged() -> None:
    samples = [sample(t, 7, 700, 20, 50) for t in (300, 400, 500)]
    assert native_growth(samples, warm_up_s=300, min_span_s=1200) == []


def test_the_report_section_shows_the_kinds_that_changed_most() -> None:
    samples = [sample(t, 7, 700 + t / 100, 20 + t / 600, 50) for t in (300, 900, 1800)]
    lines = native_lines(native_growth(samples, 300, 1200), shown=2)
    assert any(line.startswith("broker-1 (pid 7, 25.0 minutes)") for line in lines)
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| kind |")]
    assert [r.split(" | ")[0] for r in rows] == ["| anonymous", f"| {OUTSIDE}"]
    assert native_lines([]) == []
    assert "every 10 minutes" in lines[1]
    assert "every 2 minutes" in native_lines(native_growth(samples, 300, 1200), every_s=120)[1]


def test_a_process_without_tracking_or_gone_gives_no_sample(tmp_path: Path) -> None:
    # A stand-in jcmd that answers as a JVM without tracking does.
    jcmd = tmp_path / "jcmd"
    jcmd.write_text(
        f"#!{sys.executable}\nprint('1:'); print('Native memory tracking is not enabled')\n"
    )
    jcmd.chmod(0o755)
    assert native_sample(1.0, "broker-1", 1, str(jcmd)) is None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert native_sample(1.0, "broker-1", gone.pid, str(tmp_path / "no-jcmd")) is None


def test_jcmd_is_looked_up_beside_the_real_java(tmp_path: Path) -> None:
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "java").touch()
    (tmp_path / "java").symlink_to(bin_dir / "java")
    assert jcmd_beside(str(tmp_path / "java")) == str(bin_dir / "jcmd")


def test_a_tracked_process_gives_its_summary_and_anonymous_memory(tmp_path: Path) -> None:
    jcmd = tmp_path / "jcmd"
    jcmd.write_text(f"#!{sys.executable}\nprint({SUMMARY!r})\n")
    jcmd.chmod(0o755)
    taken = native_sample(5.0, "broker-2", os.getpid(), str(jcmd))
    assert taken is not None
    assert (taken.t, taken.role, taken.pid) == (5.0, "broker-2", os.getpid())
    assert taken.committed_kib == parse_summary(SUMMARY)
    assert taken.anon_kib > 0
