"""The alert rules and the Grafana dashboard of examples/monitoring: every metric they name is
one the code exports, promtool accepts the rules and passes their unit tests, every dashboard
query parses, and a real Prometheus scraping a real sidecar and consumer evaluates every rule
and fills the panels a healthy run should."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from prometheus_client.metrics import MetricWrapperBase

from consumer_sdk import metrics as consumer_metrics
from contract.local_ports import free_port
from local_kafka.clusters import required_legs
from sidecar import metrics as sidecar_metrics
from tests.sdk_helpers import local_sidecar_env, wait_until

ROOT = Path(__file__).parents[1]
MONITORING = ROOT / "examples" / "monitoring"
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


def tool(name: str) -> str:
    """make test's ``name`` (promtool, prometheus: taken out of Debian's package into the
    cache), else one on PATH."""
    cache = Path(os.environ.get("KAFKA_AUTOSCALER_CACHE") or ROOT / ".cache")
    cached = cache / "promtool" / "usr" / "bin" / name
    found = str(cached) if cached.is_file() else shutil.which(name)
    if found is None:
        reason = f"{name} not available (make test takes it out of Debian's prometheus package)"
        if "promtool" in required_legs():
            pytest.fail(f"the promtool leg is required here: {reason}")
        pytest.skip(reason)
    return found


def promtool() -> str:
    return tool("promtool")


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


# The panels a healthy run fills (the others show faults, or a drain ceiling, when there are).
FILLED_BY_A_HEALTHY_RUN = {
    "Consumers",
    "Lag per topic",
    "Write speed per partition",
    "Records written per consumer",
    "Capacity",
    "Rscore of the plan",
    "Decisions",
    "Sidecars",
}


def query(port: int, expression: str) -> list[dict[str, Any]]:
    """An instant query of the Prometheus on ``port``; fails on an evaluation error."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", f"{expression}: {answer}"
    return list(answer["data"]["result"])


def api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=10) as answer:
        return json.loads(answer.read())["data"]


def test_a_real_prometheus_on_a_real_run_fills_the_panels_and_evaluates_every_rule(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    # A sidecar with one local consumer under load, both scraped every second by Prometheus
    # with the alert rules loaded: every dashboard query runs (vector matching fails only on
    # real series), a healthy run fills the panels it should, and no rule fails to evaluate
    # or fires.
    prometheus = tool("prometheus")
    topic = topic_factory(2)
    group = f"g-{topic}"  # local_sidecar_env's
    sidecar_port, consumer_port, prometheus_port = free_port(), free_port(), free_port()
    consumer = (
        f"env AUTOSCALER_METRICS_PORT={consumer_port} {shlex.quote(sys.executable)} "
        f"-m consumer_sdk.cli --sink jsonl:{tmp_path}/{{identity}}.jsonl"
    )
    env = local_sidecar_env(
        kafka,
        topic,
        topic_factory(1, prefix="speeds"),
        consumer,
        http_port=sidecar_port,
        lock_file=str(tmp_path / "lock"),
        capacity=1000,
        max_replicas=1,  # one consumer: one metrics port
    )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in (("sidecar", sidecar_port), ("consumer", consumer_port))
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    stop = threading.Event()

    def load() -> None:  # about 400 records/s until told to stop
        producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
        while not stop.is_set():
            for i in range(40):
                producer.produce(topic, value=b"x" * 100, partition=i % 2)
            producer.poll(0)
            stop.wait(0.1)
        producer.flush(30)

    with (tmp_path / "prometheus.log").open("w") as log:
        server = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
            stdout=log,
            stderr=log,
        )
        sidecar = subprocess.Popen([sys.executable, "-m", "sidecar.cli"], env=env, cwd=ROOT)
        loader = threading.Thread(target=load)
        loader.start()
        try:
            rate = f'rate(autoscaler_consumer_records_total{{group="{group}"}}[15s]) > 0'
            assert wait_until(lambda: ready(prometheus_port, rate), timeout_s=120), (
                tmp_path / "prometheus.log"
            ).read_text()[-2000:]
            # Three more rule evaluations on the series as they are now.
            stop.wait(3)
            panels = {
                panel["title"]: [
                    answer(prometheus_port, target["expr"], group) for target in panel["targets"]
                ]
                for panel in json.loads(DASHBOARD.read_text())["panels"]
            }
            rules = [r for g in api(prometheus_port, "rules")["groups"] for r in g["rules"]]
            firing = [a for a in api(prometheus_port, "alerts")["alerts"] if a["state"] == "firing"]
        finally:
            stop.set()
            loader.join(60)
            sidecar.send_signal(signal.SIGTERM)
            sidecar.wait(60)
            server.terminate()
            server.wait(30)
    empty = {title for title, results in panels.items() if not any(results)}
    assert not FILLED_BY_A_HEALTHY_RUN & empty, f"panels without data: {sorted(empty)}"
    assert len(rules) == len(rule_expressions()) > 0
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    assert firing == []


def ready(port: int, expression: str) -> bool:
    try:
        return bool(query(port, expression))
    except OSError:  # not listening yet
        return False


def answer(port: int, expression: str, group: str) -> list[dict[str, Any]]:
    """A dashboard query as Grafana would run it for ``group``."""
    for variable, value in {"$group": group, "$__rate_interval": "15s"}.items():
        expression = expression.replace(variable, value)
    return query(port, expression)
