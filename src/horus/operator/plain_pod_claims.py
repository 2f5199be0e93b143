"""Plain pods' ``horus.io/gpu-*`` requests on the DRA path: Horus chooses the
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
   pod use (entry ``horus-gpu``) claim ``horus-gpu-<pod name>`` — or, for a pod with only
   ``generateName`` (a Deployment's, a Job's), the ResourceClaimTemplate
   ``horus-gpu-made-by-horus``, which must not exist. Such a pod has no name and no UID at
   mutating admission (the registry's create generates both afterwards, in
   ``k8s.io/apiserver`` ``registry/generic/registry/store.go``) and a policy's CEL offers
   nothing else unique (the ``request`` it sees has no ``uid``:
   ``admission/plugin/cel/compile.go``), so no claim name can be written there. The
   kube-scheduler waits while the claim does not exist (for a template entry: until the
   pod's ``status.resourceClaimStatuses`` names one);
2. **each operator pass** (this module) finds such pods, reads their request as the
   scheduler extender does (:func:`horus.operator.extender.demand.pod_demand`: the
   ``horus.io/graph-profile`` annotation, the amounts; ``horus.io/gpu-memory`` in the device
   plugin's default unit of 256 MiB, so pods written for that path ask for the same memory),
   lets the core choose node and GPU by predicted interference, and creates the claim, pinned
   to that GPU by UUID with the share and controlled by the pod
   (:func:`horus.operator.claim_manifests.pod_share_claim`) — for a template entry under the name
   ``horus-gpu-<pod UID>``, marked as the kube-controller-manager's resourceclaim controller
   marks the claims it makes from a template: that controller, finding no template, adopts
   it as the pod's claim and records it in the pod's status (its ``findPodResourceClaim``:
   a claim the pod controls with the entry's name in ``resource.kubernetes.io/pod-claim-name``).
   The kube-scheduler allocates it and binds the pod.

Trust: Horus creates a claim only in the pod's own namespace, under the name the pod's entry
gives (its own name or UID, not a name the pod could point at another pod's claim) and only
for pods that carry the policy's entry; a claim already under that name that Horus did not
make for the pod (``horus.io/converted-for-pod``, which only the operator may write on a
claim) is never adopted, changed or deleted, and the pod gets an Event, ``ClaimNameTaken``.

Pods that name a gang (``horus.io/gang-name``, ``horus.io/gang-size``) are decided together,
all or none (:mod:`horus.operator.plain_pod_gangs`); pods of a Kueue Workload Horus' check
admitted fill that Workload's slots instead (:mod:`horus.operator.kueue.gang_pods`).

Until it is allocated, such a claim is Horus' decision and counts in the live state
(:mod:`horus.operator.livestate`, rule (d)); a claim that overtakes it gets it deleted (the
pod still names it, so the next pass decides again and creates it anew).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from horus.common import constants as c
from horus.operator import status as st
from horus.operator.claim_manifests import pod_share_claim
from horus.operator.claimcommit import ClaimPath
from horus.operator.claimcount import converted_claim_name, made_for_pod
from horus.operator.extender.demand import pod_demand
from horus.operator.jobapi import JobApi
from horus.operator.pass_state import PassReport
from horus.operator.placeholder_claims import foreign_claim
from horus.operator.plain_pod_gangs import REASON_GANG_INVALID, split_gangs
from horus.operator.queueing import stable_refusal
from horus.operator.residents import TERMINAL_POD_PHASES, LiveState
from horus.operator.writer import StatusWriter
from horus.scheduler import JobRequest, Scheduler
from horus.scheduler.types import GpuShare, Placement

__all__ = [
    "REASON_CLAIM_NAME_TAKEN",
    "REASON_REQUEST_REFUSED",
    "Conversion",
    "as_requested",
    "claim_name_taken",
    "convert_pods",
    "converted_claim_name",
    "pending_conversions",
]

log = logging.getLogger(__name__)

#: MiB per unit of ``horus.io/gpu-memory`` a converted pod's quantity is read in.
MEMORY_UNIT_MIB = c.DEFAULT_GPU_MEMORY_UNIT_MIB


#: The Event reason on a pod whose request Horus cannot read.
REASON_REQUEST_REFUSED = "GPURequestRefused"
#: ... and on a pod whose claim name a claim Horus did not make for it holds.
REASON_CLAIM_NAME_TAKEN = "ClaimNameTaken"


@dataclass(frozen=True)
class Conversion:
    """A pod waiting for the claim its admission named, and what it asks (or why not, and the
    Event reason that says so)."""

    pod: dict[str, Any]
    claim: str
    request: JobRequest | None
    problem: str | None = None
    reason: str = REASON_REQUEST_REFUSED


def _kueue_gated(pod: Mapping[str, Any]) -> bool:
    """A pod Kueue holds until its Workload is admitted: Kueue decides first (and, where its
    ClusterQueue names Horus' check, Horus decides the Workload's GPUs, not the pod's)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == c.KUEUE_ADMISSION_GATE for g in gates)


def as_requested(pod: Mapping[str, Any]) -> dict[str, Any]:
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


def claim_name_taken(namespace: str, name: str) -> str:
    """Why a pod gets no claim from Horus: its claim's name holds one Horus did not make."""
    return (
        f"ResourceClaim {namespace}/{name} exists but Horus did not make it for this pod; "
        "Horus neither uses, changes nor deletes it: this pod's GPU and share are that "
        "claim's, not chosen by Horus"
    )


def pending_conversions(
    pods: Iterable[Mapping[str, Any]], claims: Mapping[tuple[str, str], Any]
) -> list[Conversion]:
    """Pods whose converted claim does not exist yet (not bound, not finished, not going).
    Two pods naming one claim (a copy of another pod's spec) get none: a share is one pod's.
    A pod whose claim name a claim holds that Horus did not make for it (a tenant's, made
    before Horus' — :func:`horus.operator.claimcount.made_for_pod`) gets none either: Horus
    neither uses, changes nor deletes a claim it did not make; the pod is told why
    (:data:`REASON_CLAIM_NAME_TAKEN`), so it does not wait in silence."""
    found: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    out: list[Conversion] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = converted_claim_name(pod)
        if (
            name is None
            or meta.get("deletionTimestamp")
            or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES
            or _kueue_gated(pod)
        ):
            continue
        key = (str(meta.get("namespace", "default")), name)
        held = claims.get(key)
        foreign = foreign_claim(pod, claims)
        if foreign is not None:
            out.append(Conversion(dict(pod), name, None, foreign, REASON_CLAIM_NAME_TAKEN))
        elif held is not None and not made_for_pod(held, str(meta.get("uid") or "")):
            # told bound or not: the kube-scheduler may well have allocated it and bound the
            # pod — on a GPU and with a share Horus did not choose
            why = claim_name_taken(key[0], name)
            out.append(Conversion(dict(pod), name, None, why, REASON_CLAIM_NAME_TAKEN))
        elif held is None and not (pod.get("spec") or {}).get("nodeName"):
            found.setdefault(key, []).append(pod)
    for (ns, name), members in sorted(found.items()):
        if len(members) > 1:
            pods_named = ", ".join(str((p.get("metadata") or {}).get("name")) for p in members)
            log.warning("pods %s in %s all name claim %s; none gets it", pods_named, ns, name)
            continue
        pod = dict(members[0])
        demand = pod_demand(as_requested(pod))
        request = demand.request
        if request is not None and request.memory_mib is not None:
            request = replace(request, memory_mib=request.memory_mib * MEMORY_UNIT_MIB)
        out.append(Conversion(pod, name, request, demand.problem))
    return out


def convert_pods(
    api: JobApi,
    writer: StatusWriter,
    claim_path: ClaimPath,
    scheduler: Scheduler,
    pods: Iterable[Mapping[str, Any]],
    live: LiveState,
    report: PassReport,
) -> None:
    """A pass's plain pods waiting for their converted claim: an overtaken claim of theirs
    is deleted (the pod still names it: decided again next pass); each pod waiting for its
    claim gets one, pinned to the GPU the core chose on this pass's state (DLJobs placed
    this pass included)."""
    for key in [k for k in live.overtaken if k.startswith("claim:")]:
        ns, _, name = key.removeprefix("claim:").partition("/")
        claim = claim_path.claims.pop((ns, name), None)
        if claim is not None:
            uid = str((claim.get("metadata") or {}).get("uid") or "")
            log.info("claim %s/%s: %s; deleting it to decide again", ns, name, live.overtaken[key])
            api.delete_resource_claim(ns, name, uid)
            report.count("claims_deleted")
    pods = list(pods)
    pending = pending_conversions(pods, claim_path.claims)
    for conv in pending:
        if conv.problem:  # told on the pod, as the extender's filter would tell it
            writer.pod_event_once(conv.pod, conv.reason, conv.problem, True)
    waiting = {conv.request.name: conv for conv in pending if conv.request is not None}
    if not waiting:
        return
    if not live.state.gpu_count:
        why = "no Ready node offers Horus GPUs (a ResourceSlice of gpu.horus.io) yet"
        for conv in waiting.values():
            writer.pod_event_once(conv.pod, "NoGPUNodes", why, True)
        return
    split = split_gangs(list(waiting.values()), gangs_with_claims(pods, claim_path.claims))
    for conv, reason, why in split.waiting:
        writer.pod_event_once(conv.pod, reason, why, reason == REASON_GANG_INVALID)
    gangs = {g.request.name: g for g in split.gangs}
    requests = [conv.request for conv in split.singles if conv.request is not None]
    result = scheduler.schedule(
        live.state, requests + [g.request for g in split.gangs], now=time.time()
    )
    for refusal in result.refused:  # the pod waits; the core's sentence says for what
        message = stable_refusal(refusal.reason, refusal.code)
        reason = st.refusal_reason(refusal.code)
        if refusal.job in gangs:
            gang = gangs[refusal.job]
            message = f"gang {gang.key} ({len(gang.members)} pods) does not fit as a whole, so no pod of it gets a GPU: {message}"
            for member in gang.members:
                writer.pod_event_once(member.pod, reason, message, True)
        else:
            writer.pod_event_once(waiting[refusal.job].pod, reason, message, True)
    for placement in result.placed:
        if placement.job in gangs:
            members = gangs[placement.job].members
            for member, replica in zip(members, placement.replicas, strict=True):
                _make_claim(api, writer, member, replica.gpus[0], placement, report)
        else:
            conv = waiting[placement.job]
            _make_claim(api, writer, conv, placement.replicas[0].gpus[0], placement, report)


def gangs_with_claims(
    pods: Iterable[Mapping[str, Any]], claims: Mapping[tuple[str, str], Any]
) -> set[tuple[str, str]]:
    """(namespace, gang) of every gang one of whose pods has the claim Horus made for it."""
    out = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(c.LABEL_GANG_NAME)
        name = converted_claim_name(pod) if gang else None
        if name is None:
            continue
        ns = str(meta.get("namespace") or "default")
        held = claims.get((ns, name))
        if held is not None and made_for_pod(held, str(meta.get("uid") or "")):
            out.add((ns, str(gang)))
    return out


def _make_claim(
    api: JobApi,
    writer: StatusWriter,
    conv: Conversion,
    share: GpuShare,
    placement: Placement,
    report: PassReport,
) -> None:
    """Create ``conv``'s claim, pinned to ``share``'s GPU with its share."""
    manifest = pod_share_claim(
        conv.pod, conv.claim, share.gpu_uuid, share.core_percent, share.memory_mib
    )
    ns = str((conv.pod.get("metadata") or {}).get("namespace", "default"))
    try:
        if api.create_resource_claim(ns, manifest) is not None:
            report.count("claims_created")
            writer.pod_event_once(
                conv.pod,
                "GPUChosen",
                f"claim {conv.claim}: {share.node}/gpu-{share.gpu_index} "
                f"({share.core_percent}% core, {share.memory_mib} MiB), predicted "
                f"speed {placement.predicted_speed:.2f}; the kube-scheduler allocates it",
            )
            log.info(
                "pod %s/%s: claim %s on %s/gpu-%d (%d%% core, %d MiB)",
                ns, (conv.pod.get("metadata") or {}).get("name"), conv.claim,
                share.node, share.gpu_index, share.core_percent, share.memory_mib,
            )  # fmt: skip
    except Exception as exc:
        log.warning("cannot create claim %s/%s: %s", ns, conv.claim, exc)
