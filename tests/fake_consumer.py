"""A stand-in consumer process for scaler tests: marks start and SIGTERM in a folder."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    folder = Path(sys.argv[1])
    identity = os.environ["AUTOSCALER_MEMBER_IDENTITY"]
    ignore_term = len(sys.argv) > 2 and sys.argv[2] == "--ignore-sigterm"

    def on_term(*_: object) -> None:
        if ignore_term:
            return
        (folder / f"{identity}.stopped").write_text("sigterm")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    (folder / f"{identity}.started").write_text(str(os.getpid()))
    rack = os.environ.get("AUTOSCALER_CLIENT_RACK")
    if rack is not None:
        # Whole or not at all: a SIGTERM between creating the file and writing it left it
        # empty (failed CI emulation of this stop).
        staged = folder / f".{identity}.rack"
        staged.write_text(rack)
        os.replace(staged, folder / f"{identity}.rack")
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
