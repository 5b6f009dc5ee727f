"""The Helm chart (charts/kafka-autoscaler): Helm lints and renders it, its pods configure as
the examples' do, its values are checked by its schema with one line naming the value, and
what it renders passes a real kube-apiserver's server-side dry run."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from assignor import HEURISTIC_NAMES
from consumer_sdk.config import DEFAULT_MAX_STALENESS_S, ConsumerConfig
from local_kafka.clusters import required_legs
from local_kube.control_plane import kube_bin_dir
from sidecar.config import parse_args
from tests.test_examples import container_env

pytestmark = pytest.mark.kube_binaries  # make test runs these once the Go build ends
CHART = Path(__file__).parents[1] / "charts" / "kafka-autoscaler"
REQUIRED = [
    "--set",
    "kafka.bootstrapServers=kafka-0.kafka:9092\\,kafka-1.kafka:9092",
    "--set",
    "group=orders-sink",
    "--set",
    "topics={orders,payments}",
    "--set-json",  # a sink named on purpose: the chart has no default
    'consumer.args=["--sink","null"]',
]


def helm() -> str:
    """Helm from make kube-binaries (built from the Go module proxy, pinned)."""
    binary = kube_bin_dir() / "helm"
    if not binary.is_file():
        reason = f"helm not in {kube_bin_dir()} (run `make kube-binaries`)"
        if "kube-apiserver" in required_legs():
            pytest.fail(f"helm is required with the kube-apiserver leg: {reason}")
        pytest.skip(reason)
    return str(binary)


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120)


def render(*values: str) -> list[dict[str, Any]]:
    """The chart's objects for release ``sink`` with the required values and ``values``."""
    done = run_helm("template", "sink", str(CHART), *REQUIRED, *values)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(objects: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for obj in objects:
        found.setdefault(obj["kind"], obj)
    return found


def test_helm_lints_the_chart() -> None:
    done = run_helm("lint", "--strict", str(CHART), *REQUIRED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_pods_configure_as_the_examples_do() -> None:
    objects = by_kind(render("--set", "capacity=5000000", "--set", "capacityUnit=bytes/s"))
    settings = objects["ConfigMap"]["data"]
    # Numbers as the settings parse them (a values file's 16777216 is a float to Helm).
    assert settings["AUTOSCALER_BATCH_BYTES"] == "16777216"
    assert settings["AUTOSCALER_CAPACITY"] == "5000000"
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    consumer = ConsumerConfig.from_env(container_env(containers["consumer"], settings))
    assert consumer.topics == ("orders", "payments") and consumer.metrics_port == 9100
    # Liveness on what a restart cures (a stuck loop), readiness on every problem.
    for name, port in (("consumer", "metrics"), ("sidecar", "http")):
        probes = {
            kind: containers[name][kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")
        }
        assert probes["livenessProbe"] == {"path": "/livez", "port": port}
        assert probes["readinessProbe"] == {"path": "/healthz", "port": port}
    sidecar = parse_args([], container_env(containers["sidecar"], settings))
    assert sidecar.scaler == "kubernetes" and sidecar.workload_name == "sink"
    assert sidecar.capacity == 5_000_000 and sidecar.capacity_unit == "bytes/s"
    # The Role names what the sidecar touches: its own scale and its own Lease.
    rules = objects["Role"]["rules"]
    assert {"resources": ["deployments/scale"], "resourceNames": ["sink"]}.items() <= rules[
        0
    ].items()
    assert any(sidecar.lease_name in rule.get("resourceNames", []) for rule in rules)
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]


def test_the_freshness_bound_is_the_consumers_default_unless_a_value_sets_it() -> None:
    settings = by_kind(render())["ConfigMap"]["data"]
    assert "AUTOSCALER_MAX_STALENESS_SECS" not in settings
    assert ConsumerConfig.from_env(settings).staleness_bound_s == DEFAULT_MAX_STALENESS_S
    settings = by_kind(render("--set-json", "maxStalenessSeconds=2.5"))["ConfigMap"]["data"]
    assert settings["AUTOSCALER_MAX_STALENESS_SECS"] == "2.5"
    assert ConsumerConfig.from_env(settings).staleness_bound_s == 2.5


def test_a_statefulset_gets_its_headless_service_and_its_own_scale_in_the_role() -> None:
    objects = by_kind(render("--set", "workload.kind=StatefulSet"))
    statefulset = objects["StatefulSet"]
    assert statefulset["spec"]["serviceName"] == objects["Service"]["metadata"]["name"]
    assert objects["Service"]["spec"]["clusterIP"] == "None"
    assert objects["Role"]["rules"][0]["resources"] == ["statefulsets/scale"]
    env = {
        e["name"]: e.get("value")
        for e in statefulset["spec"]["template"]["spec"]["containers"][1]["env"]
    }
    assert env["AUTOSCALER_WORKLOAD_KIND"] == "statefulset"


def test_with_keda_a_sizer_serves_the_count_and_the_pods_have_no_sidecar() -> None:
    objects = render("--set", "keda.enabled=true")
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds.count("Deployment") == 2 and "ScaledObject" in kinds
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    consumers, sizer = deployments["sink"], deployments["sink-sizer"]
    assert [c["name"] for c in consumers["spec"]["template"]["spec"]["containers"]] == ["consumer"]
    settings = by_kind(objects)["ConfigMap"]["data"]
    (container,) = sizer["spec"]["template"]["spec"]["containers"]
    config = parse_args([], container_env(container, settings))
    assert config.scaler == "keda" and config.workload_name == "sink"
    scaled = by_kind(objects)["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "sink"
    address = scaled["triggers"][0]["metadata"]["scalerAddress"]
    assert address.startswith(f"{sizer['metadata']['name']}.") and address.endswith(":6000")
    # The sizer marks pods but never writes the scale or takes a Lease.
    rules = by_kind(objects)["Role"]["rules"]
    assert rules[0]["verbs"] == ["get"] and all("leases" not in r["resources"] for r in rules)


def test_extra_env_reaches_every_container_and_extra_volumes_the_consumer() -> None:
    extra = [
        "--set",
        "extraEnv[0].name=KUBERNETES_SERVICE_HOST",
        "--set",
        "extraEnv[0].value=10.244.0.1",
        "--set",
        "extraVolumes[0].name=lake",
        "--set",
        "extraVolumes[0].hostPath.path=/srv/lake",
        "--set",
        "consumer.extraVolumeMounts[0].name=lake",
        "--set",
        "consumer.extraVolumeMounts[0].mountPath=/lake",
    ]
    for keda in ("false", "true"):
        objects = render(*extra, "--set", f"keda.enabled={keda}")
        pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]
        containers = [c for pod in pods for c in pod["containers"]]
        assert len(containers) == 2
        for container in containers:
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["KUBERNETES_SERVICE_HOST"] == "10.244.0.1"
        consumers = [pod for pod in pods if pod["containers"][0]["name"] == "consumer"]
        assert {"name": "lake", "hostPath": {"path": "/srv/lake"}} in consumers[0]["volumes"]
        mounts = consumers[0]["containers"][0]["volumeMounts"]
        assert {"name": "lake", "mountPath": "/lake"} in mounts


def test_with_racks_the_consumers_declare_their_zone_and_spread_over_zones() -> None:
    objects = by_kind(render("--set", "racks.enabled=true", "--set", "racks.locality=replicas"))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    consumer = next(c for c in pod["containers"] if c["name"] == "consumer")
    env = {e["name"]: e for e in consumer["env"]}
    zone = env["AUTOSCALER_CLIENT_RACK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert zone == "metadata.labels['topology.kubernetes.io/zone']"
    config = ConsumerConfig.from_env(container_env(consumer, objects["ConfigMap"]["data"]))
    assert config.client_rack and config.rack_locality == "replicas"
    sidecar = next(c for c in pod["containers"] if c["name"] == "sidecar")
    sizing = parse_args([], container_env(sidecar, objects["ConfigMap"]["data"]))
    assert sizing.rack_locality == "replicas"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone" and spread["maxSkew"] == 1
    plain = by_kind(render())["Deployment"]["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in plain
    assert all(e["name"] != "AUTOSCALER_CLIENT_RACK" for c in plain["containers"] for e in c["env"])


def test_the_schema_knows_every_heuristic() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["heuristic"]["enum"] == list(HEURISTIC_NAMES)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("capacity=0", "capacity"),
        ("heuristic=best", "heuristic"),
        ("topics={bad topic!}", "topics"),
        ("kafka.bootstrapServers=kafka", "bootstrapServers"),
        ("maxReplicas=0", "maxReplicas"),
        ("waitTimeSeconds=7200", "waitTimeSeconds"),
        ("maxStalenessSeconds=-1", "maxStalenessSeconds"),
        ("workload.kind=DaemonSet", "kind"),
        ("racks.locality=nearest", "locality"),
        ("extraEnv[0].value=unnamed", "extraEnv"),
    ],
)
def test_a_bad_value_fails_the_render_naming_it(value: str, named: str) -> None:
    done = run_helm("template", "sink", str(CHART), *REQUIRED, "--set", value)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if named in line]
    assert lines, done.stderr
    assert "goroutine" not in done.stderr and "panic" not in done.stderr


@pytest.mark.parametrize("values", [[], ["--set", "keda.enabled=true"]])
def test_only_the_sidecar_holds_a_kubernetes_token_and_pods_meet_restricted(
    values: list[str],
) -> None:
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    for obj in render(*values):
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["allowPrivilegeEscalation"] is False
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert (token_path in mounts) == (container["name"] == "sidecar"), container
        tmp = [
            m["name"]
            for c in pod["containers"]
            for m in c.get("volumeMounts", [])
            if m["mountPath"] == "/tmp"
        ]
        assert len(tmp) == len(set(tmp)) == len(pod["containers"])  # a /tmp each


def test_a_password_in_extra_settings_is_refused_naming_where_it_goes() -> None:
    done = run_helm(
        "template", "sink", str(CHART), *REQUIRED,
        "--set", "extraSettings.AUTOSCALER_SASL_PLAIN_PASSWORD=hunter2",
    )  # fmt: skip
    assert done.returncode != 0
    assert "extraSettings.AUTOSCALER_SASL_PLAIN_PASSWORD would sit in a ConfigMap" in done.stderr
    assert "hunter2" not in done.stdout


def test_each_container_gets_its_own_credentials_and_the_status_token() -> None:
    objects = render(
        "--set", "consumer.extraEnv[0].name=AUTOSCALER_SASL_PLAIN_USERNAME",
        "--set", "consumer.extraEnv[0].value=sink-consumer",
        "--set", "sidecar.extraEnv[0].name=AUTOSCALER_SASL_PLAIN_USERNAME",
        "--set", "sidecar.extraEnv[0].value=sink-sidecar",
        "--set", "sidecar.extraVolumeMounts[0].name=sidecar-user",
        "--set", "sidecar.extraVolumeMounts[0].mountPath=/etc/kafka-user",
        "--set", "sidecar.statusTokenSecret=sink-status",
    )  # fmt: skip
    pod = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}

    def env(name: str) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in containers[name]["env"]}

    assert env("consumer")["AUTOSCALER_SASL_PLAIN_USERNAME"] == "sink-consumer"
    assert env("sidecar")["AUTOSCALER_SASL_PLAIN_USERNAME"] == "sink-sidecar"
    token_file = env("sidecar")["AUTOSCALER_STATUS_TOKEN_FILE"]
    assert "AUTOSCALER_STATUS_TOKEN_FILE" not in env("consumer")
    mounts = {m["name"]: m["mountPath"] for m in containers["sidecar"]["volumeMounts"]}
    assert token_file.startswith(mounts["status-token"]) and "sidecar-user" in mounts
    assert "sidecar-user" not in {m["name"] for m in containers["consumer"]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["status-token"]["secret"]["secretName"] == "sink-status"


@pytest.mark.parametrize("keda", ["false", "true"])
def test_the_network_policy_opens_the_metrics_ports_and_the_sizers_to_keda(keda: str) -> None:
    objects = by_kind(
        render("--set", "networkPolicy.enabled=true", "--set", f"keda.enabled={keda}")
    )
    ingress = objects["NetworkPolicy"]["spec"]["ingress"]
    ports = {p["port"] for rule in ingress for p in rule["ports"]}
    assert {9100, 8080} <= ports
    assert (6000 in ports) == (keda == "true")
    assert "NetworkPolicy" not in by_kind(render())  # asked for, not by default


def test_the_chart_has_no_default_sink_and_spark_needs_somewhere_to_write() -> None:
    base = [a for a in REQUIRED if a not in ("--set-json", 'consumer.args=["--sink","null"]')]
    unnamed = run_helm("template", "sink", str(CHART), *base)
    assert unnamed.returncode != 0
    assert "consumer.args: say where records go" in unnamed.stderr
    spark = ["--set-json", 'consumer.args=["--sink","spark"]']
    nowhere = run_helm("template", "sink", str(CHART), *base, *spark)
    assert "set extraSettings.AUTOSCALER_SPARK_WAREHOUSE" in nowhere.stderr
    warehouse = ["--set", "extraSettings.AUTOSCALER_SPARK_WAREHOUSE=/lake"]
    objects = by_kind(render(*spark, *warehouse))
    consumer = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert consumer["args"] == ["--sink", "spark"]


def test_under_keda_the_sizer_and_keda_can_speak_mutual_tls() -> None:
    objects = render(
        "--set", "keda.enabled=true",
        "--set", "keda.tls.serverSecretName=sizer-tls",
        "--set", "keda.tls.clientSecretName=keda-client",
    )  # fmt: skip
    kinds = by_kind(objects)
    (sizer,) = [
        o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] == "Deployment"
        and [c["name"] for c in o["spec"]["template"]["spec"]["containers"]] == ["sidecar"]
    ]
    (container,) = sizer["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AUTOSCALER_KEDA_TLS_CERT_FILE"] == "/etc/kafka-autoscaler/keda-tls/tls.crt"
    assert env["AUTOSCALER_KEDA_CLIENT_CA_FILE"] == "/etc/kafka-autoscaler/keda-tls/ca.crt"
    assert {v["name"]: v for v in sizer["volumes"]}["keda-tls"]["secret"]["secretName"] == (
        "sizer-tls"
    )
    trigger = kinds["ScaledObject"]["spec"]["triggers"][0]
    auth = kinds["TriggerAuthentication"]
    assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
    params = {ref["parameter"]: ref["key"] for ref in auth["spec"]["secretTargetRef"]}
    assert params == {"caCert": "ca.crt", "tlsClientCert": "tls.crt", "tlsClientKey": "tls.key"}
