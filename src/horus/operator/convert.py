"""Plain pods' ``horus.io/gpu-*`` requests on the DRA path (issue 25 item 3): Horus chooses the
GPU, the kube-scheduler allocates it.

``DRAExtendedResource`` cannot carry a share: the kube-scheduler turns an extended resource
backed by a DeviceClass into an ``ExactCount`` request whose count is the quantity
(``createRequestsAndMappings`` in the kube-scheduler's ``dynamicresources`` plugin), so
``horus.io/gpu-core: 40`` would ask for 40 GPUs. And a pod's ``resourceClaims`` cannot change
once it exists. So the conversion is in two halves:

1. **at admission**, the MutatingAdmissionPolicy ``examples/dra/extended-resources-policy.yaml``
   (no webhook server, no side effect) moves the first container's ``horus.io/gpu-core`` and
   ``horus.io/gpu-memory`` out of its resources into the annotations
   ``horus.io/gpu-core-request`` / ``horus.io/gpu-memory-request`` (as written), and makes the
   pod use claim ``horus-gpu-<pod name>`` (entry ``horus-gpu``). The kube-scheduler waits
   while that claim does not exist. Only pods named at creation: a ``generateName`` pod has
   no name yet at admission and a policy's CEL sees nothing else unique (no request UID), so
   such pods are not converted;
2. **each operator pass** (this module) finds such pods, reads their request as the
   scheduler extender does (:func:`horus.operator.extender.demand.pod_demand`: the
   ``horus.io/graph-profile`` annotation, the amounts; ``horus.io/gpu-memory`` in the device
   plugin's default unit of 256 MiB, so pods written for that path ask for the same memory),
   lets the core choose node and GPU by predicted interference, and creates the claim, pinned
   to that GPU by UUID with the share and owned by the pod
   (:func:`horus.operator.claims.pod_share_claim`). The kube-scheduler allocates it and binds
   the pod.

Until it is allocated, such a claim is Horus' decision and counts in the live state
(:mod:`horus.operator.livestate`, rule (d)); a claim that overtakes it gets it deleted (the
pod still names it, so the next pass decides again and creates it anew).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from horus.common import constants as c
from horus.operator.extender.demand import pod_demand
from horus.operator.livestate import TERMINAL_POD_PHASES, converted_claim_name
from horus.scheduler import JobRequest

__all__ = ["Conversion", "converted_claim_name", "pending_conversions"]

log = logging.getLogger(__name__)

#: MiB per unit of ``horus.io/gpu-memory`` a converted pod's quantity is read in.
MEMORY_UNIT_MIB = c.DEFAULT_GPU_MEMORY_UNIT_MIB


@dataclass(frozen=True)
class Conversion:
    """A pod waiting for the claim its admission named, and what it asks (or why not)."""

    pod: dict[str, Any]
    claim: str
    request: JobRequest | None
    problem: str | None = None


def _as_requested(pod: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` with the moved amounts back on its first container, for ``pod_demand``."""
    out = copy.deepcopy(dict(pod))
    ann = (out.get("metadata") or {}).get("annotations") or {}
    containers = (out.get("spec") or {}).get("containers") or []
    if containers:
        res = containers[0].setdefault("resources", {})
        limits = res.setdefault("limits", {})
        for key, resource in (
            (c.ANNOTATION_GPU_CORE_REQUEST, c.RESOURCE_GPU_CORE),
            (c.ANNOTATION_GPU_MEMORY_REQUEST, c.RESOURCE_GPU_MEMORY),
        ):
            if key in ann:
                limits[resource] = str(ann[key])
    return out


def pending_conversions(
    pods: Iterable[Mapping[str, Any]], claims: Mapping[tuple[str, str], Any]
) -> list[Conversion]:
    """Pods whose converted claim does not exist yet (not bound, not finished, not going).
    Two pods naming one claim (a copy of another pod's spec) get none: a share is one pod's."""
    found: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = converted_claim_name(pod)
        if (
            name is None
            or meta.get("deletionTimestamp")
            or (pod.get("spec") or {}).get("nodeName")
            or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES
        ):
            continue
        key = (str(meta.get("namespace", "default")), name)
        if key not in claims:
            found.setdefault(key, []).append(pod)
    out: list[Conversion] = []
    for (ns, name), members in sorted(found.items()):
        if len(members) > 1:
            pods_named = ", ".join(str((p.get("metadata") or {}).get("name")) for p in members)
            log.warning("pods %s in %s all name claim %s; none gets it", pods_named, ns, name)
            continue
        pod = dict(members[0])
        demand = pod_demand(_as_requested(pod))
        request = demand.request
        if request is not None and request.memory_mib is not None:
            request = replace(request, memory_mib=request.memory_mib * MEMORY_UNIT_MIB)
        out.append(Conversion(pod, name, request, demand.problem))
    return out
