"""The few Kubernetes calls the device plugin makes, in one place (and one fake for tests).

Pods are listed as raw JSON (``_preload_content=False``): the Python client's model
deserialisation costs about a millisecond per pod, and Allocate sits on the kubelet's pod
admission path, so the plugin reads plain dicts. Everything the plugin learns about a pod
comes from the API server, never from the kubelet's request (which names no pod).
"""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from horus.api.raw import discard, read_items
from horus.common.constants import (
    ASSIGNMENT_KEY_SECRET,
    ASSIGNMENT_KEY_SECRET_KEY,
    EVENT_COMPONENT_DEVICE_PLUGIN,
    HORUS_NAMESPACE,
)
from horus.common.errors import ConfigError

log = logging.getLogger(__name__)


class ConflictError(Exception):
    """The object changed since it was read (HTTP 409); read again and retry."""


class NodeApi(Protocol):
    """What the allocator and inventory publisher need from the API server."""

    def list_node_pods(self, node: str) -> list[dict[str, Any]]: ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str], resource_version: str
    ) -> None: ...

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, node: str) -> None: ...

    def patch_node_annotations(self, node: str, annotations: dict[str, str]) -> None: ...

    def read_assignment_key(self) -> bytes: ...


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeApi:
    """:class:`NodeApi` on the real API server (kubernetes Python client)."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        from kubernetes import client
        from kubernetes import config as _config

        config: Any = _config
        if kubeconfig is not None:
            api = config.new_client_from_config(config_file=str(kubeconfig))
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                try:
                    config.load_kube_config()
                except Exception as exc:
                    raise ConfigError(
                        f"no Kubernetes credentials: not in a pod and no kubeconfig ({exc}); "
                        "pass --kubeconfig"
                    ) from None
            api = client.ApiClient()
        self.core: Any = client.CoreV1Api(api)

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
                raise ConflictError(f"pod {namespace}/{name} changed") from None
            raise

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, node: str) -> None:
        meta = pod.get("metadata", {})
        now = now_rfc3339()
        body = {
            "metadata": {
                "generateName": f"{meta.get('name', 'pod')}.",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": EVENT_COMPONENT_DEVICE_PLUGIN, "host": node},
            "reportingComponent": EVENT_COMPONENT_DEVICE_PLUGIN,
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            discard(
                self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
            )
        except Exception as exc:  # an Event is best effort; the gRPC error still says it all
            log.warning("could not record Event %s on pod %s: %s", reason, meta.get("name"), exc)

    def patch_node_annotations(self, node: str, annotations: dict[str, str]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self.core.patch_node(node, body, _preload_content=False)

    def read_assignment_key(self) -> bytes:
        from kubernetes.client.exceptions import ApiException

        where = f"Secret {HORUS_NAMESPACE}/{ASSIGNMENT_KEY_SECRET}"
        try:
            secret = self.core.read_namespaced_secret(ASSIGNMENT_KEY_SECRET, HORUS_NAMESPACE)
        except ApiException as exc:
            raise ConfigError(
                f"cannot read {where}: HTTP {exc.status} {exc.reason}; the operator creates it "
                "on first start, and the device plugin needs get on it (or mount it and set "
                "HORUS_ASSIGNMENT_KEY_FILE)"
            ) from None
        raw = (secret.data or {}).get(ASSIGNMENT_KEY_SECRET_KEY)
        if raw is None:
            raise ConfigError(f"{where} has no '{ASSIGNMENT_KEY_SECRET_KEY}' entry")
        key = base64.b64decode(raw).strip()
        if len(key) < 16:
            raise ConfigError(f"{where} holds a {len(key)}-byte key; need at least 16")
        return key
