"""Leader election on Kubernetes: a coordination.k8s.io/v1 Lease.

The holder renews ``renewTime`` every tick; another sidecar takes the lease over once it
has not been renewed for ``duration_s``. Writes carry the resourceVersion read, so two
sidecars racing for the same lease cannot both win (the loser gets 409 Conflict).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

from kubernetes.client import ApiClient, CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def utc_now() -> datetime.datetime:
    """Now, timezone-aware."""
    return datetime.datetime.now(datetime.UTC)


class KubernetesLease:
    """``acquire()`` takes or renews the lease (never waits); ``held`` says if we hold it."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        if duration_s < 1:
            raise ValueError(f"duration_s must be >= 1, got {duration_s!r}")
        self.api = CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s = duration_s
        self.clock = clock
        self.held = False

    def acquire(self) -> bool:
        """Create, renew or take over the lease; True if we hold it afterwards."""
        now = self.clock()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading lease %s failed: HTTP %s", self.name, exc.status)
                self.held = False
                return False
            return self._write(None, now)
        spec = lease.spec or V1LeaseSpec()
        if spec.holder_identity not in (None, "", self.identity):
            renewed = spec.renew_time or spec.acquire_time
            duration = spec.lease_duration_seconds or self.duration_s
            if renewed is not None and now - renewed < datetime.timedelta(seconds=duration):
                self.held = False
                return False
            log.info("lease %s of %s expired: taking over", self.name, spec.holder_identity)
        return self._write(lease, now)

    def _write(self, lease: V1Lease | None, now: datetime.datetime) -> bool:
        spec = lease.spec if lease is not None and lease.spec is not None else V1LeaseSpec()
        ours = spec.holder_identity == self.identity
        body = V1Lease(
            metadata=V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=(
                    lease.metadata.resource_version if lease and lease.metadata else None
                ),
            ),
            spec=V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.duration_s,
                acquire_time=spec.acquire_time if ours else now,
                renew_time=now,
                lease_transitions=(spec.lease_transitions or 0) + (0 if ours or not lease else 1),
            ),
        )
        try:
            if lease is None:
                self.api.create_namespaced_lease(self.namespace, body)
            else:
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status not in (409, 403):
                log.warning("writing lease %s failed: HTTP %s", self.name, exc.status)
            elif exc.status == 403:
                log.error("writing lease %s forbidden: the Role must allow leases", self.name)
            self.held = False
            return False
        self.held = True
        return True

    def release(self) -> None:
        """Give the lease up so a standby takes over at once."""
        if not self.held:
            return
        self.held = False
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            log.warning("releasing lease %s failed: HTTP %s", self.name, exc.status)
