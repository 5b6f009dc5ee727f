"""The console scripts. Each checks that the extra its command needs is installed before it
imports the command, so a command used without its extra says in one line which extra to
install (exit 2) instead of failing with an ImportError's traceback.

The base install carries the heuristics and the contract; ``pip install
'kafka-autoscaler[sidecar]'`` the sidecar, ``[consumer]`` the SDK, ``[spark]`` the Spark table
sink, ``[kubernetes]`` the sidecar's Kubernetes scaler, ``[keda]`` its KEDA external scaler,
``[demo]`` the demo and local brokers.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contract.extras import missing_extra_line, missing_modules

USAGE_ERROR = 2


@dataclass(frozen=True)
class Command:
    """A console script: where its ``main`` lives, the extra it needs and the modules of
    that extra it imports."""

    name: str
    target: str  # "module:function"
    extra: str | None
    modules: tuple[str, ...] = ()


COMMANDS = {
    c.name: c
    for c in (
        Command("kafka-autoscaler-assign", "assignor.cli:main", None),
        Command("kafka-autoscaler-sidecar", "sidecar.cli:main", "sidecar", ("prometheus_client",)),
        Command(
            "kafka-autoscaler-consumer",
            "consumer_sdk.cli:main",
            "consumer",
            ("pyarrow", "numpy", "cramjam", "prometheus_client"),
        ),
        Command(
            "kafka-autoscaler-compact",
            "consumer_sdk.lake.compact:main",
            "spark",
            ("pyspark", "pyarrow", "numpy", "deltalake"),
        ),
        Command(
            "kafka-autoscaler-broker", "local_kafka.broker_cli:main", "demo", ("confluent_kafka",)
        ),
    )
}


def run(name: str, argv: Sequence[str] | None = None) -> int:
    """Run the command ``name`` if its extra is installed; else print one line and return 2."""
    command = COMMANDS[name]
    missing = missing_modules(command.modules)
    if missing and command.extra is not None:
        print(missing_extra_line(command.name, command.extra, missing), file=sys.stderr)
        return USAGE_ERROR
    module, function = command.target.split(":")
    main: Callable[..., int | None] = getattr(importlib.import_module(module), function)
    result = main(argv) if argv is not None else main()
    return int(result or 0)


def assign() -> int:
    """``kafka-autoscaler-assign``."""
    return run("kafka-autoscaler-assign")


def sidecar() -> int:
    """``kafka-autoscaler-sidecar``."""
    return run("kafka-autoscaler-sidecar")


def consumer() -> int:
    """``kafka-autoscaler-consumer``."""
    return run("kafka-autoscaler-consumer")


def compact() -> int:
    """``kafka-autoscaler-compact``."""
    return run("kafka-autoscaler-compact")


def broker() -> int:
    """``kafka-autoscaler-broker``."""
    return run("kafka-autoscaler-broker")
