"""In-memory stand-in for the device plugin's API-server access (``NodeApi``), for unit tests.

``FakeNodeApi`` holds pod dicts as the real API server returns them and records patches and
Events, so the allocator's decisions are tested without a cluster; the same decisions run
against the real kube-apiserver in ``tests/integration/deviceplugin``.
"""

from __future__ import annotations

import copy
from typing import Any

from horus.api.signing import KeyRing
from horus.kube.errors import Conflict
from signing_keys import KEY


class FakeNodeApi:
    def __init__(self, key: KeyRing = KEY) -> None:
        self.pods: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []  # (pod or node, reason, message)
        self.node_annotations: dict[str, dict[str, str]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}  # read_node answers (absent: None)
        self.node_error: Exception | None = None  # read_node raises this when set
        self.key = key
        self.lists = 0
        self._rv = 0

    def add(self, pod: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
        pod = copy.deepcopy(pod)
        self._rv += 1
        meta = pod["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["creationTimestamp"] = created
        meta["resourceVersion"] = str(self._rv)
        pod.setdefault("status", {"phase": "Pending"})
        self.pods.append(pod)
        return pod

    def get(self, name: str) -> dict[str, Any]:
        return next(p for p in self.pods if p["metadata"]["name"] == name)

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        self.lists += 1
        return copy.deepcopy([p for p in self.pods if p["spec"].get("nodeName") == node])

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str], resource_version: str
    ) -> None:
        pod = self.get(name)
        if resource_version and resource_version != pod["metadata"]["resourceVersion"]:
            raise Conflict(name)
        pod["metadata"].setdefault("annotations", {}).update(annotations)
        self._rv += 1
        pod["metadata"]["resourceVersion"] = str(self._rv)

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, node: str) -> None:
        self.events.append((pod["metadata"]["name"], reason, message))

    def read_node(self, node: str) -> dict[str, Any] | None:
        if self.node_error is not None:
            raise self.node_error
        return copy.deepcopy(self.nodes.get(node))

    def node_event(self, node: dict[str, Any], reason: str, message: str) -> None:
        self.events.append((node["metadata"]["name"], reason, message))

    def patch_node_annotations(self, node: str, annotations: dict[str, str | None]) -> None:
        mine = self.node_annotations.setdefault(node, {})
        for key, value in annotations.items():
            if value is None:
                mine.pop(key, None)
            else:
                mine[key] = value

    def read_assignment_key(self) -> KeyRing:
        """The published public keys (the ConfigMap): never the private key."""
        return self.key.verify_only()
