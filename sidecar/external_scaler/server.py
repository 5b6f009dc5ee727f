"""KEDA's ``externalscaler.ExternalScaler`` gRPC service over :class:`Answers`.

IsActive, StreamIsActive (for an ``external-push`` trigger: the current answer at once, then
each change), GetMetricSpec and GetMetrics. StreamMetricSpec is left unimplemented: the
target never changes, and KEDA falls back to GetMetricSpec when a scaler lacks it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from sidecar.external_scaler import messages
from sidecar.external_scaler.answers import Answers, Code, Refused, ScaledObject

log = logging.getLogger(__name__)

T = TypeVar("T")

WORKERS = 8
# StreamIsActive streams held at once (KEDA opens one per ScaledObject that names this
# scaler with external-push): each holds a worker, and the rest must answer KEDA's polls.
MAX_STREAMS = 4
# Calls in flight or queued beyond which gRPC refuses at once (RESOURCE_EXHAUSTED).
MAX_CONCURRENT_RPCS = 64


@dataclass(frozen=True)
class Tls:
    """The service's TLS: its certificate and key (PEM files), and, for mutual TLS, the CA
    that must have signed the client's certificate (KEDA's ``tlsClientCert``)."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials read from the files now."""
        client_ca = Path(self.client_cafile).read_bytes() if self.client_cafile else None
        return grpc.ssl_server_credentials(
            [(Path(self.keyfile).read_bytes(), Path(self.certfile).read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )


class ExternalScalerUnavailable(RuntimeError):
    """The service cannot listen where it was told to."""


def _abort(context: grpc.ServicerContext, refused: Refused) -> NoReturn:
    log.warning("KEDA's call refused: %s", refused.line)
    context.abort(grpc.StatusCode[refused.code.value], refused.line)
    raise refused  # abort raised already; this line is for the type checker


def _scaled_object(ref: Any) -> ScaledObject:
    return ScaledObject(ref.name, ref.namespace, dict(ref.scalerMetadata))


class Service:
    """The service's handlers; ``poll_s`` is how often StreamIsActive looks for a change."""

    def __init__(self, answers: Answers, poll_s: float = 1.0) -> None:
        self.answers = answers
        self.poll_s = poll_s
        self.stopping = threading.Event()
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)

    def _answer(self, context: grpc.ServicerContext, call: Callable[[], T]) -> T:
        try:
            return call()
        except Refused as refused:
            _abort(context, refused)

    def is_active(self, request: Any, context: grpc.ServicerContext) -> Any:
        """IsActive: whether the sidecar wants at least one consumer."""
        ref = _scaled_object(request)
        return messages.IsActiveResponse(
            result=self._answer(context, lambda: self.answers.is_active(ref))
        )

    def stream_is_active(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """StreamIsActive: the answer now, then each time it changes (at most
        :data:`MAX_STREAMS` at once: more are refused, RESOURCE_EXHAUSTED)."""
        if not self.streams.acquire(blocking=False):
            _abort(
                context,
                Refused(
                    Code.RESOURCE_EXHAUSTED,
                    f"StreamIsActive: {MAX_STREAMS} streams are open already (KEDA opens one "
                    f"per ScaledObject); this one is refused so that polls are still answered",
                ),
            )
        try:
            yield from self._stream(request, context)
        finally:
            self.streams.release()

    def _stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        ref = _scaled_object(request)
        last: bool | None = None
        while context.is_active() and not self.stopping.is_set():
            active: bool | None
            try:
                active = self.answers.is_active(ref)
            except Refused as refused:
                if refused.code is not Code.UNAVAILABLE:
                    _abort(context, refused)
                # No count for now (starting, a leader change): nothing new to say.
                active = last
            if active is not None and active != last:
                yield messages.IsActiveResponse(result=active)
                last = active
            self.stopping.wait(self.poll_s)

    def get_metric_spec(self, request: Any, context: grpc.ServicerContext) -> Any:
        """GetMetricSpec: the consumer-count metric, target 1 per replica."""
        ref = _scaled_object(request)
        name, target = self._answer(context, lambda: self.answers.metric_spec(ref))
        spec = messages.MetricSpec(metricName=name, targetSize=int(target), targetSizeFloat=target)
        return messages.GetMetricSpecResponse(metricSpecs=[spec])

    def get_metrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        """GetMetrics: the sidecar's consumer count."""
        ref = _scaled_object(request.scaledObjectRef)
        name, value = self._answer(
            context, lambda: self.answers.metric_value(ref, request.metricName)
        )
        metric = messages.MetricValue(
            metricName=name, metricValue=int(value), metricValueFloat=value
        )
        return messages.GetMetricsResponse(metricValues=[metric])

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's methods, registered under KEDA's service name."""
        ref_in = messages.ScaledObjectRef.FromString
        return grpc.method_handlers_generic_handler(
            messages.SERVICE,
            {
                "IsActive": grpc.unary_unary_rpc_method_handler(self.is_active, ref_in, _serialize),
                "StreamIsActive": grpc.unary_stream_rpc_method_handler(
                    self.stream_is_active, ref_in, _serialize
                ),
                "GetMetricSpec": grpc.unary_unary_rpc_method_handler(
                    self.get_metric_spec, ref_in, _serialize
                ),
                "GetMetrics": grpc.unary_unary_rpc_method_handler(
                    self.get_metrics, messages.GetMetricsRequest.FromString, _serialize
                ),
            },
        )


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


class ExternalScalerServer:
    """The gRPC server: started by :func:`serve_keda`, stopped by :meth:`stop`."""

    def __init__(self, server: grpc.Server, service: Service, port: int) -> None:
        self.server = server
        self.service = service
        self.port = port

    def stop(self, grace_s: float = 1.0) -> None:
        """End the streams and stop serving (calls in flight get ``grace_s``)."""
        self.service.stopping.set()
        self.server.stop(grace_s).wait()


def serve_keda(
    host: str, port: int, answers: Answers, poll_s: float = 1.0, tls: Tls | None = None
) -> ExternalScalerServer:
    """Serve KEDA's external scaler on ``host:port`` (0: any free port; see ``.port``), over
    TLS (mutual with ``tls.client_cafile``) when ``tls`` is given."""
    service = Service(answers, poll_s)
    # A stream holds a worker while KEDA watches (at most MAX_STREAMS of them); the other
    # workers answer the polls. No SO_REUSEPORT (gRPC's default): a port another process
    # holds is an error, not shared.
    server = grpc.server(
        ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="keda-grpc"),
        options=[("grpc.so_reuseport", 0)],
        maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
    )
    server.add_generic_rpc_handlers((service.handler(),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        credentials = tls.credentials() if tls is not None else None
    except OSError as exc:
        raise ExternalScalerUnavailable(
            f"--keda-tls-cert-file/--keda-tls-key-file/--keda-client-ca-file: cannot read "
            f"{exc.filename}: {exc.strerror}"
        ) from None
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ExternalScalerUnavailable(
            f"--keda-host/--keda-port (AUTOSCALER_KEDA_HOST/PORT): cannot serve on {address}: {exc}"
        ) from None
    if bound == 0:
        raise ExternalScalerUnavailable(
            f"--keda-host/--keda-port (AUTOSCALER_KEDA_HOST/PORT): cannot serve on {address} "
            "(in use, or not an address of this host)"
        )
    server.start()
    return ExternalScalerServer(server, service, bound)
