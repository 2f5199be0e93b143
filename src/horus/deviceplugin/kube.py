"""The few Kubernetes calls the device plugin makes, in one place (and one fake for tests).

Pods are listed as raw JSON (``_preload_content=False``): the Python client's model
deserialisation costs about a millisecond per pod, and Allocate sits on the kubelet's pod
admission path, so the plugin reads plain dicts. Everything the plugin learns about a pod
comes from the API server, never from the kubelet's request (which names no pod).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from horus.api.raw import discard, read_items, read_object
from horus.api.signing import KeyRing, parse_public_keys
from horus.common.constants import (
    EVENT_COMPONENT_DEVICE_PLUGIN,
    HORUS_NAMESPACE,
    VERIFY_KEYS_CONFIGMAP,
    VERIFY_KEYS_CONFIGMAP_ENTRY,
)
from horus.common.errors import ConfigError
from horus.kube.client import api_client
from horus.kube.errors import Conflict
from horus.kube.events import event_body, pod_involved, post_event


class NodeApi(Protocol):
    """What the allocator and inventory publisher need from the API server."""

    def list_node_pods(self, node: str) -> list[dict[str, Any]]: ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str], resource_version: str
    ) -> None:
        """Merge ``annotations`` into the pod (:class:`~horus.kube.errors.Conflict` on 409)."""
        ...

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, node: str) -> None: ...

    def read_node(self, node: str) -> dict[str, Any] | None:
        """The Node object as JSON (None when it does not exist)."""
        ...

    def node_event(self, node: dict[str, Any], reason: str, message: str) -> None:
        """A Warning Event on the Node (best effort)."""
        ...

    def patch_node_annotations(self, node: str, annotations: dict[str, str | None]) -> None:
        """Merge ``annotations`` into the Node's (None removes a key)."""
        ...

    def read_assignment_key(self) -> KeyRing: ...


class KubeApi:
    """:class:`NodeApi` on the real API server (kubernetes Python client)."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client(kubeconfig))

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        return read_items(
            self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _preload_content=False
            )
        )

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str], resource_version: str
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        metadata: dict[str, Any] = {"annotations": annotations}
        if resource_version:  # optimistic concurrency only when the caller asks for it
            metadata["resourceVersion"] = resource_version
        body = {"metadata": metadata}
        try:
            discard(self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"pod {namespace}/{name} changed") from None
            raise

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, node: str) -> None:
        """A Warning Event on ``pod`` (best effort: the gRPC error still says it all)."""
        meta = pod.get("metadata", {})
        involved = pod_involved(
            meta["namespace"],
            str(meta.get("name", "pod")),
            str(meta.get("uid") or ""),
            str(meta.get("resourceVersion") or ""),
        )
        self._warn(involved, reason, message, node)

    def _warn(self, involved: dict[str, str], reason: str, message: str, node: str) -> None:
        """Post a Warning Event from this node's device plugin (best effort)."""
        body = event_body(
            involved,
            reason,
            message,
            warning=True,
            component=EVENT_COMPONENT_DEVICE_PLUGIN,
            instance=node,
            host=node,
        )
        post_event(self.core, body)

    def read_node(self, node: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return read_object(self.core.read_node(node, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def node_event(self, node: dict[str, Any], reason: str, message: str) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        involved = {"apiVersion": "v1", "kind": "Node", "name": name}
        if meta.get("uid"):
            involved["uid"] = str(meta["uid"])
        self._warn(involved, reason, message, name)

    def patch_node_annotations(self, node: str, annotations: dict[str, str | None]) -> None:
        body = {"metadata": {"annotations": annotations}}
        discard(self.core.patch_node(node, body, _preload_content=False))

    def read_assignment_key(self) -> KeyRing:
        """The published public keys (ConfigMap ``horus-verify-keys``), verify-only."""
        from kubernetes.client.exceptions import ApiException

        where = f"ConfigMap {HORUS_NAMESPACE}/{VERIFY_KEYS_CONFIGMAP}"
        try:
            cm = self.core.read_namespaced_config_map(VERIFY_KEYS_CONFIGMAP, HORUS_NAMESPACE)
        except ApiException as exc:
            raise ConfigError(
                f"cannot read {where}: HTTP {exc.status} {exc.reason}; the operator publishes "
                "it on first start, and the device plugin needs get on it (or mount it and set "
                "HORUS_ASSIGNMENT_KEY_FILE to its keys.pem)"
            ) from None
        text = str((cm.data or {}).get(VERIFY_KEYS_CONFIGMAP_ENTRY) or "")
        return KeyRing(parse_public_keys(text, where), None, "nodes verify only")
