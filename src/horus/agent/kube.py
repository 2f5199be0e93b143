"""The agent's few Kubernetes calls, made as raw JSON requests.

The agent lists its node's pods every few seconds; the generated client's model objects cost
more CPU to build than the whole rest of a cycle, so requests go through the client's
``param_serialize``/``call_api`` (auth and TLS from the kubeconfig) and plain ``json`` decoding (this is what keeps the
agent under its 2 %-of-a-core budget). Only what the agent does is here: list pods and nodes,
read a node, DLJob or ConfigMap, evict a pod, write an Event, merge-patch ``status.observed``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from horus.agent.pods import PodInfo
from horus.common import constants as c
from horus.common.documents import loads_api_json
from horus.common.errors import ClusterError

log = logging.getLogger("horus.agent.kube")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Kube:
    """Thin JSON client over the Kubernetes API."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    @classmethod
    def connect(cls, kubeconfig: Path | None) -> Kube:
        from kubernetes import client, config

        try:
            if kubeconfig is not None:
                api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
            else:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                api = client.ApiClient()
        except Exception as exc:
            raise ClusterError(
                f"cannot configure the Kubernetes client ({exc}); pass --kubeconfig outside a "
                "cluster"
            ) from exc
        return cls(api)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            params = self._api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self._api.call_api(*params[:4], _request_timeout=30)
            resp.read()
        except ApiException as exc:
            raise ApiError(int(exc.status or 0), str(exc.body or exc.reason)[:500]) from None
        except OSError as exc:  # connection refused/reset: one failed cycle, not a crash
            raise ApiError(0, str(exc)) from None
        if not 200 <= int(resp.status) < 300:
            raise ApiError(int(resp.status), (resp.data or b"").decode(errors="replace")[:500])
        data = resp.data
        # Lenient bounded decoding: one absurdly nested object (a DLJob whose template is
        # thousands of levels deep) must not make the whole list undecodable (RecursionError);
        # its deep values become a marker and that object alone is refused where it is read.
        return loads_api_json(data) if data else None

    # --- reads -----------------------------------------------------------------------------

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        out = self.request(
            "GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={node}")]
        )
        return list(out.get("items", []))

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", f"/api/v1/nodes/{name}"))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def node_names(self, selector: str) -> list[str]:
        out = self.request("GET", "/api/v1/nodes", query=[("labelSelector", selector)])
        return sorted(n["metadata"]["name"] for n in out.get("items", []))

    def dljob(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.request(
                    "GET",
                    f"/apis/{c.API_GROUP}/{c.API_VERSION}/namespaces/{namespace}/"
                    f"{c.DLJOB_PLURAL}/{name}",
                )
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}"))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    # --- writes ----------------------------------------------------------------------------

    def patch_observed(self, namespace: str, job: str, observed: dict[str, Any]) -> None:
        """JSON merge patch of ``status.observed`` only (the operator owns the rest)."""
        self.request(
            "PATCH",
            f"/apis/{c.API_GROUP}/{c.API_VERSION}/namespaces/{namespace}/{c.DLJOB_PLURAL}/{job}/status",
            body={"status": {"observed": observed}},
            content_type="application/merge-patch+json",
        )

    def evict(self, pod: PodInfo, message: str) -> bool:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        try:
            self.request(
                "POST", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction", body=body
            )
        except ApiError as exc:
            if exc.status == 404:
                return True  # already gone
            log.warning("eviction of pod %s refused (%s); retrying next cycle", pod.key, exc)
            return False
        return True

    def event(self, pod: PodInfo, reason: str, message: str, host: str = "") -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{pod.name}.{uuid.uuid4().hex[:12]}",
                "namespace": pod.namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message[:1000],
            "type": "Warning",
            "source": {"component": c.EVENT_COMPONENT_AGENT, "host": host or pod.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.request("POST", f"/api/v1/namespaces/{pod.namespace}/events", body=body)
        except ApiError as exc:
            log.warning("could not write Event %s on pod %s: %s", reason, pod.key, exc)


class KubeActions:
    """:class:`horus.agent.watchdog.EnforcementActions` on the real API."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def evict(self, pod: PodInfo, message: str) -> bool:
        return self._kube.evict(pod, message)

    def event(self, pod: PodInfo, reason: str, message: str) -> None:
        self._kube.event(pod, reason, message)
