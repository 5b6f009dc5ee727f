"""What the KIP-848 sidecar tests share: the sidecar process sizing a group of
``examples/kip848_consumer.py`` members, the load it sizes for, and what the members wrote."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from local_kafka.processes import processes_mentioning
from tests.sdk_helpers import local_sidecar_env, sidecar_status, start_sidecar_process

ROOT = Path(__file__).parent.parent
CONSUMER = ROOT / "examples" / "kip848_consumer.py"
RATES = (160, 120, 80, 40, 40, 40)  # records/s per partition: 480 in all
CAPACITY = 250.0  # records/s per consumer: two are needed, and the plan is not an even split


def rows(folder: Path) -> set[tuple[int, int]]:
    """(partition, offset) of every complete line the consumers wrote."""
    found: set[tuple[int, int]] = set()
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().split("\n")[:-1]:
            row = json.loads(line)
            found.add((row["partition"], row["offset"]))
    return found


def running(folder: Path) -> list[str]:
    """The members (by instance id) whose consumer process writes into ``folder`` and runs."""
    return sorted(
        words[words.index("--instance-id") + 1]
        for words in processes_mentioning(str(folder)).values()
        if str(CONSUMER) in words
    )


def member_loads(page: dict[str, Any]) -> dict[str, float]:
    """Each planned member's load by the sidecar's own speeds."""
    speeds = page["speeds"]
    plan = page["broker_plans"]["plan"] or {}
    return {member: sum(speeds.get(tp, 0.0) for tp in tps) for member, tps in plan.items()}


def kip848_sidecar(
    bootstrap: str,
    topic: str,
    consumer: str,
    port: int,
    folder: Path,
    *,
    max_replicas: int,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """A sidecar CLI process for group ``g-<topic>`` with ``--group-protocol consumer`` and
    the local scaler starting ``consumer``; ``env`` is added to its environment (security
    settings, for example); its stderr is piped."""
    variables = local_sidecar_env(
        bootstrap,
        topic,
        f"speeds-{topic}",
        consumer,
        http_port=port,
        lock_file=str(folder / "lock"),
        capacity=CAPACITY,
        max_replicas=max_replicas,
    )
    variables |= {"AUTOSCALER_GROUP_PROTOCOL": "consumer", "AUTOSCALER_SCALE_DOWN_WINDOW": "2"}
    variables |= env or {}
    return start_sidecar_process([], variables, ROOT)


def planned_and_held(port: int, members: int = 2) -> bool:
    """Whether the sidecar on ``port`` sized the group to at least ``members`` and the group
    reads as its last plan says."""
    page = sidecar_status(port)
    plans = page.get("broker_plans") or {}
    return (page.get("replicas") or 0) >= members and bool(plans.get("holds"))
