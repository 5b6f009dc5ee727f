"""``kafka-autoscaler-sidecar``: the sidecar process (flags or AUTOSCALER_* variables)."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from contract.extras import missing_extra_line, missing_modules
from contract.quiet_logs import quiet_repeats
from contract.settings import without_credentials
from sidecar.app import STATUS_CLOSED, Sidecar
from sidecar.config import SidecarConfig, loopback, parse_args
from sidecar.http import serve
from sidecar.leader import FileLease, Lease, LockDirError, default_lock_dir, ensure_private_dir
from sidecar.scalers.base import Scaler
from sidecar.scalers.local import LocalScaler

if TYPE_CHECKING:  # grpc comes with the keda extra: imported only with --scaler keda
    from sidecar.external_scaler.server import ExternalScalerServer

log = logging.getLogger(__name__)


class CannotListen(RuntimeError):
    """An endpoint (HTTP, or KEDA's external scaler) cannot listen where it was told to."""


def kubernetes_client() -> Any:
    """In-cluster credentials when running in a pod, else the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def build_scaler(config: SidecarConfig) -> Scaler | None:
    """The scaler the configuration names."""
    if config.scaler == "local":
        # The consumers read the settings they share with the sidecar from AUTOSCALER_*
        # variables: hand them over however they were given here (flags or variables).
        return LocalScaler(
            shlex.split(config.consumer_command),
            identity_prefix=config.identity_prefix,
            env={**without_credentials(os.environ), **config.shared_environment()},
            max_replicas=config.max_replicas,
            lock_dir=config.lock_path.with_name(config.lock_path.name + ".members"),
            racks=config.racks(),
        )
    if config.scaler == "keda":
        from sidecar.scalers.keda_target import KedaTarget

        if not config.workload_name or config.workload_kind != "deployment":
            return KedaTarget()  # StatefulSets remove the highest ordinals: nothing to mark
        from sidecar.scalers.pod_deletion import DeploymentPods

        pods = DeploymentPods(kubernetes_client(), config.namespace, config.workload_name)
        return KedaTarget(pods)
    if config.scaler == "kubernetes":
        from sidecar.scalers.kubernetes import KubernetesScaler

        return KubernetesScaler(
            kubernetes_client(), config.namespace, config.workload_kind, config.workload_name
        )
    return None


def build_lease(config: SidecarConfig) -> Lease:
    """A Kubernetes Lease next to a Kubernetes workload, else a local file lock."""
    if config.scaler == "kubernetes":
        from sidecar.k8s_lease import KubernetesLease

        identity = os.environ.get("POD_NAME") or socket.gethostname()
        return KubernetesLease(kubernetes_client(), config.namespace, config.lease_name, identity)
    if config.lock_path.parent == default_lock_dir():
        ensure_private_dir(config.lock_path.parent)
    return FileLease(config.lock_path)


def serve_external_scaler(config: SidecarConfig, sidecar: Sidecar) -> ExternalScalerServer:
    """KEDA's external scaler (``--scaler keda``), answering with the sidecar's count."""
    from sidecar.external_scaler.answers import Answers
    from sidecar.external_scaler.server import ExternalScalerUnavailable, Tls, serve_keda

    answers = Answers(config.scaled_object, config.namespace, config.group, sidecar.sized)
    tls = (
        Tls(
            config.keda_tls_cert_file,
            config.keda_tls_key_file,
            config.keda_client_ca_file or None,
        )
        if config.keda_tls_cert_file
        else None
    )
    if tls is None and not loopback(config.keda_host):
        log.warning(
            "KEDA's external scaler on %s speaks plain text to anyone who reaches it: set "
            "--keda-tls-cert-file, --keda-tls-key-file and --keda-client-ca-file (mutual TLS)",
            config.keda_host,
        )
    try:
        return serve_keda(config.keda_host, config.keda_port, answers, tls=tls)
    except ExternalScalerUnavailable as exc:
        raise CannotListen(str(exc)) from None


async def run(config: SidecarConfig) -> None:
    """Run until SIGTERM/SIGINT; the local scaler's consumers are stopped on the way out."""
    scaler = build_scaler(config)
    planner = None
    if config.group_protocol == "consumer" and scaler is not None:
        from contract.security import librdkafka_options
        from sidecar.broker_plans.planner import BrokerPlanner
        from sidecar.broker_plans.scaler import EmptyFirstScaler

        planner = BrokerPlanner(
            config.bootstrap_servers,
            config.group,
            list(config.topics),
            heuristic=config.heuristic,
            identity=config.member_name,
            plans_topic=config.plans_topic,
            client_options=librdkafka_options(config),
        )
        scaler = EmptyFirstScaler(scaler, planner)
    sidecar = Sidecar(config, scaler, build_lease(config), planner=planner)
    server = None
    if config.http_port:
        try:
            server = serve(config.http_host, config.http_port, sidecar.endpoints())
            if config.status_closed:
                log.warning("%s", STATUS_CLOSED.format(host=config.http_host))
        except OSError as exc:  # port in use, host that does not resolve or is not ours
            raise CannotListen(
                f"--http-host/--http-port (AUTOSCALER_HTTP_HOST/PORT): cannot serve on "
                f"{config.http_host}:{config.http_port}: {exc.strerror or exc}"
            ) from None
    keda = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if config.scaler == "keda":
            keda = serve_external_scaler(config, sidecar)
        await sidecar.run(stop)
    finally:
        if server is not None:
            server.shutdown()
        if keda is not None:
            keda.stop()
        if scaler is not None:
            # Consumers take a while to flush and leave; the loop stays free meanwhile.
            await asyncio.to_thread(scaler.close)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    config = parse_args(argv)
    needs = {"kubernetes": ("kubernetes", ("kubernetes",)), "keda": ("keda", ("grpc",))}
    wanted = (
        [(f"--scaler {config.scaler}", *needs[config.scaler])] if config.scaler in needs else []
    )
    if config.group_protocol == "consumer":
        wanted.append(("--group-protocol consumer", "kip848", ("confluent_kafka",)))
    for flag, extra, modules in wanted:
        if missing := missing_modules(modules):
            line = missing_extra_line(flag, extra, missing)
            print(f"kafka-autoscaler-sidecar: error: {line}", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    quiet_repeats()  # one line a minute, not several a second, while a broker is down
    try:
        asyncio.run(run(config))
    except (CannotListen, LockDirError) as exc:
        print(f"kafka-autoscaler-sidecar: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
