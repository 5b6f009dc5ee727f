"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from the Go module proxy by ``make kube-binaries``
(``scripts/build_kube_control_plane.sh``) into ``$KAFKA_AUTOSCALER_CACHE/kube/bin``, or taken
from ``KAFKA_AUTOSCALER_KUBE_BIN``. Everything runs on 127.0.0.1 from a temporary directory:
no nodes (pods stay Pending unless a :class:`~local_kube.node.Node` joins), Node and RBAC
authorization with NodeRestriction, static tokens (the admin's in ``system:masters``, the
node's kubelet's and the scheduler's, :data:`IDENTITIES`), the controllers a Deployment's
scale needs (serviceaccount, deployment, replicaset), the HorizontalPodAutoscaler's and a
node's, and the aggregation layer (a front-proxy client certificate from a CA made here,
:attr:`ControlPlane.certificates`), so an extension API server such as KEDA's metrics server
can serve ``external.metrics.k8s.io`` (local_kube/keda.py).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, Configuration
from kubernetes.dynamic import DynamicClient

from contract.local_ports import free_port
from local_kafka.clusters import required_legs
from local_kafka.secured import Certificates

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
ADMIN_TOKEN = "kafka-autoscaler-test-admin"  # a throwaway cluster's token
NODE_NAME = "kafka-autoscaler-node"  # the one node that may join (local_kube.node)
# Who each token is: the admin in system:masters; the node's kubelet as the Node authorizer
# expects a node (system:node:<name> in system:nodes, limited to its own node and pods); the
# scheduler under the user RBAC's bootstrap roles are bound to.
IDENTITIES = {
    "admin": (ADMIN_TOKEN, "admin", "system:masters"),
    "kubelet": ("kafka-autoscaler-test-kubelet", f"system:node:{NODE_NAME}", "system:nodes"),
    "kube-scheduler": ("kafka-autoscaler-test-scheduler", "system:kube-scheduler", ""),
}
START_TIMEOUT_S = 90.0
FRONT_PROXY_CLIENT = "front-proxy-client"  # the name the aggregator proxies as


class ControlPlaneUnavailable(RuntimeError):
    """The binaries are missing or a component did not start; the message says which."""


def kube_bin_dir() -> Path:
    """Where the control plane's binaries are expected."""
    explicit = os.environ.get("KAFKA_AUTOSCALER_KUBE_BIN")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("KAFKA_AUTOSCALER_CACHE") or str(Path(__file__).parents[1] / ".cache")
    return Path(cache) / "kube" / "bin"


def missing_binaries() -> list[str]:
    """The binaries not found (empty when the control plane can start)."""
    directory = kube_bin_dir()
    return [name for name in BINARIES if not os.access(directory / name, os.X_OK)]


