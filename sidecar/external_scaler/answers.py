"""What the sidecar answers KEDA (pure logic: no gRPC, no I/O).

KEDA's HPA scales a workload to ``ceil(metric / target)`` replicas for an ``AverageValue``
metric (KEDA's default for external triggers). The sidecar reports its consumer count as
the metric with a target of 1, so the HPA's desired count is the sidecar's, within the
HPA's tolerance (10 % by default: a change from 10 to 11 replicas is inside it).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

METRIC_NAME = "kafka-autoscaler-consumers"
TARGET = 1.0

# Trigger metadata KEDA itself reads (it forwards the whole trigger) and ours.
KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl"})
OUR_KEYS = frozenset({"group"})
# KEDA resolves ``<key>FromEnv`` from the workload's environment and forwards the key.
_FROM_ENV = re.compile(r"^(?P<key>.+)FromEnv$")


class Code(enum.Enum):
    """Why a call is refused (the gRPC status it becomes)."""

    NOT_FOUND = "NOT_FOUND"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    UNAVAILABLE = "UNAVAILABLE"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"


class Refused(Exception):
    """A call the sidecar does not answer, with the status and one line saying why."""

    def __init__(self, code: Code, line: str) -> None:
        super().__init__(line)
        self.code = code
        self.line = line


@dataclass(frozen=True)
class ScaledObject:
    """A ScaledObject as KEDA names it in each call."""

    name: str
    namespace: str
    metadata: Mapping[str, str]


@dataclass(frozen=True)
class Answers:
    """The answers for the one ScaledObject this sidecar sizes.

    ``count`` is the sidecar's consumer count now, None until it has sized the group
    (starting, not leading, or no data yet): KEDA then gets UNAVAILABLE and its HPA keeps
    the replicas it has, rather than a zero it would scale towards."""

    name: str
    namespace: str
    group: str
    count: Callable[[], int | None]

    def check(self, ref: ScaledObject) -> None:
        """Refuse a ScaledObject that is not this one (NOT_FOUND) or trigger metadata that is
        wrong (INVALID_ARGUMENT), naming it."""
        if (ref.namespace, ref.name) != (self.namespace, self.name):
            raise Refused(
                Code.NOT_FOUND,
                f"ScaledObject {ref.namespace + '/' + ref.name!r} is not sized here: this sidecar "
                f"answers for {self.namespace}/{self.name} (--scaled-object, --namespace)",
            )
        for key, value in sorted(ref.metadata.items()):
            base = m.group("key") if (m := _FROM_ENV.match(key)) else key
            if base not in KEDA_KEYS | OUR_KEYS:
                accepted = ", ".join(sorted(KEDA_KEYS | OUR_KEYS))
                raise Refused(
                    Code.INVALID_ARGUMENT,
                    f"trigger metadata {key!r}: not a key of this scaler (accepted: {accepted})",
                )
            if base == "group" and value != self.group:
                raise Refused(
                    Code.INVALID_ARGUMENT,
                    f"trigger metadata group: {value!r} is not the consumer group this sidecar "
                    f"sizes ({self.group!r})",
                )

    def sized(self) -> int:
        """The count now, or UNAVAILABLE saying why there is none."""
        count = self.count()
        if count is None:
            raise Refused(
                Code.UNAVAILABLE,
                f"the sidecar has not sized group {self.group!r} yet (starting, not the "
                "leader, or no speeds measured): the HPA keeps its replicas",
            )
        return count

    def is_active(self, ref: ScaledObject) -> bool:
        """Active while the sidecar wants at least one consumer (KEDA scales an inactive
        workload to its minReplicaCount, or idleReplicaCount)."""
        self.check(ref)
        return self.sized() > 0

    def metric_spec(self, ref: ScaledObject) -> tuple[str, float]:
        """The metric KEDA's HPA watches and its per-replica target."""
        self.check(ref)
        return METRIC_NAME, TARGET

    def metric_value(self, ref: ScaledObject, metric_name: str) -> tuple[str, float]:
        """The metric's value: the consumer count."""
        self.check(ref)
        if metric_name != METRIC_NAME:
            raise Refused(
                Code.INVALID_ARGUMENT,
                f"metricName: {metric_name!r} is not a metric of this scaler "
                f"(accepted: {METRIC_NAME})",
            )
        return METRIC_NAME, float(self.sized())
