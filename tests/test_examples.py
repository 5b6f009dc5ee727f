"""The shipped Kubernetes example stays valid: its configuration parses with the real
consumer and sidecar configs, and its Role grants what the scaler and Lease use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from consumer_sdk.config import ConsumerConfig
from sidecar.config import parse_args

EXAMPLES = Path(__file__).parent.parent / "examples" / "kubernetes"


def load(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / name).read_text()))


def container_env(container: dict[str, Any], configmap: dict[str, str]) -> dict[str, str]:
    env = dict(configmap)
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "pod-value-from-field")
    return env


def test_both_containers_configure_cleanly() -> None:
    (configmap,) = load("configmap.yaml")
    (deployment,) = load("deployment.yaml")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    consumer = ConsumerConfig.from_env(container_env(containers["consumer"], configmap["data"]))
    assert consumer.heuristic == "repair" and consumer.metrics_port == 9100
    sidecar_env = container_env(containers["sidecar"], configmap["data"])
    sidecar = parse_args([], sidecar_env)
    assert sidecar.scaler == "kubernetes" and sidecar.workload_name == "orders-sink"
    assert sidecar.heuristic == consumer.heuristic  # one flag for both
    assert sidecar.lease_name == "kafka-autoscaler-orders-sink"


def test_role_grants_exactly_what_the_sidecar_uses() -> None:
    role = next(doc for doc in load("rbac.yaml") if doc["kind"] == "Role")
    granted = {
        (rule["apiGroups"][0], resource, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        ("apps", "deployments/scale", "get"),
        ("apps", "deployments/scale", "patch"),
        ("", "pods", "list"),
        ("", "pods", "patch"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
    assert granted == needed
