"""Where and when a benchmark ran, recorded beside its figures."""

from __future__ import annotations

import datetime
import os
import platform
import sys


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
    }


def machine_line() -> str:
    """One markdown line describing the machine and date."""
    info = machine_info()
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}; "
        f"run {info['date_utc']} UTC."
    )
