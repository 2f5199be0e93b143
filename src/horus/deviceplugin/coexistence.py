"""One device plugin per GPU: do not advertise on a node where another plugin already does.

NVIDIA's device plugin advertises every GPU of its node as ``nvidia.com/gpu``. If Horus
advertised the same GPUs too, the kubelet would hand one GPU to a pod asking for a whole
``nvidia.com/gpu`` (no limits) and to Horus' shared pods at once, and neither side could
tell. The chart keeps Horus off nodes where the GPU Operator deploys NVIDIA's plugin (by its
labels), but a standalone NVIDIA plugin leaves no label; it does leave its resource in the
node's capacity, which the kubelet fills from the registered plugins. So before it
registers, and every ``node_check_interval_s`` after, the device plugin reads its Node: while
the capacity has ``nvidia.com/gpu`` above zero it does not advertise (its servers stop, the
kubelet drops the Horus resources) and it withdraws the node's ``horus.io/gpu-inventory``,
so neither placer picks the node. It says why in its log (ERROR, once per change) and in a
Warning Event on the Node (``kubectl describe node``), and it keeps running: when the other
plugin is removed (the kubelet drops its resource from the capacity) Horus registers again.
``allow_other_gpu_plugin`` turns the check off, for an admin who has split the GPUs between
the plugins by other means. Decision and alternatives: ``docs/decisions.md``.

A Node that cannot be read leaves the last decision in place (at start: advertise, as
before this check existed); the Allocate path needs the apiserver anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.deviceplugin.kube import NodeApi

log = logging.getLogger(__name__)

__all__ = ["CoexistenceGuard", "other_plugin_gpus"]


def other_plugin_gpus(node: Mapping[str, Any]) -> int:
    """How many ``nvidia.com/gpu`` the Node's capacity lists (0 when none or unreadable)."""
    status = node.get("status")
    capacity = status.get("capacity") if isinstance(status, Mapping) else None
    if not isinstance(capacity, Mapping) or c.RESOURCE_NVIDIA_GPU not in capacity:
        return 0
    try:
        return parse_quantity(capacity[c.RESOURCE_NVIDIA_GPU], c.RESOURCE_NVIDIA_GPU)
    except ValidationError:
        return 0


class CoexistenceGuard:
    """Whether this node's GPUs are Horus' to advertise, re-checked every ``interval_s``."""

    def __init__(self, api: NodeApi, node: str, allow: bool, interval_s: float) -> None:
        self.api = api
        self.node = node
        self.allow = allow
        self.interval_s = interval_s
        self.refusal: str | None = None  # why Horus does not advertise now (None: it may)
        self.checks = 0
        self._next = 0.0
        self._read_failed = False

    def may_advertise(self) -> bool:
        """Reads the Node when due; True when Horus may advertise its GPUs."""
        if self.allow:
            return True
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval_s
            self._check()
        return self.refusal is None

    def _check(self) -> None:
        self.checks += 1
        try:
            node = self.api.read_node(self.node)
        except Exception as exc:  # apiserver down, RBAC: keep the last decision
            if not self._read_failed:
                log.warning(
                    "cannot read node %s to check for another GPU device plugin (%s); "
                    "keeping the last decision (%s)",
                    self.node,
                    exc,
                    "not advertising" if self.refusal else "advertising",
                )
            self._read_failed = True
            return
        self._read_failed = False
        count = other_plugin_gpus(node or {})
        if count <= 0:
            if self.refusal is not None:
                log.warning(
                    "node %s no longer lists %s in its capacity: advertising Horus GPUs again",
                    self.node,
                    c.RESOURCE_NVIDIA_GPU,
                )
            self.refusal = None
            return
        if self.refusal is not None:
            return
        self.refusal = (
            f"node {self.node} already has {c.RESOURCE_NVIDIA_GPU}: {count} in its capacity: "
            "another device plugin (NVIDIA's) hands out its GPUs, and two plugins advertising "
            "one GPU would give it to a whole-GPU pod and to shared Horus pods at once. Horus "
            "does not advertise its GPUs here. Remove the other plugin from this node (GPU "
            "Operator: label the node nvidia.com/gpu.deploy.device-plugin=false), or keep Horus "
            "off it (label horus.io/gpu-node=false); set allow_other_gpu_plugin=true only if "
            "the two plugins do not share GPUs"
        )
        log.error("%s", self.refusal)
        self.api.node_event(node or {}, c.EVENT_REASON_GPU_PLUGIN_CONFLICT, self.refusal)
