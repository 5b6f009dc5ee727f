"""How a Kubernetes scaler reports the API's refusals."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException


class ScalerError(RuntimeError):
    """The platform refused to scale; the message says why and what to check."""


def explain(exc: ApiException, what: str) -> ScalerError:
    """A ScalerError for an API failure, with the likely fix for 403/404."""
    hint = {
        403: "forbidden: the sidecar's Role must allow get/patch on the workload's scale "
        "subresource, list/patch on pods and get/create/update on leases",
        404: "not found: check --namespace, --workload-kind and --workload-name",
    }.get(exc.status or 0, exc.reason or "")
    return ScalerError(f"{what} failed with HTTP {exc.status}: {hint}")
