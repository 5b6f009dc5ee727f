"""Where and when a benchmark ran, recorded beside its figures."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib.machinery
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from local_kafka.clusters import ClusterKind, KafkaCluster

# The checkout these benchmarks run from.
CHECKOUT = Path(__file__).resolve().parent.parent.parent


def machine_info() -> dict[str, str]:
    """Host, CPU, cores, Python and the UTC date of this run."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in cpuinfo
                    if line.startswith("model name")
                ),
                cpu,
            )
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": sys.version.split()[0],
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "code": code_at_start(),
    }


def code_version() -> str:
    """The commit measured (``+`` when the work tree had changes outside the results, which
    are what benchmarks write, not code), or ``unknown``."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = _git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+" if dirty else "")


@functools.cache
def code_at_start() -> str:
    """:func:`code_version` as it was when the benchmark started (this module is imported
    then, see the end of it), so a commit made while a long run goes on does not rename
    what it measured."""
    return code_version()


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=CHECKOUT, capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout.strip()


def copy_checkout(target: Path) -> Path:
    """The checkout's files as they are (tracked, and new ones git does not ignore; no
    symlinks) copied into ``target``: a tree to build from without touching the checkout."""
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=CHECKOUT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in names:
        source = CHECKOUT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def baseline_checkout(revision: str) -> Path:
    """A work tree of ``revision`` under .cache/baselines (to run another commit's code side
    by side with this one's), its record decoder built beside the module that loads it, with
    the compiler flags the install uses."""
    tree = CHECKOUT / ".cache" / "baselines" / revision
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), revision], cwd=CHECKOUT, check=True
        )
    source = next(tree.glob("consumer_sdk/**/native/kafka_records.c"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    library = source.parent.parent / f"_kafka_records{suffix}"
    subprocess.run(["cc", "-O3", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return tree


@contextlib.contextmanager
def imports_from(tree: Path | None) -> Iterator[None]:
    """Processes spawned inside import from ``tree`` first (multiprocessing's spawn hands
    the parent's ``sys.path`` to the child): another commit's code, its benchmark module
    included, runs in them. None: no change."""
    if tree is None:
        yield
        return
    sys.path.insert(0, str(tree))
    try:
        yield
    finally:
        sys.path.remove(str(tree))


# Set to 1 to write a result measured with uncommitted changes (its code then ends in "+").
ALLOW_DIRTY_ENV = "KAFKA_AUTOSCALER_BENCH_DIRTY"


class DirtyTree(SystemExit):
    """A result would name code no commit holds."""


def require_committed_code() -> None:
    """Refuse (one line, exit 2) a run whose code has uncommitted changes, unless
    ``KAFKA_AUTOSCALER_BENCH_DIRTY=1`` asks for it: a figure must name the code it came from."""
    code = code_at_start()
    if code.endswith("+") and os.environ.get(ALLOW_DIRTY_ENV) != "1":
        print(
            f"benchmark refused: the work tree has uncommitted changes (code {code}); commit "
            f"them, or set {ALLOW_DIRTY_ENV}=1 to measure them anyway",
            file=sys.stderr,
        )
        raise DirtyTree(2)


def machine_line() -> str:
    """One markdown line describing the machine and date (refused on uncommitted code:
    :func:`require_committed_code`)."""
    require_committed_code()
    info = machine_info()
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}; "
        f"run {info['date_utc']} UTC, code {info['code']}."
    )


def broker_line(kafka: KafkaCluster) -> str:
    """One markdown line naming the broker a benchmark measured on."""
    if kafka.kind is ClusterKind.APACHE:
        from local_kafka.apache_kafka import kafka_version

        nodes = kafka.broker_count
        return f"Broker: Apache Kafka {kafka_version()} (KRaft, {nodes} node(s) on this machine)."
    if kafka.kind is ClusterKind.EMBEDDED:
        import confluent_kafka

        return (
            f"Broker: embedded (librdkafka {confluent_kafka.libversion()[0]} mock cluster, "
            f"{kafka.broker_count} brokers)."
        )
    return f"Broker: {kafka.kind.value} cluster at {kafka.bootstrap_servers}."


def add_cluster_option(parser: argparse.ArgumentParser) -> None:
    """``--cluster apache|embedded`` (default apache), the same in every Kafka benchmark."""
    require_committed_code()  # at the start, not after the run
    parser.add_argument(
        "--cluster",
        choices=[ClusterKind.APACHE.value, ClusterKind.EMBEDDED.value],
        default=ClusterKind.APACHE.value,
        help="Apache Kafka started from its jars (default) or the embedded broker",
    )


code_at_start()  # when the benchmark starts: the code its figures come from
