"""The operator's writer of the GPU identity registry (:mod:`horus.node.identities`).

Every :data:`~horus.common.constants.GPU_IDENTITIES_SYNC_SECONDS` the operator reads the
registry ConfigMap (making it, empty, when it is missing), reads the GPUs each node publishes
from the watch-fed view (the Horus driver's ResourceSlices on the DRA path, the
``horus.io/gpu-inventory`` annotations on the device-plugin path), and adds every UUID seen for
the first time with the node that publishes it, and removes the entries of nodes that no
longer exist, in one merge patch conditional on the version it read. Only the leader writes; every replica keeps the registry it read
(:attr:`IdentityRecorder.registry`) for its live state. A node that publishes a GPU registered
to another node gets one Warning Event per GPU (``HorusGpuIdentityConflict``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from horus.api.inventory import GpuDevice, decode_inventory
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.kube.errors import ApiError
from horus.kube.events import event_body
from horus.kube.rest import RestClient
from horus.node.claim_checks import slice_gpus
from horus.node.identities import (
    Registry,
    additions,
    merge_patch,
    parse_registry,
    released,
    split_gpus,
)

log = logging.getLogger(__name__)

__all__ = ["IdentityApi", "IdentityRecorder", "KubeIdentityApi", "published_gpus"]


class IdentityApi(Protocol):
    """The apiserver calls the recorder makes (raw JSON)."""

    def read(self) -> dict[str, Any] | None:
        """The registry ConfigMap; None when it does not exist."""
        ...

    def create(self) -> dict[str, Any]:
        """Make the registry, empty (a conflict: someone made it first; read it again)."""
        ...

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the registry (raises on a conflict)."""
        ...

    def post_event(self, body: Mapping[str, Any]) -> None: ...


def published_gpus(
    nodes: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]] | None
) -> dict[str, list[GpuDevice]]:
    """Node name → the GPUs it publishes: from its ResourceSlices of the Horus driver when
    ``slices`` is given (the DRA path), else from its inventory annotation. A node whose
    inventory does not read publishes nothing here (the live state says why)."""
    out: dict[str, list[GpuDevice]] = {}
    if slices is not None:
        grouped: dict[str, list[Mapping[str, Any]]] = {}
        for item in slices:
            spec = item.get("spec") if isinstance(item, Mapping) else None
            if isinstance(spec, Mapping) and spec.get("driver") == c.DRA_DRIVER_NAME:
                grouped.setdefault(str(spec.get("nodeName") or ""), []).append(item)
        for name, items in grouped.items():
            if name:
                out[name] = slice_gpus(items, name)
        return out
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        text = (meta.get("annotations") or {}).get(c.ANNOTATION_GPU_INVENTORY)
        if not name or not isinstance(text, str):
            continue
        try:
            out[name] = decode_inventory(text, f"node {name} {c.ANNOTATION_GPU_INVENTORY}")
        except ValidationError:
            continue
    return out


class IdentityRecorder:
    """Keeps the registry up to date with what the nodes publish (one :meth:`tick` a round)."""

    def __init__(
        self,
        api: IdentityApi,
        objects: Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]] | None]],
        may_write: Callable[[], bool],
        instance: str = "",
    ) -> None:
        self.api = api
        #: () → (nodes, slices or None off the DRA path), as the view holds them
        self.objects = objects
        self.may_write = may_write
        self.instance = instance
        #: The registry as last read (None until the first read).
        self.registry: Registry | None = None
        self._told: set[tuple[str, str]] = set()
        self.added = 0  # entries this process added (tests, logs)

    def tick(self) -> int:
        """One round: read, record what is new (leader only), tell about foreign GPUs.
        The number of entries added. Raises the API's errors (the caller logs, retries)."""
        raw = self.api.read()
        if raw is None and self.may_write():
            log.info("GPU identity registry %s missing: created", c.GPU_IDENTITIES_CONFIGMAP)
            raw = self.api.create()
        registry = self._keep(parse_registry(raw))
        nodes, slices = self.objects()
        published = published_gpus(nodes, slices)
        self._tell(registry, published)
        if raw is None or not self.may_write():
            return 0
        todo = additions(registry, {n: [g.uuid for g in gs] for n, gs in published.items()})
        for problem in todo.problems:
            log.warning("%s", problem)
        names = {str((n.get("metadata") or {}).get("name") or "") for n in nodes}
        gone = released(registry, names - {""})
        if not todo.entries and not gone:
            return 0
        if gone:
            log.info("GPU identity registry: released %d GPUs of deleted nodes", len(gone))
        out = self.api.patch(merge_patch(raw, todo.entries, gone))
        self._keep(parse_registry(out))
        self.added += len(todo.entries)
        log.info(
            "GPU identity registry: recorded %d GPUs (%s)",
            len(todo.entries),
            ", ".join(f"{u} → {n}" for u, n in sorted(todo.entries.items())[:5]),
        )
        return len(todo.entries)

    def _keep(self, registry: Registry) -> Registry:
        """Hold ``registry``, or the equal one already held: the live state builds in full
        when the registry it is handed is a different one (``LiveDelta``)."""
        if self.registry is None or self.registry != registry:
            self.registry = registry
        return self.registry

    def _tell(self, registry: Registry, published: Mapping[str, list[GpuDevice]]) -> None:
        """One Warning Event on a node for each GPU it publishes that is another node's."""
        for name, gpus in sorted(published.items()):
            for foreign in split_gpus(registry, name, gpus)[1]:
                key = (name, foreign.uuid)
                if key in self._told:
                    continue
                self._told.add(key)
                log.warning("%s", foreign.why)
                if self.may_write():
                    self.api.post_event(
                        event_body(
                            {"apiVersion": "v1", "kind": "Node", "name": name},
                            c.EVENT_REASON_GPU_IDENTITY_CONFLICT,
                            foreign.why,
                            warning=True,
                            component=c.OPERATOR_SERVICE_ACCOUNT,
                            instance=self.instance,
                        )
                    )


class KubeIdentityApi:
    """:class:`IdentityApi` over the operator's ApiClient (plain JSON, a real merge patch)."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.rest = RestClient(api_client)
        self.path = f"/api/v1/namespaces/{namespace}/configmaps"
        self.namespace = namespace

    def read(self) -> dict[str, Any] | None:
        return self.rest.get(f"{self.path}/{c.GPU_IDENTITIES_CONFIGMAP}")

    def create(self) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": c.GPU_IDENTITIES_CONFIGMAP, "namespace": self.namespace},
        }
        try:
            out = self.rest.request("POST", self.path, body=body)
        except ApiError as exc:
            again = self.read() if exc.status == 409 else None
            if again is None:
                raise
            return again
        return out if isinstance(out, dict) else {}

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        out = self.rest.merge_patch(f"{self.path}/{c.GPU_IDENTITIES_CONFIGMAP}", body)
        return out if isinstance(out, dict) else {}

    def post_event(self, body: Mapping[str, Any]) -> None:
        self.rest.post_event(body)
