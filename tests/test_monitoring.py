"""The alert rules and the Grafana dashboard of examples/monitoring: every metric they name is
one the code exports, promtool accepts the rules and passes their unit tests, and every
dashboard query parses."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from consumer_sdk import metrics as consumer_metrics
from local_kafka.clusters import required_legs
from sidecar import metrics as sidecar_metrics

MONITORING = Path(__file__).parents[1] / "examples" / "monitoring"
RULES = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "dashboard.json"
METRIC = re.compile(r"\bautoscaler_[a-z0-9_]+")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# Grafana's variables, as a query would run.
VARIABLES = {"$group": "orders", "$__rate_interval": "1m", "${datasource}": "prometheus"}


def exported() -> dict[str, str]:
    """Every metric name the sidecar and the consumers export -> its type."""
    names: dict[str, str] = {}
    for module in (sidecar_metrics, consumer_metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                suffix = "_total" if value._type == "counter" else ""
                names[value._name + suffix] = str(value._type)
    return names


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    variables = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return queries + variables


def named(expression: str) -> set[str]:
    """The metric names an expression reads, histogram series by their histogram's name."""
    names = set()
    for name in METRIC.findall(expression):
        for suffix in HISTOGRAM_SERIES:
            if name.endswith(suffix) and exported().get(name.removesuffix(suffix)) == "histogram":
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def promtool() -> str:
    """make test's promtool (taken out of Debian's package into the cache), else one on PATH."""
    cache = Path(os.environ.get("KAFKA_AUTOSCALER_CACHE") or MONITORING.parents[1] / ".cache")
    cached = cache / "promtool" / "usr" / "bin" / "promtool"
    found = str(cached) if cached.is_file() else shutil.which("promtool")
    if found is None:
        reason = "promtool not available (make test takes it out of Debian's prometheus package)"
        if "promtool" in required_legs():
            pytest.fail(f"the promtool leg is required here: {reason}")
        pytest.skip(reason)
    return found


def test_every_metric_the_rules_and_the_dashboard_read_is_exported() -> None:
    rules = set().union(*map(named, rule_expressions()))
    dashboard = set().union(*map(named, dashboard_expressions()))
    assert len(rules) >= 10 and len(dashboard) >= 20
    assert (rules | dashboard) - set(exported()) == set()


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    tool = promtool()
    for command in (["check", "rules", RULES.name], ["test", "rules", "alerts_test.yaml"]):
        done = subprocess.run(
            [tool, *command], cwd=MONITORING, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    # promtool parses expressions in rule files only: each query becomes a recording rule.
    queries = [q for q in dashboard_expressions() if not q.startswith("label_values(")]
    for variable, value in VARIABLES.items():
        queries = [q.replace(variable, value) for q in queries]
    rules = [{"record": f"dashboard:query_{i}", "expr": q} for i, q in enumerate(queries)]
    path = tmp_path / "dashboard_queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout


def test_the_dashboards_panels_have_queries_and_distinct_ids() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert all(panel["targets"] for panel in panels)
    assert len({panel["id"] for panel in panels}) == len(panels) >= 10
