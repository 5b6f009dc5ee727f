"""An hour under faults: the sidecar scaling SDK consumers that write a Delta table (or, with
``--table-format``, an Iceberg or parquet one) through Spark Connect, on three Apache Kafka
nodes, while a seeded schedule breaks something every 45-90 s.

The faults (benchmarks.soak.faults): kill -9 of a consumer; of a broker (restarted 20-40 s
later); of the sidecar (restarted 5-15 s later; its consumers leave with it); of the Spark
Connect server (restarted 5-15 s later on its port); one consumer cut from the network for
30-60 s (benchmarks.soak.network_cut: an nftables rule on the sockets of its own cgroup);
a consumer stopped with SIGSTOP past its session timeout and resumed (a zombie writer); the
warehouse's disk (a tmpfs of its own) full for 30 s. Load: the paper's random walk per
partition, no steps. The first ``--warm-up`` seconds have no fault; they give the steady
state's lag p99. A fault never begins before the last one is judged (its lag back under that
p99, or 60 s after its repair): the schedule's later faults move back by the wait.

With ``--producer transactional`` the load is written by confluent-kafka's transactional
producer (a transaction a second, every fifth aborted, through the broker kills too), and the
checker reads the log with ``read_committed`` at the end: the table must hold exactly the
records of committed transactions, once, and none of an aborted one.

Figures: records produced, missing and duplicated in the table (read by delta-rs, pyiceberg or
pyarrow and the offset ledger); per fault,
the time from its repair until the lag is back under the steady-state p99 (target 60 s); RSS
and open file descriptors of every long-lived process sampled each minute and their slopes
after the warm-up (target: < 1 MiB per 10 minutes, no descriptor growth); and what
``/healthz`` said during each fault (expected: no answer while the sidecar is down, ok
otherwise: one broker of three, a consumer or the sink down do not stop its loop).

Needs root (tmpfs, cgroups, nftables) and Java 17.
``python -m benchmarks.soak [--duration 3600] [--seed 7] [--table-format delta]`` writes
``results/soak.{md,json,png}`` (a subset of faults or another format: a name of its own).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from assignor import TopicPartition
from benchmarks.soak import network_cut
from benchmarks.soak.faults import FaultKind, PlannedFault, delayed_start, schedule
from benchmarks.soak.incarnations import by_incarnation, long_enough
from benchmarks.soak.live_heap import SAMPLE_S as LIVE_HEAP_SAMPLE_S
from benchmarks.soak.live_heap import (
    LiveHeapSample,
    live_heap_growth,
    live_heap_lines,
    live_heap_sample,
)
from benchmarks.soak.native_memory import MIN_SAMPLE_S as MIN_NATIVE_SAMPLE_S
from benchmarks.soak.native_memory import SAMPLE_S as NATIVE_SAMPLE_S
from benchmarks.soak.native_memory import (
    NativeSample,
    jcmd_beside,
    native_growth,
    native_lines,
    native_sample,
)
from benchmarks.soak.slopes import slope_error_per_10_min, slope_per_10_min
from benchmarks.support.lake_readers import key_counts
from benchmarks.support.machine import broker_line, machine_line
from benchmarks.support.report import RESULTS, publish, row
from benchmarks.support.transactional_load import (
    Record,
    TransactionalLoad,
    TransactionOutcomes,
    committed_in_log,
)
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_connect import SparkConnectServer
from contract.local_ports import free_port
from examples.demo import capacity_settings
from examples.load import LoadGenerator, RateWalk
from local_kafka.apache_kafka import ApacheKafka, java_executable
from local_kafka.clusters import ClusterKind, KafkaCluster, kafka_cluster

ROOT = Path(__file__).parent.parent.parent
TOPIC = "soak-orders"
GROUP = "soak"
SPEEDS = "soak.autoscaler.speeds"
PARTITIONS = 12
BROKERS = 3
SESSION_MS = 6000
SAMPLE_S = 2.0
# What reads each lake format back (engines the project did not write).
READERS = {"delta": "delta-rs", "iceberg": "pyiceberg", "parquet": "pyarrow and the offset ledger"}
READER_FAILURES = 5  # samples in a row without a lag figure before a new reader
PROCESS_SAMPLE_S = 60.0
SEGMENT_FILE = re.compile(r"/\d{20}\.log$")  # a partition's log segment, named by offset
RECOVERY_TARGET_S = 60.0
"""The lag is to be back under the steady-state p99 this long after a fault's repair."""


@dataclass
class Sample:
    """What the soak saw every ``SAMPLE_S`` seconds."""

    t: float
    lag: int | None
    healthz: int | None
    replicas: int | None


@dataclass
class ProcessSample:
    """One long-lived process, once a minute."""

    t: float
    role: str
    pid: int
    rss_mib: float
    anon_mib: float
    fds: int
    # Of ``fds``, the open log segments (a broker keeps each one open until retention
    # deletes it: they follow the data kept, not a leak). None: not counted (older runs).
    segment_fds: int | None = None


@dataclass
class InjectedFault:
    """A fault as it happened: planned start, actual repair time, its target."""

    kind: FaultKind
    at: float
    repaired: float
    target: str
    skipped: str = ""


