"""The reference pages of the docs, generated from the code they describe:
``docs/configuration.md`` from the settings definitions (each field's variable, flag, default
and the meaning and accepted range its :func:`contract.settings.setting` declares) and
``docs/metrics.md`` from the Prometheus metrics the consumer and the sidecar register.
``python -m kafka_autoscaler.reference_pages --write`` rewrites them; a test fails when a
committed page and the code disagree."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, Field, fields
from pathlib import Path
from types import ModuleType
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from consumer_sdk import metrics as consumer_metrics
from consumer_sdk.cli import SINK_HELP
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.lake.spark_config import SparkSinkConfig, spark_env_name
from contract.settings import GroupSettings, env_name, setting_help
from sidecar import metrics as sidecar_metrics
from sidecar.config import DERIVED, SidecarConfig, flag_name

DOCS = Path(__file__).resolve().parent.parent / "docs"
_PYTHON = shlex.quote(sys.executable)

HEADER = """# Configuration reference

Generated from the settings definitions (`python -m kafka_autoscaler.reference_pages
--write`); a test fails when this page and the code disagree. Every value is checked when a
process starts: a bad one stops it with one line naming the setting, its variable and the
accepted range.

- **Consumers** (`AutoscalingConsumer`, `kafka-autoscaler-consumer`) take keyword arguments
  of `ConsumerConfig`, else the `AUTOSCALER_*` variables.
- **The Spark table sink** takes `SparkSinkConfig` arguments, else `AUTOSCALER_SPARK_*`.
- **The sidecar** (`kafka-autoscaler-sidecar`) takes flags, else the same variables.
- The **shared** settings mean the same to both; give consumers and the sidecar the same
  values (the sidecar's local scaler passes its own to the consumers it starts).
"""


def _default(f: Field[Any]) -> str:
    if f.default is not MISSING:
        value = f.default
        if value is None:
            return "unset"
        if isinstance(value, str):
            return f"`{value.replace(_PYTHON, '<python>')}`" if value else "empty"
        return f"`{value}`"
    factory: Any = f.default_factory
    if factory is dict:
        return "empty"
    if factory is not MISSING:
        return "see meaning"
    return "required"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _rows(items: Iterable[Field[Any]], variable: Callable[[str], str], flag: bool) -> list[str]:
    heads = ["setting", "variable", *(["flag"] if flag else []), "default"]
    heads.append("meaning and accepted values")
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for f in items:
        cells = [f"`{f.name}`", f"`{variable(f.name)}`"]
        if flag:
            # A secret is no flag: the command line shows in the process list.
            cells.append("none (secret)" if f.metadata.get("secret") else f"`{flag_name(f.name)}`")
        cells += [_default(f), _cell(setting_help(f))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def configuration_page() -> str:
    """``docs/configuration.md``."""
    shared = {f.name for f in fields(GroupSettings)}
    sections = [
        HEADER,
        "## Shared by consumers and the sidecar\n",
        *_rows(fields(GroupSettings), env_name, flag=True),
        "\n## Consumers\n",
        *_rows((f for f in fields(ConsumerConfig) if f.name not in shared), env_name, False),
        "| `sink` (`kafka-autoscaler-consumer --sink`) | `AUTOSCALER_SINK` | required | "
        f"{_cell(SINK_HELP)} |",
        "\n## The Spark table sink\n",
        *_rows(fields(SparkSinkConfig), spark_env_name, flag=False),
        "\n## The sidecar\n",
        *_rows(
            (f for f in fields(SidecarConfig) if f.name not in shared | set(DERIVED)),
            env_name,
            flag=True,
        ),
    ]
    return "\n".join(sections) + "\n"


METRICS_HEADER = """# Metrics reference

Generated from the metrics the code registers (`python -m kafka_autoscaler.reference_pages
--write`); a test fails when this page and the code disagree. How to use them:
[Metrics and operations](operations.md).
"""


def _exposed_name(metric: MetricWrapperBase) -> str:
    name: str = metric._name
    return f"{name}_total" if metric._type == "counter" else name


def _metric_rows(module: ModuleType) -> list[str]:
    found = sorted(
        (value for value in vars(module).values() if isinstance(value, MetricWrapperBase)),
        key=_exposed_name,
    )
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for metric in found:
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        lines.append(
            f"| `{_exposed_name(metric)}` | {metric._type} | {labels or '-'} | "
            f"{_cell(metric._documentation)} |"
        )
    return lines


def metrics_page() -> str:
    """``docs/metrics.md``."""
    sections = [
        METRICS_HEADER,
        "## The sidecar (`/metrics` on `--http-port`)\n",
        *_metric_rows(sidecar_metrics),
        "\n## Each consumer (`/metrics` on `metrics_port`)\n",
        *_metric_rows(consumer_metrics),
    ]
    return "\n".join(sections) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "configuration.md": configuration_page,
    "metrics.md": metrics_page,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the pages, or ``--write`` them into ``docs/``."""
    parser = argparse.ArgumentParser(prog="python -m kafka_autoscaler.reference_pages")
    parser.add_argument("--write", action="store_true", help="write them into docs/")
    args = parser.parse_args(argv)
    for name, render in PAGES.items():
        if args.write:
            (DOCS / name).write_text(render())
        else:
            sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
