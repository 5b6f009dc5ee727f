"""What the sidecar needs from a scaler."""

from __future__ import annotations

from typing import Protocol

from sidecar.join_watch import MemberFailure


class Scaler(Protocol):
    """Reads and sets the number of consumer replicas."""

    def replicas(self) -> int:
        """Replicas running (or requested) now."""
        ...

    def scale(self, replicas: int) -> None:
        """Run exactly ``replicas`` consumers; raise if the platform refuses."""
        ...

    def problems(self) -> list[str]:
        """What is wrong with the replicas now (for example a crash-looping consumer), one
        line each; empty when nothing is."""
        ...

    def failing_members(self) -> list[MemberFailure]:
        """Members this scaler started that fail now (a consumer that exited, a pod waiting
        in CrashLoopBackOff), each with its own last error where it can be read; empty when
        none is (sidecar.join_watch holds scale-ups meanwhile)."""
        ...

    def member_words(self) -> list[MemberFailure]:
        """The last thing each running member said (a local consumer's last stderr line),
        to name why members run but do not join; empty where it cannot be read."""
        ...

    def close(self) -> None:
        """Release what the scaler holds (local: stop the consumers)."""
        ...
