"""KEDA's operator and metrics server, built from its sources, on a real control plane.

``make kube-binaries`` builds ``keda-operator`` and ``keda-adapter`` (kedacore/keda, pinned in
scripts/kube_control_plane/keda) beside the kube binaries and copies KEDA's CRDs into
``kube/keda-crds``. :func:`install_keda` does on a :class:`ControlPlane` what KEDA's Helm chart
does on a cluster, minus the pods:

- the CRDs and the ``keda`` namespace;
- one certificate from the control plane's CA for the operator's metrics service (mutual TLS
  between the two processes, as in the chart) and for the metrics server's HTTPS;
- ``v1beta1.external.metrics.k8s.io`` registered as an APIService whose Service has one
  endpoint: this machine's address and the metrics server's port (the aggregator dials
  endpoints directly; an endpoint may not be a loopback address);
- both processes, waited on until they answer their health checks.

The HPA controller of the control plane's kube-controller-manager then reads KEDA's metric
through the aggregation layer, as it does on a cluster.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient

from contract.local_ports import free_port
from local_kube.control_plane import (
    ControlPlane,
    ControlPlaneUnavailable,
    create,
    dynamic,
    kube_bin_dir,
)

NAMESPACE = "keda"
METRICS_SERVER = "keda-metrics-apiserver"
OPERATOR_SERVICE = "keda-operator"
BINARIES = ("keda-operator", "keda-adapter")
EXTERNAL_METRICS = "v1beta1.external.metrics.k8s.io"
AVAILABLE_TIMEOUT_S = 60.0


def crd_dir() -> Path:
    """Where the build copied KEDA's CRDs."""
    return kube_bin_dir().parent / "keda-crds"


def missing() -> list[str]:
    """What is missing to run KEDA (empty when it can start)."""
    absent = [name for name in BINARIES if not (kube_bin_dir() / name).exists()]
    if not list(crd_dir().glob("*.yaml")):
        absent.append(str(crd_dir()))
    return absent


def host_address() -> str:
    """This machine's address on its default route: an endpoint the aggregator may dial."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route
        address: str = probe.getsockname()[0]
    if address.startswith("127."):
        raise ControlPlaneUnavailable("no non-loopback IPv4 address for the metrics server")
    return address


def install_keda(plane: ControlPlane) -> None:
    """Install and start KEDA on ``plane`` (stopped with it); ControlPlaneUnavailable with the
    log tail of whatever did not come up."""
    absent = missing()
    if absent:
        raise ControlPlaneUnavailable(f"{', '.join(absent)} not built (run `make kube-binaries`)")
    assert plane.certificates is not None, "the control plane is not started"
    client = plane.client()
    _apply_crds(client)
    create(client, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    address = host_address()
    certs = plane.root / "keda-certs"
    certs.mkdir()
    pair = plane.certificates.serving(
        "keda",
        OPERATOR_SERVICE,
        [
            "127.0.0.1",
            address,
            f"{OPERATOR_SERVICE}.{NAMESPACE}.svc",
            f"{METRICS_SERVER}.{NAMESPACE}.svc",
        ],
    )
    # The file names KEDA's processes read, as the chart's Secret mounts them.
    (certs / "tls.crt").write_bytes(pair.certificate.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    (certs / "ca.crt").write_bytes(plane.certificates.ca.certificate.read_bytes())

    kubeconfig = str(plane.kubeconfig())
    env = {
        "KUBECONFIG": kubeconfig,
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
    }
    health, grpc_port = free_port(), free_port()
    plane.launch(
        "keda-operator",
        [
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--metrics-service-bind-address=127.0.0.1:{grpc_port}",
            f"--cert-dir={certs}",
            f"--ca-dir={certs}",
            "--enable-cert-rotation=false",
            "--zap-log-level=info",
        ],
        f"http://127.0.0.1:{health}/readyz",
        env,
    )
    secure_port = free_port()
    plane.launch(
        "keda-adapter",
        [
            f"--secure-port={secure_port}",
            f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'tls.crt'}",
            f"--tls-private-key-file={certs / 'tls.key'}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--metrics-service-address=127.0.0.1:{grpc_port}",
            f"--port={free_port()}",
        ],
        f"https://127.0.0.1:{secure_port}/readyz",
        env,
    )
    _register_metrics_server(plane, address, secure_port, plane.certificates.ca.certificate)


def _until(check: Callable[[], bool]) -> bool:
    """Poll ``check`` until it holds or AVAILABLE_TIMEOUT_S pass; whether it held. The API
    server establishes CRDs and the aggregator checks APIServices on their own schedules:
    there is no event to await."""
    deadline = time.monotonic() + AVAILABLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def conditions(body: Any) -> dict[str, str]:
    """An object's status conditions, type -> status."""
    return {c["type"]: c["status"] for c in (body.get("status") or {}).get("conditions") or []}


def _apply_crds(client: ApiClient) -> None:
    paths = sorted(crd_dir().glob("*.yaml"))
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                create(client, None, document)
    crds = dynamic(client).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )

    def established() -> bool:
        listed = crds.get().to_dict()["items"]
        return sum(conditions(crd).get("Established") == "True" for crd in listed) >= len(paths)

    if not _until(established):
        raise ControlPlaneUnavailable("KEDA's CRDs were not established")


def _register_metrics_server(plane: ControlPlane, address: str, port: int, ca: Path) -> None:
    client = plane.client()
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": METRICS_SERVER},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
    }
    # No selector and no pods: this machine's address is the one endpoint, written by hand
    # the way the endpoint controllers would (the aggregator reads the EndpointSlice).
    endpoint_slice: dict[str, Any] = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": METRICS_SERVER,
            "labels": {"kubernetes.io/service-name": METRICS_SERVER},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    for body in (service, endpoint_slice):
        create(client, NAMESPACE, body)
    api_service: dict[str, Any] = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": EXTERNAL_METRICS},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"name": METRICS_SERVER, "namespace": NAMESPACE, "port": 443},
            "caBundle": base64.b64encode(ca.read_bytes()).decode(),
        },
    }
    create(client, None, api_service)
    api_services = dynamic(client).resources.get(
        api_version="apiregistration.k8s.io/v1", kind="APIService"
    )
    status: dict[str, str] = {}

    def available() -> bool:
        status.update(conditions(api_services.get(name=EXTERNAL_METRICS).to_dict()))
        return status.get("Available") == "True"

    if _until(available):
        return
    raise ControlPlaneUnavailable(
        f"{EXTERNAL_METRICS} did not become available: {status}\n{plane.log_tail('keda-adapter')}"
    )
