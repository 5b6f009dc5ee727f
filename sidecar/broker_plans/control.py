"""Control members: the sidecar's way to make the coordinator run the assignor.

A KIP-848 coordinator assigns only when the group changes (a member joins or leaves, a
subscription or the topics' metadata change), not when speeds drift. So when the group does
not read as the latest plan says, the sidecar has a member of its own join: one with a
``group.instance.id`` starting ``autoscaler-control``, which the broker's assignor counts out
of the plans and gives nothing. Each kick is a new instance id (a static member rejoining under
its old one would not change the group); the one before leaves."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from assignor.broker import ASSIGNOR_NAME, CONTROL_INSTANCE_PREFIX

log = logging.getLogger(__name__)


class ControlMembers:
    """Starts a fresh control member per :meth:`kick`, each polled on a thread of its own (a
    confluent-kafka consumer is not shared between threads), and stops the previous one.
    ``client_options``: librdkafka properties added to each (security, for example)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap, self.group, self.topics = bootstrap, group, list(topics)
        self.client_options = dict(client_options or {})
        self.kicks = 0
        self._current: tuple[threading.Thread, threading.Event] | None = None

    def instance_id(self, kick: int) -> str:
        """The ``group.instance.id`` of the control member of kick number ``kick``."""
        return f"{CONTROL_INSTANCE_PREFIX}-{os.getpid()}-{kick}"

    def kick(self) -> str:
        """Have a new control member join (the coordinator assigns); the previous leaves.
        Returns the new member's instance id."""
        self.kicks += 1
        name = self.instance_id(self.kicks)
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(name, stop), daemon=True, name=name)
        thread.start()
        self.release()
        self._current = (thread, stop)
        return name

    def release(self) -> None:
        """Have the current control member leave (nothing when there is none)."""
        current, self._current = self._current, None
        if current is not None:
            current[1].set()
            current[0].join(timeout=30)

    def _run(self, name: str, stop: threading.Event) -> None:
        from confluent_kafka import Consumer, KafkaException

        settings: dict[str, Any] = {
            **self.client_options,
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "group.protocol": "consumer",
            "group.remote.assignor": ASSIGNOR_NAME,
            "group.instance.id": name,
            "enable.auto.commit": False,
        }
        try:
            consumer = Consumer(settings)
            consumer.subscribe(self.topics)
            while not stop.is_set():
                consumer.poll(0.2)  # it is given nothing; polling keeps it in the group
            consumer.close()
        except KafkaException as exc:
            log.warning("control member %s failed: %s", name, exc)
