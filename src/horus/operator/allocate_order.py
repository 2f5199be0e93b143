"""On a node with a real kubelet, no two pods that share a Horus amount await Allocate at once.

The kubelet's Allocate call names device IDs, never the pod, and it is made once per container
*and resource*. The device plugin takes the oldest bound, not yet allocated pod on its node
whose container requests exactly the amount asked for *of that resource*
(``horus.deviceplugin.allocator.candidates``). Two pods waiting on one node that ask the same
amount of either resource — the replicas of one job, two jobs given the same share, or twins
with equal core % and different memory — reach the kubelet in an order the plugin cannot see
(the kubelet sorts a batch by creation second, ties in no fixed order). For twins the
``gpu-core`` call may pick one pod and the ``gpu-memory`` call the other, so each container may
receive the other pod's assignment: its GPU and ``HORUS_POD_*`` identity. Seen on the local
cluster's real kubelets (``horus dev cluster add-nodes --real``), in the demo; never on kwok
nodes, where nothing calls Allocate.

So the operator (and the extender's bind) binds a pod only when no other pod bound to that
node still waits for the Allocate of a resource (``horus.io/gpu-allocated`` not yet naming it)
with the same amount as this pod's; the next pass binds it, once the first pod has been
admitted (its phase change nudges the loop). A pod whose amounts differ from every waiting
pod's in both resources, or on another node, is never held back: each Allocate then has
exactly one candidate. Only nodes whose kubelet reports a version are gated: kwok nodes (and
the unit tests' in-memory nodes) run no kubelet and no device plugin.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from horus.api.resources import container_amount
from horus.common import constants as c
from horus.common.errors import ValidationError

_RESOURCES = (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
_FINISHED = ("Succeeded", "Failed")


def horus_requests(pod: dict[str, Any]) -> dict[str, int] | None:
    """The amount of each Horus resource the pod's Horus container requests (parsed, so
    ``1k`` and ``1000`` are one amount), or None when no container asks for one. A quantity
    that does not parse counts as -1: such a pod is never a candidate of Allocate, but two of
    them still wait one at a time."""
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        if not isinstance(container, dict):
            continue
        out: dict[str, int] = {}
        for resource in _RESOURCES:
            try:
                amount = container_amount(container, resource, f"spec.containers[{i}]")
            except ValidationError:
                amount = -1
            if amount is not None:
                out[resource] = amount
        if out:
            return out
    return None


def _allocated(pod: dict[str, Any]) -> set[str]:
    """The resources whose Allocate this pod has had (``horus.io/gpu-allocated``)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GPU_ALLOCATED)
    try:
        marks = json.loads(text) if text and len(text) < 4096 else {}
    except ValueError:
        return set()
    return {r for r in _RESOURCES if r in marks} if isinstance(marks, dict) else set()


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
        #: (node, resource, amount) of every Allocate still to come on a gated node
        self._waiting: set[tuple[str, str, int]] = set()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in self._gated:  # most pods (kwok nodes gate none): nothing parsed
                continue
            req = horus_requests(pod)
            if req is None:
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in _FINISHED:
                continue
            done = _allocated(pod)
            self._waiting |= {(str(node), r, a) for r, a in req.items() if r not in done}

    def claim(self, node: str, pod: dict[str, Any]) -> bool:
        """True when ``pod`` may be bound to ``node`` now (and records that it is): no pod
        waiting there for an Allocate asks the same amount of the same resource."""
        req = horus_requests(pod)
        if node not in self._gated or req is None:
            return True
        keys = {(node, r, a) for r, a in req.items()}
        with self._lock:
            if keys & self._waiting:
                return False
            self._waiting |= keys
            return True
