"""Leader election on Kubernetes: a coordination.k8s.io/v1 Lease.

The holder renews ``renewTime`` every tick; another sidecar takes the lease over once it
has not been renewed for ``duration_s``. Writes carry the resourceVersion read, so two
sidecars racing for the same lease cannot both win (the loser gets 409 Conflict).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api, V1Lease, V1LeaseSpec
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def utc_now() -> datetime.datetime:
    """Now, timezone-aware."""
    return datetime.datetime.now(datetime.UTC)


def micro_time(moment: datetime.datetime) -> str:
    """A Lease time as the API server parses it: RFC 3339 in UTC with exactly six fractional
    digits. (The client's own serialisation, isoformat, drops the fraction when it is zero,
    and the server rejects such a Lease with 400 Bad Request.)"""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    name: str, namespace: str, resource_version: str | None, spec: dict[str, Any]
) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease to create or replace (``resource_version`` makes the
    replace conditional); fields that are None are left out."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {key: value for key, value in spec.items() if value is not None},
    }


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
        acquired = spec.acquire_time if ours and spec.acquire_time is not None else now
        body = lease_body(
            self.name,
            self.namespace,
            lease.metadata.resource_version if lease and lease.metadata else None,
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": micro_time(acquired),
                "renewTime": micro_time(now),
                "leaseTransitions": (spec.lease_transitions or 0) + (0 if ours or not lease else 1),
            },
        )
        try:
            self._send(body, create=lease is None)
        except ApiException as exc:
            if exc.status not in (409, 403):
                log.warning("writing lease %s failed: HTTP %s", self.name, exc.status)
            elif exc.status == 403:
                log.error("writing lease %s forbidden: the Role must allow leases", self.name)
            self.held = False
            return False
        self.held = True
        return True

    def _send(self, body: dict[str, Any], create: bool) -> None:
        """POST (create) or PUT (replace) ``body`` as it is; raises ApiException.

        Not through create/replace_namespaced_lease: those turn the body into a V1Lease
        model and serialise its times with isoformat again (see micro_time)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        client = self.api.api_client
        request = client.param_serialize(
            "POST" if create else "PUT",
            path if create else f"{path}/{self.name}",
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*request)
        response.read()
        if not 200 <= response.status <= 299:
            client.response_deserialize(response, {})  # raises ApiException with the status

    def release(self) -> None:
        """Give the lease up so a standby takes over at once."""
        if not self.held:
            return
        self.held = False
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            spec = lease.spec
            if spec is None or spec.holder_identity != self.identity:
                return
            kept = {
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "acquireTime": micro_time(spec.acquire_time) if spec.acquire_time else None,
                "renewTime": micro_time(spec.renew_time) if spec.renew_time else None,
                "leaseTransitions": spec.lease_transitions,
            }
            version = lease.metadata.resource_version if lease.metadata else None
            self._send(lease_body(self.name, self.namespace, version, kept), create=False)
        except ApiException as exc:
            log.warning("releasing lease %s failed: HTTP %s", self.name, exc.status)
