"""One Kubernetes node on this machine, beside a :class:`~local_kube.control_plane.ControlPlane`:
kube-scheduler, containerd and a kubelet, so pods of our images really run.

Everything is built from source by ``make kube-binaries`` (scripts/build_kube_control_plane.sh):
the kubelet and scheduler from the control plane's own k8s.io/kubernetes, containerd 2 with its
runc shim (Kubernetes >= 1.36 refuses containerd 1.x), and the pause process from the same
Kubernetes source, made into the sandbox image with buildah. runc and the CNI plugins are
Debian's (``make container-tools``). Images are loaded from the local image store (buildah's,
where ``make images`` puts ours) into containerd's: no registry.

What these machines need, set here rather than left to a wiki:

- cgroup v1 (a hybrid layout): the kubelet refuses it unless ``failCgroupV1: false``;
- no ``CAP_SYS_RESOURCE`` (a Firecracker VM's root lacks it), so no process may lower its
  ``oom_score_adj``: the kubelet keeps its own at 0 and containerd clamps the pods' to its
  own (``restrict_oom_score_adj``), or runc fails every sandbox with "failed to update
  /proc/self/oom_score_adj: Permission denied";
- swap may be on (``failSwapOn: false``); the disk's device is unknown to cAdvisor (its
  eviction thresholds are kept low, so a missing statistic never evicts).

Pods get addresses of their own on a bridge (:data:`POD_SUBNET`, Debian's ``bridge`` and
``host-local`` CNI plugins, no masquerading: no iptables needed), the way a Deployment's replicas
on one node each have their own ports. This machine is the bridge's gateway
(:data:`POD_GATEWAY`): a Kafka and an API server that listen there are reachable from the pods
(``ApacheKafka(host=POD_GATEWAY)``, ``control_plane(pod_addresses=(POD_GATEWAY,))``). There
is no kube-proxy, so the ``kubernetes`` Service's cluster IP leads nowhere: pods that call the
API server are told its address (:func:`api_server_env`). Pods on the host's network
(``hostNetwork: true``) reach the loopback ones as well. Pod logs are files under
the node's directory (:meth:`Node.logs`): the API server cannot reach a kubelet that listens on
loopback only.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubernetes.client import CoreV1Api

from contract.local_ports import free_port
from local_kafka.clusters import required_legs
from local_kafka.processes import processes_mentioning
from local_kube.control_plane import (
    NODE_NAME,
    ControlPlane,
    control_plane,
    kube_bin_dir,
    log_tail,
    stop_processes,
)

NODE_BINARIES = ("kube-scheduler", "kubelet", "containerd", "containerd-shim-runc-v2", "ctr")
# The sandbox image containerd's CRI starts first in every pod; built here (pause_image()).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
POD_BRIDGE = "kas0"
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
POD_GATEWAY_CIDR = f"{POD_GATEWAY}/{POD_SUBNET.partition('/')[2]}"  # the bridge's own address
READY_TIMEOUT_S = 120.0
# One node per machine: a second would share the bridge, the gateway and pod addresses.
MACHINE_LOCK = Path(tempfile.gettempdir()) / "kafka-autoscaler-kube-node.lock"
MACHINE_LOCK_WAIT_S = 900.0
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers


class NodeUnavailable(RuntimeError):
    """The node cannot run here, or did not become ready; the message says why."""


def node_required() -> bool:
    """Whether a node that cannot run fails the suite instead of skipping its tests."""
    return "kube-node" in required_legs()


def node_problem() -> str | None:
    """Why a node cannot run on this machine (None: it can)."""
    directory = kube_bin_dir()
    missing = [b for b in (*NODE_BINARIES, "pause") if not os.access(directory / b, os.X_OK)]
    if missing:
        return f"{', '.join(missing)} not in {directory} (run `make kube-binaries`)"
    if os.geteuid() != 0:
        return "a kubelet and containerd need root"
    for tool, where in (("runc", "make container-tools"), ("buildah", "make container-tools")):
        if shutil.which(tool) is None:
            return f"{tool} not installed ({where} installs it as root)"
    for plugin in ("loopback", "bridge", "host-local"):
        if not (CNI_PLUGINS / plugin).exists():
            return f"no CNI {plugin} plugin in {CNI_PLUGINS} (Debian's containernetworking-plugins)"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2) to make the pods' bridge"
    return None


def api_server_env(plane: ControlPlane) -> dict[str, str]:
    """The variables that point a pod's in-cluster ``kubernetes`` client at ``plane`` through
    the pod network's gateway (they override the Service ones the kubelet sets)."""
    return {"KUBERNETES_SERVICE_HOST": POD_GATEWAY, "KUBERNETES_SERVICE_PORT": str(plane.api_port)}


