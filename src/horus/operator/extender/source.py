"""The cluster as the extender reads and writes it, behind a small protocol (a fake in tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from horus.api.raw import discard, read_items, read_object
from horus.common import constants as c
from horus.kube.errors import Conflict
from horus.operator.livestate import LiveObjects


class ClusterSource(Protocol):
    """What the extender reads from and writes to the apiserver."""

    def list_objects(self) -> LiveObjects: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge ``annotations`` (None deletes); 409 → :class:`~horus.kube.errors.Conflict`."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class KubeClusterSource:
    """:class:`ClusterSource` over the official Kubernetes client (raw JSON, no models)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        # Any: raw JSON calls (_preload_content=False) return urllib3 responses, not models.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)

    def _list(self, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return read_items(call(*args, _preload_content=False, **kwargs))

    def list_objects(self) -> LiveObjects:
        from kubernetes.client.exceptions import ApiException

        selector = "status.phase!=Succeeded,status.phase!=Failed"
        nodes = self._list(self.core.list_node)
        pods = self._list(self.core.list_pod_for_all_namespaces, field_selector=selector)
        try:
            dljobs = self._list(
                self.custom.list_cluster_custom_object, c.API_GROUP, c.API_VERSION, c.DLJOB_PLURAL
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            dljobs = []  # the DLJob CRD is not installed: plain pods only
        return LiveObjects(nodes, pods, dljobs)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version  # optimistic concurrency: 409 if stale
        try:
            resp = self.core.patch_namespaced_pod(
                name, namespace, {"metadata": meta}, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"pod {namespace}/{name} changed meanwhile") from None
            raise
        return read_object(resp)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # _preload_content=False: the client cannot deserialise the Binding it gets back.
        discard(
            self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
        )
