"""The shipped examples stay valid: the Kubernetes example's configuration parses with the
real consumer and sidecar configs, its Role grants what the scaler and Lease use, and the
plain KIP-848 consumer takes a secured cluster's librdkafka properties."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumer_sdk.config import ConsumerConfig
from examples.kip848_consumer import properties_file, property_pair
from sidecar.config import parse_args
from sidecar.external_scaler.answers import METRIC_NAME, Answers, ScaledObject

EXAMPLES = Path(__file__).parent.parent / "examples" / "kubernetes"


def load(name: str) -> list[dict[str, Any]]:
    """The documents of examples/kubernetes/``name``."""
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


def test_the_secured_example_mounts_each_container_its_own_secrets(tmp_path: Path) -> None:
    (configmap,) = load("secured/configmap.yaml")
    (deployment,) = load("secured/deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    configs: dict[str, Any] = {}
    users = {}
    for container in pod["containers"]:
        env = container_env(container, configmap["data"])
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        files = {k: v for k, v in env.items() if k.endswith("FILE") and k != "AUTOSCALER_LOCK_FILE"}
        for name, path in files.items():  # each file it names is in a Secret it mounts
            assert mounts.get(str(Path(path).parent)) in secrets, (container["name"], name)
            local = tmp_path / container["name"] / path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text("a-secret\n")
            env[name] = str(local)
        users[container["name"]] = secrets[mounts["/etc/kafka-user"]]
        if container["name"] == "consumer":
            configs["consumer"] = ConsumerConfig.from_env(env)
        else:
            configs["sidecar"] = parse_args([], env)
    consumer, sidecar = configs["consumer"], configs["sidecar"]
    for config in (consumer, sidecar):
        assert config.security_protocol == "SASL_SSL" and config.sasl_mechanism == "SCRAM-SHA-512"
    # Two users, two Secrets: the consumer cannot read the sidecar's password.
    assert consumer.sasl_plain_username != sidecar.sasl_plain_username
    assert users["consumer"] != users["sidecar"]
    assert sidecar.status_token_file and sidecar.http_host == "0.0.0.0"


def test_the_keda_example_asks_the_sizer_what_it_answers() -> None:
    (configmap,) = load("configmap.yaml")
    sizer, service = load("keda/sizer.yaml")
    (scaled_object,) = load("keda/scaledobject.yaml")
    (container,) = sizer["spec"]["template"]["spec"]["containers"]
    env = container_env(container, configmap["data"])
    env["AUTOSCALER_NAMESPACE"] = "default"  # the pod's namespace, where the example goes
    config = parse_args([], env)
    assert config.scaler == "keda" and config.scaled_object == scaled_object["metadata"]["name"]
    (trigger,) = scaled_object["spec"]["triggers"]
    assert trigger["type"] == "external" and trigger["metricType"] == "AverageValue"
    host, port = trigger["metadata"]["scalerAddress"].rsplit(":", 1)
    assert host.startswith(f"{service['metadata']['name']}.{config.namespace}.svc")
    (service_port,) = service["spec"]["ports"]
    assert int(port) == service_port["port"]
    assert service_port["targetPort"] in {p["name"] for p in container["ports"]}
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["keda"] == config.keda_port
    answers = Answers(config.scaled_object, config.namespace, config.group, lambda: 2)
    ref = ScaledObject(scaled_object["metadata"]["name"], "default", trigger["metadata"])
    assert answers.metric_value(ref, METRIC_NAME) == (METRIC_NAME, 2.0)
    (consumers,) = load("deployment.yaml")
    assert scaled_object["spec"]["scaleTargetRef"]["name"] == consumers["metadata"]["name"]
    # The sizer marks the pods KEDA's scale-down should take: it names the same Deployment,
    # with the ServiceAccount whose Role lets it read that scale and annotate pods.
    assert config.workload_name == consumers["metadata"]["name"]
    account = sizer["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == consumers["spec"]["template"]["spec"]["serviceAccountName"]


def test_the_kip848_example_takes_librdkafka_properties(tmp_path: Path) -> None:
    settings = tmp_path / "client.properties"
    settings.write_text("# a secured cluster\nsecurity.protocol=SASL_SSL\n\nsasl.password=a=b\n")
    assert properties_file(str(settings)) == [
        ("security.protocol", "SASL_SSL"),
        ("sasl.password", "a=b"),  # only the first '=' splits
    ]
    assert property_pair("linger.ms=5") == ("linger.ms", "5")
    for bad in ("linger.ms", "=5"):
        with pytest.raises(argparse.ArgumentTypeError, match="key=value"):
            property_pair(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="No such file"):
        properties_file(str(tmp_path / "missing"))
