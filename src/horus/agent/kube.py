"""The agent's few Kubernetes calls: list pods and nodes, read a node, DLJob or ConfigMap (and
on the dra path a ResourceClaim and the node's ResourceSlices), delete a pod (the memory watchdog), write an Event, merge-patch ``status.observed``.

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

_RESOURCE = f"/apis/{c.RESOURCE_API_GROUP}/{c.RESOURCE_API_VERSION}"
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

    # --- the dra path (horus.agent.claims) -------------------------------------------------

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"{_RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")

    def resourceslices_on(self, node: str) -> list[dict[str, Any]]:
        """This node's slices (field selector ``spec.nodeName``; the reader checks it too)."""
        return self.list(
            f"{_RESOURCE}/resourceslices", [("fieldSelector", f"spec.nodeName={node}")]
        )

    # --- writes ----------------------------------------------------------------------------

    def patch_observed(self, namespace: str, job: str, observed: dict[str, Any]) -> None:
        """JSON merge patch of ``status.observed`` only (the operator owns the rest)."""
        self.merge_patch(
            f"{_DLJOBS.format(namespace=namespace)}/{job}/status",
            {"status": {"observed": observed}},
        )

    def delete_pod(self, pod: PodInfo) -> bool:
        """DELETE ``pod`` for the memory watchdog; True once it is gone or going.

        A DELETE, not an Eviction: an Eviction's admission request names only the
        pod, so no policy can tell a pod on this node from one elsewhere, while a DELETE's
        ``oldObject`` is the pod itself, and the policy ``horus-node-own-pods`` refuses the
        node identity any pod not bound to its own node. The pod keeps its own
        ``terminationGracePeriodSeconds`` (a DLJob replica checkpoints on SIGTERM), as an
        Eviction would give it. A PodDisruptionBudget no longer holds the watchdog back: a pod
        over its GPU memory share takes memory its neighbours were promised, and the kubelet's
        own node-pressure eviction does not wait for a budget either. The UID precondition
        deletes only the pod that was measured, never a new pod given the same name since.
        """
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if pod.uid:
            body["preconditions"] = {"uid": pod.uid}
        try:
            self.request("DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", body=body)
        except ApiError as exc:
            if exc.status == 404:
                return True  # already gone
            if exc.status == 409:
                return True  # the UID precondition failed: that pod is gone, a new one has its name
            log.warning("deleting pod %s refused (%s); retrying next cycle", pod.key, exc)
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
        return self._kube.delete_pod(pod)

    def event(self, pod: PodInfo, reason: str, message: str) -> None:
        self._kube.event(pod, reason, message)
