"""The cluster as the extender reads and writes it, behind a small protocol (a fake in tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from horus.api.raw import discard, read_object
from horus.kube.errors import Conflict
from horus.operator.jobapi import KubeJobApi
from horus.operator.livedelta import Change
from horus.operator.livestate import LiveObjects
from horus.operator.view import ClusterView


class ClusterSource(Protocol):
    """What the extender reads from and writes to the apiserver."""

    def list_objects(self) -> LiveObjects:
        """The cluster now (from a watch-fed copy where there is one)."""
        ...

    def fresh_objects(self) -> LiveObjects:
        """The cluster as the apiserver answers a LIST now: what a bind re-checks its own
        write against (a copy may not have another placer's write of a moment ago yet)."""
        ...

    def generation(self) -> object:
        """A value that changes whenever :meth:`list_objects` may answer differently (None:
        not known — every answer is rebuilt)."""
        ...

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
    """:class:`ClusterSource` over the operator's :class:`~horus.operator.jobapi.KubeJobApi`
    (the same raw-JSON calls), plus the two writes only the extender makes. With a
    :class:`~horus.operator.view.ClusterView`, filter and prioritize read its watch-fed copy
    (no LIST per request); a bind's re-check still LISTs (:meth:`fresh_objects`)."""

    def __init__(self, api_client: Any, view: ClusterView | None = None) -> None:
        self.api_client = api_client
        self.view = view
        self.jobs = KubeJobApi(api_client, view)
        self._direct = KubeJobApi(api_client)
        # Any: raw JSON calls (_preload_content=False) return urllib3 responses, not models.
        self.core: Any = self.jobs.core

    def list_objects(self) -> LiveObjects:
        if self.view is None:
            return self.fresh_objects()
        self.jobs.list_nodes()  # waits for the first LISTs
        view = self.view
        return LiveObjects(view.nodes.items(), view.active_pods(), view.dljobs.items())

    def generation(self) -> object:
        return None if self.view is None else self.view.generation

    def changes_since(self, mark: object) -> tuple[object, list[Change] | None]:
        """The view's changes since ``mark`` (:meth:`ClusterView.changes_since`): what the
        extender's live state is brought up to date with. No view: (None, None)."""
        if self.view is None:
            return None, None
        return self.view.changes_since(mark if isinstance(mark, tuple) else None)

    def lookup(self, kind: str, key: str) -> Mapping[str, Any] | None:
        """What :meth:`list_objects` lists under ``key`` now (None: nothing, or a finished
        pod, which :meth:`ClusterView.active_pods` leaves out)."""
        if self.view is None:
            return None
        if kind == "pods":
            return self.view.active_pod(key)
        informer = {"dljobs": self.view.dljobs, "nodes": self.view.nodes}.get(kind)
        return None if informer is None else informer.get(key)

    def fresh_objects(self) -> LiveObjects:
        from kubernetes.client.exceptions import ApiException

        jobs = self._direct

        nodes = jobs.list_nodes()
        pods = jobs.list_pods(active_only=True)
        try:
            dljobs = jobs.list_dljobs()
        except ApiException as exc:
            if exc.status != 404:
                raise
            dljobs = []  # the DLJob CRD is not installed: plain pods only
        return LiveObjects(nodes, pods, dljobs)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.read_pod(namespace, name)

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
        out = read_object(resp)
        if self.view is not None:
            self.view.pods.observe(out)
        return out

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """A Binding through the pod's ``binding`` subresource (with the uid it was asked for)."""
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
