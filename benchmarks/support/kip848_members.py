"""KIP-848 consumers (confluent-kafka, ``group.protocol=consumer``, no code of ours) in
threads, recording what each owns; and the topic ids our broker-side assignor's plans name."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AdminClient

from contract.broker_plans import check_topic_id


class Kip848Members:
    """KIP-848 consumers, each polled on a thread of its own (a confluent-kafka consumer is
    not to be shared between threads). ``assignor``: the ``group.remote.assignor`` (None: the
    broker's default); members are static (``group.instance.id`` = their name) when
    ``static``, as the plans of our assignor name them."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        *,
        assignor: str | None = None,
        static: bool = True,
    ) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.assignor, self.static = assignor, static
        self.owned: dict[str, set[int]] = {}
        self._stops: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}

    def join(self, name: str) -> None:
        """Start the member ``name`` (it owns nothing until the group assigns it some)."""
        stop = threading.Event()
        self.owned[name] = set()
        thread = threading.Thread(target=self._run, args=(name, stop), daemon=True)
        self._stops[name], self._threads[name] = stop, thread
        thread.start()

    def leave(self, name: str) -> None:
        """Close the member ``name`` and forget it."""
        self._stops[name].set()
        self._threads[name].join(timeout=30)
        del self.owned[name]

    def _run(self, name: str, stop: threading.Event) -> None:
        settings: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
        if self.assignor is not None:
            settings["group.remote.assignor"] = self.assignor
        if self.static:
            settings["group.instance.id"] = name
        consumer = Consumer(settings)
        consumer.subscribe([self.topic])
        try:
            while not stop.is_set():
                consumer.poll(0.1)
                self.owned[name] = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()

    def close(self) -> None:
        """Close every member."""
        for name in list(self.owned):
            self.leave(name)

    def holds(self, expected: Mapping[str, set[int]]) -> bool:
        """Whether the members are exactly ``expected``'s, each owning what it says."""
        return {k: set(v) for k, v in self.owned.items()} == dict(expected)

    def owners(self) -> dict[int, str]:
        """Partition -> the member owning it now."""
        return {p: name for name, owned in list(self.owned.items()) for p in owned}


def kafka_topic_id(bootstrap: str, topic: str) -> str:
    """``topic``'s id, in the URL-safe form the plans use."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result()
    return check_topic_id(str(described.topic_id))
