"""A small in-process Kubernetes API server: the REST paths the sidecar uses, in memory.

Scale subresources of Deployments and StatefulSets (GET; PATCH as a merge patch or as a JSON
patch whose failed ``test`` answers 422, as kube-apiserver does), pods (list by label
selector, PATCH annotations), coordination.k8s.io Leases (GET, POST, PUT with resourceVersion
checks, times parsed as strictly as the real server). ``fail_next`` injects one error
response. The real ``kubernetes`` client talks to it over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes.client import ApiClient, Configuration

SCALE = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(deployments|statefulsets)/([^/]+)/scale$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")
# kube-apiserver parses a Lease's times as RFC 3339 with exactly six fractional digits.
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?$")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


@dataclass
class FakeKube:
    """State and server; use as a context manager."""

    scales: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    leases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    failures: list[tuple[str, str, int]] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    version: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def add_workload(
        self,
        kind: str,
        name: str,
        replicas: int,
        labels: dict[str, str],
        namespace: str = "default",
    ) -> None:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        self.scales[(namespace, kind + "s", name)] = {
            "replicas": replicas,
            "selector": selector,
            "rv": self._bump(),
        }

    def add_pod(self, name: str, labels: dict[str, str], namespace: str = "default") -> None:
        self.pods[(namespace, name)] = {"labels": labels, "annotations": {}, "rv": self._bump()}

    def fail_next(self, method: str, path_part: str, code: int) -> None:
        """The next ``method`` request whose path contains ``path_part`` gets ``code``."""
        self.failures.append((method, path_part, code))

    def client(self) -> ApiClient:
        assert self.server is not None
        config = Configuration()
        config.host = f"http://127.0.0.1:{self.server.server_port}"
        return ApiClient(config)

    def _bump(self) -> int:
        self.version += 1
        return self.version

    def __enter__(self) -> FakeKube:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the client's pool expects

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def _reply(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                body = self._body() if method in ("PATCH", "POST", "PUT") else None
                with fake.lock:
                    fake.requests.append((method, url.path, body))
                    for i, (m, part, code) in enumerate(fake.failures):
                        if m == method and part in url.path:
                            del fake.failures[i]
                            return self._reply(code, status(code, "Injected", "injected"))
                    code, payload = fake.route(method, url.path, parse_qs(url.query), body)
                self._reply(code, payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()

    # routing -------------------------------------------------------------------------------
    def route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, dict[str, Any]]:
        if match := SCALE.match(path):
            return self._scale(method, match.groups(), body)
        if match := PODS.match(path):
            return self._pods(method, match.group(1), match.group(2), query, body)
        if match := LEASES.match(path):
            return self._leases(method, match.group(1), match.group(2), body)
        return 404, status(404, "NotFound", f"no route for {method} {path}")

    def _scale(self, method: str, key: tuple[str, ...], body: Any) -> tuple[int, dict[str, Any]]:
        namespace, plural, name = key
        scale = self.scales.get((namespace, plural, name))
        if scale is None:
            return 404, status(404, "NotFound", f"{plural}/{name} not found")
        if method == "PATCH":
            replicas = self._patched_replicas(scale, body)
            if replicas is None:  # what kube-apiserver answers when a JSON patch test fails
                return 422, status(422, "Invalid", "the server rejected our request")
            scale["replicas"] = replicas
            scale["rv"] = self._bump()
        return 200, {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(scale["rv"])},
            # The real API omits a zero (omitempty): the spec of a workload at 0 is empty.
            "spec": {"replicas": scale["replicas"]} if scale["replicas"] else {},
            "status": {"replicas": scale["replicas"], "selector": scale["selector"]},
        }

    @staticmethod
    def _patched_replicas(scale: dict[str, Any], body: Any) -> int | None:
        """The replicas a scale PATCH sets: a JSON patch (test, then add or replace
        /spec/replicas; a test of /spec) or a merge patch; None when a test operation fails."""
        if isinstance(body, dict):
            return int(body["spec"]["replicas"])
        spec = {"replicas": scale["replicas"]} if scale["replicas"] else {}
        for operation in body:
            path, op = operation["path"], operation["op"]
            if path not in ("/spec", "/spec/replicas") or op not in ("test", "add", "replace"):
                raise ValueError(f"unsupported JSON patch operation {op!r} on {path!r}")
            present = path == "/spec" or "replicas" in spec
            if op in ("test", "replace") and not present:
                return None  # the path does not exist: the server answers 422
            if op == "test":
                if (spec if path == "/spec" else spec["replicas"]) != operation["value"]:
                    return None
            elif path == "/spec/replicas":
                spec["replicas"] = operation["value"]
        return int(spec.get("replicas", 0))

    def _pod_json(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.pods[(namespace, name)]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": pod["labels"],
                "annotations": pod["annotations"],
                "resourceVersion": str(pod["rv"]),
            },
            "spec": {"containers": [{"name": "consumer", "image": "consumer"}]},
        }

    def _pods(
        self, method: str, namespace: str, name: str | None, query: dict[str, list[str]], body: Any
    ) -> tuple[int, dict[str, Any]]:
        if name is None and method == "GET":
            selector = dict(
                part.split("=", 1)
                for part in (query.get("labelSelector") or [""])[0].split(",")
                if part
            )
            items = [
                self._pod_json(ns, n)
                for (ns, n), pod in sorted(self.pods.items())
                if ns == namespace and all(pod["labels"].get(k) == v for k, v in selector.items())
            ]
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
        if name is not None and method == "PATCH":
            if (namespace, name) not in self.pods:
                return 404, status(404, "NotFound", f"pod {name} not found")
            pod = self.pods[(namespace, name)]
            pod["annotations"].update((body.get("metadata") or {}).get("annotations") or {})
            pod["rv"] = self._bump()
            return 200, self._pod_json(namespace, name)
        return 405, status(405, "MethodNotAllowed", method)

    def _leases(
        self, method: str, namespace: str, name: str | None, body: Any
    ) -> tuple[int, dict[str, Any]]:
        if method in ("POST", "PUT"):
            for field_name in ("acquireTime", "renewTime"):
                value = body["spec"].get(field_name)
                if value is not None and not MICRO_TIME.match(value):
                    return 400, status(400, "BadRequest", f"{field_name} {value!r} not MicroTime")
        if method == "POST":
            name = body["metadata"]["name"]
            if (namespace, name) in self.leases:
                return 409, status(409, "AlreadyExists", f"lease {name} exists")
            self.leases[(namespace, name)] = {"spec": body["spec"], "rv": self._bump()}
            return 201, self._lease_json(namespace, name)
        assert name is not None
        lease = self.leases.get((namespace, name))
        if lease is None:
            return 404, status(404, "NotFound", f"lease {name} not found")
        if method == "PUT":
            if str(body["metadata"].get("resourceVersion")) != str(lease["rv"]):
                return 409, status(409, "Conflict", "the object has been modified")
            lease["spec"] = body["spec"]
            lease["rv"] = self._bump()
        return 200, self._lease_json(namespace, name)

    def _lease_json(self, namespace: str, name: str) -> dict[str, Any]:
        lease = self.leases[(namespace, name)]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(lease["rv"])},
            "spec": lease["spec"],
        }
