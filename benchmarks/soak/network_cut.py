"""Cut one consumer process from the network (the brokers and the Spark Connect server), and
heal it: the soak's network fault.

Each consumer the soak's sidecar starts runs through ``python -m
benchmarks.soak.network_cut exec -- COMMAND...``, which moves itself into a cgroup v2 group
of its own (named after ``AUTOSCALER_MEMBER_IDENTITY``) before it executes the consumer, so
every socket the consumer opens carries that group. A cut is one nftables rule, in a table
this module owns, dropping what sockets of that group send (``socket cgroupv2``): the
consumer's requests and acknowledgements stop, as if its link went down; nothing else on the
machine is touched. Needs root and nftables.

nftables resolves a group's path under ``/sys/fs/cgroup``; where cgroup v2 is mounted elsewhere
(the hybrid layout: ``/sys/fs/cgroup/unified``), the group is bind-mounted there too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TABLE = "kafka_autoscaler_soak"
NFT_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "soak-member-"


def cgroup2_root() -> Path:
    """Where cgroup v2 is mounted."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    raise RuntimeError("no cgroup v2 mount: the network cut needs one")


def group_name(identity: str) -> str:
    """The cgroup of the member ``identity``."""
    return GROUP_PREFIX + "".join(c if c.isalnum() or c in "-_" else "_" for c in identity)


def join(identity: str) -> None:
    """Move this process into the member's cgroup (created if needed), visible to nftables."""
    name = group_name(identity)
    group = cgroup2_root() / name
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    if cgroup2_root() != NFT_ROOT:
        alias = NFT_ROOT / name
        alias.mkdir(exist_ok=True)
        if not os.path.ismount(alias):
            subprocess.run(["mount", "--bind", str(group), str(alias)], check=True)


def cut(identity: str) -> None:
    """Drop every packet the member's sockets send."""
    name = group_name(identity)
    chain = "{ type filter hook output priority 0; }"
    _nft(f"add table inet {TABLE}")
    _nft(f"add chain inet {TABLE} {name} {chain}")
    _nft(f"add rule inet {TABLE} {name} socket cgroupv2 level 1 {name} drop")


def heal(identity: str) -> None:
    """Lift the member's cut."""
    with contextlib.suppress(subprocess.CalledProcessError):
        _nft(f"delete chain inet {TABLE} {group_name(identity)}")


def clean_up() -> None:
    """Lift every cut and remove the groups no process is in any more (without nftables
    installed there is no cut to lift: a soak without network cuts does not need it)."""
    if shutil.which("nft") is not None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _nft(f"delete table inet {TABLE}")
    root = cgroup2_root()
    for group in root.glob(GROUP_PREFIX + "*"):
        alias = NFT_ROOT / group.name
        if root != NFT_ROOT and os.path.ismount(alias):
            subprocess.run(["umount", str(alias)], check=False)
            with contextlib.suppress(OSError):
                alias.rmdir()
        with contextlib.suppress(OSError):  # busy while a process is still in it
            group.rmdir()


def _nft(command: str) -> None:
    subprocess.run(["nft", command], check=True, capture_output=True, text=True)


def main(argv: Sequence[str]) -> int:
    """``exec -- COMMAND...``: join the member's cgroup, then become COMMAND."""
    if len(argv) < 3 or argv[0] != "exec" or argv[1] != "--":
        print("usage: python -m benchmarks.soak.network_cut exec -- COMMAND...", file=sys.stderr)
        return 2
    join(os.environ.get("AUTOSCALER_MEMBER_IDENTITY", str(os.getpid())))
    os.execvp(argv[2], list(argv[2:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