def control_plane_required() -> bool:
    """Whether a missing control plane fails the suite instead of skipping its tests."""
    return "kube-apiserver" in required_legs()


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver + kube-controller-manager; ``stop()`` ends them.

    ``hpa_sync_period_s`` is how often the HPA controller decides (Kubernetes' default: 15 s).
    ``pod_addresses`` are addresses of this machine pods reach the API server at (a pod
    network's gateway): it then listens on every interface, and its certificate names them.
    """

    root: Path
    hpa_sync_period_s: float = 15.0
    pod_addresses: tuple[str, ...] = ()
    api_port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    certificates: Certificates | None = None

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca(self) -> Path:
        """The CA certificate the API server's serving certificate is signed by."""
        if self.certificates is None:
            raise ControlPlaneUnavailable("the control plane has not been started")
        return self.certificates.ca.certificate

    def client(self, token: str = ADMIN_TOKEN) -> ApiClient:
        """A ``kubernetes`` client authenticated by ``token`` (the admin's by default)."""
        configuration = Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca)
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return ApiClient(configuration)

    def start(self) -> ControlPlane:
        """Start the three components; raises ControlPlaneUnavailable with the log tail."""
        missing = missing_binaries()
        if missing:
            raise ControlPlaneUnavailable(
                f"{', '.join(missing)} not in {kube_bin_dir()} (run `make kube-binaries`)"
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        etcd_port, peer_port = free_port(), free_port()
        self._launch(
            "etcd",
            [
                f"--data-dir={self.root / 'etcd'}",
                "--name=default",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
            ],
        )
        self._wait("etcd", f"http://127.0.0.1:{etcd_port}/health", deadline)
        key = self._service_account_key()
        tokens = self.root / "tokens.csv"
        tokens.write_text(
            "".join(
                f"{token},{user},{name}" + (f',"{group}"' if group else "") + "\n"
                for name, (token, user, group) in IDENTITIES.items()
            )
        )
        self.certificates = Certificates.make(self.root / "pki", clients=[FRONT_PROXY_CLIENT])
        front_proxy = self.certificates.clients[FRONT_PROXY_CLIENT]
        serving = self.certificates.serving(
            "kube-apiserver", "kube-apiserver", ["127.0.0.1", *self.pod_addresses]
        )
        self.api_port = free_port()
        self._launch(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--secure-port={self.api_port}",
                f"--bind-address={'0.0.0.0' if self.pod_addresses else '127.0.0.1'}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",  # a loopback address cannot be an endpoint
                f"--tls-cert-file={serving.certificate}",
                f"--tls-private-key-file={serving.key}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                # The aggregation layer: requests proxied to an extension API server carry
                # the user in headers, vouched for by this client certificate; endpoints are
                # dialled directly (no kube-proxy here).
                f"--requestheader-client-ca-file={self.certificates.ca.certificate}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={front_proxy.certificate}",
                f"--proxy-client-key-file={front_proxy.key}",
                "--enable-aggregator-routing=true",
            ],
        )
        self._wait("kube-apiserver", f"{self.server}/readyz", deadline)
        kubeconfig = self.kubeconfig()
        self._launch(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                # nodelifecycle lifts the not-ready taint of a node (local_kube.node) once it
                # is ready; root-ca-cert-publisher gives pods the CA of the API server.
                "--controllers=serviceaccount,deployment,replicaset,horizontalpodautoscaling,"
                "nodelifecycle,root-ca-cert-publisher",
                f"--root-ca-file={self.certificates.ca.certificate}",
                "--leader-elect=false",
                "--secure-port=0",
                "--concurrent-deployment-syncs=2",
                "--concurrent-replicaset-syncs=2",
                f"--horizontal-pod-autoscaler-sync-period={self.hpa_sync_period_s}s",
            ],
        )
        return self

    def _launch(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(kube_bin_dir() / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )

    def launch(
        self, name: str, args: list[str], ready_url: str, env: dict[str, str] | None = None
    ) -> None:
        """Start another binary from the same directory beside the control plane (stopped
        with it) and wait until ``ready_url`` answers 200; ControlPlaneUnavailable with its
        log tail if it does not within START_TIMEOUT_S."""
        self._launch(name, args, env)
        self._wait(name, ready_url, time.monotonic() + START_TIMEOUT_S)

    def _wait(self, name: str, url: str, deadline: float) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                break
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(request, timeout=2, context=context) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.2)  # polling a starting server; readiness has no push channel
        raise ControlPlaneUnavailable(f"{name} did not become ready:\n{self.log_tail(name)}")

    def _service_account_key(self) -> Path:
        key = self.root / "service-account.key"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"],
            check=True,
            capture_output=True,
        )
        return key

    def kubeconfig(self, identity: str = "admin") -> Path:
        """A kubeconfig file for one of :data:`IDENTITIES` (the admin by default; written
        once)."""
        token = IDENTITIES[identity][0]
        path = self.root / ("kubeconfig" if identity == "admin" else f"kubeconfig-{identity}")
        if path.exists():
            return path
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: test\n  cluster:\n"
            f"    server: {self.server}\n"
            f"    certificate-authority: {self.ca}\n"
            f"users:\n- name: {identity}\n  user:\n"
            f"    token: {token}\n"
            f"contexts:\n- name: test\n  context: {{cluster: test, user: {identity}}}\n"
            "current-context: test\n"
        )
        return path

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines a component wrote."""
        return log_tail(self.root / f"{name}.log", lines)

    def stop(self) -> None:
        """Stop the components, newest first, and wait for them."""
        stop_processes(list(self.processes.values()))


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a component's log file ("(no log)" when it has none)."""
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process still running, newest (last) first; SIGKILL one that has not
    ended 15 s later."""
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


DISCOVERY_CACHE = Path(tempfile.mkdtemp(prefix="kafka-autoscaler-discovery-"))
atexit.register(shutil.rmtree, DISCOVERY_CACHE, True)


def dynamic(admin: ApiClient) -> Any:
    """The client for objects of any kind (what kubectl apply uses).

    Its discovery cache is this thread's, in a directory of this process: by default every
    client of the machine shares one file per server address in /tmp, so clients writing it
    at once made others read half a file ("load cache error"), and a control plane started
    later on a reused port could read an earlier one's resources."""
    cache = str(discovery_cache(admin))
    return DynamicClient(admin, cache_file=cache)  # type: ignore[no-untyped-call]


def discovery_cache(admin: ApiClient) -> Path:
    """Where this thread's dynamic clients of ``admin``'s server keep their discovery."""
    host = hashlib.sha256(admin.configuration.host.encode()).hexdigest()[:16]
    return DISCOVERY_CACHE / f"{host}-{threading.get_ident()}.json"


def create(admin: ApiClient, namespace: str | None, body: dict[str, Any]) -> Any:
    """Create one object of any kind (``namespace`` None: a cluster-scoped one)."""
    resource = dynamic(admin).resources.get(api_version=body["apiVersion"], kind=body["kind"])
    return resource.create(body=body, namespace=namespace)


IMAGE = "registry.invalid/kafka-autoscaler:test"  # never pulled: there is no node


def workload(kind: str, name: str, replicas: int, grace_s: int | None = None) -> dict[str, Any]:
    """A Deployment or StatefulSet ``name`` whose pods select ``app=<name>``, their
    terminationGracePeriodSeconds ``grace_s`` (None: Kubernetes' default)."""
    labels = {"app": name}
    pod: dict[str, Any] = {"containers": [{"name": "consumer", "image": IMAGE}]}
    if grace_s is not None:
        pod["terminationGracePeriodSeconds"] = grace_s
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


@contextlib.contextmanager
def control_plane(
    hpa_sync_period_s: float = 15.0, pod_addresses: tuple[str, ...] = ()
) -> Iterator[ControlPlane]:
    """A started control plane in a temporary directory, stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kube-control-plane-"))
    plane = ControlPlane(root, hpa_sync_period_s, pod_addresses)
    try:
        yield plane.start()
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)
