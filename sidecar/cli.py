"""``kafka-autoscaler-sidecar``: the sidecar process (flags or AUTOSCALER_* variables)."""

from __future__ import annotations

import asyncio
import logging
import shlex
import signal
import sys
from collections.abc import Sequence

from sidecar.app import Sidecar
from sidecar.config import SidecarConfig, parse_args
from sidecar.http import serve
from sidecar.leader import FileLease
from sidecar.scalers.base import Scaler
from sidecar.scalers.local import LocalScaler


def build_scaler(config: SidecarConfig) -> Scaler | None:
    """The scaler the configuration names."""
    if config.scaler == "local":
        return LocalScaler(
            shlex.split(config.consumer_command),
            identity_prefix=config.identity_prefix,
            max_replicas=config.max_replicas,
        )
    if config.scaler == "kubernetes":
        raise SystemExit(
            "kafka-autoscaler-sidecar: error: --scaler kubernetes is not "
            "available yet (issue 6); use local or none"
        )
    return None


async def run(config: SidecarConfig) -> None:
    """Run until SIGTERM/SIGINT; the local scaler's consumers are stopped on the way out."""
    scaler = build_scaler(config)
    sidecar = Sidecar(config, scaler, FileLease(config.lock_path))
    server = (
        serve(config.http_host, config.http_port, sidecar.healthy, sidecar.status)
        if config.http_port
        else None
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await sidecar.run(stop)
    finally:
        if server is not None:
            server.shutdown()
        if scaler is not None:
            scaler.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    config = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
