"""The soak's reading of what a JVM's heap holds alive (a class histogram)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.soak.live_heap import (
    MIB,
    LiveHeapSample,
    live_heap_growth,
    live_heap_lines,
    live_heap_sample,
    parse_histogram,
)

# The shape of a JDK 17 answer to ``jcmd <pid> GC.class_histogram`` (trimmed).
HISTOGRAM = """12345:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:         52011        5124560  [B (java.base@17.0.15)
   2:         48000        1152000  java.lang.String (java.base@17.0.15)
   3:          9000         864000  org.apache.kafka.common.TopicPartition
   4:            10            320  java.lang.Object (java.base@17.0.15)
Total        109021        7140880
"""


def test_a_histogram_gives_the_live_total_and_its_largest_classes() -> None:
    total, classes = parse_histogram(HISTOGRAM, top=3) or (0, {})
    assert total == 7140880
    assert classes == {
        "[B": 5124560,
        "java.lang.String": 1152000,
        "org.apache.kafka.common.TopicPartition": 864000,
    }
    assert parse_histogram("12345:\nAttach failed\n") is None


def test_a_jvm_that_answers_gives_a_sample_and_one_that_does_not_gives_none(
    tmp_path: Path,
) -> None:
    jcmd = tmp_path / "jcmd"
    jcmd.write_text(f"#!{sys.executable}\nprint({HISTOGRAM!r})\n")
    jcmd.chmod(0o755)
    taken = live_heap_sample(3.0, "broker-1", 12345, str(jcmd))
    assert taken is not None and taken.live_bytes == 7140880 and "[B" in taken.top_classes
    assert live_heap_sample(3.0, "broker-1", 12345, str(tmp_path / "no-jcmd")) is None


def test_growth_is_judged_per_incarnation_and_names_the_class_that_grew() -> None:
    def heap(t: float, pid: int, partitions_mib: float) -> LiveHeapSample:
        bytes_of = {"[B": 40 * MIB, "TopicPartition": round(partitions_mib * MIB)}
        return LiveHeapSample(t, "broker-1", pid, sum(bytes_of.values()), bytes_of)

    # One incarnation whose partitions' objects grow 1 MiB per 10 minutes, one too short.
    samples = [heap(300.0 + 300 * i, 7, 1 + i / 2) for i in range(5)]
    samples += [heap(t, 8, 1) for t in (1800.0, 2100.0)]
    (grew,) = live_heap_growth(samples, warm_up_s=300, min_span_s=1200)
    assert (grew["pid"], grew["live_mib_per_10_min"]) == (7, 1.0)
    assert grew["classes_changed_most"][0] == ["TopicPartition", 2.0]
    lines = live_heap_lines([grew])
    (table_row,) = [line for line in lines if line.startswith("| broker-1 |")]
    assert "`TopicPartition` +2.00" in table_row and "| 1.0 |" in table_row
    assert live_heap_lines([]) == []


def test_the_jvm_sampler_asks_the_brokers_and_spark_connect_only(tmp_path: Path) -> None:
    from benchmarks.soak.run import JvmSampler, Run
    from tests.sdk_helpers import wait_until

    class Processes:
        """The part of the soak the sampler reads: its clock and its processes."""

        def elapsed(self) -> float:
            return 400.0

        def long_lived(self) -> dict[str, int]:
            return {"broker-1": 11, "spark-connect": 12, "sidecar": 13, "consumer soak-0": 14}

    asked = tmp_path / "asked"
    jcmd = tmp_path / "jcmd"
    jcmd.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(asked)!r}, 'a').write(sys.argv[1] + ' ' + sys.argv[2] + '\\n')\n"
        f"print({HISTOGRAM!r})\n"
    )
    jcmd.chmod(0o755)
    run = Run()
    sampler = JvmSampler(Processes(), run, native_every_s=None, live_heap=True)  # type: ignore[arg-type]
    sampler.jcmd = str(jcmd)
    sampler.start()
    try:
        assert wait_until(lambda: len(run.live_heap) >= 2)
    finally:
        sampler.halt.set()
        sampler.join(30)
    assert {(s.role, s.pid) for s in run.live_heap} == {("broker-1", 11), ("spark-connect", 12)}
    # Native memory was not asked for: only class histograms were taken.
    assert set(asked.read_text().split()) == {"11", "12", "GC.class_histogram"}
    assert run.native == []
