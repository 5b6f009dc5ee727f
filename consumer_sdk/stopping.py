"""Running a member until SIGTERM or SIGINT asks it to stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any


def run_until_signalled(
    request_stop: Callable[[], None], run_async: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Run ``run_async()`` in a new event loop; SIGTERM and SIGINT call ``request_stop``
    (which asks the run to finish what it holds and return)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, request_stop)
        await run_async()

    asyncio.run(main())
