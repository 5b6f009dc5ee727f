"""The images (``make images``): how long they take to build, how large they are, and how
soon the sidecar container is ready.

Builds go into an image store and a cache of their own (``CONTAINERS_STORAGE_CONF`` naming
a temporary graph root; a temporary ``KAFKA_AUTOSCALER_CACHE`` holding a copy of the checked
jars and, as ``make images`` keeps it after its first run, the Debian base's tarball), so
nothing a previous build cached counts:

- **fresh**: a clone's first ``make images`` with the base cached (target <= 6 minutes):
  the project's wheel and both wheelhouses (pip's own cache is the machine's), both images;
- **base**: the Debian bookworm base made with mmdebstrap, the one-off step before it;
- **code only**: a copy of the tree with one module changed, built again into the same
  store (target <= 90 s: only the wheel's layers rebuild).

Then each image's size (target: sidecar <= 250 MB) and, against one Apache Kafka node, the
time from ``podman run`` of the sidecar image (``AUTOSCALER_SCALER=none``) to its first
``/healthz`` 200, five times (target <= 5 s). ``python -m benchmarks.images`` writes
``results/images.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.support.machine import broker_line, copy_checkout, machine_line
from benchmarks.support.report import publish
from consumer_sdk.lake.jar_lock import cache_dir
from local_kafka.clusters import ClusterKind, kafka_cluster

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "scripts/build_images.sh"
IMAGES = ("kafka-autoscaler-sidecar", "kafka-autoscaler-consumer")


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(command, cwd=cwd, env=env, check=True)
    return time.monotonic() - start


def podman(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["podman", *args], env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def ready_seconds(env: dict[str, str], bootstrap: str) -> float:
    """``podman run`` of the sidecar image to its first /healthz 200."""
    port = 18000 + uuid.uuid4().int % 1000
    name = f"ready-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    podman(
        env,
        *("run", "--detach", "--name", name, "--network=host", "--read-only"),
        *(f"--env=AUTOSCALER_BOOTSTRAP_SERVERS={bootstrap}", "--env=AUTOSCALER_GROUP=ready"),
        *("--env=AUTOSCALER_TOPICS=ready", "--env=AUTOSCALER_CAPACITY=1000"),
        *("--env=AUTOSCALER_SCALER=none", f"--env=AUTOSCALER_HTTP_PORT={port}"),
        "kafka-autoscaler-sidecar:latest",
    )
    try:
        while time.monotonic() - start < 60:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return time.monotonic() - start
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise RuntimeError("the sidecar container was not ready within 60 s")
    finally:
        podman(env, "rm", "--force", "--time=0", name)


def main(argv: Sequence[str] | None = None) -> int:
    """Build, measure, write ``results/images.{md,json}``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ready-runs", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="images-bench-") as work_dir:
        work = Path(work_dir)
        storage = work / "storage.conf"
        storage.write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{work / "graph"}"\n'
            f'runroot = "{work / "run"}"\n'
        )
        cache = work / "cache"
        shutil.copytree(cache_dir(), cache / "jars", symlinks=True)
        env = {
            **os.environ,
            "CONTAINERS_CONF": str(ROOT / "containers" / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(storage),
            "KAFKA_AUTOSCALER_CACHE": str(cache),
            "PY": str(ROOT / ".venv" / "bin" / "python"),
        }
        try:
            base_s = timed([SCRIPT, "base"], ROOT, env)
            fresh_s = timed([SCRIPT], ROOT, env)
            sizes = {
                image: int(
                    podman(env, "image", "inspect", "--format", "{{.Size}}", f"{image}:latest")
                )
                for image in IMAGES
            }
            changed = copy_checkout(work / "tree")
            with (changed / "consumer_sdk" / "sink.py").open("a") as module:
                module.write("\n# a change of the project's code alone\n")
            code_only_s = timed([str(changed / SCRIPT)], changed, env)
            with kafka_cluster(ClusterKind.APACHE) as kafka:
                broker = broker_line(kafka)
                ready = [
                    ready_seconds(env, kafka.bootstrap_servers) for _ in range(args.ready_runs)
                ]
        finally:  # the temporary store's overlay mounts, before its folder goes
            subprocess.run(["podman", "system", "reset", "--force"], env=env, check=False)
    data: dict[str, Any] = {
        "base_s": base_s,
        "fresh_s": fresh_s,
        "code_only_s": code_only_s,
        "sizes_bytes": sizes,
        "sidecar_ready_s": ready,
    }
    table = "\n".join(
        [
            "# The images: build time, size, sidecar readiness",
            "",
            machine_line(),
            broker,
            "Builds into an image store and cache of their own (nothing cached before), pip's "
            "cache the machine's; `scripts/build_images.sh` as `make images` runs it.",
            "",
            "| what | measured | target |",
            "|---|---:|---:|",
            f"| Debian bookworm base (mmdebstrap, once per machine) | {base_s:.0f} s | |",
            f"| fresh `make images`, the base cached | {fresh_s:.0f} s | <= 360 s |",
            f"| again after a change of the project's code alone | {code_only_s:.0f} s | <= 90 s |",
            f"| sidecar image | {sizes['kafka-autoscaler-sidecar'] / 1e6:.0f} MB | <= 250 MB |",
            f"| consumer image (JRE, PySpark, lake jars) | "
            f"{sizes['kafka-autoscaler-consumer'] / 1e6:.0f} MB | reported |",
            f"| sidecar `podman run` to /healthz 200, median of {len(ready)} (max) | "
            f"{statistics.median(ready):.2f} s ({max(ready):.2f} s) | <= 5 s |",
        ]
    )
    publish("images", table, data, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