def buildah(*args: str) -> str:
    """Run buildah with the project's container settings; its stdout."""
    env = {**os.environ}
    env.setdefault(
        "CONTAINERS_CONF", str(Path(__file__).parents[1] / "containers" / "containers.conf")
    )
    done = subprocess.run(["buildah", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise NodeUnavailable(f"buildah {args[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def pause_archive() -> Path:
    """An OCI archive of the pause image, made once per pause binary into the kube cache."""
    binary = kube_bin_dir() / "pause"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]
    archive = kube_bin_dir().parent / "images" / f"pause-{digest}.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    container = buildah("from", "scratch")
    try:
        buildah("copy", container, str(binary), "/pause")
        buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
        image = buildah(
            "commit", "--quiet", container, f"localhost/kafka-autoscaler-pause:{digest}"
        )
    finally:
        buildah("rm", container)
    partial = archive.with_suffix(".partial")
    buildah("push", "--quiet", image, f"oci-archive:{partial}:{PAUSE_IMAGE}")
    partial.rename(archive)
    return archive


@dataclass
class Node:
    """A running kube-scheduler, containerd and kubelet registered as :data:`NODE_NAME` with
    ``plane``; ``images`` (names in buildah's store) are loaded before it is ready."""

    plane: ControlPlane
    root: Path
    images: Sequence[str] = ()
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    startup_seconds: float = 0.0
    machine_lock: IO[bytes] | None = None

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.root / "containerd.sock"

    @property
    def pod_logs(self) -> Path:
        """Where the kubelet writes containers' output (its ``podLogsDir``)."""
        return self.root / "pod-logs"

    def start(self) -> Node:
        """Start the node and wait until it is ready and schedulable; NodeUnavailable with
        the reason (and the log tail of the component that failed) otherwise."""
        problem = node_problem()
        if problem is not None:
            raise NodeUnavailable(problem)
        self._lock_machine()
        started = time.monotonic()
        atexit.register(self.stop)
        self._make_bridge()
        self._start_containerd()
        self.load(pause_archive(), PAUSE_IMAGE)
        for image in self.images:
            self.load_image(image)
        scheduler = self.plane.kubeconfig("kube-scheduler")
        self._launch(
            "kube-scheduler",
            [f"--kubeconfig={scheduler}", "--leader-elect=false", "--secure-port=0"],
        )
        self._launch(
            "kubelet",
            [
                f"--config={self._kubelet_config()}",
                f"--kubeconfig={self.plane.kubeconfig('kubelet')}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
            ],
        )
        self._wait_schedulable(started + READY_TIMEOUT_S)
        self.startup_seconds = time.monotonic() - started
        return self

    def load_image(self, image: str) -> None:
        """Copy ``image`` from buildah's store into containerd's, under the same name."""
        with tempfile.TemporaryDirectory(prefix="node-image-", dir=self.root) as scratch:
            archive = Path(scratch) / "image.tar"
            buildah("push", "--quiet", image, f"oci-archive:{archive}:{image}")
            self.load(archive, image)

    def load(self, archive: Path, name: str) -> None:
        """Import an OCI archive into containerd's store for the kubelet."""
        done = self.ctr("images", "import", str(archive))
        if done.returncode != 0:
            raise NodeUnavailable(f"loading {name} into containerd failed: {done.stderr[-500:]}")

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """containerd's own client on this node's socket, in the CRI's namespace."""
        command = [str(kube_bin_dir() / "ctr"), "--address", str(self.socket), "-n", NAMESPACE]
        return subprocess.run([*command, *args], capture_output=True, text=True)

    def kill(self, namespace: str, pod: str, container: str) -> int:
        """SIGKILL the process of ``container`` of ``pod`` under the kubelet (as a crash or
        the OOM killer would); how many running containers were killed."""
        labels = {
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.name": pod,
            "io.kubernetes.container.name": container,
        }
        matching = ",".join(f'labels."{key}"=={value}' for key, value in labels.items())
        killed = 0
        for found in self.ctr("containers", "ls", "--quiet", matching).stdout.split():
            killed += self.ctr("tasks", "kill", "--signal", "SIGKILL", found).returncode == 0
        return killed

    def logs(self, namespace: str, pod: str, container: str) -> str:
        """What ``container`` of ``pod`` wrote, every restart in turn (empty if nothing)."""
        found = sorted(self.pod_logs.glob(f"{namespace}_{pod}_*/{container}/*.log"))
        return "".join(path.read_text(errors="replace") for path in found)

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines a component of the node wrote."""
        return log_tail(self.root / f"{name}.log", lines)

    def stop(self) -> None:
        """Stop the kubelet, kill the pods' containers, stop containerd and its shims, and
        undo the mounts they left, so the directory can be removed."""
        kubelet = self.processes.get("kubelet")
        if kubelet is not None and kubelet.poll() is None:
            kubelet.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                kubelet.wait(timeout=15)
        if self.socket.exists():
            for task in self.ctr("tasks", "ls", "--quiet").stdout.split():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task)
        stop_processes(list(self.processes.values()))
        self.processes.clear()
        for pid in processes_mentioning(str(self.socket)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # the runc shims outlive containerd
        for mount in _mounts_under(self.root):
            subprocess.run(["umount", "--lazy", mount], capture_output=True)
        if self.machine_lock is not None:  # the bridge is this node's while it holds the lock
            subprocess.run(["ip", "link", "delete", POD_BRIDGE], capture_output=True)
            self.machine_lock.close()  # releases the flock
            self.machine_lock = None

    def _lock_machine(self) -> None:
        """Wait for another node of this machine (another test session's) to stop."""
        handle = MACHINE_LOCK.open("ab")
        deadline = time.monotonic() + MACHINE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    handle.close()
                    raise NodeUnavailable(
                        f"another node held {MACHINE_LOCK} for {MACHINE_LOCK_WAIT_S:.0f} s"
                    ) from None
                time.sleep(1.0)  # the other node's session ends when it ends
        self.machine_lock = handle

    def _make_bridge(self) -> None:
        """The pods' bridge with this machine as its gateway, made before any pod so that a
        Kafka can listen on the gateway first. One left by a node that was killed is taken
        over: the machine lock says no other node uses it."""
        if subprocess.run(["ip", "link", "show", POD_BRIDGE], capture_output=True).returncode:
            for command in (
                ["ip", "link", "add", POD_BRIDGE, "type", "bridge"],
                ["ip", "addr", "add", POD_GATEWAY_CIDR, "dev", POD_BRIDGE],
            ):
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    raise NodeUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()}")
        subprocess.run(["ip", "link", "set", POD_BRIDGE, "up"], capture_output=True)

    def _start_containerd(self) -> None:
        cni = self.root / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        bridge = {
            "cniVersion": "1.0.0",
            "name": "pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": POD_BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.root / "cni-ipam"),
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }
        (cni / "10-pods.conflist").write_text(json.dumps(bridge))
        config = self.root / "containerd.toml"
        config.write_text(
            _CONTAINERD_CONFIG.format(
                root=self.root / "containerd",
                socket=self.socket,
                pause=PAUSE_IMAGE,
                cni_bin=CNI_PLUGINS,
                cni_conf=cni,
                runc=shutil.which("runc"),
            )
        )
        self._launch("containerd", ["--config", str(config)])
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self.ctr("version").returncode != 0:
            self._check_alive("containerd")
            if time.monotonic() > deadline:
                raise NodeUnavailable(f"containerd did not answer:\n{self.log_tail('containerd')}")
            time.sleep(0.1)  # a starting server; its socket has no readiness signal

    def _kubelet_config(self) -> Path:
        path = self.root / "kubelet.yaml"
        path.write_text(
            _KUBELET_CONFIG.format(
                socket=self.socket,
                port=free_port(),
                healthz_port=free_port(),
                pod_logs=self.pod_logs,
            )
        )
        return path

    def _launch(self, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        # containerd finds its runc shim on PATH.
        env = {**os.environ, "PATH": f"{kube_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.processes[name] = subprocess.Popen(
            [str(kube_bin_dir() / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )

    def _check_alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise NodeUnavailable(
                f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
            )

    def _wait_schedulable(self, deadline: float) -> None:
        """Until the node reports Ready and the node lifecycle controller lifted the
        not-ready taint the kubelet registers it with."""
        api = CoreV1Api(self.plane.client())
        while time.monotonic() < deadline:
            for name in ("containerd", "kube-scheduler", "kubelet"):
                self._check_alive(name)
            if _schedulable(api):
                return
            time.sleep(0.5)  # the node's status has no push channel short of a watch
        raise NodeUnavailable(f"the node was not ready in time:\n{self.log_tail('kubelet')}")


def _schedulable(api: CoreV1Api) -> bool:
    for node in api.list_node().items:
        if node.metadata is None or node.metadata.name != NODE_NAME:
            continue
        conditions = node.status.conditions if node.status is not None else None
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions or [])
        return ready and not (node.spec is not None and node.spec.taints)
    return False


def _mounts_under(root: Path) -> list[str]:
    """Mount points under ``root``, deepest first."""
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point.startswith(f"{root}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


@contextlib.contextmanager
def node(plane: ControlPlane, images: Sequence[str] = ()) -> Iterator[Node]:
    """A started node of ``plane`` in a temporary directory, stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kube-node-"))
    started = Node(plane, root, images)
    try:
        yield started.start()
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


def pod(name: str, image: str, command: Sequence[str], **spec: Any) -> dict[str, Any]:
    """A Pod on the host's network running ``command`` in ``image`` (never pulled: the node
    has it); ``spec`` adds fields to the pod's spec."""
    container = {"name": name, "image": image, "imagePullPolicy": "Never", "command": list(command)}
    body: dict[str, Any] = {
        "hostNetwork": True,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {**body, **spec},
    }


_CONTAINERD_CONFIG = """\
version = 3
root = "{root}/root"
state = "{root}/state"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
"""

_KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{socket}
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
resolvConf: ""
podLogsDir: {pod_logs}
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``make cluster``: a control plane and one node with our images, until Ctrl-C or
    SIGTERM; prints the kubeconfig to use and how long the node took to be ready."""
    import argparse
    import sys

    from local_kube.control_plane import ControlPlaneUnavailable

    parser = argparse.ArgumentParser(
        description=main.__doc__.splitlines()[0] if main.__doc__ else None
    )
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        help="an image of buildah's store to load (repeatable; default: the sidecar and consumer)",
    )
    args = parser.parse_args(argv)
    images = args.image or [
        "localhost/kafka-autoscaler-sidecar:latest",
        "localhost/kafka-autoscaler-consumer:latest",
    ]
    import threading

    stopping = threading.Event()

    def stop(_signal: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        with control_plane(pod_addresses=(POD_GATEWAY,)) as plane, node(plane, images) as started:
            ready_in = f"{started.startup_seconds:.1f} s"
            print(f"node {NODE_NAME} ready in {ready_in} with {', '.join(images)}")
            print(f"export KUBECONFIG={plane.kubeconfig()}  # Ctrl-C stops and removes it all")
            sys.stdout.flush()
            stopping.wait()
    except (ControlPlaneUnavailable, NodeUnavailable) as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
