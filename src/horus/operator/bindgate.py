"""One pod per node and per request waiting for its kubelet's Allocate at a time.

The kubelet's Allocate call names device IDs, never the pod. The device plugin takes the
oldest bound, not yet allocated pod on its node that requests exactly the amount asked for
(``horus.deviceplugin.allocator.candidates``). Two pods with the *same* requests on one node —
the replicas of one job, or two jobs given the same share — that reach the kubelet together
are admitted in an order the plugin cannot see (the kubelet sorts a batch by creation second,
ties in no fixed order). Each container may then receive the other pod's assignment: its GPU
and ``HORUS_POD_*`` identity. Seen on the local cluster's real kubelets (``horus dev cluster
add-nodes --real``), in the demo; never on kwok nodes, where nothing calls Allocate.

So the operator binds a pod only when no other pod bound to that node with the same Horus
requests still waits to be allocated (``horus.io/gpu-allocated`` not yet naming both
resources); the next pass binds it, once the first pod has been admitted (its phase change
nudges the loop). Pods with different requests, or on different nodes, are never held back.
Only nodes whose kubelet reports a version are gated: kwok nodes (and the unit tests'
in-memory nodes) run no kubelet and no device plugin.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from horus.common import constants as c

_RESOURCES = (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
_FINISHED = ("Succeeded", "Failed")


def horus_requests(pod: dict[str, Any]) -> tuple[str, str] | None:
    """The (gpu-core, gpu-memory) amounts the pod's Horus container requests, if any."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = (container.get("resources") or {}) if isinstance(container, dict) else {}
        req = res.get("requests") or res.get("limits") or {}
        if isinstance(req, dict) and any(r in req for r in _RESOURCES):
            return (str(req.get(_RESOURCES[0], "")), str(req.get(_RESOURCES[1], "")))
    return None


def _allocated(pod: dict[str, Any]) -> bool:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GPU_ALLOCATED)
    try:
        marks = json.loads(text) if text and len(text) < 4096 else {}
    except ValueError:
        return False
    return isinstance(marks, dict) and all(r in marks for r in _RESOURCES)


def _real_kubelet(node: dict[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    if (meta.get("annotations") or {}).get(c.KWOK_NODE_ANNOTATION) == c.KWOK_NODE_ANNOTATION_VALUE:
        return False
    info = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or ""
    return str(info).startswith("v")


class BindGate:
    """Built from one pass's listing; :meth:`claim` is safe from the commit threads."""

    def __init__(self, pods: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]]) -> None:
        self._gated = {
            str((n.get("metadata") or {}).get("name")) for n in nodes if _real_kubelet(n)
        }
        self._lock = threading.Lock()
        self._waiting: set[tuple[str, tuple[str, str]]] = set()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            req = horus_requests(pod)
            if node not in self._gated or req is None:
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in _FINISHED or _allocated(pod):
                continue
            self._waiting.add((str(node), req))

    def claim(self, node: str, pod: dict[str, Any]) -> bool:
        """True when ``pod`` may be bound to ``node`` now (and records that it is)."""
        req = horus_requests(pod)
        if node not in self._gated or req is None:
            return True
        with self._lock:
            if (node, req) in self._waiting:
                return False
            self._waiting.add((node, req))
            return True
