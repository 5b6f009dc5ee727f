"""Print a benchmark's markdown table and commit-ready files under ``results/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.support.machine import machine_info

RESULTS = Path(__file__).resolve().parent.parent / "results"


def row(*cells: object) -> str:
    """One markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def publish(name: str, table: str, data: dict[str, Any], *, write: bool = True) -> None:
    """Print ``table``; with ``write``, save ``results/<name>.md`` and ``results/<name>.json``
    (``data`` plus the machine and date)."""
    print(table)
    if not write:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.md").write_text(table + "\n")
    payload = {"machine": machine_info(), **data}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
