"""Wait until a fresh Apache Kafka cluster coordinates groups.

A new cluster creates ``__consumer_offsets`` on the first group request and then loads each
of its partitions; until a group's partition is loaded, every request of that group fails
(``GroupCoordinatorNotAvailable``, ``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``).
Clients retry, but a test that counts rounds does not: a sidecar ticking five times on a
fresh broker found its group's offsets unreadable in four of them (the flaky
``test_loop_scales_publishes_and_serves[apache]``). So the cluster handle waits here, once,
until one probe group per partition of the topic is described by its coordinator
(DescribeGroups goes to the same coordinator as the sidecar's OffsetFetch and fails the same
way until it is loaded; confluent-kafka 2.16.1's ``list_consumer_group_offsets`` crashed the
process here on the coordinator's NOT_COORDINATOR, librdkafka's known crash of an OffsetFetch
without a consumer group handle: confluent-kafka-python issue 1982). The probe runs in a child
process (``wait_in_child``): librdkafka also aborted once inside ``describe_consumer_groups``
on a fresh cluster (likely its open issue 4605: an assertion on a timed-out DescribeGroups),
and an abort there took the whole test session down with it; a child killed by a signal is
started again until the deadline. A child that exits with an error (a broken import, a bad
argument) would fail the same way every time, so that one stops the wait with its last line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

PROBE_PREFIX = "kafka-autoscaler-ready-"


class ProbeFailed(RuntimeError):
    """The probe child exited with an error (not a crash): starting it again would not help."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed), for text of the Basic Multilingual Plane."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka: ``Utils.abs(hashCode) % n``,
    where ``Utils.abs`` of the smallest int is 0)."""
    value = java_string_hash(group)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


def probe_groups(partitions: int) -> list[str]:
    """One group name per partition of ``__consumer_offsets``, in partition order."""
    if partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
    found: dict[int, str] = {}
    index = 0
    while len(found) < partitions:
        name = f"{PROBE_PREFIX}{index}"
        found.setdefault(offsets_partition(name, partitions), name)
        index += 1
    return [found[p] for p in range(partitions)]


def wait_for_group_coordinators(admin: Any, partitions: int, deadline: float) -> list[str]:
    """Describe each probe group through ``admin`` (a confluent-kafka ``AdminClient``) until
    every coordinator answers or ``deadline`` (monotonic) passes; the probe groups still
    failing then (empty: every coordinator answers)."""
    waiting = probe_groups(partitions)
    while waiting and time.monotonic() < deadline:
        for group in list(waiting):
            try:
                admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
            except Exception:  # not created, not loaded, or moving: asked again below
                continue
            waiting.remove(group)
        if waiting:
            time.sleep(0.1)
    return waiting


def probe_command(bootstrap: str, partitions: int, seconds: float) -> list[str]:
    """The child that probes (this module's ``main``)."""
    module = "local_kafka.group_coordinators"
    return [sys.executable, "-m", module, bootstrap, str(partitions), f"{seconds:.1f}"]


def wait_in_child(
    bootstrap: str,
    partitions: int,
    deadline: float,
    command: Sequence[str] | None = None,
) -> list[str]:
    """``wait_for_group_coordinators`` in a child process, started again if a signal kills it
    (a crash in the client library), until ``deadline`` (monotonic); the probe groups still
    failing. Raises :class:`ProbeFailed` with the child's last stderr line when it exits
    with an error of its own."""
    waiting = probe_groups(partitions)
    while (left := deadline - time.monotonic()) > 0:
        try:
            child = subprocess.run(
                list(command or probe_command(bootstrap, partitions, left)),
                capture_output=True,
                text=True,
                timeout=left + 30,
            )
        except subprocess.TimeoutExpired:
            break
        if child.returncode == 0:
            answer: list[str] = json.loads(child.stdout.strip().splitlines()[-1])
            return answer
        if child.returncode > 0:
            lines = child.stderr.strip().splitlines()
            raise ProbeFailed(
                f"the group coordinator probe exited with {child.returncode}: "
                + (lines[-1] if lines else "(nothing on stderr)")
            )
    return waiting


def main(argv: Sequence[str] | None = None) -> int:
    """Child: ``BOOTSTRAP PARTITIONS SECONDS``; prints the probe groups still failing (JSON)."""
    from confluent_kafka.admin import AdminClient

    bootstrap, partitions, seconds = argv if argv is not None else sys.argv[1:]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + float(seconds)
    print(json.dumps(wait_for_group_coordinators(admin, int(partitions), deadline)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