@dataclass
class Run:
    """Everything one soak run recorded."""

    samples: list[Sample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    faults: list[InjectedFault] = field(default_factory=list)
    native: list[NativeSample] = field(default_factory=list)  # brokers, with --broker-nmt
    live_heap: list[LiveHeapSample] = field(default_factory=list)  # JVMs, with --live-heap


def process_sample(t: float, role: str, pid: int) -> ProcessSample | None:
    """RSS, its anonymous part and open descriptors of ``pid`` (None if it is gone). The
    anonymous part leaves out mapped files (a broker's mmapped segment indexes grow with the
    log, not with a leak)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    segments = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            segments += bool(SEGMENT_FILE.search(os.readlink(f"/proc/{pid}/fd/{fd}")))
    kib = {
        key: int(value.split()[0])
        for key, _, value in (line.partition(":") for line in status.splitlines())
        if key in ("VmRSS", "RssAnon")
    }
    return ProcessSample(
        t, role, pid, kib.get("VmRSS", 0) / 1024, kib.get("RssAnon", 0) / 1024, len(fds), segments
    )


def consumer_processes() -> dict[str, int]:
    """Member identity -> pid of the soak's consumer processes."""
    found: dict[str, int] = {}
    for environ_path in Path("/proc").glob("[0-9]*/environ"):
        try:
            cmdline = (environ_path.parent / "cmdline").read_bytes()
            if b"consumer_sdk.cli" not in cmdline:
                continue
            environ = environ_path.read_bytes().split(b"\0")
        except OSError:
            continue
        values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        if values.get(b"AUTOSCALER_GROUP") == GROUP.encode():
            identity = values.get(b"AUTOSCALER_MEMBER_IDENTITY", b"?").decode()
            found[identity] = int(environ_path.parent.name)
    return found


class Soak:
    """The running system and the hands that break it."""

    def __init__(
        self,
        kafka: KafkaCluster,
        spark: SparkConnectServer,
        out: Path,
        seed: int,
        table_format: str = "delta",
        compact_every_commits: int = 0,
    ):
        self.kafka, self.spark, self.out = kafka, spark, out
        self.table_format = table_format
        self.compact_every_commits = compact_every_commits
        handle = kafka.broker_handle()
        assert isinstance(handle, ApacheKafka)
        self.apache = handle
        self.rng = random.Random(seed)
        self.port = free_port()
        self.sidecar: subprocess.Popen[bytes] | None = None
        self.started = time.monotonic()
        self.warehouse = spark.warehouse
        self.ballast = self.warehouse / "ballast"

    def elapsed(self) -> float:
        """Seconds since the load started."""
        return time.monotonic() - self.started

    def environment(self) -> dict[str, str]:
        """The sidecar's settings (its consumers inherit the shared ones)."""
        python = shlex.quote(sys.executable)
        consumer = (
            f"{python} -m benchmarks.soak.network_cut exec -- "
            f"{python} -m consumer_sdk.cli --sink spark"
        )
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AUTOSCALER_BOOTSTRAP_SERVERS": self.kafka.bootstrap_servers,
            "AUTOSCALER_GROUP": GROUP,
            "AUTOSCALER_TOPICS": TOPIC,
            **capacity_settings(ClusterKind.APACHE, declared=False),
            "AUTOSCALER_SNAPSHOT_TOPIC": SPEEDS,
            "AUTOSCALER_INTERVAL": "1",
            "AUTOSCALER_WINDOW": "8",
            "AUTOSCALER_MIN_WINDOW": "2",
            "AUTOSCALER_SCALE_DOWN_WINDOW": "60",
            "AUTOSCALER_DRAIN_SECONDS": "30",
            "AUTOSCALER_MIN_REPLICAS": "1",
            "AUTOSCALER_MAX_REPLICAS": "6",
            "AUTOSCALER_SCALER": "local",
            "AUTOSCALER_CONSUMER_COMMAND": consumer,
            "AUTOSCALER_IDENTITY_PREFIX": "soak",
            "AUTOSCALER_HTTP_PORT": str(self.port),
            "AUTOSCALER_LOCK_FILE": str(self.out / "sidecar.lock"),
            "AUTOSCALER_SESSION_TIMEOUT_MS": str(SESSION_MS),
            "AUTOSCALER_HEARTBEAT_INTERVAL_MS": "500",
            "AUTOSCALER_WAIT_TIME_SECS": "2",
            "AUTOSCALER_WRITES_IN_FLIGHT": "1",
            "AUTOSCALER_SPARK_REMOTE": self.spark.url,
            "AUTOSCALER_SPARK_WAREHOUSE": str(self.warehouse),
            "AUTOSCALER_SPARK_TABLE_FORMAT": self.table_format,
            "AUTOSCALER_SPARK_COMPACT_EVERY_COMMITS": str(self.compact_every_commits),
        }

    def start_sidecar(self) -> None:
        """Start (or restart) the sidecar; its log is appended to."""
        with (self.out / "sidecar.log").open("ab") as log:
            self.sidecar = subprocess.Popen(
                [sys.executable, "-m", "sidecar.cli"],
                env=self.environment(),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop_sidecar(self) -> None:
        """SIGTERM: it stops its consumers (flush, commit, leave) and exits."""
        if self.sidecar is not None and self.sidecar.poll() is None:
            self.sidecar.send_signal(signal.SIGTERM)
            self.sidecar.wait(180)

    def long_lived(self) -> dict[str, int]:
        """Role -> pid of every process the soak keeps running."""
        roles: dict[str, int] = {}
        if self.sidecar is not None and self.sidecar.poll() is None:
            roles["sidecar"] = self.sidecar.pid
        for node in range(1, BROKERS + 1):
            if (pid := self.apache.node_pid(node)) is not None:
                roles[f"broker-{node}"] = pid
        if self.spark.pid is not None:
            roles["spark-connect"] = self.spark.pid
        for identity, pid in consumer_processes().items():
            roles[f"consumer {identity}"] = pid
        return roles

    def inject(self, fault: PlannedFault, stop: threading.Event) -> InjectedFault:
        """Break, wait the fault's duration (or until ``stop``), repair."""
        kind, began = fault.kind, self.elapsed()
        target = ""
        consumers = consumer_processes()
        if kind in (FaultKind.CONSUMER_KILL, FaultKind.NETWORK_CUT, FaultKind.ZOMBIE):
            if not consumers:
                return InjectedFault(kind, began, began, "", skipped="no consumer running")
            target = self.rng.choice(sorted(consumers))
            pid = consumers[target]
        if kind is FaultKind.CONSUMER_KILL:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        elif kind is FaultKind.BROKER_KILL:
            node = self.rng.randint(1, BROKERS)
            target = f"broker-{node}"
            self.apache.broker_down(node)
            stop.wait(fault.duration)
            self.apache.broker_up(node)
        elif kind is FaultKind.SIDECAR_KILL:
            target = "sidecar"
            assert self.sidecar is not None
            self.sidecar.kill()
            self.sidecar.wait(30)
            stop.wait(fault.duration)
            self.start_sidecar()
        elif kind is FaultKind.SPARK_KILL:
            target = "spark-connect"
            self.spark.kill()
            stop.wait(fault.duration)
            self.spark.start()
        elif kind is FaultKind.NETWORK_CUT:
            network_cut.cut(target)
            stop.wait(fault.duration)
            network_cut.heal(target)
        elif kind is FaultKind.ZOMBIE:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stop.wait(fault.duration)
                os.kill(pid, signal.SIGCONT)
        elif kind is FaultKind.DISK_FULL:
            target = "warehouse"
            self.fill_disk()
            stop.wait(fault.duration)
            self.ballast.unlink(missing_ok=True)
        return InjectedFault(kind, began, self.elapsed(), target)

    def fill_disk(self) -> None:
        """Take every free byte of the warehouse's filesystem."""
        space = os.statvfs(self.warehouse)
        free = space.f_bavail * space.f_frsize
        # Full before the last block is as wanted: the error is suppressed.
        with self.ballast.open("wb") as ballast, contextlib.suppress(OSError):
            os.posix_fallocate(ballast.fileno(), 0, free)


class Sampler(threading.Thread):
    """Lag, /healthz and replicas every ``SAMPLE_S``; processes every minute."""

    def __init__(self, soak: Soak, run: Run) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.soak, self.run_record = soak, run
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as Partition

        def fresh() -> Any:
            return Consumer(
                {"bootstrap.servers": self.soak.kafka.bootstrap_servers, "group.id": GROUP}
            )

        reader = fresh()
        partitions = [Partition(TOPIC, p) for p in range(PARTITIONS)]
        next_processes = 0.0
        failures = 0
        try:
            while not self.halt.wait(SAMPLE_S):
                t = self.soak.elapsed()
                figure = lag(reader, partitions)
                failures = 0 if figure is not None else failures + 1
                if failures >= READER_FAILURES:
                    # After kills of the group's coordinator, librdkafka's idle reader kept
                    # failing for 254 and 262 s while the sidecar read the offsets: a new
                    # client looks the coordinator up afresh.
                    reader.close()
                    reader, failures = fresh(), 0
                self.run_record.samples.append(
                    Sample(t, figure, healthz(self.soak.port), replicas(self.soak.port))
                )
                if t >= next_processes:
                    next_processes = t + PROCESS_SAMPLE_S
                    for role, pid in self.soak.long_lived().items():
                        if (sample := process_sample(t, role, pid)) is not None:
                            self.run_record.processes.append(sample)
        finally:
            reader.close()


class JvmSampler(threading.Thread):
    """The brokers' native memory every ``native_every_s`` and the JVMs' live heap every
    5 minutes, each when asked for. A thread of its own: an attach takes a second or more,
    which would leave gaps in the lag samples recoveries are timed by."""

    def __init__(
        self, soak: Soak, run: Run, *, native_every_s: float | None, live_heap: bool
    ) -> None:
        super().__init__(name="soak-jvm-sampler", daemon=True)
        self.soak, self.run_record = soak, run
        self.jcmd = jcmd_beside(java_executable())
        self.native_every_s = native_every_s
        self.live_heap = live_heap
        self.halt = threading.Event()

    def run(self) -> None:
        # (every how many seconds, which roles, how to ask one, where its answers go)
        probes: list[
            tuple[float, tuple[str, ...], Callable[[float, str, int, str], Any], list[Any]]
        ] = []
        if self.native_every_s is not None:
            probes.append((self.native_every_s, ("broker",), native_sample, self.run_record.native))
        if self.live_heap:
            probes.append(
                (
                    LIVE_HEAP_SAMPLE_S,
                    ("broker", "spark-connect"),
                    live_heap_sample,
                    self.run_record.live_heap,
                )
            )
        due = [0.0] * len(probes)
        while not self.halt.wait(SAMPLE_S):
            t = self.soak.elapsed()
            for index, (every_s, roles, take, into) in enumerate(probes):
                if t < due[index]:
                    continue
                due[index] = t + every_s
                for role, pid in self.soak.long_lived().items():
                    if role.startswith(roles) and (taken := take(t, role, pid, self.jcmd)):
                        into.append(taken)


def lag(reader: Any, partitions: list[Any]) -> int | None:
    """The group's lag (log end minus committed), None while the brokers cannot say."""
    try:
        committed = reader.committed(partitions, timeout=1.5)
        total = 0
        for tp in committed:
            _, high = reader.get_watermark_offsets(tp, timeout=1.5, cached=False)
            total += high - (tp.offset if tp.offset >= 0 else 0)
        return total
    except Exception:  # a broker down, a coordinator moving: no figure this time
        return None


def healthz(port: int) -> int | None:
    """The sidecar's /healthz status (None: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as page:
            return int(page.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def replicas(port: int) -> int | None:
    """Consumers the sidecar runs, from /status."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1) as page:
            return int(json.loads(page.read()).get("replicas") or 0)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` mounted at ``path`` (the warehouse whose disk fills)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def landed(warehouse: Path, table_format: str) -> Counter[tuple[int, int]]:
    """(partition, offset) -> rows in the topic's table, read without Spark."""
    config = SparkSinkConfig(warehouse=str(warehouse), table_format=table_format)
    return key_counts(config, config.table_for(TOPIC))


def later_half(samples: Sequence[ProcessSample]) -> list[ProcessSample]:
    """The samples of the second half of an incarnation's span (at least two)."""
    middle = (samples[0].t + samples[-1].t) / 2
    return [s for s in samples if s.t >= middle] or list(samples[-2:])


def steady_p99(samples: Sequence[Sample], warm_up_s: float) -> float:
    """The lag's p99 in the warm-up after its first minute: what a recovery comes back under."""
    steady = [s.lag for s in samples if 60 <= s.t <= warm_up_s and s.lag is not None]
    return statistics.quantiles(steady, n=100)[98] if len(steady) >= 2 else 0


def first_back(
    samples: Sequence[Sample], since: float, p99: float, until: float = float("inf")
) -> float | None:
    """The time of the first sample in [``since``, ``until``) with the lag back under ``p99``."""
    return next(
        (s.t for s in samples if since <= s.t < until and s.lag is not None and s.lag <= p99),
        None,
    )


def judged_at(samples: Sequence[Sample], repaired: float, p99: float) -> float | None:
    """When a fault repaired at ``repaired`` is judged: the first sample after it with the
    lag back under ``p99``, or the recovery target's end; None: neither yet."""
    back = first_back(samples, repaired, p99)
    if back is not None:
        return back
    latest = samples[-1].t if samples else None
    if latest is not None and latest >= repaired + RECOVERY_TARGET_S:
        return repaired + RECOVERY_TARGET_S
    return None


def analyse(run: Run, warm_up_s: float, min_span_s: float) -> dict[str, Any]:
    """The figures of the module docstring."""
    p99 = steady_p99(run.samples, warm_up_s)
    recoveries = []
    for index, fault in enumerate(run.faults):
        following = run.faults[index + 1].at if index + 1 < len(run.faults) else float("inf")
        back_at = first_back(run.samples, fault.repaired, p99, until=following)
        back = None if back_at is None else back_at - fault.repaired
        judged_until = min(following, fault.repaired + RECOVERY_TARGET_S)
        measured = any(
            s.lag is not None for s in run.samples if fault.repaired <= s.t < judged_until
        )
        during = [s.healthz for s in run.samples if fault.at <= s.t <= fault.repaired]
        expected: int | None = None if fault.kind is FaultKind.SIDECAR_KILL else 200
        told = sum(1 for answer in during if answer == expected)
        recoveries.append(
            {
                **{k: v for k, v in asdict(fault).items() if k != "kind"},
                "kind": fault.kind.name,
                "recovered_s": None if back is None else round(back, 1),
                "next_fault_after_s": (
                    None if following == float("inf") else round(following - fault.repaired, 1)
                ),
                "lag_unmeasured": not measured,
                "healthz_samples": len(during),
                "healthz_as_expected": told,
            }
        )
    incarnations = by_incarnation(run.processes, warm_up_s)
    growth = []
    for (role, pid), samples in sorted(incarnations.items()):
        if not long_enough(samples, min_span_s):
            continue
        growth.append(
            {
                "role": role,
                "pid": pid,
                "minutes": round((samples[-1].t - samples[0].t) / 60, 1),
                "rss_first_mib": round(samples[0].rss_mib, 1),
                "rss_last_mib": round(samples[-1].rss_mib, 1),
                "rss_mib_per_10_min": round(
                    slope_per_10_min([(s.t, s.rss_mib) for s in samples]), 2
                ),
                "anon_first_mib": round(samples[0].anon_mib, 1),
                "anon_last_mib": round(samples[-1].anon_mib, 1),
                "anon_mib_per_10_min": round(
                    slope_per_10_min([(s.t, s.anon_mib) for s in samples]), 2
                ),
                "anon_mib_per_10_min_se": rounded(
                    slope_error_per_10_min([(s.t, s.anon_mib) for s in samples])
                ),
                # A warm-up (JIT, caches filling) slows down; a leak keeps its pace.
                "anon_late_mib_per_10_min": round(
                    slope_per_10_min([(s.t, s.anon_mib) for s in later_half(samples)]), 2
                ),
                "anon_late_mib_per_10_min_se": rounded(
                    slope_error_per_10_min([(s.t, s.anon_mib) for s in later_half(samples)])
                ),
                "fds_first": samples[0].fds,
                "fds_last": samples[-1].fds,
                "fds_per_10_min": round(
                    slope_per_10_min([(s.t, float(s.fds)) for s in samples]), 2
                ),
                **segment_fd_figures(samples),
            }
        )
    lives: dict[str, list[float]] = {}
    for (role, _), samples in incarnations.items():
        lives.setdefault(role, []).append((samples[-1].t - samples[0].t) / 60)
    judged = {g["role"] for g in growth}
    unjudged = {
        role: {"incarnations": len(minutes), "longest_minutes": round(max(minutes), 1)}
        for role, minutes in sorted(lives.items())
        if role not in judged
    }
    return {
        "steady_lag_p99": p99,
        "faults": recoveries,
        "growth": growth,
        "growth_not_judged": unjudged,
        "native_growth": native_growth(run.native, warm_up_s, min_span_s),
        "live_heap_growth": live_heap_growth(run.live_heap, warm_up_s, min_span_s),
    }


def segment_fd_figures(samples: Sequence[ProcessSample]) -> dict[str, Any]:
    """The log segments among an incarnation's descriptors, first and last, and the slope of
    the others (what the no-growth target judges); empty when they were not counted."""
    if any(s.segment_fds is None for s in samples):
        return {}
    return {
        "segment_fds_first": samples[0].segment_fds,
        "segment_fds_last": samples[-1].segment_fds,
        "other_fds_per_10_min": round(
            slope_per_10_min([(s.t, float(s.fds - (s.segment_fds or 0))) for s in samples]), 2
        ),
    }


def cut_short(fault: Mapping[str, Any]) -> bool:
    """The lag had not come back when the next fault began, less than
    :data:`RECOVERY_TARGET_S` after this one's repair: whether it would have in time is not
    known (the schedule starts faults 45-90 s apart, and some last 60 s)."""
    gap = fault.get("next_fault_after_s")
    return fault["recovered_s"] is None and gap is not None and gap < RECOVERY_TARGET_S


def unmeasured(fault: Mapping[str, Any]) -> bool:
    """Not cut short, and the benchmark's own lag reader had no figure from the repair until
    the next fault or the target's end: nothing says whether the lag was back in time."""
    return bool(fault.get("lag_unmeasured")) and not cut_short(fault)


def omitted_line(kinds: Sequence[str] | None) -> list[str]:
    """The report's line naming the fault kinds a run left out (none for the full schedule)."""
    left_out = [kind.value for kind in FaultKind if kinds is not None and kind.name not in kinds]
    return [f"Faults left out of this run: {'; '.join(left_out)}."] if left_out else []


def report(figures: dict[str, Any], context: dict[str, Any]) -> str:
    """The markdown of results/soak.md."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for fault in figures["faults"]:
        by_kind.setdefault(fault["kind"], []).append(fault)
    table_format = context.get("table_format", "delta")  # runs before the option: Delta
    lines = [
        "# Soak: the autoscaler under faults",
        "",
        context["machine"],
        context["broker"],
        f"Load {context['duration_s']:.0f} s, seed {context['seed']}, the first "
        f"{context['warm_up_s']:.0f} s without faults; steady-state lag p99 "
        f"{figures['steady_lag_p99']:.0f} records.",
        *omitted_line(context.get("fault_kinds")),
        *(
            [
                f"The consumers compacted the table beside their appends every "
                f"{context['compact_every_commits']} commits (compact_every_commits)."
            ]
            if context.get("compact_every_commits")
            else []
        ),
        *(
            ["Brokers ran with the JVM's native memory tracking (summary level)."]
            if context.get("broker_native_memory_tracking")
            else []
        ),
        "",
        *records_lines(context, table_format),
        "",
        row("fault", "count", "skipped", "lag back <= 60 s", "recovery p50 / max (s)")
        + " /healthz as expected |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for kind in FaultKind:
        done = by_kind.get(kind.name, [])
        applied = [f for f in done if not f["skipped"]]
        short = sum(1 for f in applied if cut_short(f))
        blind = sum(1 for f in applied if unmeasured(f))
        judged = [f for f in applied if not cut_short(f) and not unmeasured(f)]
        times = [f["recovered_s"] for f in judged if f["recovered_s"] is not None]
        never = len(judged) - len(times)
        within = sum(1 for t in times if t <= RECOVERY_TARGET_S)
        notes = [f"{short} cut short by the next fault"] if short else []
        notes += [f"{blind} not measured: no lag figure"] if blind else []
        notes += [f"{never} never"] if never else []
        answers = sum(f["healthz_samples"] for f in applied)
        expected = sum(f["healthz_as_expected"] for f in applied)
        lines.append(
            row(
                kind.value,
                len(applied),
                len(done) - len(applied),
                f"{within} of {len(applied) - short - blind}"
                + (f" ({', '.join(notes)})" if notes else ""),
                f"{statistics.median(times):.0f} / {max(times):.0f}" if times else "-",
                f"{expected} of {answers}",
            )
        )
    segments = any("other_fds_per_10_min" in g for g in figures["growth"])
    lines += [
        "",
        f"Cut short: the next fault began less than {RECOVERY_TARGET_S:.0f} s after the "
        "fault's repair, before the lag was back; not judged (the schedule starts faults "
        "45-90 s apart, and a cut lasts up to 60 s). Not measured: the benchmark's own lag "
        "reader had no figure from the repair until the next fault or the target's end, so "
        "nothing says whether the lag came back. Never: the lag did not come back before "
        "the next fault, which began later than that.",
        "",
        "Long-lived processes after the warm-up (each incarnation that lived long enough). "
        "After each slope, its standard error: a process whose memory swings with its work "
        "(a consumer's backlogs, a JVM's heap) gives a slope no finer than about twice that."
        + (
            " A broker keeps each log segment of its partitions open until retention deletes "
            "it: those descriptors follow the data kept, and the no-growth target judges the "
            "other ones."
            if segments
            else ""
        ),
        "",
        row("process", "pid", "minutes", "RSS first -> last (MiB)", "RSS MiB / 10 min")
        + " anonymous first -> last (MiB) | anonymous MiB / 10 min ± standard error"
        + " | its second half"
        + " | fds first -> last | fds / 10 min |"
        + (" log segments among them, first -> last | other fds / 10 min |" if segments else ""),
        "|---|---:|---:|---|---:|---|---:|---:|---|---:|" + ("---|---:|" if segments else ""),
    ]
    for g in figures["growth"]:
        segment_cells = (
            (
                f"{g['segment_fds_first']} -> {g['segment_fds_last']}",
                g["other_fds_per_10_min"],
            )
            if "other_fds_per_10_min" in g
            else ("-", "-")
        )
        lines.append(
            row(
                g["role"],
                g["pid"],
                g["minutes"],
                f"{g['rss_first_mib']} -> {g['rss_last_mib']}",
                g["rss_mib_per_10_min"],
                f"{g['anon_first_mib']} -> {g['anon_last_mib']}",
                with_error(g["anon_mib_per_10_min"], g.get("anon_mib_per_10_min_se")),
                with_error(
                    g.get("anon_late_mib_per_10_min", "-"), g.get("anon_late_mib_per_10_min_se")
                ),
                f"{g['fds_first']} -> {g['fds_last']}",
                g["fds_per_10_min"],
                *(segment_cells if segments else ()),
            )
        )
    lines += not_judged_lines(figures.get("growth_not_judged") or {})
    lines += native_lines(
        figures.get("native_growth") or [],
        context.get("broker_nmt_every_s", NATIVE_SAMPLE_S),
    )
    lines += live_heap_lines(figures.get("live_heap_growth") or [])
    return "\n".join(lines)


def rounded(value: float | None) -> float | None:
    """``value`` to two decimals, or None."""
    return None if value is None else round(value, 2)


def with_error(slope: object, error: float | None) -> str:
    """A slope and, when known, its standard error (``1.88 ± 1.48``)."""
    return f"{slope}" if error is None else f"{slope} ± {error:.2f}"


def not_judged_lines(unjudged: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The processes whose growth could not be judged, and how long they lived."""
    if not unjudged:
        return []
    return [
        "",
        "Not judged (no incarnation lived long enough after the warm-up: faults killed them, "
        "or the sidecar scaled them in): "
        + "; ".join(
            f"{role} ({u['incarnations']} incarnation(s), the longest {u['longest_minutes']} min)"
            for role, u in unjudged.items()
        )
        + ".",
    ]


def plot(run: Run, path: Path) -> None:
    """Lag and consumers over time, each fault a shaded span."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    top.plot(
        [s.t for s in run.samples],
        [s.lag if s.lag is not None else float("nan") for s in run.samples],
        lw=0.8,
    )
    top.set_ylabel("lag (records)")
    bottom.step(
        [s.t for s in run.samples],
        [s.replicas if s.replicas is not None else float("nan") for s in run.samples],
        where="post",
    )
    bottom.set_ylabel("consumers")
    bottom.set_xlabel("seconds")
    palette = plt.get_cmap("tab10")
    colours = {kind: palette(index) for index, kind in enumerate(FaultKind)}
    for fault in run.faults:
        for axis in (top, bottom):
            axis.axvspan(
                fault.at, max(fault.repaired, fault.at + 2), color=colours[fault.kind], alpha=0.25
            )
    handles = [Patch(color=colours[k], alpha=0.4) for k in FaultKind]
    top.legend(handles, [k.name.lower() for k in FaultKind], fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fault_kinds(text: str) -> tuple[FaultKind, ...]:
    """``--faults``: names of :class:`FaultKind`, comma-separated, case-insensitive."""
    names = [name.strip().upper() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FaultKind.__members__]
    if not names or unknown:
        accepted = ", ".join(kind.name.lower() for kind in FaultKind)
        raise argparse.ArgumentTypeError(f"--faults takes some of {accepted}; got {text!r}")
    return tuple(FaultKind[name] for name in names)


def missing_tools(kinds: Sequence[FaultKind]) -> list[str]:
    """The commands ``kinds`` need that are not on PATH, each with its Debian package."""
    needed = {"mount": "mount"}
    if FaultKind.NETWORK_CUT in kinds:
        needed["nft"] = "nftables"
    return [
        f"{tool} (Debian: {package})" for tool, package in needed.items() if not shutil.which(tool)
    ]


def transaction_figures(
    outcomes: TransactionOutcomes, in_log: set[Record], rows: set[Record], replaced: int
) -> dict[str, Any]:
    """What the transactional producer's records became, in the log and in the table."""
    return {
        "transactions": outcomes.transactions,
        "producers_replaced": replaced,
        "aborted_records": len(outcomes.aborted),
        "aborted_landed": len(outcomes.aborted & rows),
        "unknown_records": len(outcomes.unknown),
        "unknown_committed": len(outcomes.unknown & in_log),
        "committed_not_in_log": len(outcomes.committed - in_log),
        "aborted_in_log": len(outcomes.aborted & in_log),
        "landed_not_committed": len(rows - in_log),
    }


def records_lines(context: Mapping[str, Any], table_format: str) -> list[str]:
    """The report's line on records: for a transactional producer, what each transaction's
    records became and what of them the table holds."""
    table = (
        f"{context['missing']} missing, {context['duplicated']} duplicated in the "
        f"{table_format.capitalize()} table (read by {READERS[table_format]})"
    )
    if context.get("producer", "plain") == "plain":
        return [
            f"**Records**: {context['produced']} produced, {table}; "
            f"{context['failed_sends']} sends failed at the producer."
        ]
    done = context["transactions"]
    return [
        f"**Records**: {context['produced']} in committed transactions (what a read_committed "
        f"reader finds in the log), {table}; **{context['aborted_landed']} of "
        f"{context['aborted_records']} records of aborted transactions landed**, and "
        f"{context['landed_not_committed']} rows in all that the log does not hold as "
        "committed.",
        "",
        f"The producer (confluent-kafka, transactional, zstd, a transaction a second, every "
        f"fifth aborted on purpose): {done['committed']} transactions committed, "
        f"{done['aborted']} aborted, {done['unknown']} of unknown outcome when the producer "
        f"had to be replaced ({context['producers_replaced']} replacement(s); of their "
        f"{context['unknown_records']} acknowledged records the log holds "
        f"{context['unknown_committed']} as committed); "
        f"{context['committed_not_in_log']} records of transactions whose commit succeeded "
        f"were not in the log, {context['aborted_in_log']} of aborted ones were; "
        f"{context['failed_sends']} sends failed at the producer.",
    ]


def result_name(
    kinds: Sequence[str],
    table_format: str = "delta",
    compacting: bool = False,
    producer: str = "plain",
) -> str:
    """The name under results/: ``soak`` for every fault kind on Delta, ``soak_<kinds>`` for a
    subset, ``soak_[<format>_][compacting_][transactional_]<kinds>`` on another format, with
    compaction or a transactional producer, so a run that leaves out some faults (to judge
    growth of processes the kills restart), writes another format, compacts or reads
    transactions does not replace the full hour."""
    parts = ["soak"] + ([] if table_format == "delta" else [table_format])
    parts += ["compacting"] if compacting else []
    parts += [] if producer == "plain" else [producer]
    if not set(kinds) >= {kind.name for kind in FaultKind}:
        parts += [kind.name.lower() for kind in FaultKind if kind.name in kinds]
    return "_".join(parts)


def reread(path: Path) -> dict[str, Any]:
    """A finished run's JSON, its figures analysed again by this code from what it recorded
    (samples, processes, the faults as they happened)."""
    data: dict[str, Any] = json.loads(path.read_text())
    run = Run(
        samples=[Sample(**s) for s in data["samples"]],
        processes=[ProcessSample(**p) for p in data["processes"]],
        native=[NativeSample(**n) for n in data.get("native", [])],
        live_heap=[LiveHeapSample(**h) for h in data.get("live_heap", [])],
        faults=[
            InjectedFault(
                FaultKind[f["kind"]], f["at"], f["repaired"], f["target"], f.get("skipped", "")
            )
            for f in data["faults"]
        ],
    )
    return data | analyse(run, data["warm_up_s"], min_span_s(data["duration_s"]))


def min_span_s(duration_s: float) -> float:
    """How long an incarnation must live after the warm-up for its growth to be judged."""
    return 20 * 60 if duration_s >= 2400 else 300


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak; exit 1 if a record is missing or duplicated, or (transactional) a row
    is not of a committed transaction."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    parser.add_argument(
        "--warm-up", type=float, default=300.0, help="seconds before the first fault"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--warehouse-mib", type=int, default=4096, help="the warehouse tmpfs size")
    parser.add_argument("--output", type=Path, default=Path("/tmp/kafka-autoscaler-soak"))
    parser.add_argument(
        "--faults",
        type=fault_kinds,
        default=tuple(FaultKind),
        help="comma-separated fault kinds to inject (default: all), e.g. spark_kill,broker_kill",
    )
    parser.add_argument(
        "--broker-nmt",
        action="store_true",
        help="start the brokers with the JVM's native memory tracking, for jcmd VM.native_memory",
    )
    parser.add_argument(
        "--broker-nmt-every",
        type=float,
        default=NATIVE_SAMPLE_S,
        metavar="SECONDS",
        help=f"with --broker-nmt, ask each broker every SECONDS (>= {MIN_NATIVE_SAMPLE_S:.0f}; "
        f"default {NATIVE_SAMPLE_S:.0f}): restarted brokers live minutes, not hours",
    )
    parser.add_argument(
        "--live-heap",
        action="store_true",
        help="every 5 minutes, take a class histogram of each broker and the Spark Connect "
        "server (jcmd GC.class_histogram, a full collection): what their heaps hold alive",
    )
    parser.add_argument(
        "--table-format",
        choices=sorted(READERS),
        default="delta",
        help="the lake format the consumers write (default delta)",
    )
    parser.add_argument(
        "--compact-every-commits",
        type=int,
        default=0,
        metavar="N",
        help="the consumers compact the table beside their appends every N commits "
        "(default 0: never, the sink's default)",
    )
    parser.add_argument(
        "--producer",
        choices=("plain", "transactional"),
        default="plain",
        help="plain: acknowledged records, no transactions (default); transactional: "
        "confluent-kafka's transactional producer, a transaction a second, every fifth "
        "aborted; the table must hold what a read_committed reader finds in the log, once",
    )
    parser.add_argument("--no-write", action="store_true", help="print, do not save results/")
    parser.add_argument(
        "--report-from",
        type=Path,
        metavar="JSON",
        help="run nothing: rewrite results/soak.{md,json} from a finished run's JSON with this "
        "code's report (after a change to the report)",
    )
    args = parser.parse_args(argv)
    if args.report_from is not None:
        data = reread(args.report_from)
        table = report(data, data)
        print(table)
        if not args.no_write:
            name = result_name(
                data.get("fault_kinds", [kind.name for kind in FaultKind]),
                data.get("table_format", "delta"),
                bool(data.get("compact_every_commits")),
                data.get("producer", "plain"),
            )
            (RESULTS / f"{name}.md").write_text(table + "\n")
            (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        return 0
    if args.broker_nmt_every < MIN_NATIVE_SAMPLE_S:
        parser.error(
            f"--broker-nmt-every must be at least {MIN_NATIVE_SAMPLE_S:.0f} seconds, "
            f"got {args.broker_nmt_every:g}"
        )
    if args.compact_every_commits < 0:
        parser.error(f"--compact-every-commits must be >= 0, got {args.compact_every_commits}")
    if os.geteuid() != 0:
        parser.error("the soak needs root (tmpfs, cgroups, nftables)")
    if missing := missing_tools(args.faults):
        parser.error(f"the soak needs {', '.join(missing)}: not found on PATH")
    if not 60 <= args.warm_up < args.duration:
        parser.error(f"--warm-up must be in [60, --duration), got {args.warm_up}")
    out = args.output / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    run = Run()
    plan = schedule(
        args.seed, args.warm_up, args.duration - 60, args.faults, session_s=SESSION_MS / 1000
    )
    with contextlib.ExitStack() as stack:
        stack.callback(network_cut.clean_up)
        warehouse = stack.enter_context(tmpfs(out / "warehouse", args.warehouse_mib))
        kafka = stack.enter_context(
            kafka_cluster(
                ClusterKind.APACHE,
                brokers=BROKERS,
                apache_heap_committed=True,
                apache_native_memory_tracking=args.broker_nmt,
            )
        )
        spark = stack.enter_context(
            SparkConnectServer(warehouse, log_file=out / "spark-connect.log")
        )
        broker = kafka.broker_handle()
        broker.create_topic(TOPIC, PARTITIONS, BROKERS)
        broker.create_topic(SPEEDS, 1, BROKERS)
        soak = Soak(kafka, spark, out, args.seed, args.table_format, args.compact_every_commits)
        soak.start_sidecar()
        stack.callback(soak.stop_sidecar)
        walk = RateWalk(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
            low=30,
            high=120,
            delta=10,
            duration_s=args.duration,
            step_up=1.0,
            step_down=1.0,
            seed=args.seed,
        )
        load = (
            TransactionalLoad(kafka.bootstrap_servers, walk, value_bytes=200)
            if args.producer == "transactional"
            else LoadGenerator(kafka.bootstrap_servers, walk, value_bytes=200)
        )
        soak.started = load.started_at = time.monotonic()
        load.start()
        sampler = Sampler(soak, run)
        sampler.start()
        jvm_sampler = JvmSampler(
            soak,
            run,
            native_every_s=args.broker_nmt_every if args.broker_nmt else None,
            live_heap=args.live_heap,
        )
        if args.broker_nmt or args.live_heap:
            jvm_sampler.start()
        stop = threading.Event()
        try:
            shift, last, p99 = 0.0, None, None
            for fault in plan:
                verdict = None
                if last is not None:
                    # The next fault waits for the last one's verdict, so none is cut short;
                    # the p99 is the warm-up's, fixed once the first fault has run.
                    if p99 is None:
                        p99 = steady_p99(run.samples, args.warm_up)
                    verdict = judged_at(list(run.samples), last.repaired, p99)
                    while verdict is None and not stop.wait(SAMPLE_S):
                        verdict = judged_at(list(run.samples), last.repaired, p99)
                start = delayed_start(fault.at, shift, verdict)
                if start + fault.duration > args.duration - 60:
                    break
                shift = start - fault.at
                if stop.wait(max(0.0, start - soak.elapsed())):
                    break
                done = soak.inject(fault, stop)
                last = done
                run.faults.append(done)
                print(
                    f"{done.at:7.0f} s {fault.kind.value}: {done.target or done.skipped} "
                    f"(repaired at {done.repaired:.0f} s)",
                    flush=True,
                )
            load.join(args.duration + 120)
            # Drain: the sidecar keeps running until the group has caught up.
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                recent = [s.lag for s in run.samples[-3:]]
                if recent and all(v == 0 for v in recent):
                    break
                time.sleep(SAMPLE_S)
        except KeyboardInterrupt:
            stop.set()
            load.stop()
        finally:
            for thread in (sampler, jvm_sampler):
                thread.halt.set()
                if thread.is_alive():
                    thread.join(150)
            soak.stop_sidecar()
        rows = landed(warehouse, args.table_format)
        in_log = (
            committed_in_log(kafka.bootstrap_servers, TOPIC, PARTITIONS)
            if isinstance(load, TransactionalLoad)
            else None
        )
        context = {
            "machine": machine_line(),
            "broker": broker_line(kafka),
            "duration_s": args.duration,
            "warm_up_s": args.warm_up,
            "seed": args.seed,
            "fault_kinds": [kind.name for kind in args.faults],
            "table_format": args.table_format,
            "compact_every_commits": args.compact_every_commits,
            "broker_native_memory_tracking": args.broker_nmt,
            "broker_nmt_every_s": args.broker_nmt_every,
            "live_heap": args.live_heap,
            "producer": args.producer,
        }
    produced = {(p, o) for (_, p, o) in load.acked}
    if isinstance(load, TransactionalLoad) and in_log is not None:
        context |= transaction_figures(load.outcomes, in_log, set(rows), load.replaced)
        produced = in_log
    context |= {
        "produced": len(produced),
        "missing": len(produced - set(rows)),
        "duplicated": sum(n - 1 for n in rows.values()),
        "failed_sends": load.failed,
    }
    figures = analyse(run, args.warm_up, min_span_s(args.duration))
    table = report(figures, context)
    data = {
        **context,
        **figures,
        "samples": [asdict(s) for s in run.samples],
        "processes": [asdict(p) for p in run.processes],
        "native": [asdict(n) for n in run.native],
        "live_heap": [asdict(h) for h in run.live_heap],
    }
    name = result_name(
        context["fault_kinds"],
        args.table_format,
        bool(args.compact_every_commits),
        args.producer,
    )
    publish(name, table, data, write=not args.no_write)
    if not args.no_write:
        plot(run, RESULTS / f"{name}.png")
    (out / "soak.md").write_text(table + "\n")
    (out / "soak.json").write_text(json.dumps(data) + "\n")
    exact = context["missing"] == 0 and context["duplicated"] == 0
    return 0 if exact and not context.get("landed_not_committed") else 1


if __name__ == "__main__":
    sys.exit(main())
