"""The agent's few Kubernetes calls: list pods and nodes, read a node, DLJob or ConfigMap,
evict a pod, write an Event, merge-patch ``status.observed``.

The agent lists its node's pods every few seconds, so every call is a raw JSON request
(:class:`horus.kube.rest.RestClient`: the generated client's models would cost more CPU than
the rest of a cycle; this is what keeps the agent under its 2 %-of-a-core budget). Client
setup, errors and Events come from the one Kubernetes layer, :mod:`horus.kube`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from horus.agent.pods import PodInfo
from horus.common import constants as c
from horus.kube.client import api_client
from horus.kube.errors import ApiError
from horus.kube.events import event_body, pod_involved
from horus.kube.rest import RestClient

log = logging.getLogger("horus.agent.kube")

_DLJOBS = f"/apis/{c.API_GROUP}/{c.API_VERSION}/namespaces/{{namespace}}/{c.DLJOB_PLURAL}"


class AgentApi(RestClient):
    """The agent's calls over a ``kubernetes.client.ApiClient``."""

    @classmethod
    def connect(cls, kubeconfig: Path | None) -> AgentApi:
        return cls(api_client(kubeconfig))

    # --- reads -----------------------------------------------------------------------------

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return self.list("/api/v1/pods", [("fieldSelector", f"spec.nodeName={node}")])

    def node(self, name: str) -> dict[str, Any] | None:
        return self.get(f"/api/v1/nodes/{name}")

    def node_names(self, selector: str) -> list[str]:
        items = self.list("/api/v1/nodes", [("labelSelector", selector)])
        return sorted(n["metadata"]["name"] for n in items)

    def dljob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"{_DLJOBS.format(namespace=namespace)}/{name}")

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    # --- writes ----------------------------------------------------------------------------

    def patch_observed(self, namespace: str, job: str, observed: dict[str, Any]) -> None:
        """JSON merge patch of ``status.observed`` only (the operator owns the rest)."""
        self.merge_patch(
            f"{_DLJOBS.format(namespace=namespace)}/{job}/status",
            {"status": {"observed": observed}},
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
        """A Warning Event on ``pod`` from the agent (best effort)."""
        involved = pod_involved(pod.namespace, pod.name, pod.uid)
        self.post_event(
            event_body(
                involved,
                reason,
                message,
                warning=True,
                component=c.EVENT_COMPONENT_AGENT,
                host=host or pod.node,
            )
        )


class KubeActions:
    """:class:`horus.agent.watchdog.EnforcementActions` on the real API."""

    def __init__(self, kube: AgentApi) -> None:
        self._kube = kube

    def evict(self, pod: PodInfo, message: str) -> bool:
        return self._kube.evict(pod, message)

    def event(self, pod: PodInfo, reason: str, message: str) -> None:
        self._kube.event(pod, reason, message)
